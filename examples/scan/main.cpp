// spindle-scan: count the lines matching a pattern in every file of a tree,
// with grep -rca's answers, on the spindle runtime.
//
// The scan itself (discovery, the window, the file tasks) is scan::scanner
// (scanner.hpp); this file is the command line, the runtime and the report.
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <spindle/spindle.hpp>
#include <stop_token>
#include <string>
#include <thread>

#include "cli.hpp"
#include "matcher.hpp"
#include "output.hpp"
#include "scanner.hpp"
#include "walker.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// Descriptors of RLIMIT_NOFILE the scan's default window leaves to the rest
// of the process (two: a pipe).
constexpr std::size_t kFreeDescriptors = 2;

// Descriptors this process has open now (/proc/self/fd), or 0 if unknown.
std::size_t open_descriptors() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  std::size_t n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n > 0 ? n - 1 : 0;  // minus the one reading the list
}

std::string human_bytes(std::uint64_t bytes) {
  char text[32];
  if (bytes >= 1'000'000'000) {
    std::snprintf(text, sizeof text, "%.2f GB", static_cast<double>(bytes) / 1e9);
  } else {
    std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  }
  return text;
}

char const* backend_name(spindle::io_backend b) {
  switch (b) {
    case spindle::io_backend::uring:
      return "uring";
    case spindle::io_backend::threadpool:
      return "threadpool";
    case spindle::io_backend::automatic:
      return "automatic";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  scan::options options;
  if (auto stop = scan::parse_command_line(argc, argv, options)) return *stop;

  std::optional<scan::matcher> matcher;
  try {
    matcher.emplace(options.match);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle-scan: %s\n", e.what());
    return 2;
  }

  // Descriptors: up to --max-in-flight open files plus the directories;
  // lift the soft limit to the hard one (`ulimit -n` lowers both: then the
  // window shrinks on EMFILE and the walker stays within its budget).
  struct rlimit files_limit {};
  if (::getrlimit(RLIMIT_NOFILE, &files_limit) == 0 &&
      files_limit.rlim_cur < files_limit.rlim_max) {
    files_limit.rlim_cur = files_limit.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &files_limit);
  }

  auto const started = clock_type::now();
  scan::console console(options.progress && ::isatty(STDERR_FILENO) != 0);

  // grep prints no file name for one operand that is not a directory, and
  // then prints its count even when it is 0.
  bool const single_file =
      options.paths.size() == 1 && !scan::walker::is_directory(options.paths[0]);
  scan::result_format format = scan::result_format::path_count;
  if (options.json) {
    format = scan::result_format::json;
  } else if (options.names == scan::name_mode::never ||
             (options.names == scan::name_mode::automatic && single_file)) {
    format = scan::result_format::count_only;
  }
  bool const print_zero = options.all || single_file;

  spindle::runtime_config config;
  config.workers = options.workers;
  config.io = options.io == scan::io_choice::uring        ? spindle::io_backend::uring
              : options.io == scan::io_choice::threadpool ? spindle::io_backend::threadpool
                                                          : spindle::io_backend::automatic;
  std::optional<spindle::runtime> rt;
  try {
    rt.emplace(config);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle-scan: cannot start the runtime: %s\n", e.what());
    return 2;
  }
  std::size_t const workers = rt->worker_count();
  // What the runtime left of RLIMIT_NOFILE (nullopt: no limit): half of it
  // at most for directories (the walker's budget), the rest for files but
  // kFreeDescriptors, which the scan never takes. A scan that opens until
  // EMFILE would leave the rest of the process none at those moments: a
  // thread starting, a socket, a pipe (UBSan's vptr check makes one for
  // each type it has not seen yet and reports a valid object as invalid
  // when it cannot).
  std::optional<std::size_t> descriptor_budget;
  if (::getrlimit(RLIMIT_NOFILE, &files_limit) == 0 && files_limit.rlim_cur != RLIM_INFINITY) {
    std::size_t const open_now = open_descriptors();
    auto const limit = static_cast<std::size_t>(files_limit.rlim_cur);
    descriptor_budget = limit > open_now ? limit - open_now : 0;
  }
  std::size_t in_flight = options.max_in_flight;
  if (in_flight == 0) {
    in_flight = std::clamp<std::size_t>(workers * 64, 128, 1024);
    if (descriptor_budget) {
      std::size_t const taken =
          scan::walker::directories_within(*descriptor_budget) + kFreeDescriptors;
      std::size_t const for_files = *descriptor_budget > taken ? *descriptor_budget - taken : 1;
      in_flight = std::min(in_flight, for_files);
    }
  }

  scan::scanner sc(*matcher, options.buffer_size, console, format, print_zero, options.quiet,
                   in_flight);
  sc.attach(*rt);

  std::jthread progress;
  if (options.progress && ::isatty(STDERR_FILENO) != 0) {
    progress = std::jthread([&sc, &console](std::stop_token stop) {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      while (true) {
        cv.wait_for(lock, stop, std::chrono::milliseconds(100), [] { return false; });
        if (stop.stop_requested()) return;
        scan::totals const t = sc.sum();
        console.progress(std::to_string(t.files) + " files, " + human_bytes(t.bytes) + ", " +
                         std::to_string(t.lines) + " matching lines");
      }
    });
  }

  scan::walker walk(sc);
  if (descriptor_budget) walk.set_descriptor_budget(*descriptor_budget);
  // The walk is a task on a worker (block_on's thread only waits): the
  // workers walk and scan, as ripgrep's threads walk and search, with no
  // third thread competing for the cores and every spawn a local one.
  try {
    rt->block_on(walk_and_wait(walk, sc, options.paths));
  } catch (std::exception const& e) {
    console.end_progress();
    std::fprintf(stderr, "spindle-scan: the walk failed: %s\n", e.what());
    rt.reset();  // stops the scans still in flight before `sc` goes
    return 2;
  }
  spindle::runtime_stats const rstats = rt->stats();
  spindle::io_backend const backend = rt->io_backend_in_use();
  rt.reset();  // joins the workers: no task touches `sc` any more
  if (progress.joinable()) {
    progress.request_stop();
    progress.join();
  }
  console.end_progress();
  sc.flush_all();

  scan::totals const t = sc.sum();
  double const seconds = std::chrono::duration<double>(clock_type::now() - started).count();
  if (options.stats) {
    double const gbps = seconds > 0 ? static_cast<double>(t.bytes) / seconds / 1e9 : 0.0;
    std::string text;
    char line[512];
    if (options.json) {
      std::snprintf(line, sizeof line,
                    "{\"files\":%llu,\"bytes\":%llu,\"matches\":%llu,\"matched_files\":%llu,"
                    "\"seconds\":%.6f,\"gb_per_s\":%.3f,\"workers\":%zu,\"io\":\"%s\","
                    "\"matcher\":\"%s\",\"tasks_spawned\":%llu,\"tasks_stolen\":%llu,"
                    "\"in_flight\":%u,\"open_retries\":%llu}\n",
                    static_cast<unsigned long long>(t.files),
                    static_cast<unsigned long long>(t.bytes),
                    static_cast<unsigned long long>(t.lines),
                    static_cast<unsigned long long>(t.matched_files), seconds, gbps, workers,
                    backend_name(backend), matcher->describe().c_str(),
                    static_cast<unsigned long long>(rstats.total_spawned),
                    static_cast<unsigned long long>(rstats.total_stolen), sc.window_size(),
                    static_cast<unsigned long long>(t.retries));
    } else {
      std::snprintf(line, sizeof line,
                    "files:    %llu\nbytes:    %llu (%s)\nmatches:  %llu lines in %llu files\n"
                    "seconds:  %.3f\nGB/s:     %.3f\nworkers:  %zu (io: %s, matcher: %s, "
                    "tasks: %llu spawned, %llu stolen)\nin flight: %u at most at the end, %llu "
                    "opens retried (out of descriptors)\n",
                    static_cast<unsigned long long>(t.files),
                    static_cast<unsigned long long>(t.bytes), human_bytes(t.bytes).c_str(),
                    static_cast<unsigned long long>(t.lines),
                    static_cast<unsigned long long>(t.matched_files), seconds, gbps, workers,
                    backend_name(backend), matcher->describe().c_str(),
                    static_cast<unsigned long long>(rstats.total_spawned),
                    static_cast<unsigned long long>(rstats.total_stolen), sc.window_size(),
                    static_cast<unsigned long long>(t.retries));
    }
    text = line;
    if (!options.json) {
      // Where the time went, per worker: a worker that parked often while
      // the others polled had nothing to steal.
      for (std::size_t k = 0; k < rstats.workers.size(); ++k) {
        spindle::worker_stats const& w = rstats.workers[k];
        std::snprintf(line, sizeof line,
                      "worker %zu:  %llu polls, %llu stolen, %llu parks, %llu I/O completions\n", k,
                      static_cast<unsigned long long>(w.polled),
                      static_cast<unsigned long long>(w.stolen),
                      static_cast<unsigned long long>(w.parked),
                      static_cast<unsigned long long>(w.io_completions));
        text += line;
      }
    }
    (void)scan::write_all(STDERR_FILENO, text);
  }
  if (sc.had_error()) return 2;
  return t.matched_files > 0 ? 0 : 1;
}
