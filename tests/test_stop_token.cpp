// Tests of cancellation: std::stop_token support (spindle::spawn with a
// token aborts a suspended, queued or running task; a finished task is not
// touched), cooperative cancellation_requested(), abort of a finished task,
// and aborting (by abort() and by stop) a multi-step task at every one of its
// suspension points, of every kind (an awaiter, a nested task, when_all,
// when_any, a task_group join): destructors run exactly once and awaiting
// the handle throws task_cancelled.
#include "spindle/stop_token.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/notify.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "spindle/task_group.hpp"
#include "spindle/when_all.hpp"
#include "spindle/when_any.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::task;
using spindle_test::counts;
using spindle_test::gate;
using spindle_test::suspend_forever;
using spindle_test::tracked;
using spindle_test::wait_and_take;
using spindle_test::wait_until;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(20)));

task<int> park_forever(counts* c, std::atomic<bool>* started) {
  tracked t{*c};
  started->store(true);
  co_await suspend_forever{};
  co_return 1;
}

TEST(StopToken, StopAbortsASuspendedTask) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  std::atomic<bool> started{false};
  std::stop_source stop;
  auto h = spindle::spawn(rt, park_forever(&c, &started), stop.get_token());
  ASSERT_TRUE(wait_until([&] { return started.load(); }));
  EXPECT_TRUE(stop.request_stop());
  EXPECT_THROW(wait_and_take(h), spindle::task_cancelled);
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(c.constructed.load(), 1);
}

TEST(StopToken, StopAbortsAQueuedTask) {
  // One worker, held by a task that spins: the stoppable task stays queued.
  spindle::runtime rt{{.workers = 1}};
  std::atomic<bool> blocker_running{false};
  std::atomic<bool> release{false};
  auto blocker = rt.spawn([](std::atomic<bool>* running, std::atomic<bool>* rel) -> task<void> {
    running->store(true);
    while (!rel->load())
      std::this_thread::yield();
    co_return;
  }(&blocker_running, &release));
  ASSERT_TRUE(wait_until([&] { return blocker_running.load(); }));

  std::atomic<int> ran{0};
  auto body = [](std::atomic<int>* r) -> task<int> {
    r->fetch_add(1);
    co_return 5;
  };
  std::stop_source stop;
  auto queued = spindle::spawn(rt, body(&ran), stop.get_token());
  stop.request_stop();
  // Requested before spawn: never runs either.
  auto late = spindle::spawn(rt, body(&ran), stop.get_token());
  release.store(true);
  wait_and_take(blocker);
  EXPECT_THROW(wait_and_take(queued), spindle::task_cancelled);
  EXPECT_THROW(wait_and_take(late), spindle::task_cancelled);
  EXPECT_EQ(ran.load(), 0);
}

TEST(StopToken, StopAfterFinishIsANoOp) {
  spindle::runtime rt{{.workers = 2}};
  std::stop_source stop;
  auto h = spindle::spawn(
      rt, []() -> task<std::string> { co_return "kept"; }(), stop.get_token());
  ASSERT_TRUE(wait_until([&] { return h.is_finished(); }));
  stop.request_stop();
  h.abort();  // abort of a finished task: a no-op as well
  EXPECT_EQ(h.take(), "kept");
}

TEST(StopToken, AbortOfAFinishedTaskIsANoOp) {
  spindle::runtime rt{{.workers = 2}};
  auto h = rt.spawn([]() -> task<int> { co_return 3; }());
  ASSERT_TRUE(wait_until([&] { return h.is_finished(); }));
  h.abort();
  h.abort();
  EXPECT_EQ(h.take(), 3);
}

TEST(StopToken, RunningTaskStopsAtItsNextSuspensionPoint) {
  spindle::runtime rt{{.workers = 2}};
  std::atomic<bool> running{false};
  std::atomic<bool> go{false};
  std::atomic<bool> saw_request{false};
  std::atomic<bool> after{false};
  counts c;
  std::stop_source stop;
  auto h = spindle::spawn(
      rt,
      [](std::atomic<bool>* r, std::atomic<bool>* g, std::atomic<bool>* saw, std::atomic<bool>* aft,
         counts* cp) -> task<int> {
        tracked t{*cp};
        r->store(true);
        while (!g->load())
          std::this_thread::yield();
        saw->store(spindle::cancellation_requested());
        co_await spindle::yield_now{};  // destroyed here
        aft->store(true);
        co_return 1;
      }(&running, &go, &saw_request, &after, &c),
      stop.get_token());
  ASSERT_TRUE(wait_until([&] { return running.load(); }));
  stop.request_stop();
  go.store(true);
  EXPECT_THROW(wait_and_take(h), spindle::task_cancelled);
  EXPECT_TRUE(saw_request.load());
  EXPECT_FALSE(after.load());
  EXPECT_EQ(c.alive(), 0);
}

