// wc::walk: finds the files spindle-wc counts below one command-line operand,
// as `find -H OPERAND -type f` finds them, with plain blocking system calls
// (spindle-wc runs it in a fiber; the unit tests call it directly).
//
// Operands: stat() follows symlinks. A directory is walked; anything else
// (a regular file, a FIFO, a device, a missing path) is handed to the
// visitor as one input, to be opened -- and reported -- the way GNU wc
// opens its arguments.
//
// Below an operand: getdents64 with d_type (fstatat(AT_SYMLINK_NOFOLLOW)
// for DT_UNKNOWN); regular files go to the visitor; subdirectories are
// opened relative to their parent (openat, O_NOFOLLOW) after the parent has
// been listed, so paths longer than PATH_MAX work; symlinks, FIFOs, sockets
// and devices are skipped, as find -type f skips them. A directory that is
// its own ancestor (a bind mount) is reported and not entered again.
// Paths are named as find names them: OPERAND "/" NAME, without the "/" when
// OPERAND already ends with one ("d/" gives "d/x", "d//" gives "d//x").
//
// Descriptors: each directory's descriptor is shared (dir_ptr) by the walk
// and the files found in it, and closed when the last of them lets go; the
// walk holds its ancestors' descriptors, so a tree N levels deep needs N of
// them (an EMFILE is reported like any error opening a directory).
//
// errno: spindle fibers may migrate to another thread while the visitor
// waits, and errno is per thread, so every system call is made in a small
// function of its own that returns -errno (see walk.cpp).
//
// Errors: opening or listing a directory fails -> visitor.error(path, errno)
// and the walk goes on with the rest. An entry removed between the listing
// and its use is skipped silently.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace wc {

/// An open directory descriptor, closed by the destructor.
struct dir_handle {
  int fd = -1;
  explicit dir_handle(int descriptor) noexcept : fd(descriptor) {}
  dir_handle(dir_handle const&) = delete;
  dir_handle& operator=(dir_handle const&) = delete;
  ~dir_handle();
};
/// Shared by a directory's walk and the files found in it; null means the
/// current directory (AT_FDCWD).
using dir_ptr = std::shared_ptr<dir_handle const>;

[[nodiscard]] inline int fd_of(dir_ptr const& dir) noexcept {
  return dir ? dir->fd : -100;
}

class walk_visitor {
 public:
  virtual ~walk_visitor() = default;
  /// One input: `name` relative to `dir` (null: `name` is the operand
  /// itself, relative to the current directory); `path` names it in
  /// output. `operand`: given on the command line (follow symlinks when
  /// opening).
  virtual void file(dir_ptr const& dir, std::string_view name, std::string_view path,
                    bool operand) = 0;
  /// A directory at `path` could not be opened or listed (errno `error`).
  virtual void error(std::string_view path, int error) = 0;
  /// A directory at `path` was not entered: `message`.
  virtual void warning(std::string_view path, std::string_view message) = 0;
};

/// Walks `operand` (see the file comment).
void walk(std::string const& operand, walk_visitor& visitor);

}  // namespace wc
