// scan::walker: the discovery side of spindle-scan (grep -r's traversal).
//
// Shape: a depth-first walk with getdents64 and d_type, as a spindle task:
// the walk runs on a worker, beside the scans it starts, and suspends (in
// the sink) while the scans in flight fill their window, so that the worker
// runs them meanwhile, as ripgrep's walker threads also search.
// Each directory is listed completely before its subdirectories are entered,
// so the memory held is one list of subdirectory names per level (reused
// across the walk). DT_UNKNOWN entries are classified with
// fstatat(AT_SYMLINK_NOFOLLOW); regular files are handed to the sink at
// once, in listing order, with the directory they are in (a dir_ref) and
// their name in it, so that they are opened with openat relative to it;
// symlinks, FIFOs, sockets and devices below the command line are skipped
// without being opened. Command-line operands are stat()ed (symlinks
// followed): a directory is walked, a regular file handed over (relative to
// the current directory), anything else skipped.
//
// Descriptors: every directory is opened relative to its parent (openat with
// O_NOFOLLOW), never by its whole path, so paths longer than PATH_MAX are
// walked. A directory's descriptor is shared (dir_ref, reference-counted)
// by the walker and the scans of its files, and closed when the last of them
// lets it go. The walker keeps the descriptors of up to keep_depth()
// ancestors (to open their remaining subdirectories); deeper, it lets a
// parent go while it walks a child and comes back with openat(child, "..")
// (checking the device and inode; by path if that fails and the path is
// short enough). At most max_directories() directory descriptors are alive
// at once (walker and scans together): beyond that, and whenever opening a
// directory fails with EMFILE or ENFILE, the walker first gives up its
// ancestors' descriptors for good, then waits for scans in flight to finish
// (co_await walk_sink::wait_for_descriptors) and tries again; only when
// nothing is in flight is EMFILE reported as an error.
//
// Paths follow grep: "dir/" and "dir//" walk as "dir" (children "dir/x"),
// "/" gives "/x", and walk_default() walks "." naming children "x".
// A directory that is its own ancestor (bind mounts) is reported with a
// warning and not entered again.
//
// Errors: reported to the sink with the errno (EACCES, ENOENT, ...); the walk
// goes on. A subdirectory that turned into a symlink between listing and
// opening (ELOOP/ENOTDIR) is skipped silently. A parent that cannot be
// reopened (it was moved away during the walk) is reported with a message
// and the rest of it is skipped.
//
// Thread-safety: a walker is used by one task at a time (which may resume on
// any worker); the sink is called from it. dir_ref copies may be used and
// destroyed on any thread; the walker must outlive them all.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <spindle/task.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace scan {

/// A shared, reference-counted directory descriptor (or none: AT_FDCWD).
class dir_ref {
 public:
  dir_ref() noexcept = default;
  /// Takes ownership of `fd`; `live` counts the descriptors alive (it is
  /// incremented here and decremented when the descriptor is closed) and
  /// must outlive every copy.
  dir_ref(int fd, std::atomic<std::size_t>& live);
  dir_ref(dir_ref const& other) noexcept;
  dir_ref(dir_ref&& other) noexcept : node_(std::exchange(other.node_, nullptr)) {}
  dir_ref& operator=(dir_ref other) noexcept {
    std::swap(node_, other.node_);
    return *this;
  }
  ~dir_ref() { reset(); }

  /// Lets this reference go (closes the descriptor if it was the last).
  void reset() noexcept;
  /// The descriptor, or AT_FDCWD for none.
  [[nodiscard]] int fd() const noexcept { return node_ != nullptr ? node_->fd : AT_FDCWD; }
  explicit operator bool() const noexcept { return node_ != nullptr; }

 private:
  struct node {
    int fd;
    std::atomic<std::uint32_t> refs;
    std::atomic<std::size_t>* live;
  };
  node* node_ = nullptr;
};

