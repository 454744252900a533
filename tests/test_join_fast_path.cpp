// Tests of the join fast path (detail::run_inline): a task that awaits the
// handle of a child that is queued and has not started polls the child
// itself, nested in its own poll. From this worker's LIFO slot the entry is
// taken out; from anywhere else the child is claimed and its entry left
// stale (CLAIMED), to be dropped by whoever pops it, or turned live again by
// a wake. Bounded by nesting depth and the tick's budget.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

using spindle::join_handle;
using spindle::runtime;
using spindle::task;
using spindle_test::await_handle;
using spindle_test::counts;
using spindle_test::test_event;
using spindle_test::tracked;
using spindle_test::value_of;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

/// Runs `t` on a worker and returns its result. Waited for without block_on:
/// a thread in block_on may run queued tasks itself while the workers are
/// busy, and a task polled there (not on a worker) takes no fast path.
template <class T>
T on_a_worker(runtime& rt, task<T> t) {
  auto h = rt.spawn(std::move(t));
  while (!h.is_finished())
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  return rt.block_on(await_handle(std::move(h)));
}

/// Waits (bounded) until no spawned task is alive: detached tasks may still
/// be finishing when the task that woke their joiners returns.
bool all_tasks_done(runtime& rt) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (rt.stats().tasks_alive != 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

task<long> spawn_and_await_loop(int n) {
  long sum = 0;
  for (int i = 0; i < n; ++i)
    sum += co_await spindle::spawn(value_of(i));
  co_return sum;
}

TEST(JoinFastPath, SpawnThenAwaitPollsTheChildInline) {
  runtime rt{{.workers = 1}};
  constexpr int n = 10'000;
  long sum = on_a_worker(rt, spawn_and_await_loop(n));
  EXPECT_EQ(sum, long{n} * (n - 1) / 2);
  auto st = rt.stats();
  // Every child but those that met the end of a tick's budget ran inline.
  EXPECT_GE(st.inline_polls, static_cast<std::uint64_t>(n) * 9 / 10);
  EXPECT_LE(st.inline_polls, st.total_polled);
  EXPECT_EQ(st.workers[0].inline_polls, st.inline_polls);
}

// A is pushed out of the LIFO slot into the ring when B is spawned: awaiting
// A claims it (its ring entry goes stale), awaiting B takes B from the slot.
task<int> displaced_then_awaited() {
  auto a = spindle::spawn(value_of(1));
  auto b = spindle::spawn(value_of(2));
  int x = co_await a;
  int y = co_await b;
  co_return x * 10 + y;
}

TEST(JoinFastPath, AChildDisplacedToTheRingIsClaimedAndItsStaleEntryDropped) {
  runtime rt{{.workers = 1}};
  EXPECT_EQ(on_a_worker(rt, displaced_then_awaited()), 12);
  auto st = rt.stats();
  EXPECT_EQ(st.inline_polls, 2u);
  // A's stale entry is popped and dropped, or drained at shutdown.
  EXPECT_TRUE(all_tasks_done(rt));
}

// A child claimed out of the ring suspends on an event; its sibling sets
// the event: the wake turns the stale entry live instead of queueing a
// second entry, and the parent's join waiter is woken when it completes.
task<int> wait_for(test_event* ev, int v) {
  co_await *ev;
  co_return v;
}
task<void> set_event(test_event* ev) {
  ev->set();
  co_return;
}
task<int> claimed_child_suspends(test_event* ev) {
  auto a = spindle::spawn(wait_for(ev, 7));
  auto b = spindle::spawn(set_event(ev));  // pushes A into the ring
  int x = co_await a;                      // claims A; A suspends; we wait
  co_await b;
  co_return x;
}

TEST(JoinFastPath, AWakeTurnsTheStaleEntryOfAClaimedChildLive) {
  for (std::size_t workers : {1u, 2u}) {
    runtime rt{{.workers = workers}};
    for (int round = 0; round < 200; ++round) {
      test_event ev;
      EXPECT_EQ(on_a_worker(rt, claimed_child_suspends(&ev)), 7);
    }
    EXPECT_TRUE(all_tasks_done(rt));
  }
}

// Each level awaits the next: the nesting of inline polls is bounded, so a
// chain far deeper than any stack could hold completes.
task<long> chain(int n) {
  if (n == 0) co_return 0;
  co_return 1 + co_await spindle::spawn(chain(n - 1));
}

TEST(JoinFastPath, DeepChainsOfSpawnAndAwaitDoNotGrowTheStack) {
  runtime rt{{.workers = 1}};
  constexpr int depth = 200'000;
  EXPECT_EQ(on_a_worker(rt, chain(depth)), depth);
}

// Nesting is bounded by the stack (half of it) and 256 levels, not by a
// small fixed depth: a chain of 200 spawn+await levels runs every child
// inline (the tick's budget is raised so that it does not end the nesting
// first).
TEST(JoinFastPath, ChainsDeeperThan32LevelsStayInline) {
  runtime rt{{.workers = 1, .budget = 1000}};
  constexpr int depth = 200;
  spindle::runtime_stats before = rt.stats();
  EXPECT_EQ(on_a_worker(rt, chain(depth)), depth);
  spindle::runtime_stats after = rt.stats();
  // Every level inline: with a bound of 32 levels every 33rd child was
  // refused, queued and polled from the queue (about 194 of 200 inline).
  EXPECT_EQ(after.inline_polls - before.inline_polls, static_cast<std::uint64_t>(depth));
}

// A task that spawns and awaits in a loop never suspends while the fast path
// serves it; the budget still ends the tick, so a task queued from another
// thread runs and stops the loop.
task<long> until_flag(std::atomic<bool>* flag, std::atomic<bool>* started) {
  long n = 0;
  started->store(true, std::memory_order_release);
  while (!flag->load(std::memory_order_acquire)) {
    n += co_await spindle::spawn(value_of(1));
  }
  co_return n;
}
task<void> raise(std::atomic<bool>* flag) {
  flag->store(true, std::memory_order_release);
  co_return;
}

TEST(JoinFastPath, ALoopOfSpawnAndAwaitStillLetsQueuedTasksRun) {
  runtime rt{{.workers = 1}};
  std::atomic<bool> flag{false};
  std::atomic<bool> started{false};
  auto loop = rt.spawn(until_flag(&flag, &started));
  while (!started.load(std::memory_order_acquire))
    std::this_thread::yield();
  // Only the worker can run `raise` (no thread is inside block_on to help),
  // and the worker is inside the loop's poll.
  auto r = rt.spawn(raise(&flag));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!flag.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(flag.load(std::memory_order_acquire)) << "the loop starved a queued task";
  long n = rt.block_on(await_handle(std::move(loop)));
  EXPECT_GE(n, 0);
  rt.block_on(await_handle(std::move(r)));
}

// A claimed child that never finishes: the parent is aborted, the child is
// detached and destroyed at shutdown, and its stale entry is drained (no
// header leaks; AddressSanitizer's leak check runs this in CI).
task<void> hold(counts* c) {
  tracked t(*c);
  co_await spindle_test::suspend_forever{};
}
task<void> noop() {
  co_return;
}
task<void> await_held(counts* c, std::atomic<bool>* waiting) {
  auto a = spindle::spawn(hold(c));
  auto b = spindle::spawn(noop());  // pushes A into the ring
  waiting->store(true, std::memory_order_release);
  co_await a;  // claims A, which suspends for ever
  co_await b;
}

TEST(JoinFastPath, StaleEntriesAreDrainedAtShutdown) {
  counts c;
  {
    runtime rt{{.workers = 1}};
    std::atomic<bool> waiting{false};
    auto parent = rt.spawn(await_held(&c, &waiting));
    while (!waiting.load(std::memory_order_acquire))
      std::this_thread::yield();
    while (c.constructed.load() == 0)
      std::this_thread::yield();
    parent.abort();
    EXPECT_THROW(rt.block_on(await_handle(std::move(parent))), spindle::task_cancelled);
    EXPECT_EQ(c.alive(), 1);  // A is detached and still suspended
  }
  EXPECT_EQ(c.alive(), 0);
}

// The stale entry is still in the ring when the runtime shuts down: the
// worker is kept busy by a task that spins until the destructor has begun.
// Without draining the queues, the claimed child's header would leak.
task<void> spin_until(std::atomic<bool>* spinning, std::atomic<bool>* release) {
  spinning->store(true, std::memory_order_release);
  while (!release->load(std::memory_order_acquire))
    std::this_thread::yield();
  co_return;
}
task<void> claim_then_block(counts* c, std::atomic<bool>* spinning, std::atomic<bool>* release) {
  auto a = spindle::spawn(hold(c));
  auto b = spindle::spawn(spin_until(spinning, release));  // pushes A into the ring
  co_await a;  // claims A (its ring entry goes stale); A suspends; B runs next
  co_await b;
}

TEST(JoinFastPath, AStaleEntryStillQueuedAtShutdownIsDrained) {
  counts c;
  std::atomic<bool> spinning{false};
  std::atomic<bool> release{false};
  std::thread releaser;
  {
    runtime rt{{.workers = 1}};
    auto parent = rt.spawn(claim_then_block(&c, &spinning, &release));
    while (!spinning.load(std::memory_order_acquire))
      std::this_thread::yield();
    EXPECT_EQ(rt.stats().inline_polls, 1u);  // A was polled inline
    releaser = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      release.store(true, std::memory_order_release);
    });
    // parent is dropped (detached), then the runtime shuts down while the
    // worker spins with A's stale entry behind it in the ring.
  }
  releaser.join();
  EXPECT_EQ(c.alive(), 0);
}

