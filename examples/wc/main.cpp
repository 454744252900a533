// spindle-wc: GNU wc's counts for every regular file of a tree, counted by
// fibers: plain synchronous loops that read through spindle::io::file and
// wait with spindle::this_fiber::await, on spindle's workers.
//
// Shape: one walker fiber lists the operands (wc::walk) and sends each file
// into a bounded channel; `--fibers` counting fibers per worker each loop:
// receive a file, open it, read it chunk by chunk, count with a plain loop
// (wc::counter). While one waits for a read the worker runs another, and
// the walker waits while the channel is full. Results come back through the
// fibers' join handles; main sorts them (operand order, then path: the order
// of `find -H PATH -type f | LC_ALL=C sort`), and prints them as GNU wc would
// print that list of files (wc::append_counts, wc::number_width).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <optional>
#include <span>
#include <spindle/spindle.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "count.hpp"
#include "format.hpp"
#include "walk.hpp"

namespace {

// A file to count, from the walker to a counting fiber.
struct work_item {
  wc::dir_ptr dir;          // `name` is relative to it (null: the current directory)
  std::string name;         // what to open
  std::string path;         // what to print
  std::size_t operand = 0;  // its command-line operand's index (the sort's first key)
  bool from_stdin = false;  // standard input ("-", or no operand)
  bool has_name = true;     // false: standard input without operands (no name printed)
};

// What is printed for one input, or one message of the walk.
struct entry {
  std::size_t operand = 0;
  std::string path;
  bool is_input = true;  // false: a message of the walk (`message`)
  bool has_name = true;
  wc::input_status status;
  int open_error = 0;   // cannot be opened: a message, no counts line
  int read_error = 0;   // a read failed: a message, then the counts so far
  std::string message;  // printed to stderr as it is
  wc::counts counts;
};

using entries = std::vector<entry>;

constexpr std::size_t kFiberStack = 256 * 1024;

// System calls whose errno is read after a fiber may have moved to another
// thread: each in a function of its own (errno is per thread, and its
// address may be kept across a call within one function).
[[gnu::noinline]] int sys_fstat(int fd, struct stat* st) {
  return ::fstat(fd, st) == 0 ? 0 : -errno;
}
[[gnu::noinline]] int sys_fstatat(int dir, char const* name, struct stat* st) {
  return ::fstatat(dir, name, st, 0) == 0 ? 0 : -errno;
}
[[gnu::noinline]] int sys_dup_stdin() {
  int const fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  return fd >= 0 ? fd : -errno;
}

wc::input_status status_of(int rc, struct stat const& st) {
  if (rc != 0) return {.stat_failed = true};
  bool const regular = S_ISREG(st.st_mode);
  return {.stat_failed = false,
          .regular = regular,
          .size = regular ? static_cast<std::uint64_t>(st.st_size) : 0};
}

// One file: open, read to the end, count. Runs in a counting fiber.
entry count_one(work_item const& item, std::span<std::byte> buffer, bool words) {
  entry e;
  e.operand = item.operand;
  e.path = item.path;
  e.has_name = item.has_name;
  spindle::io::file file;
  std::uint64_t offset = 0;
  if (item.from_stdin) {
    int const fd = sys_dup_stdin();
    if (fd < 0) {
      e.open_error = -fd;
      e.status.stat_failed = true;
      return e;
    }
    file = spindle::io::file::from_fd(fd);
    off_t const at = ::lseek(fd, 0, SEEK_CUR);  // wc reads on from where stdin is
    if (at > 0) offset = static_cast<std::uint64_t>(at);
  } else {
    if (item.name.empty()) {
      e.message = "spindle-wc: invalid zero-length file name\n";
      e.status.stat_failed = true;
      return e;
    }
    std::error_code ec;
    file = spindle::this_fiber::await(
        spindle::io::file::open_at(wc::fd_of(item.dir), item.name, O_RDONLY, 0, ec));
    if (ec) {
      e.open_error = ec.value();
      struct stat st {};
      e.status = status_of(sys_fstatat(wc::fd_of(item.dir), item.name.c_str(), &st), st);
      return e;
    }
  }
  struct stat st {};
  e.status = status_of(sys_fstat(file.native_handle(), &st), st);

  // The plain loop: read a chunk (the fiber waits, its worker does not),
  // count it, until the end of the file.
  wc::counter counter(words);
  try {
    for (;;) {
      std::size_t const got = spindle::this_fiber::await(file.read_at(buffer, offset));
      if (got == 0) break;
      counter.feed(buffer.first(got));
      offset += got;
    }
  } catch (std::system_error const& error) {
    e.read_error = error.code().value();
  }
  e.counts = counter.result();
  return e;
}

// A counting fiber: files from the channel until it is closed and drained.
entries count_files(spindle::channel<work_item>& files, wc::options const& opt) {
  entries done;
  try {
    std::vector<std::byte> buffer(opt.buffer_size);
    for (;;) {
      std::optional<work_item> item = spindle::this_fiber::await(files.recv());
      if (!item) break;
      done.push_back(count_one(*item, buffer, opt.what.words));
    }
  } catch (...) {
    files.close();  // the walker must not wait for receivers that are gone
    throw;
  }
  return done;
}

// The walk's side: each file found goes into the channel (waiting while it
// is full); messages are kept to be printed in order.
class channel_visitor final : public wc::walk_visitor {
 public:
  channel_visitor(spindle::channel<work_item>& files, entries& messages)
      : files_(files), messages_(messages) {}

  void set_operand(std::size_t k) noexcept { operand_ = k; }

