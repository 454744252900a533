// Tests of spindle::io::file and read_file, on both I/O backends.
//
// Every test runs once with io_backend::uring and once with
// io_backend::threadpool (runtime_config{.workers = 2, .io = ...}); the uring
// run is skipped when io_uring cannot be set up on the machine. The Abort*
// tests check join_handle::abort() on tasks suspended in file I/O: the
// operation is withdrawn or cancelled, the frame is destroyed (locals, files),
// awaiting throws task_cancelled, nothing leaks and the runtime keeps working.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
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
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "io_test_support.hpp"
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

using spindle_test::errno_of;
using spindle_test::uring_available;
using spindle_test::write_plain;

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

class FileTest : public spindle_test::backend_dir_test {
 protected:
  FileTest() : backend_dir_test("file") {}
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

/// Descriptors open in this process (the listing's own included).
std::size_t open_fd_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] auto const& entry : fs::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

// --- open_at --------------------------------------------------------------

task<std::string> read_text(file& f) {
  std::vector<std::byte> buffer(256);
  std::size_t const n = co_await f.read_at(buffer, 0);
  co_return std::string(reinterpret_cast<char const*>(buffer.data()), n);
}

task<void> open_at_relative(fs::path dir) {
  file d = co_await file::open(dir / "sub", O_RDONLY | O_DIRECTORY);
  // By a file object and by its descriptor.
  file a = co_await file::open_at(d, "inside.txt");
  EXPECT_EQ(co_await read_text(a), "inside\n");
  EXPECT_EQ(::fcntl(a.native_handle(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  file b = co_await file::open_at(d.native_handle(), "inside.txt");
  EXPECT_EQ(co_await read_text(b), "inside\n");
  // ".." and a relative path with several components.
  file c = co_await file::open_at(d, "../top.txt");
  EXPECT_EQ(co_await read_text(c), "top\n");
  // An absolute path ignores the directory; AT_FDCWD is open().
  file e = co_await file::open_at(d, dir / "top.txt");
  EXPECT_EQ(co_await read_text(e), "top\n");
  file g = co_await file::open_at(AT_FDCWD, dir / "sub" / "inside.txt");
  EXPECT_EQ(co_await read_text(g), "inside\n");
  // The descriptor names the directory, not its path: renamed, still found.
  EXPECT_EQ(::rename((dir / "sub").c_str(), (dir / "moved").c_str()), 0);
  file h = co_await file::open_at(d, "inside.txt");
  EXPECT_EQ(co_await read_text(h), "inside\n");
  // Creating relative to it.
  file w = co_await file::open_at(d, "created.txt", O_WRONLY | O_CREAT | O_EXCL, 0600);
  std::vector<std::byte> const data = bytes_of("made\n");
  EXPECT_EQ(co_await w.write_at(data, 0), data.size());
  co_await w.close();
  EXPECT_TRUE(fs::exists(dir / "moved" / "created.txt"));
}

TEST_P(FileTest, OpenAtRelativeToADirectory) {
  fs::create_directory(dir_ / "sub");
  write_plain(dir_ / "sub" / "inside.txt", bytes_of("inside\n"));
  write_plain(dir_ / "top.txt", bytes_of("top\n"));
  runtime rt{config()};
  rt.block_on(open_at_relative(dir_));
}

task<void> open_at_errors(fs::path dir) {
  file d = co_await file::open(dir, O_RDONLY | O_DIRECTORY);
  file regular = co_await file::open(dir / "plain.txt");
  // The "directory" is a regular file: ENOTDIR for a relative path.
  EXPECT_EQ(co_await errno_of(file::open_at(regular, "x")), ENOTDIR);
  EXPECT_EQ(co_await errno_of(file::open_at(regular.native_handle(), "x")), ENOTDIR);
  // A component that is a file.
  EXPECT_EQ(co_await errno_of(file::open_at(d, "plain.txt/x")), ENOTDIR);
  // Missing.
  EXPECT_EQ(co_await errno_of(file::open_at(d, "missing")), ENOENT);
  EXPECT_EQ(co_await errno_of(file::open_at(d, "no/such/dir")), ENOENT);
  try {
    (void)co_await file::open_at(d, "missing");
    ADD_FAILURE() << "open_at of a missing file succeeded";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  // Without exceptions: the errno in an error_code, a file that is not open.
  std::error_code ec = std::make_error_code(std::errc::interrupted);
  file none = co_await file::open_at(d.native_handle(), "missing", O_RDONLY, 0, ec);
  EXPECT_FALSE(none.is_open());
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  EXPECT_EQ(&ec.category(), &std::system_category());
  file none2 = co_await file::open_at(regular.native_handle(), "x", O_RDONLY, 0, ec);
  EXPECT_FALSE(none2.is_open());
  EXPECT_EQ(ec, std::errc::not_a_directory);
  file some = co_await file::open_at(d.native_handle(), "plain.txt", O_RDONLY, 0, ec);
  EXPECT_TRUE(some.is_open());
  EXPECT_FALSE(ec);  // cleared on success
  EXPECT_EQ(co_await read_text(some), "x\n");
  // A directory that is not open: EBADF, even for an absolute path.
  file closed;
  EXPECT_EQ(co_await errno_of(file::open_at(closed, "plain.txt")), EBADF);
  EXPECT_EQ(co_await errno_of(file::open_at(closed, dir / "plain.txt")), EBADF);
  EXPECT_EQ(co_await errno_of(file::open_at(-1, "plain.txt")), EBADF);
  // A symlink with O_NOFOLLOW: ELOOP. A name longer than NAME_MAX.
  EXPECT_EQ(co_await errno_of(file::open_at(d, "link", O_RDONLY | O_NOFOLLOW)), ELOOP);
  EXPECT_EQ(co_await errno_of(file::open_at(d, std::string(300, 'n'))), ENAMETOOLONG);
  // A directory opened as a file: the open succeeds, reading it is EISDIR;
  // writing access fails at the open.
  file sub = co_await file::open_at(d, "sub");
  std::vector<std::byte> buffer(16);
  EXPECT_EQ(co_await errno_of(sub.read_at(buffer, 0)), EISDIR);
  EXPECT_EQ(co_await errno_of(file::open_at(d, "sub", O_WRONLY)), EISDIR);
  EXPECT_EQ(co_await errno_of(file::open_at(d, "sub", O_RDWR)), EISDIR);
}

TEST_P(FileTest, OpenAtErrors) {
  write_plain(dir_ / "plain.txt", bytes_of("x\n"));
  fs::create_directory(dir_ / "sub");
  fs::create_symlink("plain.txt", dir_ / "link");
  runtime rt{config()};
  rt.block_on(open_at_errors(dir_));
}

/// Removes `name` in the directory `parent` and everything below it with
/// *at() calls only (std::filesystem::remove_all builds whole paths, which
/// fail beyond PATH_MAX).
void remove_tree_at(int parent, char const* name) {
  int const fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    ::unlinkat(parent, name, 0);
    return;
  }
  std::vector<std::string> names;
  if (DIR* d = ::fdopendir(::dup(fd))) {
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        names.emplace_back(e->d_name);
      }
    }
    ::closedir(d);
  }
  for (auto const& n : names)
    remove_tree_at(fd, n.c_str());
  ::close(fd);
  ::unlinkat(parent, name, AT_REMOVEDIR);
}

task<void> open_beyond_path_max(fs::path dir, std::size_t levels, std::string const* name) {
  // Nest `levels` directories, each opened relative to the previous one.
  file current = co_await file::open(dir, O_RDONLY | O_DIRECTORY);
  fs::path whole = dir;
  for (std::size_t k = 0; k < levels; ++k) {
    EXPECT_EQ(::mkdirat(current.native_handle(), name->c_str(), 0755), 0);
    current = co_await file::open_at(current, *name, O_RDONLY | O_DIRECTORY);
    whole /= *name;
  }
  EXPECT_GT(whole.native().size(), std::size_t{PATH_MAX});
  file w = co_await file::open_at(current, "deep.txt", O_RDWR | O_CREAT | O_EXCL, 0644);
  std::vector<std::byte> const data = bytes_of("at the bottom\n");
  EXPECT_EQ(co_await w.write_at(data, 0), data.size());
  co_await w.close();
  file r = co_await file::open_at(current, "deep.txt");
  EXPECT_EQ(co_await read_text(r), "at the bottom\n");
  file_status const st = co_await r.stat();
  EXPECT_EQ(st.size, data.size());
  // The whole path is too long for open(): why open_at exists.
  EXPECT_EQ(co_await errno_of(file::open(whole / "deep.txt")), ENAMETOOLONG);
}

TEST_P(FileTest, OpenAtBeyondPathMax) {
  std::string const name(200, 'd');
  std::size_t const levels = PATH_MAX / (name.size() + 1) + 2;
  {
    runtime rt{config()};
    rt.block_on(open_beyond_path_max(dir_, levels, &name));
  }
  int const top = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(top, 0);
  remove_tree_at(top, name.c_str());
  ::close(top);
  EXPECT_FALSE(fs::exists(dir_ / name));
}

/// In a child process: RLIMIT_NOFILE is lowered to what is open plus
/// `spare`, then files are opened with open_at until the limit; returns
/// 0 when that failed with EMFILE (std::errc::too_many_files_open), and
/// the runtime still works once one is closed.
int emfile_child(io_backend backend, fs::path const& dir) {
  try {
    runtime rt{runtime_config{.workers = 1, .io = backend}};
    std::size_t const open_now = open_fd_count();
    rlimit lim{open_now + 4, open_now + 4};
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) return 77;
    return rt.block_on([](fs::path d) -> task<int> {
      file parent = co_await file::open(d, O_RDONLY | O_DIRECTORY);
      std::vector<file> files;
      for (int k = 0; k < 64; ++k) {
        int const err = co_await errno_of([](file const* p, std::vector<file>* out) -> task<void> {
          out->push_back(co_await file::open_at(*p, "plain.txt"));
        }(&parent, &files));
        if (err == 0) continue;
        if (err != EMFILE) co_return 3;
        if (files.empty()) co_return 4;
        files.pop_back();  // one descriptor free again: the next open works
        file again = co_await file::open_at(parent, "plain.txt");
        co_return again.is_open() ? 0 : 5;
      }
      co_return 2;  // the limit was never hit
    }(dir));
  } catch (...) {
    return 6;
  }
}

