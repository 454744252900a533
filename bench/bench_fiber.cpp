// Fiber micro-benchmarks (Google Benchmark): spindle's stackful fibers
// (spawn_fiber, default 64 KiB stacks) and, for each workload, the same
// workload with coroutine tasks (co_await where the fiber calls
// this_fiber::await). bench/compare.py's fiber section puts them beside
// Boost.Fiber (bench/peers/boost_fiber) and Go (bench/peers/go), which run
// the same shapes:
//
//   {fiber,task}_spawn_join  a root spawns 10,000 empty fibers (tasks), then
//                            joins each; items = fibers. Counter
//                            stacks_mapped_per_fiber: the share of stacks
//                            that had to be mapped (not in the pools)
//   {fiber,task}_yield       200 fibers (tasks) x 1,000 this_fiber::yield()
//                            (co_await yield_now); items = yields
//   {fiber,task}_ping_pong   the root (ping) and one fiber (task) it spawns
//                            (pong) exchange 10,000 round trips over two
//                            rendezvous channels (spindle::channel<int> of
//                            capacity 0, Go's unbuffered chan); items = round
//                            trips
//   {fiber,task}_park        100,000 fibers (tasks) parked in sleep_for(1 h):
//                            counters bytes_per_fiber (VmRSS growth over the
//                            spawns) and park_ms (time until the last one
//                            has run); exact only alone in a fresh process
//                            (--benchmark_filter=^fiber_park/), as
//                            bench/compare.py runs it. The runtime's
//                            destructor then cancels them (each fiber unwinds).
//
// The measuring thread only waits (as in bench_runtime.cpp): each workload's
// root is spawned onto the workers (runtime::spawn_fiber or runtime::spawn)
// and the thread sleeps on a done_signal until the root has finished.
//
// Worker counts: 1 and 2, or only N when SPINDLE_BENCH_WORKERS=N.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "spindle/channel.hpp"
#include "spindle/fiber.hpp"
#include "spindle/runtime.hpp"
#include "spindle/time.hpp"

