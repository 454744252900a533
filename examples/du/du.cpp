#include "du.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <spindle/fold.hpp>
#include <spindle/io.hpp>
#include <spindle/runtime.hpp>
#include <spindle/semaphore.hpp>
#include <spindle/task_group.hpp>
#include <spindle/when_all.hpp>
#include <system_error>
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

The walk is a parallel fold (spindle::fold) on -j worker threads. The
entries' statx are direct system calls while they are fast (the inodes are
cached) and go through io_uring (IORING_OP_STATX, one batch per directory;
the thread pool with SPINDLE_IO=threadpool) once one takes longer than
50 us (the disk): --stat=auto, the default. --stat=sync (or --sync-stat)
always calls statx directly, --stat=uring always batches.)";

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

constexpr int kStatFlags = AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT;

struct dir_closer {
  void operator()(DIR* d) const noexcept { ::closedir(d); }
};
using dir_ptr = std::unique_ptr<DIR, dir_closer>;

struct tree;
spindle::task<void> stat_batch(tree const* g, dir_record* r, dir_ptr dir, std::size_t seen);

// fts (and so du) visits a directory of more than 10,000 entries in inode
// order, except on file systems where that does not help.
void sort_if_large(dir_record& r, int fd, std::size_t seen) {
  if (seen <= 10000) return;
  struct statfs sfs {};
  bool sort = ::fstatfs(fd, &sfs) == 0 && sfs.f_type != TMPFS_MAGIC &&
              sfs.f_type != NFS_SUPER_MAGIC && sfs.f_type != PROC_SUPER_MAGIC;
  if (sort) {
    std::stable_sort(r.entries.begin(), r.entries.end(),
                     [](entry const& a, entry const& b) { return a.ino < b.ino; });
  }
}

// The directory tree: children() reads one directory (see du.hpp).
struct tree {
  bool all;
  bool count_links;
  bool hash_all;
  /// Where the statx batches run (null: --sync-stat, statx inside children).
  spindle::task_group* batches = nullptr;
  /// Directory descriptors held open by batches not finished yet, and the
  /// most allowed: beyond it (the walk ran far ahead of the ring) a
  /// directory's entries are stat'ed inside children(), which bounds the
  /// descriptors in use well below RLIMIT_NOFILE.
  mutable std::atomic<std::size_t> open_batches{0};
  std::size_t max_open_batches = 256;
  /// statx in flight, all batches together (a batch submits its entries in
  /// chunks of statx_chunk, each holding that many permits): the kernel
  /// copies every path into a names_cache object at submission, and tens of
  /// thousands in flight at once made it allocate fresh slabs all the time.
  spindle::semaphore* statx_permits = nullptr;
  std::size_t statx_chunk = 64;
  /// --stat=auto: a directory stats its entries directly, timing each,
  /// until a second one takes longer than slow_statx_ns (a warm statx takes
  /// 1-3 us; one that reads the disk, tens of us at least; one slow entry
  /// alone may only have been preempted); the rest of its entries then go
  /// to a batch, and so do the next batch_after_slow directories' (then one
  /// probes again). Through io_uring every statx goes to an io-wq
  /// kernel thread, about 1.4 us more CPU per entry: worth it only when the
  /// batch overlaps disk reads. SPINDLE_DU_SLOW_STATX_NS overrides the
  /// threshold (tests: 0 makes every statx slow).
  bool adaptive = false;
  std::uint64_t slow_statx_ns = 50'000;
  static constexpr int batch_after_slow = 64;
  mutable std::atomic<int> batch_dirs{0};

  // --stat=auto: whether this directory starts in a batch (taking one of
  // batch_dirs), rather than probing with direct calls.
  bool starts_batched() const noexcept {
    int n = batch_dirs.load(std::memory_order_relaxed);
    while (n > 0 && !batch_dirs.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
    }
    return n > 0;
  }

  // A non-directory entry whose statx is known: summed, or recorded when
  // printed (-a) or possibly counted elsewhere (a hard link).
  void add_file(dir_record& r, entry& e, std::uint32_t nlink) const {
    e.dedup = !count_links && (hash_all || nlink > 1);
    if (!all && !e.dedup) {
      r.plain_bytes += e.bytes;
      e.skip = true;
    }
  }

  // The entry `name` of `r` stat'ed here (--sync-stat, or readdir did not
  // give its type): recorded, and emitted when it is a directory.
  template <class E>
  void stat_now(dir_record& r, int fd, char const* name, E& emit) const {
    struct statx stx {};
    if (::statx(fd, name, kStatFlags, STATX_TYPE | STATX_SIZE | STATX_INO | STATX_NLINK, &stx) !=
        0) {
      r.access_errors.emplace_back(join(r.path, name), errno);
      return;
    }
    dev_t dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
    if (S_ISDIR(stx.stx_mode)) {
      auto sub = std::make_unique<dir_record>();
      sub->path = join(r.path, name);
      sub->own_bytes = stx.stx_size;
      sub->dev = dev;
      sub->ino = stx.stx_ino;
      dir_record* child = sub.get();
      r.entries.push_back(
          entry{{}, stx.stx_size, dev, stx.stx_ino, false, false, true, std::move(sub)});
      emit(dnode{child});
      return;
    }
    entry e{{}, stx.stx_size, dev, stx.stx_ino, false, false, true, nullptr};
    add_file(r, e, stx.stx_nlink);
    if (!e.skip) {
      e.name = name;
      r.entries.push_back(std::move(e));
    }
  }

