// Tests of spindle::runtime as a whole: configuration, stats, shutdown with
// work pending, spawn refusal after shutdown began, join handles outliving
// the runtime, idle CPU use, thread pinning.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/event.hpp"
#include "spindle/io/file.hpp"
#include "spindle/runtime.hpp"
#include "spindle/stats.hpp"
#include "spindle/task.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::task;
using spindle_test::counts;
using spindle_test::suspend_forever;
using spindle_test::test_event;
using spindle_test::tracked;
using spindle_test::value_of;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

/// Busy work of roughly `iterations` steps (not optimized away).
long spin_work(long iterations) {
  long volatile x = 0;
  for (long i = 0; i < iterations; ++i)
    x = x + i;
  return x;
}

// ---------------------------------------------------------------------------
// Configuration

TEST(Runtime, WorkerCount) {
  for (std::size_t n : {1u, 2u, 5u}) {
    spindle::runtime rt{{.workers = n}};
    EXPECT_EQ(rt.worker_count(), n);
    EXPECT_EQ(rt.stats().workers.size(), n);
  }
}

TEST(Runtime, DefaultWorkersIsHardwareConcurrency) {
  spindle::runtime rt;
  unsigned hc = std::thread::hardware_concurrency();
  EXPECT_EQ(rt.worker_count(), hc == 0 ? 1u : hc);
  EXPECT_EQ(rt.block_on(value_of(1)), 1);
}

TEST(Runtime, IoBackendInUseIsNeverAutomatic) {
  spindle::runtime rt{{.workers = 1}};
  EXPECT_NE(rt.io_backend_in_use(), spindle::io_backend::automatic);
}

task<long> tree(int depth) {
  if (depth == 0) co_return 1;
  auto left = spindle::spawn(tree(depth - 1));
  long right = co_await tree(depth - 1);
  co_return right + co_await left;
}

task<long> fan_out(int n, long work) {
  std::vector<join_handle<long>> hs;
  hs.reserve(static_cast<std::size_t>(n));
  auto leaf = [](long work) -> task<long> { co_return spin_work(work) >= 0 ? 1 : 0; };
  for (int i = 0; i < n; ++i)
    hs.push_back(spindle::spawn(leaf(work)));
  long sum = 0;
  for (auto& h : hs)
    sum += co_await h;
  co_return sum;
}

TEST(Runtime, SeedIsAccepted) {
  for (std::uint64_t seed :
       {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{12345}, ~std::uint64_t{0}}) {
    spindle::runtime rt{{.workers = 3, .seed = seed}};
    EXPECT_EQ(rt.config().seed, seed);
    EXPECT_EQ(rt.block_on(tree(10)), 1024) << "seed " << seed;
  }
  // What the seed decides (the victims' order) is checked on the scheduler's
  // core in test_core.cpp: the same seed, the same steals.
}

// The budget: polls in one tick before the worker reaps I/O. One worker: a
// task reads a file through the ring (cached reads off) while another task
// yields in a loop. The read's completion is reaped at the end of a tick,
// so the yielder polls at most about `budget` times (twice that if the read
// completes only after the submitting tick's end) between the read's
// submission and its task's next poll. An ignored budget (always 128) makes
// the small budgets' counts go far past their bounds.
task<void> yield_until(std::atomic<bool>* stop, std::atomic<long>* polls) {
  while (!stop->load(std::memory_order_relaxed)) {
    polls->fetch_add(1, std::memory_order_relaxed);
    co_await spindle::yield_now{};
  }
}

task<long> reads_between_yields(std::string path, std::atomic<bool>* stop,
                                std::atomic<long>* polls) {
  spindle::io::file f = co_await spindle::io::file::open(path);
  std::array<std::byte, 512> buf{};
  long worst = 0;
  for (int i = 0; i < 200; ++i) {
    long const before = polls->load(std::memory_order_relaxed);
    (void)co_await f.read_at(buf, 0);
    worst = std::max(worst, polls->load(std::memory_order_relaxed) - before);
  }
  stop->store(true);
  co_await f.close();
  co_return worst;
}

