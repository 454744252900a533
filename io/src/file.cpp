// spindle::io::file and read_file (see spindle/io/file.hpp).
#include "spindle/io/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

#include "io_op.hpp"
#include "spindle/runtime.hpp"

namespace spindle::io {

namespace {

using detail::io_op;
using detail::op_awaiter;
using detail::op_code;

[[noreturn]] void throw_errno(int err, char const* what) {
  throw std::system_error(err, std::system_category(), what);
}

[[noreturn]] void throw_errno(int err, char const* what, std::filesystem::path const& path) {
  throw std::system_error(err, std::system_category(), std::string(what) + " " + path.string());
}

std::uint32_t clamp_length(std::size_t bytes) noexcept {
  return static_cast<std::uint32_t>(std::min<std::size_t>(bytes, detail::max_rw_count));
}

std::filesystem::file_type type_of(std::uint32_t mode) noexcept {
  using std::filesystem::file_type;
  switch (mode & S_IFMT) {
    case S_IFREG:
      return file_type::regular;
    case S_IFDIR:
      return file_type::directory;
    case S_IFLNK:
      return file_type::symlink;
    case S_IFBLK:
      return file_type::block;
    case S_IFCHR:
      return file_type::character;
    case S_IFIFO:
      return file_type::fifo;
    case S_IFSOCK:
      return file_type::socket;
    default:
      return file_type::unknown;
  }
}

file_status status_of(struct statx const& stx) noexcept {
  file_status status;
  status.size = stx.stx_size;
  status.mode = stx.stx_mode;
  status.type = type_of(stx.stx_mode);
  status.ino = static_cast<ino_t>(stx.stx_ino);
  status.dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
  status.nlink = stx.stx_nlink;
  status.uid = stx.stx_uid;
  status.gid = stx.stx_gid;
  status.blocks = stx.stx_blocks;
  return status;
}

}  // namespace

file::file(file&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      no_nowait_reads_(other.no_nowait_reads_.exchange(false, std::memory_order_relaxed)) {}

file& file::operator=(file&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    no_nowait_reads_.store(other.no_nowait_reads_.exchange(false, std::memory_order_relaxed),
                           std::memory_order_relaxed);
  }
  return *this;
}

file::~file() {
  if (fd_ >= 0) ::close(fd_);
}

file file::from_fd(int fd) noexcept {
  return file{fd < 0 ? -1 : fd};
}

int file::release() noexcept {
  no_nowait_reads_.store(false, std::memory_order_relaxed);
  return std::exchange(fd_, -1);
}

task<file> file::open(std::filesystem::path path, int flags, mode_t mode) {
  int const r = co_await op_awaiter{{},
                                    io_op{.code = op_code::openat,
                                          .dir_fd = AT_FDCWD,
                                          .flags = flags | O_CLOEXEC,
                                          .mode = mode,
                                          .path = path.c_str()}};
  if (r < 0) throw_errno(-r, "spindle::io::file::open", path);
  co_return file{r};
}

task<file> file::open_at(int dir_fd, std::filesystem::path path, int flags, mode_t mode) {
  int const r = co_await op_awaiter{{},
                                    io_op{.code = op_code::openat,
                                          .dir_fd = dir_fd,
                                          .flags = flags | O_CLOEXEC,
                                          .mode = mode,
                                          .path = path.c_str()}};
  if (r < 0) throw_errno(-r, "spindle::io::file::open_at", path);
  co_return file{r};
}

task<file> file::open_at(int dir_fd, std::filesystem::path path, int flags, mode_t mode,
                         std::error_code& ec) {
  int const r = co_await op_awaiter{{},
                                    io_op{.code = op_code::openat,
                                          .dir_fd = dir_fd,
                                          .flags = flags | O_CLOEXEC,
                                          .mode = mode,
                                          .path = path.c_str()}};
  if (r < 0) {
    ec.assign(-r, std::system_category());
    co_return file{};
  }
  ec.clear();
  co_return file{r};
}

task<file> file::open_at(file const& dir, std::filesystem::path path, int flags, mode_t mode) {
  // Checked here: openat ignores a bad descriptor when `path` is absolute.
  if (dir.fd_ < 0) throw_errno(EBADF, "spindle::io::file::open_at: directory not open", path);
  co_return co_await open_at(dir.fd_, std::move(path), flags, mode);
}

task<std::size_t> file::read_at(std::span<std::byte> buffer, std::uint64_t offset) {
  if (fd_ < 0) throw_errno(EBADF, "spindle::io::file::read_at: file not open");
  if (buffer.empty()) co_return 0;
  std::uint32_t const length = clamp_length(buffer.size());
  std::uint32_t got = 0;  // bytes copied from the page cache
  using spindle::detail::sync_io_grant;
  sync_io_grant grant = sync_io_grant::off;
  if (!no_nowait_reads_.load(std::memory_order_relaxed)) {
    grant = spindle::detail::take_sync_io_budget();
    if (grant == sync_io_grant::spent) {
      // This poll copied its share (the coop budget): let the other tasks
      // run, and copy it on the next poll, with a fresh budget. Through the
      // driver instead, a loop of cached reads paid a ring trip (an SQE, a
      // CQE and a wake, often on the other worker) every 65th read.
      co_await spindle::yield_now{};
      grant = spindle::detail::take_sync_io_budget();
    }
  }
  if (grant == sync_io_grant::granted) {
    // Data in the page cache: copy it now, without the driver (see
    // runtime_config::try_cached_reads). EAGAIN: it would block; anything
    // else (a pipe's ESPIPE, EOPNOTSUPP where the file system has no
    // RWF_NOWAIT, EBADF, EISDIR, ...) the driver reports or does the same
    // way, and this file stops trying.
    iovec iov{buffer.data(), length};
    ssize_t const n = ::preadv2(fd_, &iov, 1, static_cast<off_t>(offset), RWF_NOWAIT);
    if (n == 0 || n == static_cast<ssize_t>(length)) co_return static_cast<std::size_t>(n);
    if (n > 0) {
      // A short count: the file ends there (a file smaller than the
      // buffer, the common case for spindle-scan), or only the start was
      // cached (readahead under way). One more RWF_NOWAIT read at the new
      // offset tells which without a trip through the driver: 0 is the end
      // of the file; data is more of it; EAGAIN sends the rest through the
      // driver, so that a regular file still gives the whole count a pread
      // would.
      got = static_cast<std::uint32_t>(n);
      for (int more = 0; more < 2 && got < length; ++more) {
        iovec rest{buffer.data() + got, length - got};
        ssize_t const m = ::preadv2(fd_, &rest, 1, static_cast<off_t>(offset + got), RWF_NOWAIT);
        if (m == 0) co_return got;
        if (m < 0) break;  // EAGAIN (or an error the driver reports the same way)
        got += static_cast<std::uint32_t>(m);
      }
      if (got == length) co_return got;
    } else if (errno != EAGAIN) {
      no_nowait_reads_.store(true, std::memory_order_relaxed);
    }
  }
  int const r = co_await op_awaiter{{},
                                    io_op{.code = op_code::read,
                                          .fd = fd_,
                                          .buffer = buffer.data() + got,
                                          .length = length - got,
                                          .offset = offset + got}};
  if (r < 0) {
    if (got != 0)
      co_return got;  // what was read, as a short read (the error comes again next time)
    throw_errno(-r, "spindle::io::file::read_at");
  }
  co_return static_cast<std::size_t>(got) + static_cast<std::size_t>(r);
}

task<std::size_t> file::write_at(std::span<const std::byte> buffer, std::uint64_t offset) {
  if (fd_ < 0) throw_errno(EBADF, "spindle::io::file::write_at: file not open");
  if (buffer.empty()) co_return 0;
  int const r = co_await op_awaiter{{},
                                    io_op{.code = op_code::write,
                                          .fd = fd_,
                                          .buffer = const_cast<std::byte*>(buffer.data()),
                                          .length = clamp_length(buffer.size()),
                                          .offset = offset}};
  if (r < 0) throw_errno(-r, "spindle::io::file::write_at");
  co_return static_cast<std::size_t>(r);
}

task<file_status> file::stat() {
  if (fd_ < 0) throw_errno(EBADF, "spindle::io::file::stat: file not open");
  struct statx stx {};
  int const r = co_await op_awaiter{{}, io_op{.code = op_code::statx, .fd = fd_, .buffer = &stx}};
  if (r < 0) throw_errno(-r, "spindle::io::file::stat");
  co_return status_of(stx);
}

namespace {

/// The op every stat_at awaits: statx(dir_fd, path, flags, STATX_BASIC_STATS,
/// &stx), yielding 0 or -errno. `path` and `stx` must stay in the awaiting
/// frame until the op completes (the stat_at coroutines' parameter and local).
op_awaiter statx_at_op(int dir_fd, std::filesystem::path const& path, int flags,
                       struct statx& stx) noexcept {
  return op_awaiter{{},
                    io_op{.code = op_code::statx_at,
                          .dir_fd = dir_fd,
                          .flags = flags,
                          .path = path.c_str(),
                          .buffer = &stx,
                          .length = STATX_BASIC_STATS}};  // io_op::statx_mask()
}

}  // namespace

task<file_status> stat_at(int dir_fd, std::filesystem::path path, int flags) {
  struct statx stx {};
  int const r = co_await statx_at_op(dir_fd, path, flags, stx);
  if (r < 0) throw_errno(-r, "spindle::io::stat_at", path);
  co_return status_of(stx);
}

task<file_status> stat_at(file const& dir, std::filesystem::path path, int flags) {
  // Checked here: statx ignores a bad descriptor when `path` is absolute.
  if (!dir.is_open()) throw_errno(EBADF, "spindle::io::stat_at: directory not open", path);
  co_return co_await stat_at(dir.native_handle(), std::move(path), flags);
}

task<file_status> stat_at(int dir_fd, std::filesystem::path path, int flags, std::error_code& ec) {
  struct statx stx {};
  int const r = co_await statx_at_op(dir_fd, path, flags, stx);
  if (r < 0) {
    ec.assign(-r, std::system_category());
    co_return file_status{};
  }
  ec.clear();
  co_return status_of(stx);
}

task<void> file::close() {
  if (fd_ < 0) throw_errno(EBADF, "spindle::io::file::close: file not open");
  int const fd = std::exchange(fd_, -1);
  int r = 0;
  try {
    r = co_await op_awaiter{{}, io_op{.code = op_code::close, .fd = fd}};
  } catch (...) {
    fd_ = fd;  // never submitted (awaited outside a spindle task): still ours
    throw;
  }
  if (r == -ECANCELED) {
    // The driver refused the op (runtime shutting down): it never ran.
    ::close(fd);
    r = 0;
  }
  if (r < 0) throw_errno(-r, "spindle::io::file::close");
}

task<std::vector<std::byte>> read_file(std::filesystem::path path) {
  file f = co_await file::open(path, O_RDONLY);  // its errors name the path already
  std::vector<std::byte> data;
  try {
    file_status const status = co_await f.stat();
    if (status.is_directory()) throw std::system_error(EISDIR, std::system_category(), "read");

    // One byte more than the reported size, so that a file that did not
    // change is read in one call and the next read (of that spare byte) sees
    // EOF. Sizes of special files (procfs, pipes) mean nothing: start with
    // 16 KiB.
    std::size_t capacity = 16 * 1024;
    if (status.is_regular() && status.size > 0) {
      capacity = static_cast<std::size_t>(status.size) + 1;
    }
    data.resize(capacity);
    std::size_t length = 0;
    for (;;) {
      if (length == data.size()) data.resize(data.size() * 2);  // the file grew
      std::size_t const n = co_await f.read_at(std::span<std::byte>(data).subspan(length), length);
      if (n == 0) break;
      length += n;
    }
    data.resize(length);
    co_await f.close();
  } catch (std::system_error const& e) {
    throw std::system_error(e.code(), "spindle::io::read_file " + path.string());
  }
  co_return data;
}

}  // namespace spindle::io