  template <class E>
  void children(dnode const& n, E&& emit) const {
    dir_record& r = *n.rec;
    int fd = ::open(r.path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      r.read_errno = errno;
      return;
    }
    dir_ptr dir(::fdopendir(fd));  // closed if emit throws
    if (!dir) {
      r.read_errno = errno;
      ::close(fd);
      return;
    }
    bool batch = batches != nullptr;
    if (batch && open_batches.fetch_add(1, std::memory_order_relaxed) >= max_open_batches) {
      open_batches.fetch_sub(1, std::memory_order_relaxed);
      batch = false;
    }
    // --stat=auto: direct statx first, each one timed (see adaptive).
    bool probing = batch && adaptive && !starts_batched();
    int slow_seen = 0;
    DIR* d = dir.get();
    std::size_t seen = 0;
    bool pending = false;  // entries left for the batch
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
      if (probing) {
        auto const start = std::chrono::steady_clock::now();
        stat_now(r, fd, name, emit);
        auto const took =
            std::chrono::nanoseconds(std::chrono::steady_clock::now() - start).count();
        if (static_cast<std::uint64_t>(took) >= slow_statx_ns && ++slow_seen == 2) {
          probing = false;  // the disk: batch the rest, and the next directories
          batch_dirs.store(batch_after_slow, std::memory_order_relaxed);
        }
        continue;
      }
      if (!batch || de->d_type == DT_UNKNOWN) {
        stat_now(r, fd, name, emit);
        continue;
      }
      pending = true;
      if (de->d_type == DT_DIR) {
        // Walked at once; its size and identity come with the batch.
        auto sub = std::make_unique<dir_record>();
        sub->path = join(r.path, name);
        dir_record* child = sub.get();
        r.entries.push_back(entry{name, 0, 0, 0, false, false, false, std::move(sub)});
        emit(dnode{child});
      } else {
        r.entries.push_back(entry{name, 0, 0, 0, false, false, false, nullptr});
      }
    }
    if (pending) {
      batches->spawn(stat_batch(this, &r, std::move(dir), seen));
      return;
    }
    if (batch) open_batches.fetch_sub(1, std::memory_order_relaxed);
    sort_if_large(r, fd, seen);
  }
};

// The statx of one directory's entries that children() left pending, all
// submitted at once (when_all: one stat_at task per entry, each an
// IORING_OP_STATX relative to the directory's descriptor, held open here),
// then recorded as stat_now would have.
spindle::task<void> stat_batch(tree const* g, dir_record* r, dir_ptr dir, std::size_t seen) {
  int const fd = ::dirfd(dir.get());
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < r->entries.size(); ++i) {
    if (!r->entries[i].stated) which.push_back(i);
  }
  std::vector<std::error_code> errors(which.size());
  std::vector<spindle::io::file_status> got;
  got.reserve(which.size());
  std::size_t const chunk = g->statx_chunk;
  for (std::size_t from = 0; from < which.size(); from += chunk) {
    std::size_t const to = std::min(which.size(), from + chunk);
    auto permit = co_await g->statx_permits->scoped_acquire(to - from);
    std::vector<spindle::task<spindle::io::file_status>> stats;
    stats.reserve(to - from);
    for (std::size_t k = from; k < to; ++k) {
      stats.push_back(spindle::io::stat_at(fd, r->entries[which[k]].name, kStatFlags, errors[k]));
    }
    for (auto& st : co_await spindle::when_all(std::move(stats)))
      got.push_back(st);
  }
  for (std::size_t k = 0; k < which.size(); ++k) {
    entry& e = r->entries[which[k]];
    if (errors[k]) {
      r->access_errors.emplace_back(join(r->path, e.name.c_str()), errors[k].value());
      e.skip = true;
      continue;
    }
    spindle::io::file_status const& st = got[k];
    e.bytes = st.size;
    e.dev = st.dev;
    e.ino = st.ino;
    e.stated = true;
    if (e.dir) {
      // readdir said directory: walked already, whatever statx says now.
      e.dir->own_bytes = st.size;
      e.dir->dev = st.dev;
      e.dir->ino = st.ino;
      e.name.clear();
      e.name.shrink_to_fit();
    } else {
      g->add_file(*r, e, st.nlink);
      if (e.skip) {
        e.name.clear();
        e.name.shrink_to_fit();
      }
    }
  }
  sort_if_large(*r, fd, seen);
  dir.reset();
  g->open_batches.fetch_sub(1, std::memory_order_relaxed);
}

