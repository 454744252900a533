// spindle-wordfreq: word frequencies of the files below the given paths, as
// a pipeline of spindle processes (spindle/process.hpp).
//
//   spindle-wordfreq [-j WORKERS] [-r READERS] [-s SHARDS] PATH...
//
// A word is a maximal run of ASCII letters (case kept). The output is one
// line per distinct word, sorted bytewise, in `uniq -c`'s format ("%7d
// word"), so it equals
//   cat FILES | tr -cs A-Za-z '\n' | grep -v '^$' | LC_ALL=C sort | uniq -c
// when every file ends with a non-letter (words never run on from one file
// into the next here; tests/processes/wordfreq_vs_coreutils.sh checks it
// with `sed -s '$a\'` in place of cat).
//
// The pipeline: the main task walks the trees (regular files, symlinks below
// the command line not followed) and sends each path to one of READERS
// reader processes, round robin. A reader reads its files with
// spindle::io::read_file, splits them into words and sends the words, in
// batches, to the counter process of each word's shard (hash % SHARDS).
// Once every reader has ended (monitor), each counter gets a flush and sends
// its table to the merger, which merges the SHARDS tables; main prints it.
//
// Exit status: 0, or 1 when a path could not be read (reported on stderr,
// the rest is still counted), 2 for a usage error.
#include <CLI/CLI.hpp>
#include <spindle/spindle.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using table = std::unordered_map<std::string, std::uint64_t>;

struct counter_msg {
  std::vector<std::string> words;  ///< a batch to count
  bool flush = false;              ///< send the table to the merger and end
};

struct shared_state {
  std::vector<spindle::pid<counter_msg>> counters;
  spindle::pid<table> merger;
  std::atomic<bool> failed{false};
};

constexpr std::size_t batch_words = 512;

bool is_letter(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

spindle::task<void> reader(spindle::process_context<std::string>& ctx, shared_state* st) {
  std::size_t const shards = st->counters.size();
  std::vector<std::vector<std::string>> batches(shards);
  auto flush_batch = [&](std::size_t s) {
    if (batches[s].empty()) return;
    (void)spindle::send(st->counters[s], counter_msg{std::move(batches[s]), false});
    batches[s].clear();
  };
  for (;;) {
    std::string path = co_await ctx.receive();
    if (path.empty()) break;
    std::vector<std::byte> bytes;
    try {
      bytes = co_await spindle::io::read_file(path);
    } catch (std::system_error const& e) {
      std::fprintf(stderr, "spindle-wordfreq: %s: %s\n", path.c_str(), e.code().message().c_str());
      st->failed.store(true);
      continue;
    }
    auto const* p = reinterpret_cast<unsigned char const*>(bytes.data());
    std::size_t const n = bytes.size();
    std::size_t i = 0;
    while (i < n) {
      while (i < n && !is_letter(p[i]))
        ++i;
      std::size_t const start = i;
      while (i < n && is_letter(p[i]))
        ++i;
      if (i == start) break;
      std::string word(reinterpret_cast<char const*>(p + start), i - start);
      std::size_t const s = std::hash<std::string>{}(word) % shards;
      batches[s].push_back(std::move(word));
      if (batches[s].size() == batch_words) flush_batch(s);
    }
  }
  for (std::size_t s = 0; s < shards; ++s)
    flush_batch(s);
}

spindle::task<void> counter(spindle::process_context<counter_msg>& ctx, shared_state* st) {
  table counts;
  for (;;) {
    counter_msg m = co_await ctx.receive();
    if (m.flush) break;
    for (auto& w : m.words)
      ++counts[std::move(w)];
  }
  (void)spindle::send(st->merger, std::move(counts));
}

spindle::task<void> merger(spindle::process_context<table>& ctx, std::size_t shards,
                           std::map<std::string, std::uint64_t>* out) {
  for (std::size_t i = 0; i < shards; ++i) {
    table part = co_await ctx.receive();
    for (auto& [word, n] : part)
      (*out)[word] += n;  // shards are disjoint: each word once
  }
}

void list_files(fs::path const& root, std::vector<std::string>& files, bool& failed) {
  std::error_code ec;
  fs::file_status const st = fs::status(root, ec);  // the command line's own links are followed
  if (ec) {
    std::fprintf(stderr, "spindle-wordfreq: %s: %s\n", root.c_str(), ec.message().c_str());
    failed = true;
    return;
  }
  if (fs::is_regular_file(st)) {
    files.push_back(root.string());
    return;
  }
  if (!fs::is_directory(st)) return;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  if (ec) {
    std::fprintf(stderr, "spindle-wordfreq: %s: %s\n", root.c_str(), ec.message().c_str());
    failed = true;
    return;
  }
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) {
      std::fprintf(stderr, "spindle-wordfreq: %s\n", ec.message().c_str());
      failed = true;
      break;
    }
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
}

