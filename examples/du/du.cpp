#include "du.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <spindle/fold.hpp>
#include <spindle/runtime.hpp>
#include <unordered_set>
#include <utility>

#ifndef SPINDLE_DU_VERSION
#define SPINDLE_DU_VERSION "0.1.0"
#endif

namespace du {

namespace {

constexpr char kMarker = '\x01';

constexpr char const* kFooter = R"(
Prints the apparent size in bytes of every directory below each PATH (and
of files with -a), one "SIZE<TAB>PATH" line each, after the directory's
contents, as GNU `du -b` prints them with the same flags. Symbolic links
are not followed; a hard-linked file is counted once, where du first meets
it (every time with -l). An unreadable directory is reported on stderr and
counted with its own size; the exit status is then 1.

The walk is a parallel fold (spindle::fold) on -j worker threads.)";

std::string join(std::string const& dir, char const* name) {
  std::string p;
  p.reserve(dir.size() + std::strlen(name) + 1);
  p = dir;
  if (p.empty() || p.back() != '/') p += '/';
  p += name;
  return p;
}

struct dnode {
  dir_record* rec;
};

// The directory tree: children() reads one directory (see du.hpp).
struct tree {
  bool all;
  bool count_links;
  bool hash_all;

  template <class E>
  void children(dnode const& n, E&& emit) const {
    dir_record& r = *n.rec;
    int fd = ::open(r.path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      r.read_errno = errno;
      return;
    }
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(fd), &::closedir);  // closed if emit throws
    if (!dir) {
      r.read_errno = errno;
      ::close(fd);
      return;
    }
    DIR* d = dir.get();
    std::size_t seen = 0;
    for (;;) {
      errno = 0;
      dirent* de = ::readdir(d);
      if (de == nullptr) {
        if (errno != 0) r.read_errno = errno;
        break;
      }
      char const* name = de->d_name;
      if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
      ++seen;
      struct statx stx {};
      if (::statx(fd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
                  STATX_TYPE | STATX_SIZE | STATX_INO | STATX_NLINK, &stx) != 0) {
        r.access_errors.emplace_back(join(r.path, name), errno);
        continue;
      }
      dev_t dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
      if (S_ISDIR(stx.stx_mode)) {
        auto sub = std::make_unique<dir_record>();
        sub->path = join(r.path, name);
        sub->own_bytes = stx.stx_size;
        sub->dev = dev;
        sub->ino = stx.stx_ino;
        dir_record* child = sub.get();
        r.entries.push_back(entry{{}, stx.stx_size, dev, stx.stx_ino, false, std::move(sub)});
        emit(dnode{child});
        continue;
      }
      bool dedup = !count_links && (hash_all || stx.stx_nlink > 1);
      if (all || dedup) {
        r.entries.push_back(entry{name, stx.stx_size, dev, stx.stx_ino, dedup, nullptr});
      } else {
        r.plain_bytes += stx.stx_size;
      }
    }
    // fts (and so du) visits a directory of more than 10,000 entries in
    // inode order, except on file systems where that does not help.
    if (seen > 10000) {
      struct statfs sfs {};
      bool sort = ::fstatfs(fd, &sfs) == 0 && sfs.f_type != TMPFS_MAGIC &&
                  sfs.f_type != NFS_SUPER_MAGIC && sfs.f_type != PROC_SUPER_MAGIC;
      if (sort) {
        std::stable_sort(r.entries.begin(), r.entries.end(),
                         [](entry const& a, entry const& b) { return a.ino < b.ino; });
      }
    }
  }
};

// Sums each subtree's bytes that need no ordering (directories and plain
// files); the per-directory totals printed come from the ordered pass.
struct plain_sum {
  struct heap {
    dir_record const* rec;
    std::uint64_t sum;
  };
  heap init(dnode const& n) const { return {n.rec, 0}; }
  void accumulate(heap& h, std::uint64_t&& child) const { h.sum += child; }
  std::uint64_t finalize(heap&& h) const { return h.sum + h.rec->own_bytes + h.rec->plain_bytes; }
};

struct dev_ino_hash {
  std::size_t operator()(std::pair<dev_t, ino_t> const& k) const noexcept {
    return std::hash<std::uint64_t>{}(k.second * 0x9e3779b97f4a7c15ULL ^ k.first);
  }
};

class reporter {
 public:
  explicit reporter(options const& o) : opts_(o), hash_all_(o.paths.size() > 1) {
    if (opts_.json) out_ += '[';
  }

  // The ordered pass over one directory (du's post-order).
  std::uint64_t visit(dir_record& r, bool top) {
    std::uint64_t total = r.own_bytes + r.plain_bytes;
    for (entry& e : r.entries) {
      if (e.dir) {
        if (hash_all_ && !opts_.count_links && !seen_.insert({e.dev, e.ino}).second) continue;
        total += visit(*e.dir, false);
        continue;
      }
      if (e.dedup && !seen_.insert({e.dev, e.ino}).second) continue;
      total += e.bytes;
      if (opts_.all && !opts_.summarize) line(e.bytes, join(r.path, e.name.c_str()));
    }
    for (auto const& [path, err] : r.access_errors)
      error("cannot access " + quote(path), err);
    if (r.read_errno != 0) error("cannot read directory " + quote(r.path), r.read_errno);
    if (!opts_.summarize || top) line(total, r.path);
    return total;
  }

  void top_file(std::string const& path, std::uint64_t bytes, dev_t dev, ino_t ino, bool dedup) {
    if (dedup && !seen_.insert({dev, ino}).second) return;
    line(bytes, path);
  }

  bool seen_dir(dev_t dev, ino_t ino) {
    return hash_all_ && !opts_.count_links && !seen_.insert({dev, ino}).second;
  }