TEST(StopToken, CooperativeLoopReturnsItsValue) {
  spindle::runtime rt{{.workers = 2}};
  std::atomic<bool> running{false};
  EXPECT_FALSE(spindle::cancellation_requested());  // outside any task
  auto h = rt.spawn([](std::atomic<bool>* r) -> task<long> {
    long iterations = 0;
    r->store(true);
    while (!spindle::cancellation_requested())
      ++iterations;
    co_return iterations >= 0 ? 7 : 0;  // finished without suspending: kept
  }(&running));
  ASSERT_TRUE(wait_until([&] { return running.load(); }));
  h.abort();
  EXPECT_EQ(wait_and_take(h), 7);
}

TEST(StopToken, SpawnWithTokenInsideTheRuntime) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    std::stop_source stop;
    std::atomic<bool> started{false};
    auto h = spindle::spawn(park_forever(cp, &started), stop.get_token());
    auto v = spindle::spawn([]() -> task<int> { co_return 4; }(), stop.get_token());
    int value = co_await v;
    while (!started.load())
      co_await spindle::yield_now{};
    stop.request_stop();
    try {
      (void)co_await h;
    } catch (spindle::task_cancelled const&) {
      co_return value;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 4);
  EXPECT_EQ(c.alive(), 0);
  // A token that can never stop: a plain spawn.
  EXPECT_EQ(rt.block_on([]() -> task<int> {
    auto h = spindle::spawn([]() -> task<int> { co_return 9; }(), std::stop_token{});
    co_return co_await h;
  }()),
            9);
}

TEST(StopToken, StopRacingCompletion) {
  // request_stop from this thread while the task finishes on a worker: the
  // callback, destroyed with the frame, never outlives the task.
  spindle::runtime rt{{.workers = 2}};
  long rounds = spindle_test::scaled(2000, 100);
  long values = 0;
  long cancelled = 0;
  for (long r = 0; r < rounds; ++r) {
    std::stop_source stop;
    auto h = spindle::spawn(
        rt,
        [](long yields) -> task<long> {
          for (long i = 0; i < yields; ++i)
            co_await spindle::yield_now{};
          co_return yields;
        }(r % 3),
        stop.get_token());
    stop.request_stop();
    try {
      EXPECT_EQ(wait_and_take(h), r % 3);
      ++values;
    } catch (spindle::task_cancelled const&) {
      ++cancelled;
    }
    spindle_test::progress();
  }
  EXPECT_EQ(values + cancelled, rounds);
}

// --- abort at every suspension point ----------------------------------------

task<int> at_gate(gate* g, counts* c) {
  tracked t{*c};
  co_await *g;
  co_return 1;
}

task<int> never(counts* c) {
  tracked t{*c};
  co_await suspend_forever{};
  co_return 0;
}

/// `n` steps; step i suspends in a different kind of suspension point, each
/// of which ends when the test opens `g` once.
task<int> multi_step(gate* g, counts* c, std::atomic<int>* steps, int n) {
  tracked whole{*c};
  int sum = 0;
  for (int i = 0; i < n; ++i) {
    tracked step{*c};
    switch (i % 5) {
      case 0:  // an awaiter
        co_await *g;
        sum += 1;
        break;
      case 1:  // a nested task awaited inline
        sum += co_await at_gate(g, c);
        break;
      case 2: {  // when_all: the gate waiter is a child
        auto [a, b] = co_await spindle::when_all(at_gate(g, c), [](counts* cp) -> task<int> {
          tracked t{*cp};
          co_return 0;
        }(c));
        sum += a + b;
        break;
      }
      case 3: {  // when_any: the loser waits forever
        auto r = co_await spindle::when_any(never(c), at_gate(g, c));
        sum += std::get<1>(r.value);
        break;
      }
      default: {  // a task_group join
        spindle::task_group group;
        group.spawn(at_gate(g, c));
        co_await group.join();
        sum += 1;
        break;
      }
    }
    steps->fetch_add(1);
  }
  co_return sum;
}

