// Runtime micro-benchmarks (Google Benchmark): spawn (local, remote, remote
// while the workers are busy), yield, ping-pong through one-shot channels,
// chained spawn, spawn+await, fork-join fib and the memory of 1,000,000
// suspended tasks. Workloads and parameters follow Tokio's
// benches/rt_multi_threaded.rs (10,000 spawns, 200 tasks x 1,000 yields,
// 1,000 ping-pong rounds, a chain of 1,000 spawns, busy tasks that yield and
// stall 10 µs); bench/peers/tokio runs the same ones on Tokio for
// bench/compare.py.
//
// chained_spawn_phases runs chained_spawn with its first and last link
// timestamped and reports where an iteration's time goes (spindle only).
//
// The *_batch variants of spawn_many_* spawn the same 10,000 tasks with one
// spawn_batch call (seed 000): one queue operation and one wake instead of
// 10,000. The runtime reads SPINDLE_PLACEMENT=global|p2c (runtime_config::
// placement), which bench/compare.py sets to report both placements.
//
// Worker counts: 1 and 2, or only N when SPINDLE_BENCH_WORKERS=N.
//
// This binary replaces the global operator new/delete with counting versions
// (malloc/free underneath): spawn_await reports `allocs_per_pair`, the heap
// allocations per spawn+await pair in steady state (after a warm-up of 1,000
// pairs), which the frame pools should keep at 0.
//
// memory_per_task measures the process RSS growth: it is exact only when it
// runs alone in a fresh process (--benchmark_filter=memory_per_task), as
// bench/compare.py runs it.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "spindle/detail/frame_pool.hpp"
#include "spindle/fold.hpp"
#include "spindle/runtime.hpp"

#if __has_include("spindle/oneshot.hpp")
#include "spindle/oneshot.hpp"
#define SPINDLE_BENCH_HAVE_ONESHOT 1
#else
#define SPINDLE_BENCH_HAVE_ONESHOT 0
#endif

// ---------------------------------------------------------------------------
// Counting allocator hook: every global operator new counts one allocation.