TEST(Runtime, BudgetIsAccepted) {
  for (std::uint32_t budget : {0u, 1u, 7u, 128u, 100000u}) {
    spindle::runtime rt{{.workers = 2, .budget = budget}};
    EXPECT_EQ(rt.config().budget, std::max(budget, 1u));
    EXPECT_EQ(rt.block_on(tree(8)), 256) << "budget " << budget;
  }
  char path[] = "/tmp/spindle-budget-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "0123456789", 10), 10);
  ::close(fd);
  long worst_small = 0;
  long worst_large = 0;
  for (std::uint32_t budget : {4u, 256u}) {
    spindle::runtime_config cfg{.workers = 1, .budget = budget, .io = spindle::io_backend::uring};
    cfg.try_cached_reads = false;
    std::optional<spindle::runtime> rt;
    try {
      rt.emplace(cfg);
    } catch (std::system_error const&) {
      ::unlink(path);
      GTEST_SKIP() << "io_uring unavailable here";
    }
    std::atomic<bool> stop{false};
    std::atomic<long> polls{0};
    auto yielder = rt->spawn(yield_until(&stop, &polls));
    long const worst = rt->block_on(reads_between_yields(path, &stop, &polls));
    spindle_test::wait_and_take(yielder);
    (budget == 4 ? worst_small : worst_large) = worst;
  }
  ::unlink(path);
  std::printf("yields between a read's submission and its wake: %ld with budget 4, %ld with 256\n",
              worst_small, worst_large);
  EXPECT_LE(worst_small, 2 * 4 + 2) << "the tick ran past a budget of 4";
  EXPECT_GT(worst_large, 2 * 4 + 2) << "a budget of 256 made no longer ticks than 4";
}

struct affinity_seen {
  std::size_t worker;
  int count;
  int cpu;
};

task<std::optional<affinity_seen>> probe_affinity() {
  std::size_t index = spindle::detail::current_worker_index();
  if (index == spindle::detail::not_a_worker) co_return std::nullopt;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) co_return std::nullopt;
  int cpu = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) {
      cpu = c;
      break;
    }
  }
  co_return affinity_seen{index, CPU_COUNT(&set), cpu};
}

task<std::vector<affinity_seen>> probe_many(int n) {
  std::vector<join_handle<std::optional<affinity_seen>>> hs;
  for (int i = 0; i < n; ++i) {
    hs.push_back(spindle::spawn(probe_affinity()));
    if (i % 10 == 0) co_await spindle::yield_now();
  }
  std::vector<affinity_seen> out;
  for (auto& h : hs) {
    if (auto s = co_await h) out.push_back(*s);
  }
  co_return out;
}

TEST(Runtime, PinThreadsPinsEachWorkerToItsCpu) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  ASSERT_GT(ncpu, 0);
  spindle::runtime rt{{.workers = 2, .pin_threads = true}};
  std::vector<affinity_seen> results = spindle_test::run_on_worker(rt, probe_many(200));
  ASSERT_FALSE(results.empty());
  for (affinity_seen const& s : results) {
    int want = static_cast<int>(s.worker % static_cast<std::size_t>(ncpu));
    if (!CPU_ISSET(want, &allowed)) continue;  // pinning there is impossible here
    EXPECT_EQ(s.count, 1) << "worker " << s.worker << " not pinned";
    EXPECT_EQ(s.cpu, want) << "worker " << s.worker;
  }
}

TEST(Runtime, WithoutPinThreadsWorkersKeepTheProcessAffinity) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  spindle::runtime rt{{.workers = 2}};
  std::vector<affinity_seen> results = spindle_test::run_on_worker(rt, probe_many(50));
  ASSERT_FALSE(results.empty());
  for (affinity_seen const& s : results)
    EXPECT_EQ(s.count, CPU_COUNT(&allowed));
}

