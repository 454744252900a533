// spindle::io::file and spindle::io::read_file: asynchronous file I/O.
//
// Shape: `file` is a move-only owner of one file descriptor. Its operations
// are lazy spindle tasks: `co_await f.read_at(buf, off)` submits one
// positional read to the runtime's I/O driver (io_uring, or the blocking
// thread pool when io_uring is unavailable; see runtime_config::io) and
// suspends the calling task until it completes; the task may resume on
// another worker. Offsets and sizes are in bytes. read_at/write_at behave
// like pread/pwrite: one system call, a count that may be short (at most
// 0x7ffff000 bytes per call), and 0 from read_at at end of file. On
// descriptors that cannot seek (pipes, sockets) the offset is ignored.
// open() and open_at() always add O_CLOEXEC. The destructor closes a still-open
// descriptor synchronously with ::close (errors ignored); close() closes it
// through the driver and reports errors.
//
// Errors: every operation throws std::system_error whose code is the errno
// in std::system_category (compare with std::errc): ENOENT (no such file),
// EACCES (permission denied), EISDIR (read_file of a directory, reads of a
// directory), EBADF (operation on a closed or moved-from file), ENOSPC, EIO,
// ... as the system call reports them; ECANCELED when the runtime is shutting
// down; EPERM (std::errc::operation_not_permitted) when awaited outside a
// spindle task (use runtime::block_on). One open_at overload reports the
// system call's errno in a std::error_code instead of throwing.
//
// Cancellation: join_handle::abort() of a task suspended in one of these
// operations never resumes it. An operation the driver has not started yet is
// withdrawn and the task's frame is destroyed at once. One already in flight
// is cancelled where that is possible (io_uring's IORING_OP_ASYNC_CANCEL; on
// the thread pool, a read or write waiting on a pipe or socket) and otherwise
// runs to its end (a regular-file read or write, an open, a close); the frame
// (with the file objects and buffers it owns) is destroyed when the operation
// completes, never while the kernel or a pool thread may still use the buffer.
// A descriptor opened by an open() that completes after the abort is closed;
// a close() that was withdrawn still closes its descriptor. Awaiting the
// aborted task's handle throws spindle::task_cancelled.
//
// Thread-safety: a file may be read and written from several tasks at once
// (positional I/O shares no cursor) provided none of them closes, moves or
// destroys it meanwhile. The file and every buffer passed to an operation must
// outlive that operation's task. Tasks created by these functions are not
// shared between threads except through the runtime.
// Design source: docs/design.md "Public contract" (namespace spindle::io) and
// "I/O driver"; Tokio's tokio::fs and Glommio's DmaFile for the shape;
// POSIX pread/pwrite for the semantics.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <system_error>
#include <vector>

#include "spindle/task.hpp"

namespace spindle::io {

/// What file::stat() and stat_at() report (from statx(2) with
/// STATX_BASIC_STATS; a file system that cannot supply a field leaves it 0).
struct file_status {
  std::uint64_t size = 0;  ///< size in bytes (st_size)
  std::uint32_t mode = 0;  ///< st_mode: file type and permission bits
  std::filesystem::file_type type = std::filesystem::file_type::none;  ///< from `mode`
  ino_t ino = 0;                                                       ///< inode number (st_ino)
  dev_t dev = 0;             ///< device of the file system holding it (st_dev, makedev'd)
  std::uint32_t nlink = 0;   ///< hard links (st_nlink)
  std::uint32_t uid = 0;     ///< owner (st_uid)
  std::uint32_t gid = 0;     ///< group (st_gid)
  std::uint64_t blocks = 0;  ///< space allocated, in 512-byte units (st_blocks)

