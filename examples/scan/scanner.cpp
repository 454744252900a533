// scan::scanner (see scanner.hpp): the task that scans one file, and the
// walk that feeds the tasks.
#include "scanner.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <exception>
#include <span>
#include <system_error>

#include "line_counter.hpp"

namespace scan {

spindle::task<void> scanner::scan_file(scanner* self, slot* s) {
  job& work = s->work;
  int err = 0;
  std::string what;
  try {
    int const flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | (work.command_line ? 0 : O_NOFOLLOW);
    std::string_view const name = std::string_view(work.path).substr(work.name_at);
    // Failures come back as an error code: no exception (and no message
    // formatting) per retry while descriptors are short.
    spindle::io::file f;
    std::error_code ec;
    for (bool tried_again = false;;) {
      f = co_await spindle::io::file::open_at(work.dir.fd(), name, flags, 0, ec);
      err = ec.value();
      if (err != EMFILE && err != ENFILE) break;
      // Out of descriptors. Others in flight will free theirs: retry later
      // in a smaller window. Alone, try once more (one may have just
      // finished), then it is a real error.
      if (self->active_.fetch_sub(1, std::memory_order_seq_cst) > 1) {
        self->defer(s);
        co_return;
      }
      self->active_.fetch_add(1, std::memory_order_seq_cst);
      if (tried_again) break;
      tried_again = true;
    }
    // O_NOFOLLOW met a symlink that replaced a listed file: grep skips those.
    if (err == ELOOP && !work.command_line) err = -1;
    work.dir.reset();  // the file no longer needs its directory
    struct stat st {};
    if (err == 0 && ::fstat(f.native_handle(), &st) != 0) {
      throw std::system_error(errno, std::system_category(), "fstat");
    }
    if (err == 0 && S_ISREG(st.st_mode)) {  // a FIFO or device swapped in: skip it unread
      s->buffer.reset();
      scan::line_counter counter(self->matcher_, s->scratch, s->buffer);
      auto const size = static_cast<std::uint64_t>(st.st_size);
      std::uint64_t offset = 0;
      while (true) {
        std::span<char> const space = counter.space();
        std::size_t const n = co_await f.read_at(std::as_writable_bytes(space), offset);
        if (n == 0) break;
        counter.commit(n);
        offset += n;
        // A short read that reaches the size fstat gave is the end of the
        // file: spare the read that would return 0.
        if (n < space.size() && size > 0 && offset >= size) break;
      }
      self->finish(s, work.path, counter.finish(), offset);
    }
    // `f` closes its descriptor with ::close as it goes out of scope. A
    // read-only close has nothing to report, and closing inline spares a
    // suspension per file (co_await f.close() measured ~15% more CPU).
  } catch (std::system_error const& e) {  // fstat, read_at
    err = e.code().value();
    if (err == 0) err = EIO;
  } catch (std::exception const& e) {
    err = -2;
    what = e.what();
  }
  if (err > 0) self->report(work.path, err, {});
  if (err == -2) self->report(work.path, 0, what);
  self->active_.fetch_sub(1, std::memory_order_seq_cst);
  self->give_back(s);
}

spindle::task<void> walk_and_wait(walker& walk, scanner& sc,
                                  std::vector<std::string> const& paths) {
  if (paths.empty()) {
    co_await walk.walk_default();
  } else {
    for (auto const& p : paths)
      co_await walk.walk_operand(p);
  }
  co_await sc.wait_all();
}

}  // namespace scan
