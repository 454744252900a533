// Tests of spindle::io::stat_at (path-based statx through the I/O driver), on
// both I/O backends: every test runs once with io_backend::uring (skipped
// when io_uring cannot be set up here) and once with io_backend::threadpool.
// The results are compared with a direct statx(2) of the same path; errors
// with the errno statx reports; many concurrent calls whose names are
// temporaries check that the path lives in the task's frame.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "io_test_support.hpp"
#include "spindle/io.hpp"
#include "spindle/runtime.hpp"
#include "spindle/when_all.hpp"

namespace {

using spindle::io_backend;
using spindle::runtime;
using spindle::task;
using spindle::io::file;
using spindle::io::file_status;
using spindle::io::stat_at;
namespace fs = std::filesystem;

using spindle_test::errno_of;

/// Writes `n` bytes ('x') to `path`.
void write_bytes(fs::path const& path, std::size_t n) {
  spindle_test::write_plain(path, std::vector<std::byte>(n, std::byte{'x'}));
}

/// Checks `st` against a direct statx of (dir_fd, path, flags).
void expect_same_as_statx(file_status const& st, int dir_fd, char const* path, int flags) {
  struct statx stx {};
  ASSERT_EQ(::statx(dir_fd, path, flags, STATX_BASIC_STATS, &stx), 0) << path;
  EXPECT_EQ(st.size, stx.stx_size) << path;
  EXPECT_EQ(st.mode, stx.stx_mode) << path;
  EXPECT_EQ(st.ino, stx.stx_ino) << path;
  EXPECT_EQ(st.dev, makedev(stx.stx_dev_major, stx.stx_dev_minor)) << path;
  EXPECT_EQ(st.nlink, stx.stx_nlink) << path;
  EXPECT_EQ(st.uid, stx.stx_uid) << path;
  EXPECT_EQ(st.gid, stx.stx_gid) << path;
  EXPECT_EQ(st.blocks, stx.stx_blocks) << path;
}

class StatAtTest : public spindle_test::backend_dir_test {
 protected:
  StatAtTest() : backend_dir_test("stat-at") {}
};

task<void> stat_kinds(fs::path dir) {
  file d = co_await file::open(dir, O_RDONLY | O_DIRECTORY);
  int const fd = d.native_handle();

  file_status const plain = co_await stat_at(fd, "plain");
  EXPECT_TRUE(plain.is_regular());
  EXPECT_EQ(plain.size, 1234u);
  EXPECT_EQ(plain.nlink, 2u);  // "hard" is a second link
  expect_same_as_statx(plain, fd, "plain", 0);

  file_status const hard = co_await stat_at(d, "hard");
  EXPECT_EQ(hard.ino, plain.ino);
  EXPECT_EQ(hard.dev, plain.dev);

  file_status const sub = co_await stat_at(fd, "sub", AT_SYMLINK_NOFOLLOW);
  EXPECT_TRUE(sub.is_directory());
  expect_same_as_statx(sub, fd, "sub", AT_SYMLINK_NOFOLLOW);

  // A symbolic link: followed by default, its own status with NOFOLLOW.
  file_status const followed = co_await stat_at(fd, "link");
  EXPECT_EQ(followed.ino, plain.ino);
  file_status const link = co_await stat_at(fd, "link", AT_SYMLINK_NOFOLLOW);
  EXPECT_EQ(link.type, fs::file_type::symlink);
  EXPECT_EQ(link.size, 5u);  // "plain"
  expect_same_as_statx(link, fd, "link", AT_SYMLINK_NOFOLLOW);

  // A path of several components, an absolute path (dir_fd ignored), the
  // current directory, and AT_EMPTY_PATH on a descriptor.
  file_status const deep = co_await stat_at(fd, "sub/inner");
  EXPECT_EQ(deep.size, 7u);
  file_status const absolute = co_await stat_at(-1, (dir / "plain").native());
  EXPECT_EQ(absolute.ino, plain.ino);
  file_status const cwd_relative = co_await stat_at(AT_FDCWD, (dir / "sub").native());
  EXPECT_EQ(cwd_relative.ino, sub.ino);
  file p = co_await file::open_at(d, "plain");
  file_status const by_fd = co_await stat_at(p.native_handle(), "", AT_EMPTY_PATH);
  EXPECT_EQ(by_fd.ino, plain.ino);
  file_status const by_file = co_await p.stat();  // file::stat fills the same fields
  EXPECT_EQ(by_file.ino, plain.ino);
  EXPECT_EQ(by_file.nlink, 2u);
  EXPECT_EQ(by_file.dev, plain.dev);
}

TEST_P(StatAtTest, KindsOfFiles) {
  write_bytes(dir_ / "plain", 1234);
  ASSERT_EQ(::link((dir_ / "plain").c_str(), (dir_ / "hard").c_str()), 0);
  fs::create_directory(dir_ / "sub");
  write_bytes(dir_ / "sub" / "inner", 7);
  fs::create_symlink("plain", dir_ / "link");
  runtime rt{config()};
  EXPECT_EQ(rt.io_backend_in_use(), GetParam());
  rt.block_on(stat_kinds(dir_));
}

task<void> stat_errors(fs::path dir) {
  file d = co_await file::open(dir, O_RDONLY | O_DIRECTORY);
  int const fd = d.native_handle();
  file regular = co_await file::open_at(d, "plain");
  EXPECT_EQ(co_await errno_of(stat_at(fd, "missing")), ENOENT);
  EXPECT_EQ(co_await errno_of(stat_at(fd, "plain/x")), ENOTDIR);
  EXPECT_EQ(co_await errno_of(stat_at(regular.native_handle(), "x")), ENOTDIR);
  EXPECT_EQ(co_await errno_of(stat_at(-1, "plain")), EBADF);
  file closed;
  EXPECT_EQ(co_await errno_of(stat_at(closed, (dir / "plain").native())), EBADF);
  EXPECT_EQ(co_await errno_of(stat_at(fd, "loop")), ELOOP);  // a -> b -> a
  EXPECT_EQ(co_await errno_of(stat_at(fd, std::string(300, 'n'))), ENAMETOOLONG);
  EXPECT_EQ(co_await errno_of(stat_at(fd, "plain", AT_REMOVEDIR)), EINVAL);
  // The loop itself, not followed, is fine.
  EXPECT_EQ(co_await errno_of(stat_at(fd, "loop", AT_SYMLINK_NOFOLLOW)), 0);
  try {
    (void)co_await stat_at(fd, "missing");
    ADD_FAILURE() << "stat_at of a missing file succeeded";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  // Without exceptions: the errno in an error_code and an empty status;
  // cleared on success.
  std::error_code ec = std::make_error_code(std::errc::interrupted);
  file_status const none = co_await stat_at(fd, "missing", 0, ec);
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  EXPECT_EQ(&ec.category(), &std::system_category());
  EXPECT_EQ(none.type, fs::file_type::none);
  EXPECT_EQ(none.size, 0u);
  file_status const some = co_await stat_at(fd, "plain", 0, ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(some.size, 3u);
}

TEST_P(StatAtTest, ErrorsAreTheErrnoOfStatx) {
  write_bytes(dir_ / "plain", 3);
  fs::create_symlink("b", dir_ / "loop");
  fs::create_symlink("loop", dir_ / "b");
  runtime rt{config()};
  rt.block_on(stat_errors(dir_));
}

TEST_P(StatAtTest, AwaitedOutsideSpindleTaskThrowsEPERM) {
  runtime rt{config()};  // exists, but this thread is not inside one of its tasks
  auto frame = stat_at(AT_FDCWD, "/").release();
  frame.resume();
  ASSERT_TRUE(frame.done());
  try {
    (void)frame.promise().take_result();
    ADD_FAILURE() << "stat_at outside a task did not throw";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::operation_not_permitted);
  }
  frame.destroy();
}

constexpr std::size_t many = 1000;

/// The name of file k: long enough to live on the heap (no small-string
/// buffer), so that a path the driver read after the caller's string died
/// would show under ASan.
std::string long_name(std::size_t k) {
  return "a-rather-long-file-name-beyond-small-string-storage-" + std::to_string(k);
}

task<std::size_t> stat_many(fs::path dir) {
  file d = co_await file::open(dir, O_RDONLY | O_DIRECTORY);
  std::vector<task<file_status>> stats;
  std::vector<std::error_code> errors(many + 1);
  for (std::size_t k = 0; k < many; ++k) {
    // The name is a temporary: gone before the tasks run.
    stats.push_back(stat_at(d.native_handle(), long_name(k), AT_SYMLINK_NOFOLLOW, errors[k]));
  }
  stats.push_back(stat_at(d.native_handle(), long_name(many), 0, errors[many]));  // missing
  std::vector<file_status> got = co_await spindle::when_all(std::move(stats));
  std::size_t right = 0;
  for (std::size_t k = 0; k < many; ++k) {
    EXPECT_FALSE(errors[k]) << k << ": " << errors[k].message();
    if (!errors[k] && got[k].size == k % 97 && got[k].is_regular()) ++right;
  }
  EXPECT_EQ(errors[many], std::errc::no_such_file_or_directory);
  co_return right;
}

TEST_P(StatAtTest, ThousandConcurrentStatsOfTemporaryNames) {
  for (std::size_t k = 0; k < many; ++k)
    write_bytes(dir_ / long_name(k), k % 97);
  runtime rt{config()};
  EXPECT_EQ(rt.block_on(stat_many(dir_)), many);
  // Every stat completed in the driver (the workers' rings, or the pool).
  EXPECT_GE(rt.stats().io_completions, many);
}

INSTANTIATE_TEST_SUITE_P(Backends, StatAtTest, spindle_test::backends(),
                         spindle_test::backend_name);

}  // namespace