TEST(Runtime, MoreThan64Workers) {
  // The parked bitmap spans three words: all 130 workers park, and work
  // spawned afterwards still gets done and lets them park again.
  spindle::runtime rt{{.workers = 130, .io_pool_threads = 4}};
  EXPECT_EQ(rt.worker_count(), 130u);
  ASSERT_TRUE(spindle_test::wait_until([&] { return rt.stats().total_parked >= 130; }))
      << "idle workers did not all park";
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(rt.block_on(tree(10)), 1024);
    EXPECT_EQ(spindle_test::run_on_worker(rt, fan_out(500, 1000)), 500);
  }
  std::size_t used = 0;
  for (auto const& w : rt.stats().workers)
    used += w.polled > 0;
  std::printf("%zu of 130 workers polled tasks\n", used);
}

TEST(Runtime, SeveralRuntimesAtOnce) {
  spindle::runtime a{{.workers = 2}};
  spindle::runtime b{{.workers = 1}};
  auto ha = a.spawn(tree(8));
  auto hb = b.spawn(tree(7));
  EXPECT_EQ(b.block_on(tree(6)), 64);
  EXPECT_EQ(spindle_test::wait_and_take(ha), 256);
  EXPECT_EQ(spindle_test::wait_and_take(hb), 128);
}

// ---------------------------------------------------------------------------
// Stats

task<int> spawn_children(int n) {
  std::vector<join_handle<int>> hs;
  for (int i = 0; i < n; ++i)
    hs.push_back(spindle::spawn(value_of(i)));
  int sum = 0;
  for (auto& h : hs)
    sum += co_await h;
  co_return sum;
}

TEST(RuntimeStats, TotalSpawnedCountsEverySpawn) {
  // Spawns off the workers are counted by the owned list they are linked
  // into: the other threads' shard, or under p2c the target worker's.
  for (spindle::placement where : {spindle::placement::global, spindle::placement::p2c}) {
    SCOPED_TRACE(where == spindle::placement::p2c ? "p2c" : "global");
    spindle::runtime rt{{.workers = 2, .placement = where}};
    EXPECT_EQ(rt.stats().total_spawned, 0u);
    // 1 remote spawn (the root) + 50 spawns from a worker.
    EXPECT_EQ(spindle_test::run_on_worker(rt, spawn_children(50)), 49 * 50 / 2);
    EXPECT_EQ(rt.stats().total_spawned, 51u);
    // 10 remote spawns, then a batch of 5 from outside.
    std::vector<join_handle<int>> hs;
    for (int i = 0; i < 10; ++i)
      hs.push_back(rt.spawn(value_of(i)));
    std::vector<task<int>> batch;
    for (int i = 0; i < 5; ++i)
      batch.push_back(value_of(i));
    for (auto& h : rt.spawn_batch(batch))
      hs.push_back(std::move(h));
    for (auto& h : hs)
      spindle_test::wait_and_take(h);
    spindle::runtime_stats s = rt.stats();
    EXPECT_EQ(s.total_spawned, 66u);
    EXPECT_GE(s.total_polled, 66u) << "every task is polled at least once on a worker";
    EXPECT_EQ(s.tasks_alive, 0u);
  }
}

task<int> yield_times(int n) {
  for (int i = 0; i < n; ++i)
    co_await spindle::yield_now{};
  co_return n;
}

task<int> spawn_and_await_times(int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i)
    sum += co_await spindle::spawn(value_of(1));
  co_return sum;
}

