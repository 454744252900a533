// spindle-scan: count the lines matching a pattern in every file of a tree,
// with grep -rca's answers, on the spindle runtime.
//
// Shape (seed 000's file-scanning consumer):
//   - discovery: one task (walk_and_wait, run with block_on, so on a
//     worker) walks the operands (scan::walker) and, for each regular file,
//     takes a permit from a scan::window (suspending while the window is
//     full; the window wakes it once per half window), takes a free scan
//     slot (read buffer, PCRE2 scratch, output batch, counters, the file's
//     job) and spawns one spindle task; the join handle is dropped
//     (detached). The walk shares the workers with the scans, as ripgrep's
//     threads walk and search: no third thread takes the cores, and every
//     spawn is local to a worker. Permits <= slots, so memory stays bounded
//     however large the tree is, and a spawned task always finds its slot.
//   - each task opens the file through spindle::io relative to its directory
//     (open_at on the walker's shared descriptor, so no PATH_MAX; O_NOFOLLOW
//     below the command line, O_NONBLOCK so that a FIFO swapped in cannot
//     block), lets the directory go, checks with fstat that it is a regular
//     file, reads it in chunks with read_at into the slot's buffer, counts
//     the complete lines of each chunk on the worker that resumed it
//     (carrying the partial last line), closes it (inline, see scan_file),
//     appends its result to the slot's batch, returns the slot and the
//     permit. The task owns the slot for its whole life, across every
//     co_await, whichever worker it resumes on.
//   - out of descriptors (EMFILE/ENFILE from the open) while other scans are
//     in flight, a task puts its job on a retry list, returns its slot and
//     gives its permit up for good (the window shrinks by one); the walk
//     task resubmits retries before new files. Only a scan that runs out
//     of descriptors with nothing else in flight (after one more try)
//     reports the error. The walker waits for scans to finish when it is
//     short of descriptors itself (walk_sink::wait_for_descriptors).
//   - the walk task then takes every permit back (all tasks done, no retry
//     left); the main thread, which only waited, writes the remaining
//     batches and reports.
// Output order is completion order; sort it to compare with grep.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <spindle/spindle.hpp>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "line_buffer.hpp"
#include "line_counter.hpp"
#include "matcher.hpp"
#include "output.hpp"
#include "walker.hpp"
#include "window.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// One file to scan: its directory (kept open until the file is), its whole
// path for the output, where its name (relative to `dir`) starts in `path`.
struct job {
  scan::dir_ref dir;
  std::string path;
  std::size_t name_at = 0;
  bool command_line = false;
};

