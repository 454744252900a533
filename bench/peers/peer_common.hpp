// Shared by the C++ peers of bench/compare.py (bench/peers/tbb, bench/peers/asio,
// bench/peers/boost_fiber): argument parsing, the measurement loop and the
// JSON output, the same as the Tokio peer's (bench/peers/tokio/src/main.rs)
// and the Go peer's (bench/peers/go/main.go). What each peer measures and how
// (threads, queues, channels, stacks): the comment at the top of each peer
// and compare.py's docstring.
//
// Usage of a peer: PEER --workers N [--reps R] [--min-time SECONDS]
//                       [--from-outside 0|1] [--workload NAME]...
// --from-outside 1 (the oneTBB peer): every workload starts from the
// measuring thread outside the pool and is waited for there, as spindle's
// and Tokio's are, instead of the measuring thread joining the pool.
// Output on stdout: {"system": S, "workers": N, "results": [
//   {"workload": NAME, "unit": UNIT, "samples": [v, ...]}, ...]}
// Each sample is the mean over enough iterations to last --min-time.
// Unknown arguments or workloads: a message on stderr and exit status 2.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace peer {

struct options {
  int workers = 2;
  int reps = 5;
  double min_time = 0.2;
  bool from_outside = false;
  std::vector<std::string> workloads;
};

inline options parse(int argc, char** argv, char const* program) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", program, arg.c_str());
      std::exit(2);
    }
    std::string value = argv[++i];
    if (arg == "--workers") {
      o.workers = std::atoi(value.c_str());
    } else if (arg == "--reps") {
      o.reps = std::atoi(value.c_str());
    } else if (arg == "--min-time") {
      o.min_time = std::atof(value.c_str());
    } else if (arg == "--from-outside") {
      o.from_outside = value == "1";
    } else if (arg == "--workload") {
      o.workloads.push_back(value);
    } else {
      std::fprintf(stderr, "%s: unknown argument %s\n", program, arg.c_str());
      std::exit(2);
    }
  }
  if (o.workers < 1 || o.reps < 1) {
    std::fprintf(stderr, "%s: --workers and --reps must be >= 1\n", program);
    std::exit(2);
  }
  return o;
}

/// Runs `body` once to warm up, then `reps` samples, each the mean over as
/// many iterations as fill `min_time`, in nanoseconds x `scale` / `per`.
inline std::vector<double> measure(options const& o, double scale, double per,
                                   std::function<void()> const& body) {
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  body();
  double once = std::chrono::duration<double>(clock::now() - start).count();
  long iters = std::max(1L, static_cast<long>(std::ceil(o.min_time / std::max(once, 1e-9))));
  std::vector<double> samples;
  for (int r = 0; r < o.reps; ++r) {
    start = clock::now();
    for (long i = 0; i < iters; ++i)
      body();
    double ns = std::chrono::duration<double, std::nano>(clock::now() - start).count();
    samples.push_back(ns / static_cast<double>(iters) * scale / per);
  }
  return samples;
}

struct result {
  std::string workload;
  std::string unit;
  std::vector<double> samples;
};

inline void print(char const* system, options const& o, std::vector<result> const& results) {
  std::printf("{\"system\": \"%s\", \"workers\": %d, \"results\": [", system, o.workers);
  for (std::size_t i = 0; i < results.size(); ++i) {
    std::printf("%s\n  {\"workload\": \"%s\", \"unit\": \"%s\", \"samples\": [", i ? "," : "",
                results[i].workload.c_str(), results[i].unit.c_str());
    for (std::size_t j = 0; j < results[i].samples.size(); ++j)
      std::printf("%s%.6f", j ? ", " : "", results[i].samples[j]);
    std::printf("]}");
  }
  std::printf("\n]}\n");
}

/// A completion signal from a task to the measuring thread. Keep one alive
/// across iterations and reset() it before each: the setter may still be
/// inside notify_one() when the waiter returns.
class done_signal {
 public:
  void reset() noexcept { done_.store(false, std::memory_order_relaxed); }
  void set() noexcept {
    done_.store(true, std::memory_order_release);
    done_.notify_one();
  }
  void wait() noexcept { done_.wait(false, std::memory_order_acquire); }

 private:
  std::atomic<bool> done_{false};
};

/// Busy for 10 µs, yielding the thread (Tokio's `stall`).
inline void stall() {
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::microseconds(10))
    std::this_thread::yield();
}

}  // namespace peer