spindle::task<void> run(std::vector<std::string> files, std::size_t readers, std::size_t shards,
                        shared_state* st, std::map<std::string, std::uint64_t>* out) {
  st->merger = spindle::spawn_process<table>(
      [shards, out](spindle::process_context<table>& ctx) { return merger(ctx, shards, out); });
  for (std::size_t i = 0; i < shards; ++i) {
    st->counters.push_back(spindle::spawn_process<counter_msg>(
        [st](spindle::process_context<counter_msg>& ctx) { return counter(ctx, st); }));
  }
  std::vector<spindle::pid<std::string>> rs;
  for (std::size_t i = 0; i < readers; ++i) {
    rs.push_back(spindle::spawn_process<std::string>(
        [st](spindle::process_context<std::string>& ctx) { return reader(ctx, st); }));
  }
  for (std::size_t i = 0; i < files.size(); ++i)
    (void)spindle::send(rs[i % readers], std::move(files[i]));
  for (auto& r : rs)
    (void)spindle::send(r, std::string());
  for (auto& r : rs)
    co_await spindle::monitor(r);
  for (auto& c : st->counters)
    (void)spindle::send(c, counter_msg{{}, true});
  co_await spindle::monitor(st->merger);
}

int usage(char const* why) {
  std::fprintf(stderr,
               "spindle-wordfreq: %s\nusage: spindle-wordfreq [-j WORKERS] [-r READERS] "
               "[-s SHARDS] PATH...\nTry 'spindle-wordfreq --help' for more information.\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t workers = 0;
  std::size_t readers = 4;
  std::size_t shards = 8;
  std::vector<std::string> paths;
  CLI::App app{
      "spindle-wordfreq: word frequencies of the files below PATHs (uniq -c format), "
      "counted by reader, counter and merger processes",
      "spindle-wordfreq"};
  app.set_help_flag("-h,--help", "Print this help and exit");
  auto const count = CLI::Range(std::size_t{1}, std::size_t{4096});
  app.add_option("-j,--workers", workers, "Worker threads (default: all CPUs)")->check(count);
  app.add_option("-r,--readers", readers, "Reader processes (default 4)")->check(count);
  app.add_option("-s,--shards", shards, "Counter processes (default 8)")->check(count);
  app.add_option("PATH", paths, "Files and directories")->required();
  try {
    app.parse(argc, argv);
  } catch (CLI::CallForHelp const& e) {
    return app.exit(e);
  } catch (CLI::ParseError const& e) {
    return usage(e.what());
  }
  bool failed = false;
  std::vector<std::string> files;
  for (auto const& p : paths)
    list_files(p, files, failed);
  shared_state st;
  std::map<std::string, std::uint64_t> result;
  try {
    spindle::runtime rt{{.workers = workers}};
    rt.block_on(run(std::move(files), readers, shards, &st, &result));
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle-wordfreq: %s\n", e.what());
    return 2;
  }
  for (auto const& [word, n] : result)
    std::printf("%7llu %s\n", static_cast<unsigned long long>(n), word.c_str());
  return failed || st.failed.load() ? 1 : 0;
}
