#include "walker.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "output.hpp"

namespace scan {
namespace {

// The kernel's record; glibc has no getdents64 wrapper before 2.30 and its
// struct dirent is the same layout, but spell it out.
struct linux_dirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK;
constexpr std::size_t kMaxKeepDepth = 64;

void append_child(std::string& path, std::string_view name) {
  if (!path.empty() && path.back() != '/') path += '/';
  path += name;
}

std::pair<dev_t, ino_t> id_of(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

}  // namespace

// --- dir_ref ------------------------------------------------------------

dir_ref::dir_ref(int fd, std::atomic<std::size_t>& live) {
  try {
    node_ = new node{fd, {1}, &live};
  } catch (...) {
    ::close(fd);
    throw;
  }
  live.fetch_add(1, std::memory_order_relaxed);
}

dir_ref::dir_ref(dir_ref const& other) noexcept : node_(other.node_) {
  if (node_ != nullptr) node_->refs.fetch_add(1, std::memory_order_relaxed);
}

void dir_ref::reset() noexcept {
  node* n = std::exchange(node_, nullptr);
  if (n != nullptr && n->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    ::close(n->fd);
    n->live->fetch_sub(1, std::memory_order_seq_cst);
    delete n;
  }
}

// --- walker -------------------------------------------------------------
//
// Every co_await below stores its result in a local before testing it:
// g++ 12.2 miscompiles a coroutine whose body declares no local at its top
// level and has a co_await in an if/while condition (GCC PR 106188, fixed in
// 12.3; see also spindle/watch.hpp). make_room() was such a coroutine: its
// body never started and the walk hung.

void walker::set_descriptor_budget(std::size_t budget) noexcept {
  max_dirs_ = directories_within(budget);
  keep_depth_ = std::min(kMaxKeepDepth, budget / 8);
}

bool walker::is_directory(std::string const& operand) {
  struct stat st {};
  return ::stat(operand.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

walker::level& walker::at(std::size_t depth) {
  while (levels_.size() <= depth)
    levels_.push_back(std::make_unique<level>());
  return *levels_[depth];
}

bool walker::drop_ancestors(std::size_t depth) {
  keep_depth_ = 0;  // short of descriptors: keep none from now on
  bool any = false;
  for (std::size_t k = 0; k < depth && k < levels_.size(); ++k) {
    if (levels_[k]->dir) {
      levels_[k]->dir.reset();
      any = true;
    }
  }
  return any;
}

spindle::task<void> walker::make_room(std::size_t depth) {
  while (live_dirs_.load(std::memory_order_seq_cst) >= max_dirs_) {
    if (drop_ancestors(depth)) continue;
    bool const freed = co_await sink_.wait_for_descriptors();
    if (!freed) co_return;  // nothing to wait for: try anyway
  }
}

spindle::task<int> walker::open_directory(int at_fd, char const* name, int extra,
                                          std::size_t depth) {
  for (;;) {
    co_await make_room(depth);
    int const fd = ::openat(at_fd, name, kDirFlags | extra);
    if (fd >= 0) co_return fd;
    int const err = errno;
    if (err == EINTR) continue;
    if (err != EMFILE && err != ENFILE) co_return -err;
    // Out of descriptors: the walker's own ancestors go first, then wait
    // for scans in flight; with nothing in flight it is a real error.
    if (drop_ancestors(depth)) continue;
    bool const freed = co_await sink_.wait_for_descriptors();
    if (freed) continue;
    co_return -err;
  }
}

spindle::task<void> walker::walk_default() {
  path_.clear();
  int const fd = co_await open_directory(AT_FDCWD, ".", 0, 0);
  if (fd < 0) {
    sink_.error(".", -fd);
    co_return;
  }
  at(0).dir = dir_ref(fd, live_dirs_);
  co_await walk_directory(0);
  at(0).dir.reset();
}

spindle::task<void> walker::walk_operand(std::string operand) {
  path_ = std::move(operand);
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    sink_.error(path_, errno);
    co_return;
  }
  if (S_ISREG(st.st_mode)) {
    co_await sink_.file(dir_ref{}, path_, path_, true);
    co_return;
  }
  if (!S_ISDIR(st.st_mode)) co_return;  // FIFOs, sockets, devices: never opened
  int const fd = co_await open_directory(AT_FDCWD, path_.c_str(), 0, 0);
  if (fd < 0) {
    sink_.error(path_, -fd);
    co_return;
  }
  while (path_.size() > 1 && path_.back() == '/')
    path_.pop_back();  // "d//" walks as "d"
  at(0).dir = dir_ref(fd, live_dirs_);
  co_await walk_directory(0);
  at(0).dir.reset();
}

spindle::task<bool> walker::reopen(std::size_t depth) {
  level& lv = at(depth);
  level& child = at(depth + 1);
  int err = 0;
  int fd = -1;
  if (child.dir) {
    fd = co_await open_directory(child.dir.fd(), "..", 0, depth);
    if (fd < 0) err = -fd;
  }
  std::pair<dev_t, ino_t> const none{0, 0};
  if (fd >= 0 && lv.id != none && id_of(fd) != lv.id) {
    ::close(fd);  // the child was moved elsewhere: ".." is another directory
    fd = -1;
  }
  if (fd < 0 && path_.size() < PATH_MAX) {
    fd = co_await open_directory(AT_FDCWD, path_.empty() ? "." : path_.c_str(), O_NOFOLLOW, depth);
    if (fd < 0) err = -fd;
    if (fd >= 0 && lv.id != none && id_of(fd) != lv.id) {
      ::close(fd);
      fd = -1;
      err = 0;
    }
  }
  if (fd < 0) {
    std::string message = "cannot return to this directory to walk the rest of it";
    if (err != 0) {
      message += ": ";
      message += errno_text(err);
    } else {
      message += " (moved during the scan)";
    }
    sink_.failure(path_.empty() ? std::string_view(".") : std::string_view(path_), message);
    co_return false;
  }
  lv.dir = dir_ref(fd, live_dirs_);
  co_return true;
}

spindle::task<void> walker::walk_directory(std::size_t depth) {
  level& lv = at(depth);
  lv.id = id_of(lv.dir.fd());
  if (lv.id != std::pair<dev_t, ino_t>{0, 0}) {
    for (std::size_t k = 0; k < depth; ++k) {
      if (levels_[k]->id == lv.id) {
        sink_.warning(path_, "recursive directory loop");
        co_return;
      }
    }
  }
  lv.subdirs.clear();
  if (dents_.empty()) dents_.resize(64 * 1024);

  std::size_t const base = path_.size();
  while (true) {
    long const got = ::syscall(SYS_getdents64, lv.dir.fd(), dents_.data(), dents_.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      sink_.error(path_.empty() ? std::string_view(".") : std::string_view(path_), errno);
      break;
    }
    if (got == 0) break;
    for (long off = 0; off < got;) {
      auto const* d = reinterpret_cast<linux_dirent64 const*>(dents_.data() + off);
      off += d->d_reclen;
      char const* name = d->d_name;
      if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
      unsigned type = d->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st {};
        if (::fstatat(lv.dir.fd(), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
          if (errno != ENOENT) {  // ENOENT: removed since the listing
            int const err = errno;
            append_child(path_, name);
            sink_.error(path_, err);
            path_.resize(base);
          }
          continue;
        }
        type = IFTODT(st.st_mode);
      }
      if (type == DT_REG) {
        append_child(path_, name);
        co_await sink_.file(lv.dir, name, path_, false);
        path_.resize(base);
      } else if (type == DT_DIR) {
        lv.subdirs.append(name);
        lv.subdirs.push_back('\0');
      }
    }
  }
  // Subdirectories open relative to this directory: no path walk from the
  // root, no PATH_MAX. Below keep_depth() this directory's descriptor is
  // given up while a child is walked and found again through "..".
  std::size_t pos = 0;
  while (pos < lv.subdirs.size()) {
    char const* name = lv.subdirs.c_str() + pos;
    std::size_t const len = std::strlen(name);
    pos += len + 1;
    if (!lv.dir) {
      bool const back = co_await reopen(depth);
      if (!back) co_return;  // reported; the rest is unreachable
    }
    append_child(path_, std::string_view(name, len));
    int const child = co_await open_directory(lv.dir.fd(), name, O_NOFOLLOW, depth);
    if (child < 0) {
      if (child != -ELOOP && child != -ENOTDIR && child != -ENOENT) sink_.error(path_, -child);
      path_.resize(base);
      continue;
    }
    level& next = at(depth + 1);
    next.dir = dir_ref(child, live_dirs_);
    if (depth >= keep_depth_) lv.dir.reset();
    co_await walk_directory(depth + 1);
    path_.resize(base);
    // Come back now while the child can lead here: for the next
    // subdirectory, or for the parent, which may need this one's "..".
    bool const needed = pos < lv.subdirs.size() || (depth > 0 && !levels_[depth - 1]->dir);
    if (!lv.dir && needed) {
      bool const back = co_await reopen(depth);
      if (!back) {
        next.dir.reset();
        co_return;
      }
    }
    next.dir.reset();
  }
}

}  // namespace scan