// Everything one file scan needs; owned by one task at a time.
struct slot {
  slot(std::size_t buffer_size, scan::matcher const& m)
      : buffer(buffer_size), scratch(m.make_scratch()) {}
  scan::line_buffer buffer;
  scan::matcher::scratch scratch;
  std::string out;
  job work;  // the file being scanned
  // Written by the owning task only (relaxed load + store); summed by the
  // progress thread and at the end.
  std::atomic<std::uint64_t> files{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> lines{0};
  std::atomic<std::uint64_t> matched_files{0};
  std::atomic<std::uint64_t> retries{0};

  static void bump(std::atomic<std::uint64_t>& counter, std::uint64_t by) noexcept {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
};

struct totals {
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  std::uint64_t lines = 0;
  std::uint64_t matched_files = 0;
  std::uint64_t retries = 0;
};

class scanner final : public scan::walk_sink {
 public:
  scanner(scan::matcher const& matcher, std::size_t buffer_size, scan::console& console,
          scan::result_format format, bool print_zero, bool quiet, std::size_t in_flight)
      : matcher_(matcher),
        console_(console),
        format_(format),
        print_zero_(print_zero),
        quiet_(quiet),
        permits_(static_cast<std::uint32_t>(in_flight)) {
    slots_.reserve(in_flight);
    free_.reserve(in_flight);
    for (std::size_t k = 0; k < in_flight; ++k) {
      slots_.push_back(std::make_unique<slot>(buffer_size, matcher));
      free_.push_back(slots_.back().get());
    }
  }

  void attach(spindle::runtime& rt) noexcept { rt_ = &rt; }

  // walk_sink: called from the walk task.
  spindle::task<void> file(scan::dir_ref const& dir, std::string_view name, std::string_view path,
                           bool command_line) override {
    if (has_retries_.load(std::memory_order_acquire)) {
      co_await drain_retries();  // files that ran out of descriptors go first
    }
    // Backpressure: at most `in_flight` files at once; the walk suspends
    // (and its worker scans) while the window is full.
    if (!permits_.try_acquire()) co_await permits_.acquire();
    slot* s = take_slot();
    s->work.dir = dir;
    s->work.path.assign(path);
    s->work.name_at = path.size() - name.size();  // `name` ends `path`
    s->work.command_line = command_line;
    spawn(s);
  }
  void error(std::string_view path, int err) override { report(path, err, {}); }
  void failure(std::string_view path, std::string_view message) override {
    report(path, 0, message);
  }
  void warning(std::string_view path, std::string_view message) override {
    if (quiet_) return;
    std::string text = "warning: ";
    text.append(path);
    text += ": ";
    text.append(message);
    console_.message(text);
  }
  spindle::task<bool> wait_for_descriptors() override {
    for (;;) {
      co_await drain_retries();  // they hold directories open: let them run
      const bool released = co_await permits_.wait_release();
      if (released) co_return true;
      if (!has_retries()) co_return false;
    }
  }

  /// Waits until every scan has finished, retries included.
  spindle::task<void> wait_all() {
    for (;;) {
      co_await drain_retries();
      const bool all_free = co_await permits_.wait_all([this] { return has_retries(); });
      if (all_free && !has_retries()) co_return;
    }
  }

  /// Writes what the slots still hold (after wait_all).
  void flush_all() {
    for (auto& s : slots_)
      note_write(console_.write_out(s->out));
  }

  [[nodiscard]] totals sum() const noexcept {
    totals t;
    for (auto const& s : slots_) {
      t.files += s->files.load(std::memory_order_relaxed);
      t.bytes += s->bytes.load(std::memory_order_relaxed);
      t.lines += s->lines.load(std::memory_order_relaxed);
      t.matched_files += s->matched_files.load(std::memory_order_relaxed);
      t.retries += s->retries.load(std::memory_order_relaxed);
    }
    return t;
  }
  [[nodiscard]] bool had_error() const noexcept { return failed_.load(); }
  /// Files scanned at once now (the window shrinks when descriptors run out).
  [[nodiscard]] std::uint32_t window_size() const noexcept { return permits_.size(); }

 private:
  static spindle::task<void> scan_file(scanner* self, slot* s);

  slot* take_slot() {
    std::lock_guard lock(free_mutex_);
    slot* s = free_.back();
    free_.pop_back();
    return s;
  }
  void return_slot(slot* s) {
    s->work.dir.reset();
    std::lock_guard lock(free_mutex_);
    free_.push_back(s);
  }
  // Starts the scan of s->work (a permit is held).
  void spawn(slot* s) {
    active_.fetch_add(1, std::memory_order_seq_cst);
    try {
      (void)rt_->spawn(scan_file(this, s));  // detached
    } catch (std::exception const& e) {
      active_.fetch_sub(1, std::memory_order_seq_cst);
      report(s->work.path, 0, e.what());
      give_back(s);
    }
  }
  [[nodiscard]] bool has_retries() {
    std::lock_guard lock(retry_mutex_);
    return !retries_.empty();
  }
  spindle::task<void> drain_retries() {
    for (;;) {
      job next;
      {
        std::lock_guard lock(retry_mutex_);
        if (retries_.empty()) {
          has_retries_.store(false, std::memory_order_relaxed);
          co_return;
        }
        next = std::move(retries_.front());
        retries_.pop_front();
      }
      co_await permits_.acquire();
      slot* s = take_slot();
      s->work = std::move(next);
      spawn(s);
    }
  }
  // Called by a task that ran out of descriptors while others are in
  // flight: its job waits on the retry list, its permit leaves the window.
  void defer(slot* s) {
    slot::bump(s->retries, 1);
    {
      std::lock_guard lock(retry_mutex_);
      retries_.push_back(std::move(s->work));
      has_retries_.store(true, std::memory_order_release);
    }
    return_slot(s);
    permits_.shrink();  // wakes the walk task; `this` must not be touched after
  }

  void report(std::string_view path, int err, std::string_view what) {
    failed_.store(true);
    if (quiet_) return;
    if (err != 0) {
      console_.error(path, scan::errno_text(err));
    } else {
      console_.error(path, what);
    }
  }
  void note_write(int err) {
    if (err != 0 && !write_failed_.exchange(true)) {
      failed_.store(true);
      console_.message("write error: " + scan::errno_text(err));
    }
  }
  void finish(slot* s, std::string_view path, std::uint64_t count, std::uint64_t bytes) {
    slot::bump(s->files, 1);
    slot::bump(s->bytes, bytes);
    slot::bump(s->lines, count);
    if (count > 0) slot::bump(s->matched_files, 1);
    if (count > 0 || print_zero_) {
      scan::append_result(s->out, format_, path, count);
      if (s->out.size() >= flush_at_) note_write(console_.write_out(s->out));
    }
  }
  void give_back(slot* s) {
    return_slot(s);
    permits_.release();  // after this the task must not touch `this`
  }

  scan::matcher const& matcher_;
  scan::console& console_;
  scan::result_format format_;
  bool print_zero_;
  bool quiet_;  // -s: no messages about unreadable files
  // Batches go out at 32 KiB; line by line when a person watches stdout.
  std::size_t flush_at_ = ::isatty(STDOUT_FILENO) != 0 ? 1 : 32 * 1024;
  spindle::runtime* rt_ = nullptr;
  scan::window permits_;                // one place per slot at first; shrinks on EMFILE
  std::atomic<std::size_t> active_{0};  // scans spawned and not finished
  std::mutex free_mutex_;
  std::vector<slot*> free_;
  std::vector<std::unique_ptr<slot>> slots_;
  std::mutex retry_mutex_;
  std::deque<job> retries_;
  std::atomic<bool> has_retries_{false};  // retries_ is not empty (set under retry_mutex_)
  std::atomic<bool> failed_{false};
  std::atomic<bool> write_failed_{false};
};

spindle::task<void> scanner::scan_file(scanner* self, slot* s) {
  job& work = s->work;
  int err = 0;
  std::string what;
  try {
    const int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | (work.command_line ? 0 : O_NOFOLLOW);
    const std::string_view name = std::string_view(work.path).substr(work.name_at);
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
      const auto size = static_cast<std::uint64_t>(st.st_size);
      std::uint64_t offset = 0;
      while (true) {
        const std::span<char> space = counter.space();
        const std::size_t n = co_await f.read_at(std::as_writable_bytes(space), offset);
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

// The main job: walks every operand (or ".") and waits until every file
// scan it started has finished.
spindle::task<void> walk_and_wait(scan::walker& walk, scanner& sc,
                                  std::vector<std::string> const& paths) {
  if (paths.empty()) {
    co_await walk.walk_default();
  } else {
    for (auto const& p : paths)
      co_await walk.walk_operand(p);
  }
  co_await sc.wait_all();
}

// Descriptors this process has open now (/proc/self/fd), or 0 if unknown.
std::size_t open_descriptors() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  std::size_t n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n > 0 ? n - 1 : 0;  // minus the one reading the list
}

std::string human_bytes(std::uint64_t bytes) {
  char text[32];
  if (bytes >= 1'000'000'000) {
    std::snprintf(text, sizeof text, "%.2f GB", static_cast<double>(bytes) / 1e9);
  } else {
    std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  }
  return text;
}

const char* backend_name(spindle::io_backend b) {
  switch (b) {
    case spindle::io_backend::uring:
      return "uring";
    case spindle::io_backend::threadpool:
      return "threadpool";
    case spindle::io_backend::automatic:
      return "automatic";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  scan::options options;
  if (auto stop = scan::parse_command_line(argc, argv, options)) return *stop;

  std::optional<scan::matcher> matcher;
  try {
    matcher.emplace(options.match);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle-scan: %s\n", e.what());
    return 2;
  }

  // Descriptors: up to --max-in-flight open files plus the directories;
  // lift the soft limit to the hard one (`ulimit -n` lowers both: then the
  // window shrinks on EMFILE and the walker stays within its budget).
  struct rlimit files_limit {};
  if (::getrlimit(RLIMIT_NOFILE, &files_limit) == 0 &&
      files_limit.rlim_cur < files_limit.rlim_max) {
    files_limit.rlim_cur = files_limit.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &files_limit);
  }

  const auto started = clock_type::now();
  scan::console console(options.progress && ::isatty(STDERR_FILENO) != 0);

  // grep prints no file name for one operand that is not a directory, and
  // then prints its count even when it is 0.
  const bool single_file =
      options.paths.size() == 1 && !scan::walker::is_directory(options.paths[0]);
  scan::result_format format = scan::result_format::path_count;
  if (options.json) {
    format = scan::result_format::json;
  } else if (options.names == scan::name_mode::never ||
             (options.names == scan::name_mode::automatic && single_file)) {
    format = scan::result_format::count_only;
  }
  const bool print_zero = options.all || single_file;

  spindle::runtime_config config;
  config.workers = options.workers;
  config.io = options.io == scan::io_choice::uring        ? spindle::io_backend::uring
              : options.io == scan::io_choice::threadpool ? spindle::io_backend::threadpool
                                                          : spindle::io_backend::automatic;
  std::optional<spindle::runtime> rt;
  try {
    rt.emplace(config);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle-scan: cannot start the runtime: %s\n", e.what());
    return 2;
  }
  const std::size_t workers = rt->worker_count();
  std::size_t in_flight = options.max_in_flight;
  if (in_flight == 0) in_flight = std::clamp<std::size_t>(workers * 64, 128, 1024);

  scanner sc(*matcher, options.buffer_size, console, format, print_zero, options.quiet, in_flight);
  sc.attach(*rt);

  std::jthread progress;
  if (options.progress && ::isatty(STDERR_FILENO) != 0) {
    progress = std::jthread([&sc, &console](std::stop_token stop) {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      while (true) {
        cv.wait_for(lock, stop, std::chrono::milliseconds(100), [] { return false; });
        if (stop.stop_requested()) return;
        const totals t = sc.sum();
        console.progress(std::to_string(t.files) + " files, " + human_bytes(t.bytes) + ", " +
                         std::to_string(t.lines) + " matching lines");
      }
    });
  }

  scan::walker walk(sc);
  // What the runtime left of RLIMIT_NOFILE: half of it at most for
  // directories, the rest for files.
  if (::getrlimit(RLIMIT_NOFILE, &files_limit) == 0 && files_limit.rlim_cur != RLIM_INFINITY) {
    const std::size_t open_now = open_descriptors();
    const auto limit = static_cast<std::size_t>(files_limit.rlim_cur);
    walk.set_descriptor_budget(limit > open_now ? limit - open_now : 0);
  }
  // The walk is a task on a worker (block_on's thread only waits): the
  // workers walk and scan, as ripgrep's threads walk and search, with no
  // third thread competing for the cores and every spawn a local one.
  try {
    rt->block_on(walk_and_wait(walk, sc, options.paths));
  } catch (std::exception const& e) {
    console.end_progress();
    std::fprintf(stderr, "spindle-scan: the walk failed: %s\n", e.what());
    rt.reset();  // stops the scans still in flight before `sc` goes
    return 2;
  }
  const spindle::runtime_stats rstats = rt->stats();
  const spindle::io_backend backend = rt->io_backend_in_use();
  rt.reset();  // joins the workers: no task touches `sc` any more
  if (progress.joinable()) {
    progress.request_stop();
    progress.join();
  }
  console.end_progress();
  sc.flush_all();

  const totals t = sc.sum();
  const double seconds = std::chrono::duration<double>(clock_type::now() - started).count();
  if (options.stats) {
    const double gbps = seconds > 0 ? static_cast<double>(t.bytes) / seconds / 1e9 : 0.0;
    std::string text;
    char line[512];
    if (options.json) {
      std::snprintf(line, sizeof line,
                    "{\"files\":%llu,\"bytes\":%llu,\"matches\":%llu,\"matched_files\":%llu,"
                    "\"seconds\":%.6f,\"gb_per_s\":%.3f,\"workers\":%zu,\"io\":\"%s\","
                    "\"matcher\":\"%s\",\"tasks_spawned\":%llu,\"tasks_stolen\":%llu,"
                    "\"in_flight\":%u,\"open_retries\":%llu}\n",
                    static_cast<unsigned long long>(t.files),
                    static_cast<unsigned long long>(t.bytes),
                    static_cast<unsigned long long>(t.lines),
                    static_cast<unsigned long long>(t.matched_files), seconds, gbps, workers,
                    backend_name(backend), matcher->describe().c_str(),
                    static_cast<unsigned long long>(rstats.total_spawned),
                    static_cast<unsigned long long>(rstats.total_stolen), sc.window_size(),
                    static_cast<unsigned long long>(t.retries));
    } else {
      std::snprintf(line, sizeof line,
                    "files:    %llu\nbytes:    %llu (%s)\nmatches:  %llu lines in %llu files\n"
                    "seconds:  %.3f\nGB/s:     %.3f\nworkers:  %zu (io: %s, matcher: %s, "
                    "tasks: %llu spawned, %llu stolen)\nin flight: %u at most at the end, %llu "
                    "opens retried (out of descriptors)\n",
                    static_cast<unsigned long long>(t.files),
                    static_cast<unsigned long long>(t.bytes), human_bytes(t.bytes).c_str(),
                    static_cast<unsigned long long>(t.lines),
                    static_cast<unsigned long long>(t.matched_files), seconds, gbps, workers,
                    backend_name(backend), matcher->describe().c_str(),
                    static_cast<unsigned long long>(rstats.total_spawned),
                    static_cast<unsigned long long>(rstats.total_stolen), sc.window_size(),
                    static_cast<unsigned long long>(t.retries));
    }
    text = line;
    if (!options.json) {
      // Where the time went, per worker: a worker that parked often while
      // the others polled had nothing to steal.
      for (std::size_t k = 0; k < rstats.workers.size(); ++k) {
        spindle::worker_stats const& w = rstats.workers[k];
        std::snprintf(line, sizeof line,
                      "worker %zu:  %llu polls, %llu stolen, %llu parks, %llu I/O completions\n", k,
                      static_cast<unsigned long long>(w.polled),
                      static_cast<unsigned long long>(w.stolen),
                      static_cast<unsigned long long>(w.parked),
                      static_cast<unsigned long long>(w.io_completions));
        text += line;
      }
    }
    (void)scan::write_all(STDERR_FILENO, text);
  }
  if (sc.had_error()) return 2;
  return t.matched_files > 0 ? 0 : 1;
}