// The walk's fold: counts directories. What du prints comes from the
// ordered pass over the records afterwards.
struct dir_count {
  std::size_t init(dnode const&) const { return 1; }
  void accumulate(std::size_t& h, std::size_t&& child) const { h += child; }
  std::size_t finalize(std::size_t&& h) const { return h; }
};

constexpr spindle::fold_policy kPolicy = spindle::fold_policy::wide_light();

// The batched walk: the fold on the runtime, the statx batches in a task
// group, all finished before it returns (or the first error rethrown).
spindle::task<void> walk_batched(tree& g, dir_record* root) {
  spindle::task_group batches;
  g.batches = &batches;
  std::size_t in_flight = 256;
  if (char const* env = std::getenv("SPINDLE_DU_STATX_IN_FLIGHT"))
    in_flight = std::strtoul(env, nullptr, 10);
  if (char const* env = std::getenv("SPINDLE_DU_STATX_CHUNK"))
    g.statx_chunk = std::strtoul(env, nullptr, 10);
  if (g.statx_chunk == 0) g.statx_chunk = 1;
  if (in_flight < g.statx_chunk) in_flight = g.statx_chunk;
  spindle::semaphore permits(in_flight);
  g.statx_permits = &permits;
  std::exception_ptr failed;
  try {
    (void)co_await spindle::fold(g, dir_count{}, dnode{root}, kPolicy);
  } catch (...) {
    failed = std::current_exception();
    batches.abort_all();
  }
  try {
    co_await batches.join();
  } catch (...) {
    if (!failed) failed = std::current_exception();
  }
  g.batches = nullptr;
  if (failed) std::rethrow_exception(failed);
}

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
      if (e.skip) continue;
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
  std::string stat_mode = "auto";
  app.add_option("--stat", stat_mode,
                 "auto: direct statx while fast, io_uring batches once one is slow "
                 "(default); sync: always direct; uring: always io_uring batches")
      ->check(CLI::IsMember({"auto", "sync", "uring"}))
      ->option_text("auto|sync|uring")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  bool sync_stat = false;
  app.add_flag("--sync-stat", sync_stat, "The same as --stat=sync");
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
    std::fprintf(
        stderr,
        "spindle-du: %s\nUsage: spindle-du [-a] [-s] [-l] [-j N] [--json] [--stat=MODE] [PATH]...\n"
        "Try 'spindle-du --help' for more information.\n",
        e.what());
    return 1;
  }
  out.stat = sync_stat || stat_mode == "sync" ? options::stat_mode::sync
             : stat_mode == "uring"           ? options::stat_mode::uring
                                              : options::stat_mode::automatic;
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
  g.adaptive = opts.stat == options::stat_mode::automatic;
  if (char const* env = std::getenv("SPINDLE_DU_SLOW_STATX_NS"))
    g.slow_statx_ns = std::strtoull(env, nullptr, 10);
  // Batches hold a directory descriptor each: at most half of what is left.
  if (struct rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    g.max_open_batches = rl.rlim_cur > 192 ? (rl.rlim_cur - 128) / 2 : 32;
  }
  reporter rep(opts);
  for (std::string const& path : opts.paths) {
    if (path.empty()) {
      rep.error("cannot access ''", ENOENT);
      continue;
    }
    std::uint64_t size = 0;
    std::uint32_t nlink = 0;
    dev_t dev = 0;
    ino_t ino = 0;
    bool is_dir = false;
    if (opts.stat != options::stat_mode::uring) {
      struct statx stx {};
      if (::statx(AT_FDCWD, path.c_str(), kStatFlags,
                  STATX_TYPE | STATX_SIZE | STATX_INO | STATX_NLINK, &stx) != 0) {
        rep.error("cannot access " + quote(path), errno);
        continue;
      }
      size = stx.stx_size;
      nlink = stx.stx_nlink;
      dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
      ino = stx.stx_ino;
      is_dir = S_ISDIR(stx.stx_mode);
    } else {
      std::error_code ec;
      spindle::io::file_status st =
          rt.block_on(spindle::io::stat_at(AT_FDCWD, path, kStatFlags, ec));
      if (ec) {
        rep.error("cannot access " + quote(path), ec.value());
        continue;
      }
      size = st.size;
      nlink = st.nlink;
      dev = st.dev;
      ino = st.ino;
      is_dir = st.is_directory();
    }
    if (!is_dir) {
      bool dedup = !opts.count_links && (g.hash_all || nlink > 1);
      rep.top_file(path, size, dev, ino, dedup);
      continue;
    }
    if (rep.seen_dir(dev, ino)) continue;
    dir_record root;
    root.path = path;
    root.own_bytes = size;
    root.dev = dev;
    root.ino = ino;
    if (opts.stat == options::stat_mode::sync) {
      (void)rt.fold(g, dir_count{}, dnode{&root}, kPolicy);
    } else {
      rt.block_on(walk_batched(g, &root));
    }
    rep.visit(root, true);
  }
  return rep.finish();
}

}  // namespace du
