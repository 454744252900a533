// scan::walker: the discovery side of spindle-scan (grep -r's traversal).
//
// Shape: a depth-first walk on the calling thread with getdents64 and d_type.
// Each directory is listed completely before its subdirectories are entered
// (openat relative to it, its descriptor kept open meanwhile, up to a depth
// of 64; deeper, by path), so the memory held is one list of subdirectory
// names per level (reused across the walk). DT_UNKNOWN
// entries are classified with fstatat(AT_SYMLINK_NOFOLLOW); regular files are
// handed to the sink at once, in listing order; symlinks, FIFOs, sockets and
// devices below the command line are skipped without being opened.
// Command-line operands are stat()ed (symlinks followed): a directory is
// walked, a regular file handed over, anything else skipped.
//
// Paths follow grep: "dir/" and "dir//" walk as "dir" (children "dir/x"),
// "/" gives "/x", and walk_default() walks "." naming children "x".
// A directory that is its own ancestor (bind mounts) is reported with a
// warning and not entered again.
//
// Errors: reported to the sink with the errno (EACCES, ENOENT, ...); the walk
// goes on. A subdirectory that turned into a symlink between listing and
// opening (ELOOP/ENOTDIR) is skipped silently.
//
// Thread-safety: a walker is used by one thread; the sink is called on it.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace scan {

class walk_sink {
 public:
  virtual ~walk_sink() = default;
  /// A regular file. `path` is valid only during the call. `command_line`:
  /// the user named it (open it following symlinks).
  virtual void file(std::string_view path, bool command_line) = 0;
  /// `path` could not be opened, listed or examined: errno `error`.
  virtual void error(std::string_view path, int error) = 0;
  /// A non-fatal oddity such as a directory loop.
  virtual void warning(std::string_view path, std::string_view message) = 0;
};

class walker {
 public:
  explicit walker(walk_sink& sink) : sink_(sink) {}

  /// Walks one operand as grep -r does.
  void walk_operand(std::string_view operand);
  /// grep -r without operands: walks "." and names files without "./".
  void walk_default();

  /// True when `operand` names a directory (following symlinks). Used for
  /// grep's rule: one operand that is not a directory prints no file name.
  static bool is_directory(std::string const& operand);

 private:
  void walk_directory(int fd);

  walk_sink& sink_;
  std::string path_;                                // the directory being listed
  std::vector<std::string> subdirs_;                // per depth: NUL-separated names
  std::vector<std::pair<dev_t, ino_t>> ancestors_;  // loop detection
  std::vector<char> dents_;                         // getdents64 buffer
};

}  // namespace scan
