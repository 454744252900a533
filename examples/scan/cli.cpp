#include "cli.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

#ifndef SPINDLE_SCAN_VERSION
#define SPINDLE_SCAN_VERSION "0.1.0"
#endif

namespace scan {

namespace {

constexpr char kMarker = '\x01';

constexpr char const* kFooter = R"(
Counts the lines matching PATTERN in every regular file below each PATH
(default: the current directory) and prints PATH:COUNT for each file with a
match, like `LC_ALL=C grep -rca PATTERN PATH...`. Symbolic links are followed
on the command line only; FIFOs, sockets and devices are never opened.
PATTERN is a GNU extended regular expression (C locale, bytes) matched by
PCRE2; a newline in PATTERN separates several patterns. With a single PATH
that is not a directory only the count is printed (as grep does).

Exit status: 0 if a line matched, 1 if none did, 2 if an error occurred
(files that could be read are still counted), with -s too (as grep -s).

--json prints one JSON object per line, {"path":"...","count":N}; bytes of a
path that are not UTF-8 are replaced by U+FFFD. With --stats the summary goes
to stderr (as a JSON object with --json).)";

}  // namespace

std::optional<int> parse_command_line(int argc, char** argv, options& out) {
  CLI::App app{"spindle-scan: count matching lines in files, in parallel, on spindle",
               "spindle-scan"};
  app.set_help_flag("--help", "Print this help and exit");
  app.footer(kFooter);

  std::vector<std::string> regexps;
  std::vector<std::string> positional;
  bool fixed = false;
  bool extended = false;
  bool version = false;
  bool with_names = false;
  bool without_names = false;
  bool no_progress = false;
  std::string io = "auto";

  app.add_flag("-F,--fixed-strings", fixed, "PATTERN is a set of fixed strings");
  app.add_flag("-E,--extended-regexp", extended, "PATTERN is an extended regex (default)");
  app.add_option("-e,--regexp", regexps, "Use PATTERN (repeatable); positionals are then PATHs")
      ->allow_extra_args(false);
  app.add_flag("-i,--ignore-case", out.match.ignore_case, "Ignore ASCII case");
  app.add_option("-j,--threads", out.workers, "Worker threads (default: all CPUs)")
      ->check(CLI::NonNegativeNumber)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_flag("--all", out.all, "Also print files with no matching line (PATH:0)");
  app.add_flag("--json", out.json, "Print JSON Lines: {\"path\":...,\"count\":...}");
  app.add_flag("--stats", out.stats, "Print files, bytes, matches, seconds, GB/s on stderr");
  app.add_flag("-H,--with-filename", with_names, "Always print file names");
  app.add_flag("-h,--no-filename", without_names, "Never print file names");
  app.add_flag("--no-progress", no_progress, "No progress line, even on a terminal");
  app.add_flag("-s,--no-messages", out.quiet,
               "No messages about missing or unreadable files (the exit status is still 2)");
  app.add_option("--io", io, "I/O backend: auto, uring or threadpool (env SPINDLE_IO)")
      ->check(CLI::IsMember({"auto", "uring", "threadpool"}));
  app.add_option("--max-in-flight", out.max_in_flight,
                 "Files scanned at once (default: 64 per worker, 128..1024)")
      ->check(CLI::PositiveNumber);
  std::size_t buffer_kib = out.buffer_size / 1024;
  app.add_option("--buffer-size", buffer_kib, "Read buffer per file in KiB (default 128)")
      ->check(CLI::Range(4, 1 << 20));
  app.add_flag("-V,--version", version, "Print the version and exit");
  app.add_option("args", positional, "PATTERN and PATHs")->take_all();

  // CLI11 reads a positional "[a,b]" as the list {a, b}, which would break
  // patterns such as "[[:digit:]]". Arguments that start with '[' (or with
  // the marker itself) get a \x01 marker in front; it is removed afterwards.
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
                 "spindle-scan: %s\nUsage: spindle-scan [OPTION]... PATTERN [PATH]...\n"
                 "Try 'spindle-scan --help' for more information.\n",
                 e.what());
    return 2;
  }
  auto unmark = [](std::vector<std::string>& list) {
    for (auto& a : list) {
      if (!a.empty() && a.front() == kMarker) a.erase(a.begin());
    }
  };
  unmark(positional);
  unmark(regexps);
  if (version) {
    std::printf("spindle-scan %s\n", SPINDLE_SCAN_VERSION);
    return 0;
  }
  if (fixed && extended) {
    std::fprintf(stderr, "spindle-scan: conflicting matchers specified\n");
    return 2;
  }
  out.match.syntax = fixed ? pattern_syntax::fixed : pattern_syntax::extended;
  if (regexps.empty()) {
    if (positional.empty()) {
      std::fprintf(stderr,
                   "Usage: spindle-scan [OPTION]... PATTERN [PATH]...\n"
                   "Try 'spindle-scan --help' for more information.\n");
      return 2;
    }
    out.match.patterns.push_back(positional.front());
    out.paths.assign(positional.begin() + 1, positional.end());
  } else {
    out.match.patterns = regexps;
    out.paths = positional;
  }
  out.names = with_names      ? name_mode::always
              : without_names ? name_mode::never
                              : name_mode::automatic;
  out.progress = !no_progress;
  out.io = io == "uring"        ? io_choice::uring
           : io == "threadpool" ? io_choice::threadpool
                                : io_choice::automatic;
  out.buffer_size = buffer_kib * 1024;
  return std::nullopt;
}

}  // namespace scan