class walk_sink {
 public:
  virtual ~walk_sink() = default;
  /// A regular file: `name` in the directory `dir` (none: `name` is a
  /// command-line path relative to the current directory); `path` is its
  /// whole path for messages. The strings are valid only during the call;
  /// copy `dir` to keep the directory open. `command_line`: the user named
  /// it (open it following symlinks). The walk waits for the returned
  /// task (the sink suspends it for backpressure).
  virtual spindle::task<void> file(dir_ref const& dir, std::string_view name, std::string_view path,
                                   bool command_line) = 0;
  /// `path` could not be opened, listed or examined: errno `error`.
  virtual void error(std::string_view path, int error) = 0;
  /// `path` could not be walked: `message`.
  virtual void failure(std::string_view path, std::string_view message) = 0;
  /// A non-fatal oddity such as a directory loop.
  virtual void warning(std::string_view path, std::string_view message) = 0;
  /// The walker is short of descriptors: suspends until a file scan in
  /// flight has finished (freeing its descriptors) and yields true; yields
  /// false at once when nothing is in flight.
  virtual spindle::task<bool> wait_for_descriptors() = 0;
};

class walker {
 public:
  explicit walker(walk_sink& sink) : sink_(sink) {}
  walker(walker const&) = delete;
  walker& operator=(walker const&) = delete;

  /// Descriptors the process may still open (the rest of RLIMIT_NOFILE):
  /// at most half of them are given to directories, and up to a quarter
  /// (at most 64) to the ancestors the walker keeps open.
  void set_descriptor_budget(std::size_t budget) noexcept;
  /// The directory descriptors a budget of `budget` allows: half, at least 2.
  [[nodiscard]] static constexpr std::size_t directories_within(std::size_t budget) noexcept {
    return budget / 2 > 2 ? budget / 2 : 2;
  }
  [[nodiscard]] std::size_t max_directories() const noexcept { return max_dirs_; }
  [[nodiscard]] std::size_t keep_depth() const noexcept { return keep_depth_; }
  /// Directory descriptors alive now (the walker's and the scans').
  [[nodiscard]] std::size_t live_directories() const noexcept { return live_dirs_.load(); }

  /// Walks one operand as grep -r does. Await it inside the runtime.
  spindle::task<void> walk_operand(std::string operand);
  /// grep -r without operands: walks "." and names files without "./".
  spindle::task<void> walk_default();

  /// True when `operand` names a directory (following symlinks). Used for
  /// grep's rule: one operand that is not a directory prints no file name.
  static bool is_directory(std::string const& operand);

 private:
  struct level {
    dir_ref dir;                   // empty while given up (reopened on return)
    std::pair<dev_t, ino_t> id{};  // device and inode, for loops and reopening
    std::string subdirs;           // NUL-separated names still to walk
  };

  spindle::task<void> walk_directory(std::size_t depth);
  // openat(at, name, kDirFlags | extra) that waits out EMFILE/ENFILE (see
  // the file comment): the descriptor, or -errno on failure (errno itself
  // does not survive a suspension: the task may resume on another thread).
  // `name` must stay valid until the task completes.
  spindle::task<int> open_directory(int at, char const* name, int extra, std::size_t depth);
  // Before a new directory descriptor: stay under max_directories().
  spindle::task<void> make_room(std::size_t depth);
  // Lets the walker's descriptors of levels [0, depth) go; true if any was.
  bool drop_ancestors(std::size_t depth);
  // Reopens levels_[depth] on the way back from its child; false if it
  // cannot (reported).
  spindle::task<bool> reopen(std::size_t depth);
  level& at(std::size_t depth);

  walk_sink& sink_;
  std::atomic<std::size_t> live_dirs_{0};
  std::size_t max_dirs_ = SIZE_MAX;
  std::size_t keep_depth_ = 64;
  std::string path_;                            // the directory being listed
  std::vector<std::unique_ptr<level>> levels_;  // per depth (stable addresses)
  std::vector<char> dents_;                     // getdents64 buffer
};

}  // namespace scan
