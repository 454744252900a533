// xcore_latency: the round trip of one cache line between two CPUs, in ns.
//
// Two threads, pinned to the first two CPUs of the process's affinity mask,
// hand a counter back and forth through one 64-byte-aligned atomic (each
// waits, spinning, for the other's store). A round trip is two transfers of
// the line. Prints one JSON object on stdout:
//   {"cpus": [A, B], "round_trip_ns": median, "samples": [...]}
// with the median of `--batches` batches (default 7) of `--rounds` round
// trips (default 20000).
//
// Why: on a virtual machine the host may move the virtual CPUs between
// physical cores that share a cache and cores that do not, while a program
// runs. On the 2-CPU machines of this project the round trip was seen at
// 80-150 ns or at 390-750 ns, and spawn_many_local's time followed it
// (README, "spawn_many_local"). bench/compare.py runs this probe before each
// system's runtime workloads, so that a comparison across a change of the
// host's placement can be seen for what it is.
//
// Exits with status 2 (and a message on stderr) when fewer than two CPUs
// are available or a thread cannot be pinned.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct alignas(64) line {
  std::atomic<long> value{0};
};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  long rounds = 20000;
  int batches = 7;
  for (int i = 1; i < argc; ++i) {
    std::string const arg = argv[i];
    if ((arg == "--rounds" || arg == "--batches") && i + 1 < argc) {
      long const v = std::strtol(argv[++i], nullptr, 10);
      if (v <= 0) {
        std::fprintf(stderr, "xcore_latency: %s needs a positive number\n", arg.c_str());
        return 2;
      }
      if (arg == "--rounds") {
        rounds = v;
      } else {
        batches = static_cast<int>(std::min(v, 1000L));
      }
    } else {
      std::fprintf(stderr, "usage: xcore_latency [--rounds N] [--batches N]\n");
      return 2;
    }
  }
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
    std::fprintf(stderr, "xcore_latency: sched_getaffinity: %s\n", std::strerror(errno));
    return 2;
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  if (cpus.size() < 2) {
    std::fprintf(stderr, "xcore_latency: needs two CPUs, the affinity mask has %zu\n", cpus.size());
    return 2;
  }

  line shared;
  std::atomic<bool> pinned_ok{true};
  long const total = rounds * batches;
  std::thread echo([&] {
    if (!pin(cpus[1])) pinned_ok.store(false);
    // Odd values are the prober's, even ones the echo's; -1 stops early.
    for (long i = 0; i < total; ++i) {
      long v;
      while ((v = shared.value.load(std::memory_order_acquire)) != 2 * i + 1) {
        if (v < 0) return;
      }
      shared.value.store(2 * i + 2, std::memory_order_release);
    }
  });
  if (!pin(cpus[0]) || !pinned_ok.load()) {
    shared.value.store(-1, std::memory_order_release);
    echo.join();
    std::fprintf(stderr, "xcore_latency: cannot pin threads to CPUs %d and %d\n", cpus[0], cpus[1]);
    return 2;
  }
  std::vector<double> samples;
  long i = 0;
  for (int b = 0; b < batches; ++b) {
    auto const start = std::chrono::steady_clock::now();
    for (long r = 0; r < rounds; ++r, ++i) {
      shared.value.store(2 * i + 1, std::memory_order_release);
      while (shared.value.load(std::memory_order_acquire) != 2 * i + 2) {
      }
    }
    auto const end = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::nano>(end - start).count() /
                      static_cast<double>(rounds));
  }
  echo.join();
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  std::printf("{\"cpus\": [%d, %d], \"round_trip_ns\": %.1f, \"samples\": [", cpus[0], cpus[1],
              sorted[sorted.size() / 2]);
  for (std::size_t k = 0; k < samples.size(); ++k)
    std::printf("%s%.1f", k == 0 ? "" : ", ", samples[k]);
  std::printf("]}\n");
  return 0;
}
