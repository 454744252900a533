// Runtime micro-benchmarks (Google Benchmark): spawn, spawn+await, yield,
// fork-join fib, ping-pong through join handles. Workloads and parameters
// follow Tokio's benches/rt_multi_threaded.rs where one exists.
#include <benchmark/benchmark.h>

#include <atomic>
#include <vector>

#include "spindle/runtime.hpp"

namespace {

using spindle::join_handle;
using spindle::runtime;
using spindle::task;

std::size_t workers_arg(benchmark::State const& state) {
  return static_cast<std::size_t>(state.range(0));
}

// spawn_many_local: inside the runtime spawn 10,000 tasks that decrement an
// atomic; the last one to finish is awaited through all the handles.
task<void> bump(std::atomic<int>* counter) {
  counter->fetch_sub(1, std::memory_order_relaxed);
  co_return;
}

task<void> spawn_many(int n, std::atomic<int>* counter) {
  std::vector<join_handle<void>> handles;
  handles.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    handles.push_back(spindle::spawn(bump(counter)));
  for (auto& h : handles)
    co_await h;
}

void spawn_many_local(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  constexpr int n = 10'000;
  for (auto _ : state) {
    std::atomic<int> counter{n};
    rt.block_on(spawn_many(n, &counter));
    if (counter.load() != 0) state.SkipWithError("lost a task");
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(spawn_many_local)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

// spawn_many_remote_idle: 10,000 spawns from a non-worker thread, then join all.
task<void> join_all(std::vector<join_handle<void>>* handles) {
  for (auto& h : *handles)
    co_await h;
}

void spawn_many_remote_idle(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  constexpr int n = 10'000;
  for (auto _ : state) {
    std::atomic<int> counter{n};
    std::vector<join_handle<void>> handles;
    handles.reserve(n);
    for (int i = 0; i < n; ++i)
      handles.push_back(rt.spawn(bump(&counter)));
    rt.block_on(join_all(&handles));
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(spawn_many_remote_idle)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

// yield_many: 200 tasks x 1,000 yield_now.
task<void> yielder(int n) {
  for (int i = 0; i < n; ++i)
    co_await spindle::yield_now{};
}

task<void> yield_many_root() {
  std::vector<join_handle<void>> handles;
  for (int i = 0; i < 200; ++i)
    handles.push_back(spindle::spawn(yielder(1000)));
  for (auto& h : handles)
    co_await h;
}

void yield_many(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  for (auto _ : state)
    rt.block_on(yield_many_root());
  state.SetItemsProcessed(state.iterations() * 200 * 1000);
}
BENCHMARK(yield_many)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// chained_spawn: a chain of 1,000 sequential spawns.
task<void> chain(int left) {
  if (left == 0) co_return;
  co_await spindle::spawn(chain(left - 1));
}

void chained_spawn(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  for (auto _ : state)
    rt.block_on(chain(1000));
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(chained_spawn)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

// spawn_await: from a worker, 100,000 x (spawn a trivial task, await it).
task<int> trivial(int v) {
  co_return v;
}

task<long> spawn_await_loop(int n) {
  long sum = 0;
  for (int i = 0; i < n; ++i)
    sum += co_await spindle::spawn(trivial(i));
  co_return sum;
}

void spawn_await(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  constexpr int n = 100'000;
  for (auto _ : state)
    benchmark::DoNotOptimize(rt.block_on(spawn_await_loop(n)));
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(spawn_await)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// fib(n) fork-join: spawn one child, compute the other inline, join.
task<long> fib(int n) {
  if (n < 2) co_return n;
  auto child = spindle::spawn(fib(n - 1));
  long b = co_await fib(n - 2);
  long a = co_await child;
  co_return a + b;
}

void fib_fork_join(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  int n = static_cast<int>(state.range(1));
  for (auto _ : state)
    benchmark::DoNotOptimize(rt.block_on(fib(n)));
}
BENCHMARK(fib_fork_join)
    ->Args({1, 25})
    ->Args({2, 25})
    ->Args({2, 30})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