// The counters count what happened: workloads whose polls, spawns and inline
// polls are known exactly, on one worker (nothing stolen, nothing else runs).
TEST(RuntimeStats, CountersCountWhatHappened) {
  spindle::runtime rt{{.workers = 1}};
  auto const a = rt.stats();
  // rt.spawn and a plain wait, not block_on: a thread inside block_on may
  // run the task itself (when every worker looks busy), off the workers'
  // counters.
  auto h1 = rt.spawn(yield_times(100));
  EXPECT_EQ(spindle_test::wait_and_take(h1), 100);
  auto const b = rt.stats();
  EXPECT_EQ(b.total_spawned - a.total_spawned, 1u);
  EXPECT_EQ(b.total_polled - a.total_polled, 101u) << "one poll per yield, plus the first";
  EXPECT_EQ(b.total_stolen, 0u);
  auto h2 = rt.spawn(spawn_and_await_times(100));
  EXPECT_EQ(spindle_test::wait_and_take(h2), 100);
  auto const c = rt.stats();
  EXPECT_EQ(c.total_spawned - b.total_spawned, 101u);
  // Each child waits in the LIFO slot, unstarted, when its parent awaits it:
  // the join fast path polls it inline, within the parent's poll.
  EXPECT_EQ(c.inline_polls - b.inline_polls, 100u);
  EXPECT_EQ(c.total_polled - b.total_polled, 101u) << "the root once, each child once inline";
  EXPECT_EQ(c.tasks_alive, 0u);
  ASSERT_EQ(c.workers.size(), 1u);
  EXPECT_EQ(c.workers[0].polled, c.total_polled);
}

TEST(RuntimeStats, SpawnsAndCompletionsBalanceAcrossWorkers) {
  spindle::runtime rt{{.workers = 3}};
  auto const a = rt.stats();
  EXPECT_EQ(rt.block_on(tree(10)), 1024);
  // Completions are counted before block_on returns for the root; every
  // child was joined before it.
  ASSERT_TRUE(spindle_test::wait_until([&] { return rt.stats().tasks_alive == 0; }));
  auto const s = rt.stats();
  EXPECT_EQ(s.total_spawned - a.total_spawned, 1024u)
      << "1 root + one spawn per inner node of a depth-10 tree";
  EXPECT_GE(s.total_polled - a.total_polled, 1024u) << "every task is polled at least once";
  for (auto const& w : s.workers)
    EXPECT_LE(w.steal_operations, w.stolen) << "a steal operation takes at least one task";
}

task<long> spawn_await_chain(int n) {
  long sum = 0;
  for (int i = 0; i < n; ++i)
    sum += co_await spindle::spawn(value_of(i));
  co_return sum;
}