// Many parents on several workers, each awaiting children that are being
// stolen, claimed, woken and completed at the same time.
task<long> fan(int width, test_event* evs) {
  std::vector<join_handle<int>> hs;
  hs.reserve(static_cast<std::size_t>(width));
  for (int i = 0; i < width; ++i) {
    if (i % 3 == 0) {
      hs.push_back(spindle::spawn(wait_for(&evs[i], i)));
    } else {
      hs.push_back(spindle::spawn(value_of(i)));
    }
  }
  for (int i = 0; i < width; i += 3)
    static_cast<void>(spindle::spawn(set_event(&evs[i])));
  long sum = 0;
  for (auto& h : hs)
    sum += co_await h;
  co_return sum;
}
task<long> many_fans(int parents, int width) {
  std::vector<std::vector<test_event>> evs(static_cast<std::size_t>(parents));
  std::vector<join_handle<long>> hs;
  for (auto& e : evs) {
    e = std::vector<test_event>(static_cast<std::size_t>(width));
    hs.push_back(spindle::spawn(fan(width, e.data())));
  }
  long sum = 0;
  for (auto& h : hs)
    sum += co_await h;
  co_return sum;
}

TEST(JoinFastPath, ParentsClaimChildrenWhileOtherWorkersStealThem) {
  int const rounds = static_cast<int>(spindle_test::scaled(40, 4));
  for (std::size_t workers : {2u, 4u}) {
    runtime rt{{.workers = workers}};
    for (int round = 0; round < rounds; ++round) {
      constexpr int parents = 32;
      constexpr int width = 30;
      EXPECT_EQ(on_a_worker(rt, many_fans(parents, width)),
                long{parents} * width * (width - 1) / 2);
    }
    EXPECT_TRUE(all_tasks_done(rt));
  }
}

}  // namespace
