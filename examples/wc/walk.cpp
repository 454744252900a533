#include "walk.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

static_assert(AT_FDCWD == -100, "fd_of(nullptr) must be AT_FDCWD");

namespace wc {
namespace {

// The kernel's getdents64 record.
struct linux_dirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Each call reads errno in a function of its own, never inlined into the
// walk: the walk may resume on another thread after the visitor, and a
// compiler may keep errno's (per-thread) address across a call.
[[gnu::noinline]] int sys_stat(char const* path, struct stat* st) {
  return ::stat(path, st) == 0 ? 0 : -errno;
}
[[gnu::noinline]] int sys_fstat(int fd, struct stat* st) {
  return ::fstat(fd, st) == 0 ? 0 : -errno;
}
[[gnu::noinline]] int sys_fstatat_nofollow(int dir, char const* name, struct stat* st) {
  return ::fstatat(dir, name, st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}
[[gnu::noinline]] int sys_open_directory(int dir, char const* name, int extra) {
  for (;;) {
    int const fd = ::openat(dir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | extra);
    if (fd >= 0 || errno != EINTR) return fd >= 0 ? fd : -errno;
  }
}
[[gnu::noinline]] long sys_getdents(int fd, char* buffer, std::size_t size) {
  for (;;) {
    long const got = ::syscall(SYS_getdents64, fd, buffer, size);
    if (got >= 0 || errno != EINTR) return got >= 0 ? got : -errno;
  }
}

std::string child_path(std::string const& parent, std::string_view name) {
  std::string path = parent;
  if (path.empty() || path.back() != '/') path += '/';
  path += name;
  return path;
}

struct level {
  level(dir_ptr d, std::string p) noexcept : dir(std::move(d)), path(std::move(p)) {}

  dir_ptr dir;
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  std::vector<std::string> subdirs;  // listed, not walked yet
  std::size_t next = 0;
};

// Lists `lv`'s directory: files to the visitor, subdirectories into
// lv.subdirs. False when listing failed (reported).
bool list(level& lv, std::vector<char>& buffer, walk_visitor& visitor) {
  for (;;) {
    long const got = sys_getdents(lv.dir->fd, buffer.data(), buffer.size());
    if (got < 0) {
      visitor.error(lv.path, static_cast<int>(-got));
      return false;
    }
    if (got == 0) return true;
    for (long off = 0; off < got;) {
      auto const* d = reinterpret_cast<linux_dirent64 const*>(buffer.data() + off);
      off += d->d_reclen;
      char const* name = d->d_name;
      if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
      unsigned type = d->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st {};
        int const rc = sys_fstatat_nofollow(lv.dir->fd, name, &st);
        if (rc != 0) {
          if (rc != -ENOENT) visitor.error(child_path(lv.path, name), -rc);
          continue;
        }
        type = IFTODT(st.st_mode);
      }
      if (type == DT_REG) {
        visitor.file(lv.dir, name, child_path(lv.path, name), false);
      } else if (type == DT_DIR) {
        lv.subdirs.emplace_back(name);
      }
    }
  }
}

// Fills in the device and inode of `lv` and tells whether an ancestor in
// `stack` (all but the last entry) is the same directory.
bool is_loop(std::vector<level> const& stack, level& lv) {
  struct stat st {};
  if (sys_fstat(lv.dir->fd, &st) != 0) return false;
  lv.dev = st.st_dev;
  lv.ino = st.st_ino;
  for (std::size_t k = 0; k + 1 < stack.size(); ++k) {
    if (stack[k].dev == lv.dev && stack[k].ino == lv.ino) return true;
  }
  return false;
}

}  // namespace

dir_handle::~dir_handle() {
  if (fd >= 0) ::close(fd);
}

void walk(std::string const& operand, walk_visitor& visitor) {
  struct stat st {};
  if (operand.empty() || sys_stat(operand.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    visitor.file(nullptr, operand, operand, true);  // opened (and reported) as GNU wc would
    return;
  }
  int const fd = sys_open_directory(AT_FDCWD, operand.c_str(), 0);
  if (fd < 0) {
    visitor.error(operand, -fd);
    return;
  }
  std::vector<char> buffer(32 * 1024);
  // An explicit stack rather than recursion: a fiber's stack is small, a
  // tree may be deep.
  std::vector<level> stack;
  stack.emplace_back(std::make_shared<dir_handle const>(fd), operand);
  is_loop(stack, stack.back());
  if (!list(stack.back(), buffer, visitor)) stack.back().subdirs.clear();
  while (!stack.empty()) {
    level& top = stack.back();
    if (top.next == top.subdirs.size()) {
      stack.pop_back();
      continue;
    }
    std::string const& name = top.subdirs[top.next++];
    std::string path = child_path(top.path, name);
    int const child = sys_open_directory(top.dir->fd, name.c_str(), O_NOFOLLOW);
    if (child < 0) {
      // Gone, or replaced by a symlink or a file since the listing: skip.
      if (child != -ENOENT && child != -ELOOP && child != -ENOTDIR) visitor.error(path, -child);
      continue;
    }
    dir_ptr dir = std::make_shared<dir_handle const>(child);  // `top` may move below
    stack.emplace_back(std::move(dir), std::move(path));
    level& lv = stack.back();
    if (is_loop(stack, lv)) {
      visitor.warning(lv.path, "recursive directory loop");
      stack.pop_back();
      continue;
    }
    if (!list(lv, buffer, visitor)) lv.subdirs.clear();
  }
}

}  // namespace wc