TEST(RuntimeStats, LifoHitsForSpawnAwaitChains) {
  // Longer than a tick's nested-poll budget (8 x 128 polls): past it the
  // awaited child is not polled inline but from the LIFO slot.
  spindle::runtime rt{{.workers = 2}};
  EXPECT_EQ(spindle_test::run_on_worker(rt, spawn_await_chain(10'000)), 9'999L * 10'000 / 2);
  EXPECT_GT(rt.stats().lifo_hits, 0u);
}

// Spawns `n` leaves onto its own worker and then holds that worker without
// suspending until some leaf has finished (or 30 s pass): the leaves sit in
// this worker's ring, so the only way one finishes is that the other worker
// steals it. Then joins them all.
task<long> fan_out_held_until_stolen(int n, std::atomic<int>* finished) {
  std::vector<join_handle<long>> hs;
  hs.reserve(static_cast<std::size_t>(n));
  auto leaf = [](std::atomic<int>* finished) -> task<long> {
    finished->fetch_add(1);
    co_return 1;
  };
  for (int i = 0; i < n; ++i)
    hs.push_back(spindle::spawn(leaf(finished)));
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (finished->load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  long sum = 0;
  for (auto& h : hs)
    sum += co_await h;
  co_return sum;
}

TEST(RuntimeStats, WideFanOutIsStolen) {
  // No timing assumption: the spawner never gives its worker back before a
  // leaf has run elsewhere, so the second worker (woken by the pushes to the
  // spawner's ring) must steal. Earlier versions raced the fan-out against
  // the second worker's wake and lost on a loaded CI machine (50 attempts in
  // 983 ms with no steal under a sanitizer). 200 leaves, fewer than the
  // ring's 256 entries: a fuller ring overflows half of itself into the
  // global queue, where the second worker takes leaves without a steal.
  spindle::runtime rt{{.workers = 2}};
  std::atomic<int> finished{0};
  ASSERT_EQ(spindle_test::run_on_worker(rt, fan_out_held_until_stolen(200, &finished)), 200);
  spindle::runtime_stats s = rt.stats();
  EXPECT_GT(s.total_stolen, 0u);
  std::uint64_t ops = 0;
  for (auto const& w : s.workers)
    ops += w.steal_operations;
  EXPECT_GT(ops, 0u);
}

TEST(RuntimeStats, RemoteSpawnsAreFetchedInBatches) {
  spindle::runtime rt{{.workers = 2, .placement = spindle::placement::global}};
  if (rt.config().placement != spindle::placement::global) {
    GTEST_SKIP() << "SPINDLE_PLACEMENT=p2c: remote spawns go to the workers' inboxes, not the "
                    "global queue (test_inbox covers p2c)";
  }
  std::vector<join_handle<int>> hs;
  for (int i = 0; i < 200; ++i)
    hs.push_back(rt.spawn(value_of(i)));
  long sum = 0;
  for (auto& h : hs)
    sum += spindle_test::wait_and_take(h);
  EXPECT_EQ(sum, 199 * 200 / 2);
  spindle::runtime_stats s = rt.stats();
  // Nobody but the workers takes from the global queue here.
  EXPECT_GT(s.global_batch_fetches, 0u);
  EXPECT_LE(s.global_batch_fetches, 200u);
}

TEST(RuntimeStats, IdleWorkersPark) {
  spindle::runtime rt{{.workers = 3}};
  EXPECT_EQ(rt.block_on(tree(6)), 64);
  EXPECT_TRUE(spindle_test::wait_until([&] { return rt.stats().total_parked >= 3; }))
      << "idle workers did not park";
}

TEST(RuntimeStats, TasksAliveCountsUnfinishedTasks) {
  test_event ev;
  spindle::runtime rt{{.workers = 2}};
  auto waiter = [](test_event* ev) -> task<void> { co_await *ev; };
  auto h = rt.spawn(waiter(&ev));
  EXPECT_EQ(rt.stats().tasks_alive, 1u);
  ev.set();
  spindle_test::wait_and_take(h);
  EXPECT_TRUE(spindle_test::wait_until([&] { return rt.stats().tasks_alive == 0; }));
}

// ---------------------------------------------------------------------------
// Shutdown with work pending

task<void> park_forever(tracked, std::atomic<int>* started) {
  started->fetch_add(1);
  co_await suspend_forever{};
}

task<void> await_forever(join_handle<void> h, tracked, std::atomic<int>* started) {
  started->fetch_add(1);
  co_await h;
}

TEST(RuntimeShutdown, DestroysTasksSuspendedForever) {
  counts c;
  std::atomic<int> started{0};
  {
    spindle::runtime rt{{.workers = 2}};
    for (int i = 0; i < 50; ++i) {
      auto parked = rt.spawn(park_forever(tracked(c), &started));
      // A second task waits for the first through its join handle.
      (void)rt.spawn(await_forever(std::move(parked), tracked(c), &started));
    }
    ASSERT_TRUE(spindle_test::wait_until([&] { return started.load() == 100; }));
    EXPECT_EQ(c.alive(), 100);
  }  // must return (watchdog) and destroy every frame
  EXPECT_EQ(c.alive(), 0) << "frames of pending tasks leaked at shutdown";
}

task<void> spawn_parked_children(int n, counts* c, std::atomic<int>* started) {
  // Spawned on a worker: each child enters an owned list only when it first
  // suspends (owned_tasks.hpp); shutdown must still find every one.
  for (int i = 0; i < n; ++i)
    (void)spindle::spawn(park_forever(tracked(*c), started));
  co_return;
}

TEST(RuntimeShutdown, DestroysTasksSpawnedOnWorkersAndSuspendedForever) {
  counts c;
  std::atomic<int> started{0};
  constexpr int n = 1000;
  {
    spindle::runtime rt{{.workers = 2}};
    rt.block_on(spawn_parked_children(n, &c, &started));
    ASSERT_TRUE(spindle_test::wait_until([&] { return started.load() == n; }));
    EXPECT_EQ(rt.stats().tasks_alive, static_cast<std::uint64_t>(n));
    EXPECT_EQ(c.alive(), n);
  }
  EXPECT_EQ(c.alive(), 0) << "frames of suspended worker-spawned tasks leaked at shutdown";
}

task<int> queued_task(tracked, std::atomic<int>* ran) {
  ran->fetch_add(1);
  co_await spindle::yield_now();
  co_return 1;
}

TEST(RuntimeShutdown, DestroysQueuedTasksAndHandlesReportTheOutcome) {
  counts c;
  std::atomic<int> ran{0};
  constexpr int n = 10'000;
  std::vector<join_handle<int>> hs;
  hs.reserve(n);
  {
    spindle::runtime rt{{.workers = 2}};
    for (int i = 0; i < n; ++i)
      hs.push_back(rt.spawn(queued_task(tracked(c), &ran)));
  }
  // Handles outlive the runtime: each task either completed or was cancelled.
  // A cancelled task's frame is gone; a completed one keeps its frame (its
  // parameters and result) until its handle is dropped.
  int values = 0;
  int cancelled = 0;
  for (auto& h : hs) {
    ASSERT_TRUE(h.is_finished());
    try {
      values += h.take();
    } catch (spindle::task_cancelled const&) {
      ++cancelled;
    }
  }
  EXPECT_EQ(values + cancelled, n);
  EXPECT_LE(values, ran.load());
  EXPECT_EQ(c.alive(), values);
  hs.clear();  // dropping handles after the runtime is gone
  EXPECT_EQ(c.alive(), 0);
}

task<int> spawn_many_then_wait(int n, counts* c, std::atomic<int>* ran,
                               std::atomic<bool>* spawned) {
  std::vector<join_handle<int>> hs;
  for (int i = 0; i < n; ++i)
    hs.push_back(spindle::spawn(queued_task(tracked(*c), ran)));
  spawned->store(true);
  co_await suspend_forever{};
  co_return 0;
}

TEST(RuntimeShutdown, DestroysTasksQueuedOnWorkers) {
  // Spawned from a worker: LIFO slot, ring, and overflow to the global queue.
  counts c;
  std::atomic<int> ran{0};
  std::atomic<bool> spawned{false};
  {
    spindle::runtime rt{{.workers = 2}};
    auto h = rt.spawn(spawn_many_then_wait(10'000, &c, &ran, &spawned));
    ASSERT_TRUE(spindle_test::wait_until([&] { return spawned.load(); }));
  }
  EXPECT_EQ(c.alive(), 0);
}

TEST(RuntimeShutdown, IdleRuntimeDestructionIsPrompt) {
  // Every worker parked with no timer armed sleeps without a timeout: only
  // the destructor's unpark ends it. Each destruction must return within a
  // bound that is generous for a loaded machine under a sanitizer (a missed
  // unpark would wait forever). It runs on its own thread so that a hang
  // fails the test instead of stopping the suite.
  constexpr auto bound = 5s;
  for (int i = 0; i < 50; ++i) {
    auto rt = std::make_unique<spindle::runtime>(spindle::runtime_config{.workers = 3});
    if (i % 2 == 0) {
      EXPECT_EQ(rt->block_on(value_of(i)), i);
    }
    // Wait until every worker has parked (tiered idle: after a few yields).
    ASSERT_TRUE(spindle_test::wait_until([&] {
      auto s = rt->stats();
      return std::all_of(s.workers.begin(), s.workers.end(),
                         [](auto const& w) { return w.parked > 0; });
    }));
    auto done = std::make_shared<std::atomic<bool>>(false);
    auto start = std::chrono::steady_clock::now();
    std::thread destroyer([r = rt.release(), done]() mutable {
      delete r;
      done->store(true);
    });
    bool const prompt = spindle_test::wait_until([&] { return done->load(); }, bound);
    if (!prompt) {
      destroyer.detach();  // left behind: the test has failed
      FAIL() << "an idle runtime's destruction took more than 5 s (round " << i << ")";
    }
    destroyer.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, bound);
  }
}

TEST(RuntimeShutdown, HandlesOutlivingTheRuntime) {
  std::atomic<int> started{0};
  counts c;
  join_handle<void> pending;
  join_handle<int> finished;
  {
    spindle::runtime rt{{.workers = 2}};
    pending = rt.spawn(park_forever(tracked(c), &started));
    finished = rt.spawn(value_of(77));
    ASSERT_TRUE(spindle_test::wait_until([&] { return started.load() == 1; }));
    ASSERT_TRUE(spindle_test::wait_until([&] { return finished.is_finished(); }));
  }
  EXPECT_TRUE(pending.is_finished());
  EXPECT_THROW(pending.take(), spindle::task_cancelled);
  EXPECT_EQ(finished.take(), 77) << "a result computed before shutdown must survive it";
  EXPECT_EQ(c.alive(), 0);
}

// What a destructor observes when it spawns while the runtime shuts down.
enum class spawn_outcome { not_run, refused, accepted, threw_system_error, other };
void PrintTo(spawn_outcome o, std::ostream* os) {
  constexpr char const* names[] = {"not_run", "refused", "accepted", "threw_system_error", "other"};
  *os << names[static_cast<int>(o)];
}

struct spawn_on_destruction {
  spawn_outcome* out;
  spindle::detail::scheduler* sched;  // null: spindle::spawn; else the scheduler directly
  counts* refused_params;
  ~spawn_on_destruction() {
    try {
      join_handle<int> h;
      if (sched == nullptr) {
        h = spindle::spawn(value_of(1));
      } else {
        auto frame = [](tracked) -> task<int> { co_return 1; }(tracked(*refused_params)).release();
        h = join_handle<int>{spindle::detail::spawn_root(sched, frame, &frame.promise())};
      }
      if (!h.is_finished()) {
        *out = spawn_outcome::accepted;
        return;
      }
      try {
        (void)h.take();
        *out = spawn_outcome::other;
      } catch (spindle::task_cancelled const&) {
        *out = spawn_outcome::refused;
      }
    } catch (std::system_error const&) {
      *out = spawn_outcome::threw_system_error;
    } catch (...) {
      *out = spawn_outcome::other;
    }
  }
};

task<void> spawns_when_destroyed(spawn_outcome* out, spindle::detail::scheduler* sched,
                                 counts* refused_params, std::atomic<int>* started) {
  spawn_on_destruction guard{out, sched, refused_params};
  started->fetch_add(1);
  co_await suspend_forever{};
}

TEST(RuntimeShutdown, SpawnDuringShutdownThroughTheSchedulerIsRefused) {
  spawn_outcome out = spawn_outcome::not_run;
  counts params;
  std::atomic<int> started{0};
  {
    spindle::runtime rt{{.workers = 2}};
    auto h = rt.spawn(spawns_when_destroyed(&out, rt.scheduler_handle(), &params, &started));
    ASSERT_TRUE(spindle_test::wait_until([&] { return started.load() == 1; }));
  }
  EXPECT_EQ(out, spawn_outcome::refused);
  EXPECT_EQ(params.alive(), 0) << "the refused task's frame was not destroyed";
}

// spindle::spawn from a destructor run by shutdown (a RAII guard that spawns
// clean-up work is common): like Tokio, the spawn should be refused (the
// handle reports task_cancelled), not throw from a destructor (which would
// terminate without the try/catch here).
TEST(RuntimeShutdown, SpindleSpawnFromADestructorDuringShutdownIsRefused) {
  spawn_outcome out = spawn_outcome::not_run;
  counts params;
  std::atomic<int> started{0};
  {
    spindle::runtime rt{{.workers = 2}};
    auto h = rt.spawn(spawns_when_destroyed(&out, nullptr, &params, &started));
    ASSERT_TRUE(spindle_test::wait_until([&] { return started.load() == 1; }));
  }
  EXPECT_NE(out, spawn_outcome::not_run) << "the guard was not destroyed";
  EXPECT_NE(out, spawn_outcome::accepted) << "spawn accepted after shutdown began";
  EXPECT_EQ(out, spawn_outcome::refused)
      << (out == spawn_outcome::threw_system_error
              ? "spindle::spawn threw (operation_not_permitted): the frames are destroyed "
                "outside the runtime's context"
              : "unexpected outcome");
}

TEST(RuntimeShutdown, ShutdownWhileTasksYield) {
  // Tasks that are running and re-queueing themselves while the destructor
  // stops the workers.
  counts c;
  std::atomic<int> started{0};
  for (int round = 0; round < 20; ++round) {
    spindle::runtime rt{{.workers = 2}};
    auto spinner = [](tracked, std::atomic<int>* started) -> task<void> {
      started->fetch_add(1);
      for (;;)
        co_await spindle::yield_now();
    };
    for (int i = 0; i < 8; ++i)
      (void)rt.spawn(spinner(tracked(c), &started));
    ASSERT_TRUE(spindle_test::wait_until([&] { return started.load() >= 1; }));
  }
  EXPECT_EQ(c.alive(), 0);
}

// ---------------------------------------------------------------------------
// Idle CPU

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TEST(Runtime, IdleRuntimeUsesAlmostNoCpu) {
  spindle::runtime rt;  // hardware_concurrency workers
  // Some work first, so that workers went through searching and parking.
  EXPECT_EQ(rt.block_on(tree(12)), 4096);
  ASSERT_TRUE(
      spindle_test::wait_until([&] { return rt.stats().total_parked >= rt.worker_count(); }));
  std::this_thread::sleep_for(50ms);
  double cpu0 = process_cpu_seconds();
  auto wall0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(300ms);
  double cpu = process_cpu_seconds() - cpu0;
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  // Generous bound: 5% of one core.
  EXPECT_LT(cpu, 0.05 * wall) << "idle runtime burned " << cpu * 1000 << " ms CPU in "
                              << wall * 1000 << " ms";
  std::uint64_t polled = rt.stats().total_polled;
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(rt.stats().total_polled, polled) << "idle workers kept polling";
}

}  // namespace

// A task's header keeps its runtime as a 16-bit id (task_header.hpp,
// runtime_slots), reused once a runtime is gone. A wake from outside must
// reach the task's own runtime: with one worker per runtime, a task woken
// into another runtime's queue would resume on that runtime's thread.
task<void> resume_where_spawned(spindle::event* ev, std::atomic<std::thread::id>* before,
                                std::atomic<std::thread::id>* after) {
  before->store(std::this_thread::get_id());
  co_await ev->wait();
  after->store(std::this_thread::get_id());
}

void wake_each_in_its_own_runtime(std::size_t at_once) {
  std::vector<std::unique_ptr<spindle::runtime>> rts;
  std::vector<spindle::event> evs(at_once);
  std::vector<std::atomic<std::thread::id>> before(at_once), after(at_once);
  std::vector<join_handle<void>> hs;
  for (std::size_t i = 0; i < at_once; ++i) {
    rts.push_back(std::make_unique<spindle::runtime>(spindle::runtime_config{.workers = 1}));
    hs.push_back(rts[i]->spawn(resume_where_spawned(&evs[i], &before[i], &after[i])));
  }
  for (std::size_t i = 0; i < at_once; ++i)
    ASSERT_TRUE(spindle_test::wait_until([&] { return before[i].load() != std::thread::id{}; }));
  for (std::size_t i = at_once; i-- > 0;)
    evs[i].set();
  for (std::size_t i = 0; i < at_once; ++i) {
    rts[i]->block_on(std::move(hs[i]));
    EXPECT_EQ(after[i].load(), before[i].load()) << "runtime " << i << "'s task resumed elsewhere";
  }
  hs.clear();
  // Destroyed out of order: ids come free in the middle of the taken ones.
  for (std::size_t i = 0; i < at_once; i += 2)
    rts[i].reset();
  rts.clear();
}

TEST(Runtime, ManyRuntimesAtOnceAndInTurnEachWakeTheirOwnTasks) {
  for (int round = 0; round < 20; ++round)
    wake_each_in_its_own_runtime(24);
}