  /// Permission bits of `mode` (07777).
  [[nodiscard]] std::filesystem::perms permissions() const noexcept {
    return static_cast<std::filesystem::perms>(mode & 07777u);
  }
  /// True for a regular file.
  [[nodiscard]] bool is_regular() const noexcept {
    return type == std::filesystem::file_type::regular;
  }
  /// True for a directory.
  [[nodiscard]] bool is_directory() const noexcept {
    return type == std::filesystem::file_type::directory;
  }
};

/// A move-only owner of an open file descriptor.
class file {
 public:
  /// A file that is not open.
  file() noexcept = default;
  /// Takes over `other`'s descriptor; `other` is left not open.
  file(file&& other) noexcept;
  /// Closes the current descriptor (synchronously) and takes `other`'s.
  file& operator=(file&& other) noexcept;
  file(file const&) = delete;
  file& operator=(file const&) = delete;
  /// Closes the descriptor with close(2) if still open (errors ignored).
  ~file();

  /// Opens `path` (openat relative to the current directory) with `flags`
  /// | O_CLOEXEC; `mode` applies when O_CREAT or O_TMPFILE creates the file.
  /// Throws std::system_error: ENOENT, EACCES, EISDIR (O_WRONLY/O_RDWR on a
  /// directory), EEXIST (O_CREAT|O_EXCL), ELOOP, EMFILE, ...
  static task<file> open(std::filesystem::path path, int flags = O_RDONLY, mode_t mode = 0644);

  /// Opens `path` relative to the directory open as `dir_fd` (openat(2)),
  /// flags and mode as open(). A relative `path` is resolved from that
  /// directory, so only `path` itself (not the directory's own path) counts
  /// against PATH_MAX, and a directory renamed meanwhile is still the one
  /// used; an absolute `path` ignores `dir_fd`; AT_FDCWD is the current
  /// directory (then this is open()). `dir_fd` must stay open until the
  /// task completes; the file does not depend on it afterwards.
  /// Throws std::system_error: ENOTDIR (`dir_fd` is not a directory and
  /// `path` is relative), EBADF (`dir_fd` is not an open descriptor),
  /// ENOENT, EACCES, ELOOP, ENAMETOOLONG (`path` or one of its components is
  /// too long), EMFILE, ENFILE, ...
  static task<file> open_at(int dir_fd, std::filesystem::path path, int flags = O_RDONLY,
                            mode_t mode = 0644);
  /// open_at(dir.native_handle(), ...): relative to the directory `dir` is
  /// open on (O_RDONLY|O_DIRECTORY, or O_PATH). `dir` must outlive the task.
  /// Throws as above; EBADF when `dir` is not open.
  static task<file> open_at(file const& dir, std::filesystem::path path, int flags = O_RDONLY,
                            mode_t mode = 0644);
  /// open_at(dir_fd, ...) without exceptions for what the system call
  /// reports (std::filesystem's convention): on failure sets `ec` to the
  /// errno (std::system_category) and returns a file that is not open; on
  /// success clears `ec`. For callers that expect failures and act on them
  /// (EMFILE: retry later; ENOENT: removed meanwhile) without paying for an
  /// exception, or formatting a message, each time. `ec` must outlive the
  /// task. Still throws EPERM when awaited outside a spindle task.
  static task<file> open_at(int dir_fd, std::filesystem::path path, int flags, mode_t mode,
                            std::error_code& ec);

  /// Takes ownership of `fd` (any descriptor: a file, a pipe, a socket).
  /// A negative fd makes a file that is not open.
  [[nodiscard]] static file from_fd(int fd) noexcept;

  /// Reads up to buffer.size() bytes at byte `offset`; returns the number
  /// read, 0 at end of file (or for an empty buffer). Data in the page cache
  /// is copied at once, without suspending (runtime_config::try_cached_reads;
  /// at most 64 such reads per poll of the task, then the task yields once
  /// and goes on), the rest goes through the I/O driver. Throws
  /// std::system_error: EBADF (not open or not open for reading), EISDIR,
  /// EINVAL, EIO, ...
  task<std::size_t> read_at(std::span<std::byte> buffer, std::uint64_t offset);