namespace {
std::atomic<std::uint64_t> heap_allocations{0};

void* counted_alloc(std::size_t bytes) {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (bytes == 0) bytes = 1;
  if (void* p = std::malloc(bytes)) return p;
  throw std::bad_alloc();
}

void* counted_alloc_aligned(std::size_t bytes, std::align_val_t align) {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  std::size_t a = static_cast<std::size_t>(align);
  if (a < sizeof(void*)) a = sizeof(void*);
  std::size_t rounded = (bytes + a - 1) / a * a;
  if (void* p = std::aligned_alloc(a, rounded == 0 ? a : rounded)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t bytes) {
  return counted_alloc(bytes);
}
void* operator new[](std::size_t bytes) {
  return counted_alloc(bytes);
}
void* operator new(std::size_t bytes, std::nothrow_t const&) noexcept {
  try {
    return counted_alloc(bytes);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t bytes, std::nothrow_t const&) noexcept {
  try {
    return counted_alloc(bytes);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t bytes, std::align_val_t align) {
  return counted_alloc_aligned(bytes, align);
}
void* operator new[](std::size_t bytes, std::align_val_t align) {
  return counted_alloc_aligned(bytes, align);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace {

using spindle::join_handle;
using spindle::runtime;
using spindle::task;

constexpr int num_spawn = 10'000;

std::size_t workers_arg(benchmark::State const& state) {
  return static_cast<std::size_t>(state.range(0));
}

// A completion signal from a task to the benchmark thread (Tokio's
// benchmarks use a std::sync::mpsc channel for this). One lives across the
// iterations, reset() before each: the setter may still be inside
// notify_one() when the waiter returns.
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

// The measuring thread only waits: every workload's root is spawned onto the
// workers and the thread sleeps on a done_signal (or a root that signals),
// never inside block_on, where it would run queued tasks itself while every
// worker is busy, a third thread that Tokio's block_on does not give (its
// block_on thread polls the block_on future alone). The peers do the same.

/// Runs `root` on the workers and waits for it from this thread, without
/// helping: the root sets `done` when it has finished.
task<void> then_signal(task<void> root, done_signal* done) {
  co_await std::move(root);
  done->set();
}

void run_and_wait(runtime& rt, task<void> root, done_signal& done) {
  done.reset();
  static_cast<void>(rt.spawn(then_signal(std::move(root), &done)));
  done.wait();
}

// spawn_many_local: inside the runtime spawn 10,000 tasks that decrement an
// atomic; the last one signals completion.
task<void> count_down(std::atomic<int>* remaining, done_signal* done) {
  if (remaining->fetch_sub(1, std::memory_order_relaxed) == 1) done->set();
  co_return;
}

// The spawning worker's frame pool misses (allocations that went to
// malloc), summed over the iterations: spawn_many_local's counters.
std::atomic<std::uint64_t> spawner_pool_misses{0};

task<void> spawn_detached(int n, std::atomic<int>* remaining, done_signal* done) {
  std::uint64_t const misses = spindle::detail::frame_pool_thread_counters().pool_misses;
  for (int i = 0; i < n; ++i)
    static_cast<void>(spindle::spawn(count_down(remaining, done)));
  spawner_pool_misses.fetch_add(spindle::detail::frame_pool_thread_counters().pool_misses - misses,
                                std::memory_order_relaxed);
  co_return;
}

void spawn_many_local(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  done_signal done;
  spawner_pool_misses.store(0);
  spindle::runtime_stats const before = rt.stats();
  for (auto _ : state) {
    std::atomic<int> remaining{num_spawn};
    done.reset();
    // A spawned root (on a worker) spawns: local spawns, as Tokio's peer's.
    static_cast<void>(rt.spawn(spawn_detached(num_spawn, &remaining, &done)));
    done.wait();
  }
  state.SetItemsProcessed(state.iterations() * num_spawn);
  // What tells the two modes apart (README, "spawn_many_local"): the share of
  // the tasks other workers ran and stole, the spawner's ring overflows, the
  // parks, and the spawner's pool misses.
  spindle::runtime_stats const after = rt.stats();
  auto const tasks = static_cast<double>(state.iterations()) * num_spawn;
  auto const iterations = static_cast<double>(state.iterations());
  state.counters["stolen_share"] =
      static_cast<double>(after.total_stolen - before.total_stolen) / tasks;
  // Polls on the workers other than the busiest one (the spawner, mostly),
  // whichever way they got their tasks (steals, or the global queue after
  // the spawner's ring overflowed).
  std::uint64_t polls = 0;
  std::uint64_t busiest = 0;
  std::uint64_t overflows = 0;
  for (std::size_t i = 0; i < after.workers.size(); ++i) {
    std::uint64_t const p = after.workers[i].polled - before.workers[i].polled;
    polls += p;
    busiest = std::max(busiest, p);
    overflows += after.workers[i].overflows - before.workers[i].overflows;
  }
  state.counters["others_share"] =
      polls == 0 ? 0.0 : static_cast<double>(polls - busiest) / static_cast<double>(polls);
  state.counters["overflows_per_iter"] = static_cast<double>(overflows) / iterations;
  state.counters["global_fetches_per_iter"] =
      static_cast<double>(after.global_batch_fetches - before.global_batch_fetches) / iterations;
  state.counters["parks_per_iter"] =
      static_cast<double>(after.total_parked - before.total_parked) / iterations;
  state.counters["spawner_misses_per_iter"] =
      static_cast<double>(spawner_pool_misses.load()) / iterations;
}

// spawn_many_local_batch: the same 10,000 tasks with one spindle::spawn_batch.
task<void> spawn_detached_batch(int n, std::atomic<int>* remaining, done_signal* done) {
  std::vector<task<void>> tasks;
  tasks.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    tasks.push_back(count_down(remaining, done));
  static_cast<void>(spindle::spawn_batch(tasks));
  co_return;
}

void spawn_many_local_batch(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  done_signal done;
  for (auto _ : state) {
    std::atomic<int> remaining{num_spawn};
    done.reset();
    static_cast<void>(rt.spawn(spawn_detached_batch(num_spawn, &remaining, &done)));
    done.wait();
  }
  state.SetItemsProcessed(state.iterations() * num_spawn);
}

// spawn_many_remote_idle: 10,000 spawns from a non-worker thread, then join
// all. spawn_many_remote_busy: the same while 2 x workers tasks loop over
// yield_now + a 10 µs stall.
task<void> nothing() {
  co_return;
}

task<void> join_all(std::vector<join_handle<void>>* handles) {
  for (auto& h : *handles)
    co_await h;
}

// `batch`: the 10,000 with one runtime::spawn_batch.
void spawn_many_remote(benchmark::State& state, runtime& rt, bool batch = false) {
  std::vector<join_handle<void>> handles;
  handles.reserve(num_spawn);
  std::vector<task<void>> tasks;
  tasks.reserve(num_spawn);
  done_signal done;
  for (auto _ : state) {
    if (batch) {
      for (int i = 0; i < num_spawn; ++i)
        tasks.push_back(nothing());
      handles = rt.spawn_batch(tasks);
      tasks.clear();
    } else {
      for (int i = 0; i < num_spawn; ++i)
        handles.push_back(rt.spawn(nothing()));
    }
    // The joins run in a task on the workers; this thread only waits.
    run_and_wait(rt, join_all(&handles), done);
    handles.clear();
  }
  state.SetItemsProcessed(state.iterations() * num_spawn);
}

void spawn_many_remote_idle(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  spawn_many_remote(state, rt);
}

void spawn_many_remote_idle_batch(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  spawn_many_remote(state, rt, true);
}

void stall() {
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::microseconds(10))
    std::this_thread::yield();
}

// Stalls the busy tasks made (one per poll after the first): the share of
// spawn_many_remote_busy's time that no placement can save.
std::atomic<std::uint64_t> busy_stalls{0};

task<void> busy(std::atomic<bool>* keep_going) {
  while (keep_going->load(std::memory_order_relaxed)) {
    co_await spindle::yield_now{};
    stall();
    busy_stalls.fetch_add(1, std::memory_order_relaxed);
  }
}

void spawn_many_remote_busy_with(benchmark::State& state, bool batch) {
  runtime rt{{.workers = workers_arg(state)}};
  std::atomic<bool> keep_going{true};
  std::vector<join_handle<void>> busy_tasks;
  for (std::size_t i = 0; i < 2 * workers_arg(state); ++i)
    busy_tasks.push_back(rt.spawn(busy(&keep_going)));
  spindle::runtime_stats const before = rt.stats();
  std::uint64_t const stalls_before = busy_stalls.load();
  spawn_many_remote(state, rt, batch);
  // Where the time goes (README, "spawn_many_remote_busy"): the busy tasks'
  // stalls per iteration (each 10 us of one worker), the batches taken from
  // the global queue, the tasks stolen.
  spindle::runtime_stats const after = rt.stats();
  auto const iterations = static_cast<double>(state.iterations());
  state.counters["stalls_per_iter"] =
      static_cast<double>(busy_stalls.load() - stalls_before) / iterations;
  state.counters["global_fetches_per_iter"] =
      static_cast<double>(after.global_batch_fetches - before.global_batch_fetches) / iterations;
  state.counters["stolen_per_iter"] =
      static_cast<double>(after.total_stolen - before.total_stolen) / iterations;
  state.counters["parks_per_iter"] =
      static_cast<double>(after.total_parked - before.total_parked) / iterations;
  keep_going.store(false, std::memory_order_relaxed);
  rt.block_on(join_all(&busy_tasks));
}

void spawn_many_remote_busy(benchmark::State& state) {
  spawn_many_remote_busy_with(state, false);
}

void spawn_many_remote_busy_batch(benchmark::State& state) {
  spawn_many_remote_busy_with(state, true);
}

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
  done_signal done;
  for (auto _ : state)
    run_and_wait(rt, yield_many_root(), done);
  state.SetItemsProcessed(state.iterations() * 200 * 1000);
}

// ping_pong: 1,000 rounds; each spawns a task that spawns a peer, and the two
// exchange two one-shot messages; the last round signals completion.
#if SPINDLE_BENCH_HAVE_ONESHOT
template <class Receiver, class Sender>
task<void> pong(Receiver rx, Sender tx) {
  int v = co_await rx;
  static_cast<void>(tx.send(v + 1));
}

task<void> ping(std::atomic<int>* remaining, done_signal* done) {
  auto [tx1, rx1] = spindle::make_oneshot<int>();
  auto [tx2, rx2] = spindle::make_oneshot<int>();
  static_cast<void>(spindle::spawn(pong(std::move(rx1), std::move(tx2))));
  static_cast<void>(tx1.send(1));
  int v = co_await rx2;
  benchmark::DoNotOptimize(v);
  if (remaining->fetch_sub(1, std::memory_order_relaxed) == 1) done->set();
}

task<void> ping_pong_root(int rounds, std::atomic<int>* remaining, done_signal* done) {
  for (int i = 0; i < rounds; ++i)
    static_cast<void>(spindle::spawn(ping(remaining, done)));
  co_return;
}

void ping_pong(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  constexpr int rounds = 1000;
  done_signal done;
  for (auto _ : state) {
    std::atomic<int> remaining{rounds};
    done.reset();
    static_cast<void>(rt.spawn(ping_pong_root(rounds, &remaining, &done)));
    done.wait();
  }
  state.SetItemsProcessed(state.iterations() * rounds);
}
#else
void ping_pong(benchmark::State& state) {
  state.SkipWithError("no spindle/oneshot.hpp in this build");
  for (auto _ : state) {
  }
}
#endif

// chained_spawn: a chain of 1,000 sequential spawns (each task spawns the
// next and finishes); the last one signals completion.
task<void> chain_link(int left, done_signal* done) {
  if (left == 0) {
    done->set();
  } else {
    static_cast<void>(spindle::spawn(chain_link(left - 1, done)));
  }
  co_return;
}

void chained_spawn(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  done_signal done;
  for (auto _ : state) {
    done.reset();
    static_cast<void>(rt.spawn(chain_link(1000, &done)));
    done.wait();
  }
  state.SetItemsProcessed(state.iterations() * 1000);
}

// chained_spawn_phases: chained_spawn with the first and the last link
// timestamped, to split an iteration into its phases (not a compared row:
// the two clock reads are the peers' extra). Counters, means in us per
// iteration: `to_first_link_us` (from the spawn to the first link's start:
// the wake-up of a worker), `chain_us` (first link to last), `to_waiter_us`
// (from the last link's signal until the measuring thread returned from
// its wait), and `slow_wakes` (the share of to_waiter above 8 us: the
// measuring thread woken on an idle CPU).
struct chain_marks {
  std::chrono::steady_clock::time_point first;
  std::chrono::steady_clock::time_point last;
};

task<void> marked_link(int left, done_signal* done, chain_marks* marks, bool first) {
  if (first) marks->first = std::chrono::steady_clock::now();
  if (left == 0) {
    marks->last = std::chrono::steady_clock::now();
    done->set();
  } else {
    static_cast<void>(spindle::spawn(marked_link(left - 1, done, marks, false)));
  }
  co_return;
}

void chained_spawn_phases(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  done_signal done;
  chain_marks marks;
  double to_first = 0;
  double chain = 0;
  double to_waiter = 0;
  double slow = 0;
  auto us = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
  for (auto _ : state) {
    done.reset();
    auto const start = std::chrono::steady_clock::now();
    static_cast<void>(rt.spawn(marked_link(1000, &done, &marks, true)));
    done.wait();
    auto const end = std::chrono::steady_clock::now();
    to_first += us(marks.first - start);
    chain += us(marks.last - marks.first);
    double const back = us(end - marks.last);
    to_waiter += back;
    if (back > 8.0) slow += 1;
  }
  auto const n = static_cast<double>(state.iterations());
  state.counters["to_first_link_us"] = to_first / n;
  state.counters["chain_us"] = chain / n;
  state.counters["to_waiter_us"] = to_waiter / n;
  state.counters["slow_wakes"] = slow / n;
  state.SetItemsProcessed(state.iterations() * 1000);
}

// spawn_await: from a worker, 100,000 x (spawn a trivial task, await it).
// `allocs_per_pair` counts heap allocations per pair after 1,000 pairs.
constexpr int spawn_await_pairs = 100'000;
constexpr int spawn_await_warmup = 1'000;

task<int> trivial(int v) {
  co_return v;
}

task<long> spawn_await_loop(int n, std::uint64_t* steady_allocations) {
  long sum = 0;
  std::uint64_t before = 0;
  for (int i = 0; i < n; ++i) {
    if (i == spawn_await_warmup) before = heap_allocations.load(std::memory_order_relaxed);
    sum += co_await spindle::spawn(trivial(i));
  }
  *steady_allocations = heap_allocations.load(std::memory_order_relaxed) - before;
  co_return sum;
}

task<void> spawn_await_root(std::uint64_t* steady_allocations, long* sum) {
  *sum = co_await spawn_await_loop(spawn_await_pairs, steady_allocations);
}

void spawn_await(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  std::uint64_t steady_allocations = 0;
  done_signal done;
  long sum = 0;
  for (auto _ : state) {
    run_and_wait(rt, spawn_await_root(&steady_allocations, &sum), done);
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * spawn_await_pairs);
  // The allocations of the last iteration (allocations on other threads in
  // the same window would count too: the runtime is otherwise idle).
  state.counters["allocs_per_pair"] = static_cast<double>(steady_allocations) /
                                      static_cast<double>(spawn_await_pairs - spawn_await_warmup);
}

// fib(n) fork-join: spawn one child, compute the other inline, join.
task<long> fib(int n) {
  if (n < 2) co_return n;
  auto child = spindle::spawn(fib(n - 1));
  long b = co_await fib(n - 2);
  long a = co_await child;
  co_return a + b;
}

task<void> fib_root(int n, long* out) {
  *out = co_await fib(n);
}

void fib_fork_join(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  int n = static_cast<int>(state.range(1));
  done_signal done;
  long result = 0;
  for (auto _ : state) {
    // The root on a worker, this thread waiting (Tokio's peer: spawn, then
    // block_on the join handle), so that 2 threads compute, not 3.
    run_and_wait(rt, fib_root(n, &result), done);
    benchmark::DoNotOptimize(result);
  }
}

// fib_fold: the same fib as a spindle::fold over its call tree (node n has
// children n-1 and n-2; a leaf's value is n; a node sums its children):
// spindle's fork-join path without a coroutine frame per node, on the same
// workers (fold.hpp).
struct fib_graph {
  template <class Emit>
  void children(int n, Emit&& emit) const {
    if (n < 2) return;
    emit(n - 1);
    emit(n - 2);
  }
};
struct fib_sum {
  long init(int n) const { return n < 2 ? n : 0; }
  void accumulate(long& heap, long&& child) const { heap += child; }
  long finalize(long&& heap) const { return heap; }
};

long serial_fib(int n) {
  return n < 2 ? n : serial_fib(n - 1) + serial_fib(n - 2);
}

task<void> fib_fold_root(int n, long* out) {
  *out = co_await spindle::fold(fib_graph{}, fib_sum{}, n);
}

void fib_fold(benchmark::State& state) {
  runtime rt{{.workers = workers_arg(state)}};
  int const n = static_cast<int>(state.range(1));
  long const expected = serial_fib(n);
  done_signal done;
  long result = 0;
  for (auto _ : state) {
    run_and_wait(rt, fib_fold_root(n, &result), done);
    if (result != expected) state.SkipWithError("wrong fib");
  }
}

// memory_per_task: RSS growth per task with 1,000,000 spawned tasks that are
// suspended with nothing to wake them (the runtime's destructor destroys
// their frames).
struct suspend_until_shutdown {
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) const noexcept {
    return spindle::detail::suspend_current(h) != nullptr;
  }
  void await_resume() const noexcept {}
};

task<void> parked(std::atomic<int>* started) {
  started->fetch_add(1, std::memory_order_relaxed);
  co_await suspend_until_shutdown{};
}

task<void> spawn_parked(int n, std::atomic<int>* started) {
  for (int i = 0; i < n; ++i)
    static_cast<void>(spindle::spawn(parked(started)));
  co_return;
}

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

void memory_per_task(benchmark::State& state) {
  constexpr int n = 1'000'000;
  double per_task = 0;
  for (auto _ : state) {
    runtime rt{{.workers = workers_arg(state)}};
    double before = status_bytes("VmRSS:");
    std::atomic<int> started{0};
    rt.block_on(spawn_parked(n, &started));
    while (started.load(std::memory_order_relaxed) < n)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // Peak growth, as the Tokio peer measures it (VmHWM).
    per_task = (status_bytes("VmHWM:") - before) / n;
  }
  state.counters["bytes_per_task"] = per_task;
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
      {"spawn_many_local", spawn_many_local, benchmark::kMicrosecond},
      {"spawn_many_remote_idle", spawn_many_remote_idle, benchmark::kMicrosecond},
      {"spawn_many_remote_busy", spawn_many_remote_busy, benchmark::kMicrosecond},
      {"spawn_many_local_batch", spawn_many_local_batch, benchmark::kMicrosecond},
      {"spawn_many_remote_idle_batch", spawn_many_remote_idle_batch, benchmark::kMicrosecond},
      {"spawn_many_remote_busy_batch", spawn_many_remote_busy_batch, benchmark::kMicrosecond},
      {"yield_many", yield_many, benchmark::kMillisecond},
      {"ping_pong", ping_pong, benchmark::kMicrosecond},
      {"chained_spawn", chained_spawn, benchmark::kMicrosecond},
      {"chained_spawn_phases", chained_spawn_phases, benchmark::kMicrosecond},
      {"spawn_await", spawn_await, benchmark::kMillisecond},
  };
  std::vector<int> workers = worker_counts();
  for (entry const& e : entries) {
    auto* b = benchmark::RegisterBenchmark(e.name, e.run);
    for (int w : workers)
      b->Arg(w);
    b->UseRealTime()->Unit(e.unit);
  }
  auto* fib_bench = benchmark::RegisterBenchmark("fib_fork_join", fib_fork_join);
  for (int w : workers)
    fib_bench->Args({w, 30})->Args({w, 35});
  fib_bench->UseRealTime()->Unit(benchmark::kMillisecond);
  auto* fold_bench = benchmark::RegisterBenchmark("fib_fold", fib_fold);
  for (int w : workers)
    fold_bench->Args({w, 30})->Args({w, 35});
  fold_bench->UseRealTime()->Unit(benchmark::kMillisecond);
  auto* memory = benchmark::RegisterBenchmark("memory_per_task", memory_per_task);
  for (int w : workers)
    memory->Arg(w);
  memory->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
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