TEST_P(FileTest, OpenAtOutOfDescriptorsThrowsEMFILE) {
  write_plain(dir_ / "plain.txt", bytes_of("x\n"));
  pid_t const child = ::fork();  // the limit must not reach the test process
  ASSERT_GE(child, 0);
  if (child == 0) _exit(emfile_child(GetParam(), dir_));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot lower RLIMIT_NOFILE";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see emfile_child for the meaning";
}

int open_at_errno_as_current_user(io_backend backend, fs::path const& dir) {
  runtime rt{runtime_config{.workers = 2, .io = backend}};
  return rt.block_on([](fs::path d) -> task<int> {
    file parent = co_await file::open(d, O_RDONLY | O_DIRECTORY);
    int const file_err = co_await errno_of(file::open_at(parent, "secret"));
    int const dir_err = co_await errno_of(file::open_at(parent, "locked/inner.txt"));
    co_return file_err == dir_err ? file_err : -1;
  }(dir));
}

TEST_P(FileTest, OpenAtPermissionDeniedThrowsEACCES) {
  write_plain(dir_ / "secret", pattern_bytes(10));
  fs::create_directory(dir_ / "locked");
  write_plain(dir_ / "locked" / "inner.txt", pattern_bytes(10));
  ASSERT_EQ(::chmod((dir_ / "secret").c_str(), 0), 0);
  ASSERT_EQ(::chmod((dir_ / "locked").c_str(), 0), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  int err = 0;
  if (::geteuid() != 0) {
    err = open_at_errno_as_current_user(GetParam(), dir_);
  } else {
    // Root bypasses permission bits: as `nobody` in a child process.
    pid_t const child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(77);
      int const e = open_at_errno_as_current_user(GetParam(), dir_);
      _exit(e == EACCES ? 0 : (e == 0 ? 2 : 3));
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot drop privileges to uid 65534";
    err = WEXITSTATUS(status) == 0 ? EACCES : -WEXITSTATUS(status);
  }
  ::chmod((dir_ / "locked").c_str(), 0755);  // so that TearDown can remove it
  EXPECT_EQ(err, EACCES) << "-2: open succeeded, -3: another errno";
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
  // Every read through the driver (the file is in the page cache).
  runtime_config cfg = config();
  cfg.try_cached_reads = false;
  runtime rt{cfg};
  watchdog guard{std::chrono::seconds(60), "ThousandConcurrentReads"};
  EXPECT_EQ(rt.block_on(read_blocks_concurrently(path)), block_count);
  spindle::runtime_stats const s = rt.stats();
  // Both backends: every read, the open and the close completed in the driver.
  EXPECT_GE(s.io_completions, block_count + 2);
  std::uint64_t reaped = 0;
  for (auto const& w : s.workers)
    reaped += w.io_completions;
  if (GetParam() == io_backend::uring) {
    EXPECT_EQ(reaped, s.io_completions);  // all reaped by the workers' rings
  } else {
    EXPECT_EQ(reaped, 0u);  // all completed on the pool's threads
  }
}

// SPINDLE_CACHED_READS=0 in the environment: read_at's cached-read path is
// off, and the tests of it skip.
bool cached_reads_off() {
  char const* env = std::getenv("SPINDLE_CACHED_READS");
  return env != nullptr && env == std::string("0");
}

// With try_cached_reads (the default) the same reads of a file in the page
// cache are copied in the tasks' polls: the data is the same, and the driver
// sees almost none of them (a task's first read always has budget).
TEST_P(FileTest, ThousandConcurrentCachedReadsSkipTheDriver) {
  if (cached_reads_off()) GTEST_SKIP() << "SPINDLE_CACHED_READS=0 turns the cached-read path off";
  fs::path const path = dir_ / "blocks";
  write_plain(path, pattern_bytes(block_size * block_count));
  runtime rt{config()};
  watchdog guard{std::chrono::seconds(60), "ThousandConcurrentCachedReadsSkipTheDriver"};
  std::uint64_t const before = rt.stats().io_completions;
  EXPECT_EQ(rt.block_on(read_blocks_concurrently(path)), block_count);
  std::uint64_t const completions = rt.stats().io_completions - before;
  // The open and the close go through the driver (both backends count
  // them: the check is not vacuous with the thread pool); a read only if
  // the file left the page cache meanwhile.
  EXPECT_GE(completions, 2u);
  EXPECT_LT(completions, block_count / 10);
}

// Files smaller than the buffer (most of spindle-scan's): a cached read
// that reaches the end of the file inside the buffer returns there, with no
// trip through the driver to read the 0 bytes past the end.
task<std::size_t> read_small_files(std::vector<fs::path> paths) {
  std::vector<std::byte> buffer(128 * 1024);
  std::size_t total = 0;
  for (auto const& p : paths) {
    file f = co_await file::open(p);
    total += co_await f.read_at(buffer, 0);
    co_await f.close();
  }
  co_return total;
}

TEST_P(FileTest, ACachedReadThatReachesTheEndOfTheFileSkipsTheDriver) {
  if (cached_reads_off()) GTEST_SKIP() << "SPINDLE_CACHED_READS=0 turns the cached-read path off";
  constexpr std::size_t files = 200;
  std::vector<fs::path> paths;
  std::size_t expected = 0;
  for (std::size_t i = 0; i < files; ++i) {
    paths.push_back(dir_ / ("small-" + std::to_string(i)));
    std::size_t const size = 1 + (i * 977) % 100'000;  // all below the 128 KiB buffer
    write_plain(paths.back(), pattern_bytes(size));
    expected += size;
  }
  runtime_config cfg = config();
  cfg.workers = 1;
  runtime rt{cfg};
  // Polls of the one task (both backends): its first, then one per
  // suspension. Each file's open and close suspend in the driver; its read
  // only if the file left the page cache meanwhile. A read that sent the
  // tail past the end of the file to the driver makes it 3 per file.
  auto polls = [&rt] { return rt.stats().total_polled; };
  std::uint64_t const before = polls();
  EXPECT_EQ(rt.block_on(read_small_files(paths)), expected);
  std::uint64_t const per_file_ops = 2;
  EXPECT_LT(polls() - before, 1 + files * per_file_ops + files / 10);
}

// A read whose start is in the page cache and whose end is not: the cached
// part is copied at once, the rest read through the driver, and the count is
// whole (as pread's on a regular file), not short.
task<std::size_t> read_whole_span(fs::path path, std::vector<std::byte>* out) {
  file f = co_await file::open(path);
  std::size_t const n = co_await f.read_at(*out, 0);
  co_await f.close();
  co_return n;
}

TEST_P(FileTest, AReadHalfInThePageCacheIsWhole) {
  constexpr std::size_t size = 1024 * 1024;
  fs::path const path = dir_ / "half-cached";
  std::vector<std::byte> const data = pattern_bytes(size);
  write_plain(path, data);
  runtime rt{config()};
  for (int round = 0; round < 5; ++round) {
    {
      // Written back and dropped from the page cache, then only the first
      // half read back in (where the kernel does it; elsewhere the read is
      // simply cached).
      int fd = ::open(path.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);  // no readahead past the first half
      std::vector<std::byte> warm(size / 2);
      ASSERT_EQ(::pread(fd, warm.data(), size / 2, 0), static_cast<ssize_t>(size / 2));
      ::close(fd);
    }
    std::vector<std::byte> got(size);
    EXPECT_EQ(rt.block_on(read_whole_span(path, &got)), size);
    EXPECT_TRUE(got == data);
  }
}

// The coop budget: a task that reads a cached file in a loop (every read
// could complete at once) still suspends every 65th read, so that another
// task on the only worker gets to run and stop it.
task<std::size_t> read_until(file* f, std::atomic<bool>* stop, std::atomic<bool>* started) {
  std::vector<std::byte> buffer(block_size);
  std::size_t reads = 0;
  started->store(true);
  while (!stop->load()) {
    std::size_t const n = co_await f->read_at(buffer, (reads % block_count) * block_size);
    if (n == 0) break;
    ++reads;
  }
  co_return reads;
}

task<void> set_flag(std::atomic<bool>* flag) {
  flag->store(true);
  co_return;
}

task<std::size_t> cached_read_loop_and_stopper(fs::path path) {
  file f = co_await file::open(path);
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  auto reader = spindle::spawn(read_until(&f, &stop, &started));
  while (!started.load())
    co_await spindle::yield_now{};
  // Queued behind the reader on the one worker: it runs only if the reader
  // suspends.
  auto stopper = spindle::spawn(set_flag(&stop));
  std::size_t const reads = co_await reader;
  co_await stopper;
  co_await f.close();
  co_return reads;
}

TEST_P(FileTest, ALoopOfCachedReadsStillLetsOtherTasksRun) {
  fs::path const path = dir_ / "blocks";
  write_plain(path, pattern_bytes(block_size * block_count));
  runtime rt{runtime_config{.workers = 1, .io = GetParam()}};
  watchdog guard{std::chrono::seconds(60), "ALoopOfCachedReadsStillLetsOtherTasksRun"};
  EXPECT_GT(rt.block_on(cached_read_loop_and_stopper(path)), 0u);
}

// Past its poll's budget a loop of cached reads yields (the next poll has a
// fresh budget): the reads stay out of the driver, and the task still
// suspends once per 64 reads. (Through the driver, every 65th read took a
// ring trip: 15 of these 1,000.)
task<std::size_t> read_every_block(fs::path path) {
  file f = co_await file::open(path);
  std::vector<std::byte> buffer(block_size);
  std::size_t total = 0;
  for (std::size_t i = 0; i < block_count; ++i)
    total += co_await f.read_at(buffer, i * block_size);
  co_await f.close();
  co_return total;
}

TEST_P(FileTest, ALoopOfCachedReadsPastItsBudgetYieldsInsteadOfUsingTheDriver) {
  if (cached_reads_off()) GTEST_SKIP() << "SPINDLE_CACHED_READS=0 turns the cached-read path off";
  fs::path const path = dir_ / "blocks";
  write_plain(path, pattern_bytes(block_size * block_count));
  runtime rt{runtime_config{.workers = 1, .io = GetParam()}};
  watchdog guard{std::chrono::seconds(60),
                 "ALoopOfCachedReadsPastItsBudgetYieldsInsteadOfUsingTheDriver"};
  auto completions = [&rt] { return rt.stats().io_completions; };
  std::uint64_t const completions_before = completions();
  std::uint64_t const polls_before = rt.stats().total_polled;
  EXPECT_EQ(rt.block_on(read_every_block(path)), block_size * block_count);
  // The open and the close, and a few reads if the file left the page cache
  // meanwhile (both backends).
  std::uint64_t const completions_now = completions() - completions_before;
  EXPECT_GE(completions_now, 2u);
  EXPECT_LE(completions_now, 2u + 3u);
  // At least a poll per 64 reads: the yields.
  EXPECT_GE(rt.stats().total_polled - polls_before, block_count / 64);
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

// --- abort of tasks suspended in I/O ------------------------------------------

using namespace std::chrono_literals;

/// Polls `done` every millisecond until it holds or `limit` passes. The limit
/// only turns a hang into a failure; nothing here depends on timing.
template <class Pred>
bool wait_until(Pred done, std::chrono::milliseconds limit = 10s) {
  auto const deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

/// Counts live instances: the locals of an aborted task must be destroyed.
class live_guard {
 public:
  explicit live_guard(std::atomic<int>* live) noexcept : live_(live) { live_->fetch_add(1); }
  live_guard(live_guard const&) = delete;
  live_guard& operator=(live_guard const&) = delete;
  ~live_guard() { live_->fetch_sub(1); }

 private:
  std::atomic<int>* live_;
};

/// A pipe whose read end is handed to a task (which wraps it in a file).
class test_pipe {
 public:
  test_pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read_end_ = fds[0];
    write_end_ = fds[1];
  }
  test_pipe(test_pipe const&) = delete;
  test_pipe& operator=(test_pipe const&) = delete;
  ~test_pipe() {
    if (read_end_ >= 0) ::close(read_end_);
    ::close(write_end_);
  }
  /// The read end, now owned by the caller.
  int take_read_end() noexcept { return std::exchange(read_end_, -1); }
  int write_end() const noexcept { return write_end_; }
  /// True when no descriptor of the read end is open any more (a write fails
  /// with EPIPE; SIGPIPE must be ignored). Writes a byte otherwise.
  bool read_end_closed() const {
    errno = 0;
    return ::write(write_end_, "x", 1) == -1 && errno == EPIPE;
  }

 private:
  int read_end_ = -1;
  int write_end_ = -1;
};

task<std::size_t> read_until_aborted(int fd, std::atomic<int>* live, std::atomic<bool>* started) {
  live_guard guard{live};
  file f = file::from_fd(fd);
  std::vector<std::byte> buffer(64);
  started->store(true);
  co_return co_await f.read_at(buffer, 0);  // nobody writes: only abort ends this
}

/// After aborts: pipe reads, regular-file reads and spawning still work.
void expect_runtime_healthy(runtime& rt, fs::path const& dir) {
  test_pipe p;
  ASSERT_EQ(::write(p.write_end(), "still here", 10), 10);
  EXPECT_EQ(rt.block_on(read_from_pipe(p.take_read_end())), "still here");
  fs::path const path = dir / "healthy";
  write_plain(path, pattern_bytes(20'000));
  EXPECT_EQ(rt.block_on(spindle::io::read_file(path)), pattern_bytes(20'000));
  EXPECT_EQ(rt.block_on(read_spawned(path)), pattern_bytes(20'000));
}

TEST_P(FileTest, AbortPipeReadFromForeignThread) {
  ::signal(SIGPIPE, SIG_IGN);
  std::size_t const fds_before = open_fd_count();
  {
    runtime rt{config()};
    watchdog guard{60s, "AbortPipeReadFromForeignThread"};
    // Round 0 aborts as soon as the task started (it may still be running:
    // the hook then runs at the end of that poll); later rounds give the read
    // time to reach the kernel or a pool thread (a state, not a correctness,
    // condition: every round must pass whatever the timing).
    for (int round = 0; round < 4; ++round) {
      test_pipe p;
      std::atomic<int> live{0};
      std::atomic<bool> started{false};
      auto h = rt.spawn(read_until_aborted(p.take_read_end(), &live, &started));
      ASSERT_TRUE(wait_until([&] { return started.load(); }));
      if (round > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10 * round));
      EXPECT_FALSE(h.is_finished());
      std::thread foreign([&h] { h.abort(); });  // not a worker, not inside block_on
      foreign.join();
      ASSERT_TRUE(wait_until([&] { return h.is_finished(); }, 5s))
          << "round " << round << ": abort() left the pipe read in flight";
      EXPECT_THROW((void)h.take(), spindle::task_cancelled);
      EXPECT_EQ(live.load(), 0) << "the task's locals were not destroyed";
      EXPECT_TRUE(p.read_end_closed()) << "the file in the aborted frame was not closed";
      h.abort();  // again, on a finished task: a no-op
    }
    expect_runtime_healthy(rt, dir_);
  }
  EXPECT_EQ(open_fd_count(), fds_before);
}

task<int> abort_and_join(join_handle<std::size_t> target) {
  target.abort();
  try {
    (void)co_await target;
  } catch (spindle::task_cancelled const&) {
    co_return 1;
  }
  co_return 0;
}

TEST_P(FileTest, AbortPipeReadFromAnotherTask) {
  ::signal(SIGPIPE, SIG_IGN);
  // One worker: the aborting task runs on the worker whose ring holds the
  // read (io_uring: the cancel is prepared on the spot). Two: either worker.
  for (std::size_t workers : {std::size_t{1}, std::size_t{2}}) {
    std::size_t const fds_before = open_fd_count();
    {
      runtime rt{runtime_config{.workers = workers, .io = GetParam()}};
      watchdog guard{60s, "AbortPipeReadFromAnotherTask"};
      for (int round = 0; round < 3; ++round) {
        test_pipe p;
        std::atomic<int> live{0};
        std::atomic<bool> started{false};
        auto reader = rt.spawn(read_until_aborted(p.take_read_end(), &live, &started));
        ASSERT_TRUE(wait_until([&] { return started.load(); }));
        if (round > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10 * round));
        auto aborter = rt.spawn(abort_and_join(std::move(reader)));
        ASSERT_TRUE(wait_until([&] { return aborter.is_finished(); }, 5s))
            << workers << " workers, round " << round << ": the aborted read never completed";
        EXPECT_EQ(aborter.take(), 1) << "awaiting the aborted task did not throw task_cancelled";
        EXPECT_EQ(live.load(), 0);
        EXPECT_TRUE(p.read_end_closed());
      }
      expect_runtime_healthy(rt, dir_);
    }
    EXPECT_EQ(open_fd_count(), fds_before) << workers << " workers";
  }
}

task<std::size_t> read_once_released(int fd, std::atomic<int>* live, std::atomic<bool>* started,
                                     std::atomic<bool>* release) {
  live_guard guard{live};
  file f = file::from_fd(fd);
  std::vector<std::byte> buffer(64);
  started->store(true);
  while (!release->load()) {
    // Still running when abort() arrives: the read is submitted in the very
    // poll after which the scheduler calls its cancel hook.
  }
  co_return co_await f.read_at(buffer, 0);
}

TEST_P(FileTest, AbortWhileRunningThenSuspendedInRead) {
  ::signal(SIGPIPE, SIG_IGN);
  runtime rt{config()};
  watchdog guard{60s, "AbortWhileRunningThenSuspendedInRead"};
  for (int round = 0; round < 5; ++round) {
    test_pipe p;
    std::atomic<int> live{0};
    std::atomic<bool> started{false};
    std::atomic<bool> release{false};
    auto h = rt.spawn(read_once_released(p.take_read_end(), &live, &started, &release));
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    h.abort();
    release.store(true);
    ASSERT_TRUE(wait_until([&] { return h.is_finished(); }, 5s)) << "round " << round;
    EXPECT_THROW((void)h.take(), spindle::task_cancelled);
    EXPECT_EQ(live.load(), 0);
    EXPECT_TRUE(p.read_end_closed());
  }
  expect_runtime_healthy(rt, dir_);
}

TEST_P(FileTest, AbortAfterTheReadCompleted) {
  ::signal(SIGPIPE, SIG_IGN);
  std::size_t const fds_before = open_fd_count();
  {
    runtime rt{config()};
    watchdog guard{60s, "AbortAfterTheReadCompleted"};
    // The task has finished: abort is a no-op and the value is kept.
    {
      test_pipe p;
      ASSERT_EQ(::write(p.write_end(), "done", 4), 4);
      std::atomic<int> live{0};
      std::atomic<bool> started{false};
      auto h = rt.spawn(read_until_aborted(p.take_read_end(), &live, &started));
      ASSERT_TRUE(wait_until([&] { return h.is_finished(); }));
      h.abort();
      EXPECT_EQ(h.take(), 4u);
      EXPECT_EQ(live.load(), 0);
    }
    // The data arrives just before or just after abort(): the read may be
    // completing, completed and not yet resumed, or still waiting. Either the
    // value or task_cancelled, never a crash, a hang or a leak.
    int const rounds = 300;
    int values = 0;
    int cancelled = 0;
    for (int round = 0; round < rounds; ++round) {
      test_pipe p;
      std::atomic<int> live{0};
      std::atomic<bool> started{false};
      auto h = rt.spawn(read_until_aborted(p.take_read_end(), &live, &started));
      ASSERT_TRUE(wait_until([&] { return started.load(); }));
      if (round % 2 == 0) {
        ASSERT_EQ(::write(p.write_end(), "data", 4), 4);
        h.abort();
      } else {
        std::thread writer([&p] {
          // EPIPE when the abort destroyed the frame (and closed the read
          // end) first.
          errno = 0;
          ssize_t const r = ::write(p.write_end(), "data", 4);
          EXPECT_TRUE(r == 4 || (r == -1 && errno == EPIPE)) << r << " " << errno;
        });
        h.abort();
        writer.join();
      }
      ASSERT_TRUE(wait_until([&] { return h.is_finished(); }, 5s)) << "round " << round;
      try {
        EXPECT_EQ(h.take(), 4u);
        ++values;
      } catch (spindle::task_cancelled const&) {
        ++cancelled;
      }
      EXPECT_EQ(live.load(), 0);
      EXPECT_TRUE(p.read_end_closed());
    }
    EXPECT_EQ(values + cancelled, rounds);
    std::printf("abort racing a completion: %d values, %d cancelled\n", values, cancelled);
    expect_runtime_healthy(rt, dir_);
  }
  EXPECT_EQ(open_fd_count(), fds_before);
}

/// Reads four blocks of the pattern file (one at a time, so that aborts find
/// it at different stages); true when every byte checked out.
task<bool> read_four_blocks(file* f, std::size_t first, std::atomic<int>* live) {
  live_guard guard{live};
  std::vector<std::byte> buffer(block_size);
  for (std::size_t k = 0; k < 4; ++k) {
    std::size_t const index = (first + k * 251) % block_count;
    std::size_t const n = co_await f->read_at(buffer, index * block_size);
    if (n != block_size) co_return false;
    for (std::size_t i = 0; i < block_size; i += 512) {
      if (buffer[i] != pattern(index * block_size + i)) co_return false;
    }
  }
  co_return true;
}

struct abort_tally {
  std::size_t values = 0;
  std::size_t cancelled = 0;
  std::size_t wrong = 0;
};

task<abort_tally> spawn_read_abort_join(file* f, std::atomic<int>* live) {
  std::vector<join_handle<bool>> handles;
  handles.reserve(block_count);
  for (std::size_t i = 0; i < block_count; ++i)
    handles.push_back(spindle::spawn(read_four_blocks(f, i, live)));
  // Let some of them run, then abort all, newest first.
  for (int i = 0; i < 3; ++i)
    co_await spindle::yield_now();
  for (std::size_t i = handles.size(); i-- > 0;)
    handles[i].abort();
  abort_tally tally;
  for (auto& h : handles) {
    try {
      if (co_await h) {
        ++tally.values;
      } else {
        ++tally.wrong;
      }
    } catch (spindle::task_cancelled const&) {
      ++tally.cancelled;
    }
  }
  co_return tally;
}

TEST_P(FileTest, AbortThousandRegularFileReads) {
  fs::path const path = dir_ / "blocks";
  write_plain(path, pattern_bytes(block_size * block_count));
  std::size_t const fds_before = open_fd_count();
  {
    runtime rt{config()};
    watchdog guard{120s, "AbortThousandRegularFileReads"};
    file f = rt.block_on(file::open(path));
    std::atomic<int> live{0};

    // From a foreign thread, while the reads complete.
    {
      std::vector<join_handle<bool>> handles;
      handles.reserve(block_count);
      for (std::size_t i = 0; i < block_count; ++i)
        handles.push_back(rt.spawn(read_four_blocks(&f, i, &live)));
      // Remote spawns run roughly in order: once an early one has finished,
      // later ones are queued, running, suspended in a read or completing.
      (void)wait_until([&] { return handles[block_count / 8].is_finished(); }, 5s);
      for (std::size_t i = 0; i < block_count; ++i) {
        // Interleaved: odd handles first, then even ones.
        handles[(2 * i + 1) % block_count].abort();
      }
      for (auto& h : handles)
        h.abort();
      abort_tally tally;
      for (auto& h : handles) {
        ASSERT_TRUE(wait_until([&] { return h.is_finished(); }, 30s)) << "an aborted read hung";
        try {
          if (h.take()) {
            ++tally.values;
          } else {
            ++tally.wrong;
          }
        } catch (spindle::task_cancelled const&) {
          ++tally.cancelled;
        }
      }
      EXPECT_EQ(tally.wrong, 0u);
      EXPECT_EQ(tally.values + tally.cancelled, block_count);
      std::printf("foreign aborts: %zu values, %zu cancelled\n", tally.values, tally.cancelled);
      EXPECT_EQ(live.load(), 0);
    }
    // From a spindle task, which awaits the handles itself.
    for (int round = 0; round < 2; ++round) {
      abort_tally const tally = rt.block_on(spawn_read_abort_join(&f, &live));
      EXPECT_EQ(tally.wrong, 0u);
      EXPECT_EQ(tally.values + tally.cancelled, block_count);
      std::printf("in-task aborts: %zu values, %zu cancelled\n", tally.values, tally.cancelled);
      EXPECT_EQ(live.load(), 0);
    }
    EXPECT_EQ(rt.block_on(read_blocks_concurrently(path)), block_count);  // still healthy
    // (block_on returns when its task's waiter is notified, just before the
    // task leaves the in-flight count.)
    EXPECT_TRUE(wait_until([&] { return rt.stats().tasks_alive == 0; }))
        << rt.stats().tasks_alive << " tasks still alive";
  }
  EXPECT_EQ(open_fd_count(), fds_before);
}

task<int> open_fifo_for_reading(fs::path path, std::atomic<int>* live, std::atomic<bool>* started) {
  live_guard guard{live};
  started->store(true);
  file f = co_await file::open(path, O_RDONLY);  // waits for a writer (thread pool)
  co_return f.native_handle();
}

// An open that completes after abort() produced a descriptor nobody will see:
// the op's awaiter closes it when the frame is destroyed.
TEST_P(FileTest, AbortedOpenClosesTheDescriptorItProduced) {
  ::signal(SIGPIPE, SIG_IGN);
  fs::path const fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::size_t const fds_before = open_fd_count();
  int writer = -1;
  {
    runtime rt{config()};
    watchdog guard{60s, "AbortedOpenClosesTheDescriptorItProduced"};
    std::atomic<int> live{0};
    std::atomic<bool> started{false};
    auto h = rt.spawn(open_fifo_for_reading(fifo, &live, &started));
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    std::this_thread::sleep_for(20ms);  // let the open reach a pool thread (not required)
    h.abort();
    // An open already blocked in a pool thread is not interruptible: give it
    // its writer (which succeeds only while the reader is in open()).
    ASSERT_TRUE(wait_until(
        [&] {
          if (writer < 0) writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
          return h.is_finished();
        },
        10s));
    bool cancelled = false;
    try {
      (void)h.take();  // io_uring opens a FIFO without waiting: it may have finished
    } catch (spindle::task_cancelled const&) {
      cancelled = true;
    }
    if (GetParam() == io_backend::threadpool) {
      EXPECT_TRUE(cancelled);
    }
    EXPECT_EQ(live.load(), 0);
    if (writer >= 0) {
      errno = 0;
      EXPECT_EQ(::write(writer, "x", 1), -1) << "the descriptor the open produced leaked";
      EXPECT_EQ(errno, EPIPE);
      ::close(writer);
    }
  }
  EXPECT_EQ(open_fd_count(), fds_before);
}

INSTANTIATE_TEST_SUITE_P(Backends, FileTest, spindle_test::backends(), spindle_test::backend_name);

}  // namespace