namespace {

using spindle::join_handle;
using spindle::runtime;
using spindle::task;
namespace this_fiber = spindle::this_fiber;

constexpr int spawn_join_count = 10'000;
constexpr int yielders = 200;
constexpr int yields_each = 1'000;
constexpr int round_trips = 10'000;
constexpr int parked_count = 100'000;

std::size_t workers_arg(benchmark::State const& state) {
  return static_cast<std::size_t>(state.range(0));
}

/// A completion signal from the workers to the benchmark thread. One lives
/// across the iterations, reset() before each: the setter may still be
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

/// Runs `root` as a fiber on the workers; this thread only waits.
template <class F>
void fiber_and_wait(runtime& rt, F root, done_signal& done) {
  done.reset();
  static_cast<void>(rt.spawn_fiber([root, &done] {
    root();
    done.set();
  }));
  done.wait();
}

task<void> then_signal(task<void> root, done_signal* done) {
  co_await std::move(root);
  done->set();
}

/// Runs `root` as a task on the workers; this thread only waits.
void task_and_wait(runtime& rt, task<void> root, done_signal& done) {
  done.reset();
  static_cast<void>(rt.spawn(then_signal(std::move(root), &done)));
  done.wait();
}

// ---------------------------------------------------------------- spawn+join

void fiber_spawn_join_root() {
  std::vector<join_handle<void>> handles;
  handles.reserve(spawn_join_count);
  for (int i = 0; i < spawn_join_count; ++i)
    handles.push_back(spindle::spawn_fiber([] {}));
  for (auto& h : handles)
    this_fiber::await(h);
}

void fiber_spawn_join(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  done_signal done;
  std::uint64_t const mapped_before = spindle::detail::fiber_stacks_mapped();
  for (auto _ : state)
    fiber_and_wait(rt, fiber_spawn_join_root, done);
  state.SetItemsProcessed(state.iterations() * spawn_join_count);
  // Stacks that were not in the pools (mmap + guard page + first-touch
  // faults, and later munmap): all 10,000 fibers of a batch may be alive at
  // once, more than the pools keep.
  state.counters["stacks_mapped_per_fiber"] =
      static_cast<double>(spindle::detail::fiber_stacks_mapped() - mapped_before) /
      static_cast<double>(state.iterations() * spawn_join_count);
}

task<void> nothing() {
  co_return;
}

task<void> task_spawn_join_root() {
  std::vector<join_handle<void>> handles;
  handles.reserve(spawn_join_count);
  for (int i = 0; i < spawn_join_count; ++i)
    handles.push_back(spindle::spawn(nothing()));
  for (auto& h : handles)
    co_await h;
}

void task_spawn_join(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  done_signal done;
  for (auto _ : state)
    task_and_wait(rt, task_spawn_join_root(), done);
  state.SetItemsProcessed(state.iterations() * spawn_join_count);
}

// --------------------------------------------------------------------- yield

void fiber_yield_root() {
  std::vector<join_handle<void>> handles;
  handles.reserve(yielders);
  for (int i = 0; i < yielders; ++i) {
    handles.push_back(spindle::spawn_fiber([] {
      for (int j = 0; j < yields_each; ++j)
        this_fiber::yield();
    }));
  }
  for (auto& h : handles)
    this_fiber::await(h);
}

void fiber_yield(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  done_signal done;
  for (auto _ : state)
    fiber_and_wait(rt, fiber_yield_root, done);
  state.SetItemsProcessed(state.iterations() * yielders * yields_each);
}

task<void> yielder() {
  for (int j = 0; j < yields_each; ++j)
    co_await spindle::yield_now{};
}

task<void> task_yield_root() {
  std::vector<join_handle<void>> handles;
  handles.reserve(yielders);
  for (int i = 0; i < yielders; ++i)
    handles.push_back(spindle::spawn(yielder()));
  for (auto& h : handles)
    co_await h;
}

void task_yield(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  done_signal done;
  for (auto _ : state)
    task_and_wait(rt, task_yield_root(), done);
  state.SetItemsProcessed(state.iterations() * yielders * yields_each);
}

// ----------------------------------------------------------------- ping-pong

void fiber_ping_pong_root() {
  spindle::channel<int> there{0};
  spindle::channel<int> back{0};
  auto pong = spindle::spawn_fiber([&] {
    for (int i = 0; i < round_trips; ++i) {
      std::optional<int> v = this_fiber::await(there.recv());
      this_fiber::await(back.send(*v + 1));
    }
  });
  for (int i = 0; i < round_trips; ++i) {
    this_fiber::await(there.send(i));
    std::optional<int> v = this_fiber::await(back.recv());
    if (!v || *v != i + 1) std::abort();
  }
  this_fiber::await(pong);
}

void fiber_ping_pong(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  done_signal done;
  for (auto _ : state)
    fiber_and_wait(rt, fiber_ping_pong_root, done);
  state.SetItemsProcessed(state.iterations() * round_trips);
}

task<void> task_pong(spindle::channel<int>* there, spindle::channel<int>* back) {
  for (int i = 0; i < round_trips; ++i) {
    std::optional<int> v = co_await there->recv();
    co_await back->send(*v + 1);
  }
}

task<void> task_ping_pong_root() {
  spindle::channel<int> there{0};
  spindle::channel<int> back{0};
  auto pong = spindle::spawn(task_pong(&there, &back));
  for (int i = 0; i < round_trips; ++i) {
    co_await there.send(i);
    std::optional<int> v = co_await back.recv();
    if (!v || *v != i + 1) std::abort();
  }
  co_await pong;
}

void task_ping_pong(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  done_signal done;
  for (auto _ : state)
    task_and_wait(rt, task_ping_pong_root(), done);
  state.SetItemsProcessed(state.iterations() * round_trips);
}

// ---------------------------------------------------------------------- park

double status_bytes(char const* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  double kib = 0;
  std::size_t len = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, len) == 0) {
      kib = std::strtod(line + len, nullptr);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

constexpr auto long_sleep = std::chrono::hours(1);

/// Counts a parked fiber (task) in; the last one signals.
void arrived(std::atomic<int>* parked, done_signal* done) {
  if (parked->fetch_add(1, std::memory_order_relaxed) + 1 == parked_count) done->set();
}

task<void> parked_task(std::atomic<int>* parked, done_signal* done) {
  arrived(parked, done);
  co_await spindle::sleep_for(long_sleep);
}

task<void> spawn_parked_tasks(std::atomic<int>* parked, done_signal* done) {
  for (int i = 0; i < parked_count; ++i)
    static_cast<void>(spindle::spawn(parked_task(parked, done)));
  co_return;
}

/// Spawns 100,000 parked fibers (tasks) and reports the RSS growth per
/// fiber and the time until the last one has run. One iteration.
void park(benchmark::State& state, bool fibers) {
  double bytes = 0;
  double ms = 0;
  for (auto _ : state) {
    // Declared before the runtime: its destructor cancels the parked fibers.
    std::atomic<int> parked{0};
    done_signal done;
    runtime rt{{.workers = workers_arg(state)}};
    double before = status_bytes("VmRSS:");
    auto start = std::chrono::steady_clock::now();
    if (fibers) {
      static_cast<void>(rt.spawn_fiber([&parked, &done] {
        for (int i = 0; i < parked_count; ++i) {
          static_cast<void>(spindle::spawn_fiber([&parked, &done] {
            arrived(&parked, &done);
            this_fiber::sleep_for(long_sleep);
          }));
        }
      }));
    } else {
      static_cast<void>(rt.spawn(spawn_parked_tasks(&parked, &done)));
    }
    done.wait();
    ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    bytes = (status_bytes("VmRSS:") - before) / parked_count;
  }
  state.counters["bytes_per_fiber"] = bytes;
  state.counters["park_ms"] = ms;
}

void fiber_park(benchmark::State& state) {
  park(state, true);
}
void task_park(benchmark::State& state) {
  park(state, false);
}

std::vector<int> worker_counts() {
  char const* env = std::getenv("SPINDLE_BENCH_WORKERS");
  if (env != nullptr && std::atoi(env) > 0) return {std::atoi(env)};
  return {1, 2};
}

void register_all() {
  using fn = void (*)(benchmark::State&);
  struct entry {
    char const* name;
    fn run;
    benchmark::TimeUnit unit;
  };
  entry const entries[] = {
      {"fiber_spawn_join", fiber_spawn_join, benchmark::kMicrosecond},
      {"task_spawn_join", task_spawn_join, benchmark::kMicrosecond},
      {"fiber_yield", fiber_yield, benchmark::kMillisecond},
      {"task_yield", task_yield, benchmark::kMillisecond},
      {"fiber_ping_pong", fiber_ping_pong, benchmark::kMillisecond},
      {"task_ping_pong", task_ping_pong, benchmark::kMillisecond},
  };
  std::vector<int> workers = worker_counts();
  for (entry const& e : entries) {
    auto* b = benchmark::RegisterBenchmark(e.name, e.run);
    for (int w : workers)
      b->Arg(w);
    b->UseRealTime()->Unit(e.unit);
  }
  for (auto [name, run] : {std::pair<char const*, fn>{"fiber_park", fiber_park},
                           std::pair<char const*, fn>{"task_park", task_park}}) {
    auto* b = benchmark::RegisterBenchmark(name, run);
    for (int w : workers)
      b->Arg(w);
    b->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