TEST(Cancellation, AbortAtEverySuspensionPoint) {
  constexpr int n = 10;
  for (std::size_t workers : {1u, 3u}) {
    spindle::runtime rt{{.workers = workers}};
    for (int k = 0; k <= n; ++k) {
      for (bool by_stop : {false, true}) {
        counts c;
        gate g;
        std::atomic<int> steps{0};
        std::stop_source stop;
        join_handle<int> h =
            by_stop ? spindle::spawn(rt, multi_step(&g, &c, &steps, n), stop.get_token())
                    : rt.spawn(multi_step(&g, &c, &steps, n));
        for (int i = 0; i < k; ++i)
          ASSERT_TRUE(g.open()) << "step " << i << " never reached";
        std::string where = std::to_string(workers) + " workers, k=" + std::to_string(k) +
                            (by_stop ? " (stop)" : " (abort)");
        if (k == n) {
          EXPECT_EQ(wait_and_take(h), n) << where;
        } else {
          // Suspended at step k (its gate waiter registered), then cancelled.
          ASSERT_TRUE(wait_until([&] { return g.has_waiter(); })) << where;
          if (by_stop) {
            stop.request_stop();
          } else {
            h.abort();
          }
          EXPECT_THROW(wait_and_take(h), spindle::task_cancelled) << where;
          EXPECT_EQ(steps.load(), k) << where;
          EXPECT_FALSE(g.has_waiter()) << where;
        }
        // Every tracked object (the task's, each step's, every child's) was
        // destroyed exactly once, before the handle reported completion.
        EXPECT_EQ(c.alive(), 0) << where;
        EXPECT_GT(c.constructed.load(), 0) << where;
        spindle_test::progress();
      }
    }
  }
}

// A task woken on a worker goes to that worker's LIFO slot. Dropping its
// join handle there (join_detach) while another thread aborts it through its
// stop token must not erase the abort: each round, a driver task on a worker
// wakes tasks that wait on their own notify, one by one, and drops each
// handle right after the wake, while a plain thread requests stop for the
// same tasks in the same order. A cancelled task is destroyed at its next
// poll; one whose CANCELLED bit was erased runs on into a second wait that
// nothing ends, and stays alive.
task<void> wait_twice(spindle::notify* first, std::atomic<int>* waiting, counts* c) {
  tracked t{*c};
  waiting->fetch_add(1);
  co_await first->wait();
  spindle::notify never;
  co_await never.wait();
}

task<void> wake_and_drop(std::vector<std::unique_ptr<spindle::notify>>* notifies,
                         std::vector<std::stop_source>* stops, std::atomic<int>* waiting,
                         std::atomic<long>* next, counts* c) {
  std::size_t const n = notifies->size();
  std::vector<join_handle<void>> handles;
  handles.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    handles.push_back(
        spindle::spawn(wait_twice((*notifies)[i].get(), waiting, c), (*stops)[i].get_token()));
  // Every task waits on its notify (its waiter registered) before the wakes.
  while (waiting->load() != static_cast<int>(n) ||
         !std::all_of(notifies->begin(), notifies->end(),
                      [](auto const& nt) { return nt->waiter_count() == 1; })) {
    co_await spindle::yield_now{};
  }
  for (std::size_t i = 0; i < n; ++i) {
    next->store(static_cast<long>(i), std::memory_order_release);
    (*notifies)[i]->notify_one();              // into this worker's LIFO slot
    { auto dropped = std::move(handles[i]); }  // join_detach while it sits there
  }
}

TEST(StopToken, AbortRacingTheDropOfAWokenTaskIsNeverLost) {
  spindle::runtime rt{{.workers = 2}};
  long const rounds = spindle_test::scaled(2000, 50);
  std::size_t const per_round = 256;
  for (long round = 0; round < rounds; ++round) {
    counts c;
    std::vector<std::unique_ptr<spindle::notify>> notifies;
    std::vector<std::stop_source> stops(per_round);
    for (std::size_t i = 0; i < per_round; ++i)
      notifies.push_back(std::make_unique<spindle::notify>());
    std::atomic<int> waiting{0};
    std::atomic<long> next{-1};
    std::thread aborter([&] {
      for (std::size_t i = 0; i < per_round; ++i) {
        while (next.load(std::memory_order_acquire) < static_cast<long>(i)) {
        }
        stops[i].request_stop();
      }
    });
    auto h = rt.spawn(wake_and_drop(&notifies, &stops, &waiting, &next, &c));
    wait_and_take(h);
    aborter.join();
    // Every task was aborted: each is destroyed at its next poll or, already
    // waiting again, by its abort. One that ran on never ends.
    ASSERT_TRUE(wait_until([&] { return c.alive() == 0; }, 10s))
        << c.alive() << " of " << per_round << " aborted tasks still alive in round " << round
        << ": an abort was lost";
    spindle_test::progress();
  }
}

}  // namespace
