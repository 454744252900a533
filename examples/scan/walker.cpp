#include "walker.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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
constexpr std::size_t kMaxOpenDepth = 64;

void append_child(std::string& path, std::string_view name) {
  if (!path.empty() && path.back() != '/') path += '/';
  path += name;
}

}  // namespace

bool walker::is_directory(std::string const& operand) {
  struct stat st {};
  return ::stat(operand.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void walker::walk_default() {
  const int fd = ::open(".", kDirFlags);
  if (fd < 0) {
    sink_.error(".", errno);
    return;
  }
  path_.clear();
  walk_directory(fd);
}

void walker::walk_operand(std::string_view operand) {
  path_.assign(operand);
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    sink_.error(path_, errno);
    return;
  }
  if (S_ISREG(st.st_mode)) {
    sink_.file(path_, true);
    return;
  }
  if (!S_ISDIR(st.st_mode)) return;  // FIFOs, sockets, devices: never opened
  const int fd = ::open(path_.c_str(), kDirFlags);
  if (fd < 0) {
    sink_.error(path_, errno);
    return;
  }
  while (path_.size() > 1 && path_.back() == '/')
    path_.pop_back();  // "d//" walks as "d"
  walk_directory(fd);
}

void walker::walk_directory(int fd) {
  struct stat self {};
  if (::fstat(fd, &self) == 0) {
    const std::pair<dev_t, ino_t> id{self.st_dev, self.st_ino};
    if (std::find(ancestors_.begin(), ancestors_.end(), id) != ancestors_.end()) {
      ::close(fd);
      sink_.warning(path_, "recursive directory loop");
      return;
    }
    ancestors_.push_back(id);
  } else {
    ancestors_.emplace_back(0, 0);
  }
  const std::size_t depth = ancestors_.size() - 1;
  if (subdirs_.size() <= depth) subdirs_.resize(depth + 1);
  subdirs_[depth].clear();
  if (dents_.empty()) dents_.resize(64 * 1024);

  const std::size_t base = path_.size();
  while (true) {
    const long got = ::syscall(SYS_getdents64, fd, dents_.data(), dents_.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      sink_.error(path_.empty() ? std::string_view(".") : std::string_view(path_), errno);
      break;
    }
    if (got == 0) break;
    for (long off = 0; off < got;) {
      const auto* d = reinterpret_cast<const linux_dirent64*>(dents_.data() + off);
      off += d->d_reclen;
      const char* name = d->d_name;
      if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
      unsigned type = d->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st {};
        if (::fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
          if (errno != ENOENT) {  // ENOENT: removed since the listing
            const int err = errno;
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
        sink_.file(path_, false);
        path_.resize(base);
      } else if (type == DT_DIR) {
        std::string& list = subdirs_[depth];
        list.append(name);
        list.push_back('\0');
      }
    }
  }
  // Subdirectories open relative to this directory (no path walk from the
  // root each time); very deep trees give the descriptor up and open by
  // path, so that at most kMaxOpenDepth descriptors are held.
  int parent = fd;
  if (depth >= kMaxOpenDepth || subdirs_[depth].empty()) {
    ::close(fd);
    parent = AT_FDCWD;
  }
  // subdirs_ may reallocate while deeper levels are walked: index, don't hold.
  std::size_t at = 0;
  while (at < subdirs_[depth].size()) {
    const std::size_t len = std::strlen(subdirs_[depth].c_str() + at);
    const char* name = subdirs_[depth].c_str() + at;
    append_child(path_, std::string_view(name, len));
    const int child =
        ::openat(parent, parent == AT_FDCWD ? path_.c_str() : name, kDirFlags | O_NOFOLLOW);
    at += len + 1;
    if (child >= 0) {
      walk_directory(child);
    } else if (errno != ELOOP && errno != ENOTDIR && errno != ENOENT) {
      sink_.error(path_, errno);
    }
    path_.resize(base);
  }
  if (parent != AT_FDCWD) ::close(parent);
  ancestors_.pop_back();
}

}  // namespace scan
