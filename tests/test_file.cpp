// Tests of spindle::io::file and read_file, on both I/O backends.
//
// Every test runs once with io_backend::uring and once with
// io_backend::threadpool (runtime_config{.workers = 2, .io = ...}); the uring
// run is skipped when io_uring cannot be set up on the machine.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "spindle/io.hpp"
#include "spindle/runtime.hpp"

namespace {

using spindle::io_backend;
using spindle::join_handle;
using spindle::runtime;
using spindle::runtime_config;
using spindle::task;
using spindle::io::file;
using spindle::io::file_status;
namespace fs = std::filesystem;

/// Aborts the process when a test body hangs (clearer than the harness timeout).
class watchdog {
 public:
  explicit watchdog(std::chrono::seconds limit, char const* what)
      : thread_([this, limit, what] {
          std::unique_lock lock(mutex_);
          if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "watchdog: %s did not finish within %lld s\n", what,
                         static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

bool uring_available() {
  static bool const available = [] {
    try {
      runtime rt{runtime_config{.workers = 1, .io = io_backend::uring}};
      return true;
    } catch (std::system_error const&) {
      return false;
    }
  }();
  return available;
}

std::byte pattern(std::uint64_t pos) {
  return static_cast<std::byte>((pos * 2654435761u) >> 13);
}

std::vector<std::byte> pattern_bytes(std::size_t n, std::uint64_t from = 0) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = pattern(from + i);
  return v;
}

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

void write_plain(fs::path const& path, std::vector<std::byte> const& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!data.empty()) {
    ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
  }
  std::fclose(f);
}

/// Runs `t` and returns the errno of the std::system_error it throws (0 if
/// it completes). Any other exception fails the test.
template <class T>
task<int> errno_of(task<T> t) {
  int code = 0;
  try {
    co_await std::move(t);
  } catch (std::system_error const& e) {
    EXPECT_EQ(&e.code().category(), &std::system_category()) << e.what();
    code = e.code().value();
  }
  co_return code;
}

class FileTest : public ::testing::TestWithParam<io_backend> {
 protected:
  void SetUp() override {
    if (GetParam() == io_backend::uring && !uring_available()) {
      GTEST_SKIP() << "io_uring cannot be set up here";
    }
    char tmpl[] = "/tmp/spindle-test-file-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }
  runtime_config config() const { return runtime_config{.workers = 2, .io = GetParam()}; }

  fs::path dir_;
};

// --- open / read_at / write_at / stat / close / read_file -------------------

task<void> round_trip(fs::path path) {
  std::vector<std::byte> const hello = bytes_of("hello, spindle\n");
  file f = co_await file::open(path, O_RDWR | O_CREAT | O_TRUNC, 0640);
  EXPECT_TRUE(f.is_open());
  EXPECT_GE(f.native_handle(), 0);
  EXPECT_EQ(::fcntl(f.native_handle(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

  EXPECT_EQ(co_await f.write_at(hello, 0), hello.size());
  EXPECT_EQ(co_await f.write_at(hello, hello.size()), hello.size());

  std::vector<std::byte> buffer(64);
  std::size_t n = co_await f.read_at(buffer, 0);
  EXPECT_EQ(n, 2 * hello.size());
  EXPECT_TRUE(std::equal(hello.begin(), hello.end(), buffer.begin()));
  EXPECT_TRUE(std::equal(hello.begin(), hello.end(), buffer.begin() + hello.size()));

  n = co_await f.read_at(std::span<std::byte>(buffer).first(5), 7);
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(std::memcmp(buffer.data(), "spind", 5), 0);

  // End of file, and past it.
  EXPECT_EQ(co_await f.read_at(buffer, 2 * hello.size()), 0u);
  EXPECT_EQ(co_await f.read_at(buffer, 1u << 20), 0u);
  // An empty buffer reads nothing.
  EXPECT_EQ(co_await f.read_at(std::span<std::byte>{}, 0), 0u);

  file_status const st = co_await f.stat();
  EXPECT_EQ(st.size, 2 * hello.size());
  EXPECT_TRUE(st.is_regular());
  EXPECT_FALSE(st.is_directory());
  EXPECT_TRUE(S_ISREG(st.mode));
  EXPECT_EQ(st.permissions() & ~fs::perms(0640), fs::perms::none);  // umask may clear bits

  co_await f.close();
  EXPECT_FALSE(f.is_open());
  EXPECT_EQ(f.native_handle(), -1);

  std::vector<std::byte> const whole = co_await spindle::io::read_file(path);
  EXPECT_EQ(whole.size(), 2 * hello.size());
  EXPECT_TRUE(std::equal(hello.begin(), hello.end(), whole.begin()));
}

TEST_P(FileTest, RoundTrip) {
  runtime rt{config()};
  EXPECT_EQ(rt.io_backend_in_use(), GetParam());
  rt.block_on(round_trip(dir_ / "round_trip"));
}

task<std::vector<std::byte>> read_spawned(fs::path path) {
  // read_file in a spawned task, awaited through its join handle.
  join_handle<std::vector<std::byte>> h = spindle::spawn(spindle::io::read_file(path));
  co_return co_await h;
}

TEST_P(FileTest, ReadFileSizes) {
  runtime rt{config()};
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096},
                           std::size_t{100'000}, std::size_t{3 << 20}}) {
    fs::path const path = dir_ / ("sized_" + std::to_string(size));
    std::vector<std::byte> const expected = pattern_bytes(size);
    write_plain(path, expected);
    EXPECT_EQ(rt.block_on(spindle::io::read_file(path)), expected) << size;
    EXPECT_EQ(rt.block_on(read_spawned(path)), expected) << size;
  }
}

TEST_P(FileTest, ReadFileOfSpecialFileWithoutSize) {
  // procfs reports size 0: read_file must read to EOF anyway.
  runtime rt{config()};
  std::vector<std::byte> const data = rt.block_on(spindle::io::read_file("/proc/self/status"));
  ASSERT_FALSE(data.empty());
  std::string const text(reinterpret_cast<char const*>(data.data()), data.size());
  EXPECT_NE(text.find("Name:"), std::string::npos);
}

// --- errors --------------------------------------------------------------

TEST_P(FileTest, OpenMissingFileThrowsENOENT) {
  runtime rt{config()};
  EXPECT_EQ(rt.block_on(errno_of(file::open(dir_ / "missing"))), ENOENT);
  EXPECT_EQ(rt.block_on(errno_of(spindle::io::read_file(dir_ / "missing"))), ENOENT);
  EXPECT_EQ(rt.block_on(errno_of(file::open(dir_ / "no" / "such" / "dir"))), ENOENT);
  try {
    rt.block_on(file::open(dir_ / "missing"));
    ADD_FAILURE() << "open of a missing file succeeded";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
}

TEST_P(FileTest, OpenExclusiveExistingThrowsEEXIST) {
  runtime rt{config()};
  write_plain(dir_ / "exists", pattern_bytes(3));
  EXPECT_EQ(rt.block_on(errno_of(file::open(dir_ / "exists", O_WRONLY | O_CREAT | O_EXCL))),
            EEXIST);
}

task<int> read_dir_errno(fs::path dir) {
  file d = co_await file::open(dir, O_RDONLY);  // succeeds on a directory
  std::vector<std::byte> buffer(16);
  co_return co_await errno_of(d.read_at(buffer, 0));
}

TEST_P(FileTest, DirectoryThrowsEISDIR) {
  runtime rt{config()};
  EXPECT_EQ(rt.block_on(errno_of(spindle::io::read_file(dir_))), EISDIR);
  try {
    (void)rt.block_on(spindle::io::read_file(dir_));
    ADD_FAILURE() << "read_file of a directory succeeded";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::is_a_directory);
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(rt.block_on(read_dir_errno(dir_)), EISDIR);
  EXPECT_EQ(rt.block_on(errno_of(file::open(dir_, O_WRONLY))), EISDIR);
}

task<void> closed_file_ops(fs::path path) {
  file f = co_await file::open(path, O_RDWR | O_CREAT, 0644);
  co_await f.close();
  std::vector<std::byte> buffer(8);
  EXPECT_EQ(co_await errno_of(f.read_at(buffer, 0)), EBADF);
  EXPECT_EQ(co_await errno_of(f.write_at(buffer, 0)), EBADF);
  EXPECT_EQ(co_await errno_of(f.stat()), EBADF);
  EXPECT_EQ(co_await errno_of(f.close()), EBADF);

  file moved_from = co_await file::open(path, O_RDONLY);
  file owner = std::move(moved_from);
  EXPECT_FALSE(moved_from.is_open());  // NOLINT(bugprone-use-after-move): tested on purpose
  EXPECT_EQ(co_await errno_of(moved_from.read_at(buffer, 0)), EBADF);
  EXPECT_EQ(co_await owner.read_at(buffer, 0), 0u);

  // The kernel's EBADF: reading a file opened write-only.
  file wo = co_await file::open(path, O_WRONLY);
  EXPECT_EQ(co_await errno_of(wo.read_at(buffer, 0)), EBADF);
}

TEST_P(FileTest, OperationsOnClosedFileThrowEBADF) {
  runtime rt{config()};
  rt.block_on(closed_file_ops(dir_ / "closed"));
}

int open_errno_as_current_user(io_backend backend, fs::path const& path) {
  runtime rt{runtime_config{.workers = 2, .io = backend}};
  int const open_err = rt.block_on(errno_of(file::open(path)));
  int const read_err = rt.block_on(errno_of(spindle::io::read_file(path)));
  return open_err == read_err ? open_err : -1;
}

TEST_P(FileTest, PermissionDeniedThrowsEACCES) {
  fs::path const path = dir_ / "secret";
  write_plain(path, pattern_bytes(10));
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  if (::geteuid() != 0) {
    EXPECT_EQ(open_errno_as_current_user(GetParam(), path), EACCES);
    return;
  }
  // Root bypasses permission bits: check as `nobody` in a child process
  // (forked before this test created any runtime thread).
  pid_t const child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(77);
    int const err = open_errno_as_current_user(GetParam(), path);
    _exit(err == EACCES ? 0 : (err == 0 ? 2 : 3));
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot drop privileges to uid 65534";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: open succeeded, 3: another errno";
}

TEST_P(FileTest, AwaitedOutsideSpindleTaskThrowsEPERM) {
  runtime rt{config()};  // exists, but this thread is not inside one of its tasks
  file f = file::from_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(f.is_open());
  std::vector<std::byte> buffer(4);
  // Drive the lazy task by hand from a plain thread.
  auto frame = f.read_at(buffer, 0).release();
  frame.resume();
  ASSERT_TRUE(frame.done());
  try {
    frame.promise().take_result();
    ADD_FAILURE() << "read_at outside a task succeeded";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::operation_not_permitted);
  }
  frame.destroy();
}

// --- descriptors that cannot seek -------------------------------------------

task<std::string> read_from_pipe(int fd) {
  file f = file::from_fd(fd);
  std::vector<std::byte> buffer(64);
  std::size_t const n = co_await f.read_at(buffer, 12345);  // offset ignored
  co_return std::string(reinterpret_cast<char const*>(buffer.data()), n);
}

task<std::string> join_string(join_handle<std::string> handle) {
  co_return co_await handle;
}

TEST_P(FileTest, PipeReadIgnoresOffset) {
  runtime rt{config()};
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ASSERT_EQ(::write(fds[1], "through a pipe", 14), 14);
  EXPECT_EQ(rt.block_on(read_from_pipe(fds[0])), "through a pipe");
  ::close(fds[1]);
}

task<std::size_t> read_size(fs::path path, int flags) {
  file f = co_await file::open(path, flags);
  std::vector<std::byte> buffer(16);
  co_return co_await f.read_at(buffer, 0);
}

TEST_P(FileTest, NonblockingFifoWithoutWriterReadsEOF) {
  fs::path const fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  runtime rt{config()};
  watchdog guard{std::chrono::seconds(20), "read of a FIFO without writer"};
  EXPECT_EQ(rt.block_on(read_size(fifo, O_RDONLY | O_NONBLOCK)), 0u);
}

TEST_P(FileTest, PipeReadWaitsForData) {
  runtime rt{config()};
  watchdog guard{std::chrono::seconds(20), "pipe read waiting for data"};
  for (int flags : {O_CLOEXEC, O_CLOEXEC | O_NONBLOCK}) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, flags), 0);
    join_handle<std::string> reader = rt.spawn(read_from_pipe(fds[0]));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_FALSE(reader.is_finished());
    ASSERT_EQ(::write(fds[1], "late", 4), 4);
    EXPECT_EQ(rt.block_on(join_string(std::move(reader))), "late");
    ::close(fds[1]);
  }
}

TEST(FileBasics, FromFdReleaseAndMove) {
  int const fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  file a = file::from_fd(fd);
  EXPECT_TRUE(a.is_open());
  EXPECT_EQ(a.native_handle(), fd);
  file b;
  EXPECT_FALSE(b.is_open());
  b = std::move(a);
  EXPECT_FALSE(a.is_open());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.native_handle(), fd);
  EXPECT_EQ(b.release(), fd);
  EXPECT_FALSE(b.is_open());
  EXPECT_EQ(::fcntl(fd, F_GETFD) >= 0, true);  // release did not close it
  { file c = file::from_fd(fd); }
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // the destructor closed it
  EXPECT_FALSE(file::from_fd(-5).is_open());
}

// --- concurrency ------------------------------------------------------------

constexpr std::size_t block_size = 4096;
constexpr std::size_t block_count = 1000;

task<bool> read_block(file* f, std::size_t index) {
  std::vector<std::byte> buffer(block_size);
  std::size_t got = 0;
  while (got < block_size) {
    std::size_t const n =
        co_await f->read_at(std::span<std::byte>(buffer).subspan(got), index * block_size + got);
    if (n == 0) co_return false;
    got += n;
  }
  for (std::size_t i = 0; i < block_size; ++i) {
    if (buffer[i] != pattern(index * block_size + i)) co_return false;
  }
  co_return true;
}

task<std::size_t> read_blocks_concurrently(fs::path path) {
  file f = co_await file::open(path);
  std::vector<join_handle<bool>> handles;
  handles.reserve(block_count);
  // Reverse order, so that completions do not simply follow submissions.
  for (std::size_t i = block_count; i-- > 0;)
    handles.push_back(spindle::spawn(read_block(&f, i)));
  std::size_t ok = 0;
  for (auto& h : handles)
    ok += (co_await h) ? 1 : 0;
  co_await f.close();
  co_return ok;
}

TEST_P(FileTest, ThousandConcurrentReads) {
  fs::path const path = dir_ / "blocks";
  write_plain(path, pattern_bytes(block_size * block_count));
  runtime rt{config()};
  watchdog guard{std::chrono::seconds(60), "ThousandConcurrentReads"};
  EXPECT_EQ(rt.block_on(read_blocks_concurrently(path)), block_count);
  if (GetParam() == io_backend::uring) {
    std::uint64_t completions = 0;
    for (auto const& w : rt.stats().workers)
      completions += w.io_completions;
    EXPECT_GE(completions, block_count);  // reaped by the workers' rings
  }
}

task<bool> write_block(file* f, std::size_t index) {
  std::vector<std::byte> const data = pattern_bytes(block_size, index * block_size);
  std::size_t put = 0;
  while (put < block_size) {
    std::size_t const n = co_await f->write_at(std::span<std::byte const>(data).subspan(put),
                                               index * block_size + put);
    if (n == 0) co_return false;
    put += n;
  }
  co_return true;
}

task<std::size_t> write_blocks_concurrently(fs::path path) {
  file f = co_await file::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<join_handle<bool>> handles;
  for (std::size_t i = 0; i < block_count; ++i)
    handles.push_back(spindle::spawn(write_block(&f, i)));
  std::size_t ok = 0;
  for (auto& h : handles)
    ok += (co_await h) ? 1 : 0;
  co_await f.close();
  co_return ok;
}

TEST_P(FileTest, ThousandConcurrentWrites) {
  fs::path const path = dir_ / "written";
  runtime rt{config()};
  watchdog guard{std::chrono::seconds(60), "ThousandConcurrentWrites"};
  EXPECT_EQ(rt.block_on(write_blocks_concurrently(path)), block_count);
  EXPECT_EQ(rt.block_on(spindle::io::read_file(path)), pattern_bytes(block_size * block_count));
}

// --- the block_on thread ---------------------------------------------------

task<std::vector<std::byte>> read_then_spawned_read(fs::path path) {
  // The first read runs wherever block_on's task runs (often the calling
  // thread); the second one in a task spawned from it.
  std::vector<std::byte> data = co_await spindle::io::read_file(path);
  std::vector<std::byte> again = co_await spindle::spawn(spindle::io::read_file(path));
  EXPECT_EQ(data, again);
  co_return data;
}

TEST_P(FileTest, ReadsFromBlockOnTask) {
  fs::path const path = dir_ / "block_on";
  write_plain(path, pattern_bytes(50'000));
  runtime rt{config()};
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(rt.block_on(read_then_spawned_read(path)), pattern_bytes(50'000));
    // block_on from several plain threads at once.
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        if (rt.block_on(spindle::io::read_file(path)) == pattern_bytes(50'000)) ok.fetch_add(1);
      });
    }
    for (auto& t : threads)
      t.join();
    EXPECT_EQ(ok.load(), 4);
  }
}

// --- shutdown with operations in flight --------------------------------------

task<void> read_pipe_forever(int fd, std::atomic<int>* started) {
  file f = file::from_fd(fd);
  std::vector<std::byte> buffer(64);
  started->fetch_add(1);
  std::size_t const n = co_await f.read_at(buffer, 0);
  ADD_FAILURE() << "a read with no writer returned " << n;
}

TEST_P(FileTest, DestroyRuntimeWithReadsInFlight) {
  ::signal(SIGPIPE, SIG_IGN);
  constexpr int pipes = 8;
  int fds[pipes][2];
  for (auto& p : fds)
    ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  std::atomic<int> started{0};
  {
    watchdog guard{std::chrono::seconds(30), "runtime destruction with reads in flight"};
    runtime rt{config()};
    for (auto& p : fds) {
      (void)rt.spawn(read_pipe_forever(p[0], &started));  // detached
    }
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < pipes && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(started.load(), pipes);
    // Let the reads reach the kernel (tick-end submission) or a pool thread.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }  // ~runtime: cancels the reads, destroys the frames, which close the read ends
  for (auto& p : fds) {
    errno = 0;
    EXPECT_EQ(::write(p[1], "x", 1), -1);
    EXPECT_EQ(errno, EPIPE) << "the task frame (and its file) was not destroyed";
    ::close(p[1]);
  }
}

std::string backend_name(::testing::TestParamInfo<io_backend> const& info) {
  return info.param == io_backend::uring ? "uring" : "threadpool";
}

INSTANTIATE_TEST_SUITE_P(Backends, FileTest,
                         ::testing::Values(io_backend::uring, io_backend::threadpool),
                         backend_name);

}  // namespace