  void error(std::string const& what, int err) {
    flush();
    std::fprintf(stderr, "spindle-du: %s: %s\n", what.c_str(), std::strerror(err));
    status_ = 1;
  }

  int finish() {
    if (opts_.json) out_ += first_ ? "]\n" : "\n]\n";
    flush();
    return status_;
  }

 private:
  void line(std::uint64_t bytes, std::string const& path) {
    if (opts_.json) {
      out_ += first_ ? "\n" : ",\n";
      out_ += R"({"path":)";
      out_ += nlohmann::json(path).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out_ += R"(,"bytes":)";
      out_ += std::to_string(bytes);
      out_ += '}';
    } else {
      out_ += std::to_string(bytes);
      out_ += '\t';
      out_ += path;
      out_ += '\n';
    }
    first_ = false;
    if (out_.size() > (1u << 20)) flush();
  }
  void flush() {
    if (!out_.empty()) std::fwrite(out_.data(), 1, out_.size(), stdout);
    out_.clear();
    std::fflush(stdout);
  }

  options const& opts_;
  bool hash_all_;
  bool first_ = true;
  int status_ = 0;
  std::string out_;
  std::unordered_set<std::pair<dev_t, ino_t>, dev_ino_hash> seen_;
};

}  // namespace

std::string quote(std::string const& name) {
  bool plain = !name.empty();
  for (unsigned char c : name) {
    if (c < 0x20 || c >= 0x7f || c == '\'') {
      plain = false;
      break;
    }
  }
  if (plain) return "'" + name + "'";
  // shell-escape-always: '...' with $'\ooo' for unprintable bytes.
  std::string q;
  bool in_quote = false;
  for (unsigned char c : name) {
    bool printable = c >= 0x20 && c < 0x7f && c != '\'';
    if (printable) {
      if (!in_quote) q += '\'';
      in_quote = true;
      q += static_cast<char>(c);
    } else {
      if (in_quote) q += '\'';
      in_quote = false;
      if (c == '\'') {
        q += "\"'\"";
      } else {
        char buf[8];
        std::snprintf(buf, sizeof buf, "%03o", c);
        q += "$'\\";
        q += buf;
        q += '\'';
      }
    }
  }
  if (in_quote) q += '\'';
  return q.empty() ? "''" : q;
}

std::optional<int> parse_command_line(int argc, char** argv, options& out) {
  CLI::App app{"spindle-du: disk usage in bytes (GNU du -b), as a parallel fold on spindle",
               "spindle-du"};
  app.set_help_flag("--help", "Print this help and exit");
  app.footer(kFooter);
  bool version = false;
  std::vector<std::string> positional;
  app.add_flag("-a,--all", out.all, "Print files too, not only directories");
  app.add_flag("-s,--summarize", out.summarize, "Print only a total for each PATH");
  app.add_flag("-l,--count-links", out.count_links, "Count hard-linked files every time");
  app.add_flag("--json", out.json, "Print a JSON array of {path, bytes}");
  app.add_option("-j,--threads", out.workers, "Worker threads (default: all CPUs)")
      ->check(CLI::NonNegativeNumber)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_flag("-V,--version", version, "Print the version and exit");
  app.add_option("PATH", positional, "Files and directories (default .)")->take_all();
  std::vector<std::string> args;
  for (int k = argc - 1; k >= 1; --k) {
    std::string a = argv[k];
    if (!a.empty() && (a.front() == '[' || a.front() == kMarker)) a.insert(a.begin(), kMarker);
    args.push_back(std::move(a));
  }
  try {
    app.parse(args);
  } catch (CLI::CallForHelp const& e) {
    return app.exit(e);
  } catch (CLI::ParseError const& e) {
    std::fprintf(stderr,
                 "spindle-du: %s\nUsage: spindle-du [-a] [-s] [-l] [-j N] [--json] [PATH]...\n"
                 "Try 'spindle-du --help' for more information.\n",
                 e.what());
    return 1;
  }
  if (version) {
    std::printf("spindle-du %s\n", SPINDLE_DU_VERSION);
    return 0;
  }
  if (out.all && out.summarize) {
    std::fprintf(stderr, "spindle-du: cannot both summarize and show all entries\n");
    return 1;
  }
  for (auto& p : positional) {
    if (!p.empty() && p.front() == kMarker) p.erase(p.begin());
  }
  out.paths = positional.empty() ? std::vector<std::string>{"."} : positional;
  return std::nullopt;
}

int run(options const& opts) {
  spindle::runtime rt{{.workers = opts.workers}};
  tree g{opts.all, opts.count_links, opts.paths.size() > 1};
  reporter rep(opts);
  for (std::string const& path : opts.paths) {
    struct statx stx {};
    if (path.empty()) {
      rep.error("cannot access ''", ENOENT);
      continue;
    }
    if (::statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
                STATX_TYPE | STATX_SIZE | STATX_INO | STATX_NLINK, &stx) != 0) {
      rep.error("cannot access " + quote(path), errno);
      continue;
    }
    dev_t dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
    if (!S_ISDIR(stx.stx_mode)) {
      bool dedup = !opts.count_links && (g.hash_all || stx.stx_nlink > 1);
      rep.top_file(path, stx.stx_size, dev, stx.stx_ino, dedup);
      continue;
    }
    if (rep.seen_dir(dev, stx.stx_ino)) continue;
    dir_record root;
    root.path = path;
    root.own_bytes = stx.stx_size;
    root.dev = dev;
    root.ino = stx.stx_ino;
    (void)rt.fold(g, plain_sum{}, dnode{&root}, spindle::fold_policy::wide_light());
    rep.visit(root, true);
  }
  return rep.finish();
}

}  // namespace du
