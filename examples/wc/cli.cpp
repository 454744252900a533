#include "cli.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>

#ifndef SPINDLE_WC_VERSION
#define SPINDLE_WC_VERSION "0.1.0"
#endif

namespace wc {

namespace {

constexpr char kMarker = '\x01';

constexpr char const* kFooter = R"(
Prints newline, word and byte counts for every regular file below each PATH,
one line per file, then a total line when there is more than one file, as
GNU `LC_ALL=C wc` prints them for the same files. Files below a directory are
printed sorted by path (bytes, like `LC_ALL=C sort`); operands keep their
order. Symbolic links are followed on the command line only; below it
symlinks, FIFOs, sockets and devices are skipped (`find -H PATH -type f`).
Without PATH, or with PATH -, reads standard input.

A word is a run of printable non-space bytes ended by whitespace; other
bytes (control characters, bytes >= 0x80) neither start nor end a word.

Exit status: 0, or 1 if a file or directory could not be read (the others
are still counted) or the command line is wrong.)";

}  // namespace

std::optional<int> parse_command_line(int argc, char** argv, options& out) {
  CLI::App app{"spindle-wc: count lines, words and bytes of files, in fibers on spindle",
               "spindle-wc"};
  app.set_help_flag("--help", "Print this help and exit");
  app.footer(kFooter);

  bool lines = false;
  bool words = false;
  bool bytes = false;
  bool version = false;
  std::string io = "auto";
  std::vector<std::string> positional;
  std::size_t buffer_kib = out.buffer_size / 1024;

  app.add_flag("-l,--lines", lines, "Print the newline counts");
  app.add_flag("-w,--words", words, "Print the word counts");
  app.add_flag("-c,--bytes", bytes, "Print the byte counts");
  app.add_option("-j,--threads", out.workers, "Worker threads (default: all CPUs)")
      ->check(CLI::NonNegativeNumber)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--fibers", out.fibers, "Counting fibers per worker (default 4)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--buffer-size", buffer_kib, "Read buffer per fiber in KiB (default 128)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--io", io, "I/O backend: auto, uring or threadpool (env SPINDLE_IO)")
      ->check(CLI::IsMember({"auto", "uring", "threadpool"}));
  app.add_flag("-V,--version", version, "Print the version and exit");
  app.add_option("PATH", positional, "Files and directories")->take_all();

  // CLI11 reads a positional "[a,b]" as the list {a, b}: arguments that
  // start with '[' (or with the marker) get a \x01 marker in front, removed
  // afterwards (as spindle-scan does).
  std::vector<std::string> args;
  for (int k = argc - 1; k >= 1; --k) {
    std::string a = argv[k];
    if (!a.empty() && (a.front() == '[' || a.front() == kMarker)) a.insert(a.begin(), kMarker);
    args.push_back(std::move(a));
  }
  try {
    app.parse(args);  // CLI11 takes the arguments in reverse order
  } catch (CLI::CallForHelp const& e) {
    return app.exit(e);
  } catch (CLI::ParseError const& e) {
    std::fprintf(stderr,
                 "spindle-wc: %s\nUsage: spindle-wc [OPTION]... [PATH]...\n"
                 "Try 'spindle-wc --help' for more information.\n",
                 e.what());
    return 1;
  }
  if (version) {
    std::printf("spindle-wc %s\n", SPINDLE_WC_VERSION);
    return 0;
  }
  for (auto& a : positional) {
    if (!a.empty() && a.front() == kMarker) a.erase(a.begin());
  }
  out.paths = std::move(positional);
  if (lines || words || bytes) out.what = selection{lines, words, bytes};
  out.io = io == "uring"        ? io_choice::uring
           : io == "threadpool" ? io_choice::threadpool
                                : io_choice::automatic;
  out.buffer_size = buffer_kib * 1024;
  return std::nullopt;
}

}  // namespace wc