  void file(wc::dir_ptr const& dir, std::string_view name, std::string_view path,
            bool /*operand*/) override {
    work_item item{dir, std::string(name), std::string(path), operand_};
    spindle::this_fiber::await(files_.send(std::move(item)));
  }
  void error(std::string_view path, int error) override {
    note(path, wc::error_line(path, wc::errno_text(error)));
  }
  void warning(std::string_view path, std::string_view message) override {
    note(path, wc::error_line(path, message));
  }
  void send_stdin(bool named) {
    work_item item{nullptr, "-", named ? "-" : "", operand_, true, named};
    spindle::this_fiber::await(files_.send(std::move(item)));
  }

 private:
  void note(std::string_view path, std::string text) {
    entry e;
    e.operand = operand_;
    e.path = path;
    e.is_input = false;
    e.message = std::move(text);
    messages_.push_back(std::move(e));
  }

  spindle::channel<work_item>& files_;
  entries& messages_;
  std::size_t operand_ = 0;
};

// The walker fiber: every operand in turn; closes the channel at the end
// (or on an exception) so that the counting fibers finish.
entries walk_all(spindle::channel<work_item>& files, std::vector<std::string> const& paths) {
  struct closer {
    spindle::channel<work_item>& ch;
    ~closer() { ch.close(); }
  } const close_at_end{files};
  entries messages;
  channel_visitor visitor(files, messages);
  if (paths.empty()) visitor.send_stdin(false);
  for (std::size_t k = 0; k < paths.size(); ++k) {
    visitor.set_operand(k);
    if (paths[k] == "-") {
      visitor.send_stdin(true);
    } else {
      wc::walk(paths[k], visitor);
    }
  }
  return messages;
}

// Collects the fibers' results (in block_on).
spindle::task<entries> collect(spindle::join_handle<entries> walker,
                               std::vector<spindle::join_handle<entries>> counters) {
  entries all = co_await walker;
  for (auto& h : counters) {
    entries part = co_await h;
    std::move(part.begin(), part.end(), std::back_inserter(all));
  }
  co_return all;
}

int write_all(int fd, std::string_view data) noexcept {
  while (!data.empty()) {
    ssize_t const n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

// Prints the results as GNU wc prints the same list of files; returns the
// exit status.
int report(entries& all, wc::selection what) {
  std::stable_sort(all.begin(), all.end(), [](entry const& a, entry const& b) {
    if (a.operand != b.operand) return a.operand < b.operand;
    return a.path < b.path;  // std::string compares bytes as unsigned char
  });
  std::vector<wc::input_status> inputs;
  for (entry const& e : all) {
    if (e.is_input) inputs.push_back(e.status);
  }
  int const width = wc::number_width(inputs, what);
  int status = 0;
  std::string out;
  auto flush = [&out, &status] {
    if (out.empty()) return;
    if (int const err = write_all(STDOUT_FILENO, out); err != 0 && status != 2) {
      std::string const text = "spindle-wc: write error: " + wc::errno_text(err) + "\n";
      (void)write_all(STDERR_FILENO, text);
      status = 2;
    }
    out.clear();
  };
  auto message = [&](std::string const& text) {
    flush();  // in order with the counts, on a terminal
    (void)write_all(STDERR_FILENO, text);
    if (status == 0) status = 1;
  };
  wc::counts total;
  for (entry const& e : all) {
    if (!e.message.empty()) {
      message(e.message);
      continue;
    }
    if (e.open_error != 0) {
      message(wc::error_line(e.path, wc::errno_text(e.open_error)));
      continue;
    }
    if (e.read_error != 0) message(wc::error_line(e.path, wc::errno_text(e.read_error)));
    wc::append_counts(out, e.counts, what, width, e.has_name ? &e.path : nullptr);
    total += e.counts;
    if (out.size() >= 64 * 1024) flush();
  }
  if (inputs.size() > 1) {
    std::string const name = "total";
    wc::append_counts(out, total, what, width, &name);
  }
  flush();
  return status == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  wc::options opt;
  if (auto stop = wc::parse_command_line(argc, argv, opt)) return *stop;

  // Directories stay open while their files are counted: lift the soft
  // descriptor limit to the hard one.
  struct rlimit files_limit {};
  if (::getrlimit(RLIMIT_NOFILE, &files_limit) == 0 &&
      files_limit.rlim_cur < files_limit.rlim_max) {
    files_limit.rlim_cur = files_limit.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &files_limit);
  }

  spindle::runtime_config config;
  config.workers = opt.workers;
  config.io = opt.io == wc::io_choice::uring        ? spindle::io_backend::uring
              : opt.io == wc::io_choice::threadpool ? spindle::io_backend::threadpool
                                                    : spindle::io_backend::automatic;
  std::optional<spindle::runtime> rt;
  try {
    rt.emplace(config);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle-wc: cannot start the runtime: %s\n", e.what());
    return 1;
  }

  std::size_t const fibers = std::max<std::size_t>(1, rt->worker_count() * opt.fibers);
  spindle::channel<work_item> files{std::max<std::size_t>(64, 4 * fibers)};
  entries all;
  try {
    spindle::fiber_options const stack{.stack_size = kFiberStack};
    auto walker = rt->spawn_fiber([&files, &opt] { return walk_all(files, opt.paths); }, stack);
    std::vector<spindle::join_handle<entries>> counters;
    counters.reserve(fibers);
    for (std::size_t k = 0; k < fibers; ++k)
      counters.push_back(
          rt->spawn_fiber([&files, &opt] { return count_files(files, opt); }, stack));
    all = rt->block_on(collect(std::move(walker), std::move(counters)));
  } catch (std::exception const& e) {
    files.close();
    rt.reset();  // stops the fibers still running before `files` goes
    std::fprintf(stderr, "spindle-wc: %s\n", e.what());
    return 1;
  }
  rt.reset();
  return report(all, opt.what);
}