  /// Writes up to buffer.size() bytes at byte `offset` (ignored with
  /// O_APPEND); returns the number written (may be short, like pwrite).
  /// Throws std::system_error: EBADF, ENOSPC, EFBIG, EIO, EPIPE, ...
  task<std::size_t> write_at(std::span<const std::byte> buffer, std::uint64_t offset);

  /// Size, mode and type of the open file (statx on the descriptor).
  /// Throws std::system_error: EBADF, ...
  task<file_status> stat();

  /// Closes the descriptor through the driver. The file is not open
  /// afterwards even when this throws (EIO, ENOSPC, ... from the close,
  /// as with close(2)). EBADF when it is not open.
  task<void> close();

  /// The descriptor, or -1 when not open.
  [[nodiscard]] int native_handle() const noexcept { return fd_; }
  /// True while the file owns a descriptor.
  [[nodiscard]] bool is_open() const noexcept { return fd_ >= 0; }
  /// Gives up ownership: returns the descriptor (or -1) and leaves the file
  /// not open, without closing anything.
  [[nodiscard]] int release() noexcept;

 private:
  explicit file(int fd) noexcept : fd_(fd) {}
  int fd_ = -1;
  /// A RWF_NOWAIT read failed with something other than EAGAIN (a pipe, a
  /// file system without it): read_at goes straight to the driver.
  /// Atomic: several tasks may read through one file at once.
  std::atomic<bool> no_nowait_reads_{false};
};

/// Status of `path` relative to the directory open as `dir_fd`, without
/// opening it: statx(2) through the I/O driver (io_uring's IORING_OP_STATX,
/// or a thread-pool thread), the asynchronous fstatat. `flags` are statx's
/// AT_* flags: AT_SYMLINK_NOFOLLOW (a symbolic link's own status, as
/// lstat), AT_NO_AUTOMOUNT, AT_EMPTY_PATH (an empty `path`: `dir_fd` itself,
/// any kind of descriptor), AT_STATX_SYNC_AS_STAT / FORCE_SYNC / DONT_SYNC
/// (network file systems); 0 follows symbolic links, as stat. A relative
/// `path` is resolved from `dir_fd` (AT_FDCWD: the current directory), an
/// absolute one ignores it. The path is copied into the task's frame and
/// the statx buffer lives there too, both until the kernel (or the pool
/// thread) is done with them; `dir_fd` must stay open until the task
/// completes. Throws std::system_error (std::system_category): ENOENT,
/// ENOTDIR (a component, or `dir_fd` with a relative `path`, is not a
/// directory), EACCES (search permission denied on a component), ELOOP,
/// ENAMETOOLONG, EBADF (`dir_fd` is not open), EINVAL (bad `flags`), ENOMEM;
/// ECANCELED when the runtime is shutting down; EPERM when awaited outside a
/// spindle task. Cancellation as the file operations (see the file comment).
/// Thread-safety: any number at once, from any task.
task<file_status> stat_at(int dir_fd, std::filesystem::path path, int flags = 0);
/// stat_at(dir.native_handle(), ...); EBADF when `dir` is not open (even for
/// an absolute path). `dir` must outlive the task.
task<file_status> stat_at(file const& dir, std::filesystem::path path, int flags = 0);
/// stat_at(dir_fd, ...) without exceptions for what statx reports (as the
/// error_code overload of file::open_at): on failure sets `ec` to the errno
/// and returns an empty file_status (type none); on success clears `ec`.
/// `ec` must outlive the task. Still throws EPERM when awaited outside a
/// spindle task, and std::bad_alloc.
task<file_status> stat_at(int dir_fd, std::filesystem::path path, int flags, std::error_code& ec);

/// Reads the whole file at `path`: openat, statx for a size hint, reads until
/// end of file (the file may grow or shrink meanwhile), close. Throws
/// std::system_error: ENOENT, EACCES, EISDIR (a directory), EIO, ...
task<std::vector<std::byte>> read_file(std::filesystem::path path);

}  // namespace spindle::io
