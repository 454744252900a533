// Timer benchmarks (Google Benchmark): how late sleeps end, what arming and
// cancelling a timer costs, and what a million pending timers cost in CPU
// and memory.
//
//   sleep_latency/<ms>/<busy>: one task sleeps <ms> ms, repeatedly; counters
//     give the mean overshoot past the deadline (us) and the worst one. With
//     busy = 1, two other tasks keep both workers busy yielding meanwhile.
//   timeout_fast_path: timeout(1h, trivial task): spawn, arm, complete,
//     disarm; compare with spawn_await in bench_runtime.
//   pending_timers/<n>: n tasks each sleeping 1 h; counters give the time to
//     arm them all (ns per timer), the process CPU time used during 500 ms of
//     wall time with all of them pending, and the resident memory per
//     sleeping task (frame + timer entry, bytes).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "spindle/runtime.hpp"
#include "spindle/time.hpp"

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using spindle::join_handle;
using spindle::runtime;
using spindle::task;

task<void> keep_busy(std::atomic<bool>* stop) {
  while (!stop->load(std::memory_order_relaxed))
    co_await spindle::yield_now{};
}

task<clock_type::duration> overshoot(clock_type::duration d) {
  auto deadline = clock_type::now() + d;
  co_await spindle::sleep_until(deadline);
  co_return clock_type::now() - deadline;
}

void sleep_latency(benchmark::State& state) {
  runtime rt{{.workers = 2}};
  auto d = std::chrono::milliseconds(state.range(0));
  bool busy = state.range(1) != 0;
  std::atomic<bool> stop{false};
  std::vector<join_handle<void>> spinners;
  if (busy) {
    for (int i = 0; i < 2; ++i)
      spinners.push_back(rt.spawn(keep_busy(&stop)));
  }
  double total_us = 0, worst_us = 0;
  std::vector<double> samples;
  for (auto _ : state) {
    auto late = rt.block_on(overshoot(d));
    double us = std::chrono::duration<double, std::micro>(late).count();
    samples.push_back(us);
    total_us += us;
    worst_us = std::max(worst_us, us);
  }
  stop.store(true);
  for (auto& h : spinners)
    rt.block_on([](join_handle<void>& h) -> task<void> { co_await h; }(h));
  std::sort(samples.begin(), samples.end());
  state.counters["overshoot_mean_us"] = total_us / static_cast<double>(state.iterations());
  state.counters["overshoot_median_us"] = samples[samples.size() / 2];
  state.counters["overshoot_max_us"] = worst_us;
}
BENCHMARK(sleep_latency)
    ->Args({1, 0})
    ->Args({10, 0})
    ->Args({1, 1})
    ->Args({10, 1})
    ->Iterations(100)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

task<int> trivial() {
  co_return 1;
}

task<void> timeouts(int n) {
  for (int i = 0; i < n; ++i) {
    int v = co_await spindle::timeout(1h, trivial());
    benchmark::DoNotOptimize(v);
  }
}

void timeout_fast_path(benchmark::State& state) {
  runtime rt{{.workers = 1}};
  constexpr int n = 10'000;
  for (auto _ : state)
    rt.block_on(timeouts(n));
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(timeout_fast_path)->UseRealTime()->Unit(benchmark::kMillisecond);

long rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

task<void> sleep_long(std::atomic<long>* armed) {
  armed->fetch_add(1, std::memory_order_relaxed);
  co_await spindle::sleep_for(1h);
}

task<void> spawn_sleepers(long n, std::atomic<long>* armed, std::vector<join_handle<void>>* out) {
  for (long i = 0; i < n; ++i)
    out->push_back(spindle::spawn(sleep_long(armed)));
  co_return;
}

void pending_timers(benchmark::State& state) {
  long const n = state.range(0);
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<join_handle<void>> handles;
    handles.reserve(static_cast<std::size_t>(n));
    long rss_before = rss_bytes();
    std::atomic<long> armed{0};
    {
      runtime rt{{.workers = 2}};
      state.ResumeTiming();
      auto start = clock_type::now();
      rt.block_on(spawn_sleepers(n, &armed, &handles));
      while (armed.load() != n)
        std::this_thread::yield();
      auto arm_time = clock_type::now() - start;
      state.PauseTiming();
      // Let the last sleeps arm, then measure an idle stretch.
      std::this_thread::sleep_for(50ms);
      long rss_after = rss_bytes();
      double cpu_before = cpu_seconds();
      std::this_thread::sleep_for(500ms);
      double cpu_idle = cpu_seconds() - cpu_before;
      state.counters["arm_ns_per_timer"] =
          std::chrono::duration<double, std::nano>(arm_time).count() / static_cast<double>(n);
      state.counters["idle_cpu_ms_per_500ms"] = cpu_idle * 1e3;
      state.counters["rss_bytes_per_timer"] =
          static_cast<double>(rss_after - rss_before) / static_cast<double>(n);
      state.counters["timers_fired"] = static_cast<double>(rt.stats().timers_fired);
      handles.clear();  // detach; the runtime's shutdown destroys the sleepers
    }
    state.ResumeTiming();
  }
}
BENCHMARK(pending_timers)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
