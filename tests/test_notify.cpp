// Tests of spindle::notify (Tokio Notify semantics): the stored permit of
// notify_one, notify_all waking only current waiters, FIFO order, awaitables
// registered at creation for notify_all, producers and consumers on every
// worker and plain threads, cancellation (withdrawal, a notify_one handed to
// an aborted task being passed on, the race of both), runtime shutdown and
// cross-worker wakes.
#include "spindle/notify.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <numeric>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "sync_test_support.hpp"

namespace {

using spindle::join_handle;
using spindle::notify;
using spindle::task;
using spindle_test::counts;
using spindle_test::scaled;
using spindle_test::tracked;
using spindle_test::wait_and_take;
using sync_test::ended_cancelled;
using sync_test::system_error_of;
using sync_test::wait_for_waiters;
using sync_test::wait_then_count;
using sync_test::wait_traced;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

/// True when a fresh waiter suspends (no permit stored); the waiter is then
/// released with notify_one. False when it completed at once.
bool fresh_waiter_suspends(spindle::runtime& rt, notify& n) {
  counts c;
  std::atomic<int> woken{0};
  auto h = rt.spawn(wait_then_count(&n, tracked(c), &woken));
  EXPECT_TRUE(spindle_test::wait_until([&] { return h.is_finished() || n.waiter_count() == 1; }));
  bool suspended = !h.is_finished();
  if (suspended) n.notify_one();
  wait_and_take(h);
  return suspended;
}

TEST(Notify, NotifyOneWithoutWaiterStoresOnePermit) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  notify n;
  n.notify_one();
  n.notify_one();  // still one permit
  std::atomic<int> woken{0};
  auto first = rt.spawn(wait_then_count(&n, tracked(c), &woken));
  wait_and_take(first);  // took the permit without waiting
  EXPECT_EQ(woken.load(), 1);
  auto second = rt.spawn(wait_then_count(&n, tracked(c), &woken));
  ASSERT_TRUE(wait_for_waiters(n, 1)) << "a second permit was stored";
  EXPECT_FALSE(second.is_finished());
  std::thread([&] { n.notify_one(); }).join();  // from outside the runtime
  wait_and_take(second);
  EXPECT_EQ(woken.load(), 2);
  EXPECT_TRUE(fresh_waiter_suspends(rt, n));
}

TEST(Notify, NotifyAllWakesCurrentWaitersOnly) {
  counts c;
  spindle::runtime rt{{.workers = 4}};
  notify n;
  std::atomic<int> woken{0};
  std::vector<join_handle<void>> handles;
  for (int i = 0; i < 8; ++i)
    handles.push_back(rt.spawn(wait_then_count(&n, tracked(c), &woken)));
  ASSERT_TRUE(wait_for_waiters(n, 8));
  n.notify_all();
  for (auto& h : handles)
    wait_and_take(h);
  EXPECT_EQ(woken.load(), 8);
  EXPECT_TRUE(fresh_waiter_suspends(rt, n)) << "notify_all stored a permit";
  // A stored permit survives notify_all.
  n.notify_one();
  n.notify_all();
  EXPECT_FALSE(fresh_waiter_suspends(rt, n)) << "notify_all consumed the stored permit";
}

task<void> wait_record(notify* n, std::atomic<int>* seq, int* slot) {
  co_await n->wait();
  *slot = seq->fetch_add(1);
}

TEST(Notify, NotifyOneWakesInArrivalOrder) {
  spindle::runtime rt{{.workers = 4}};
  notify n;
  std::atomic<int> seq{0};
  int const count = 10;
  std::vector<int> served(count, -1);
  std::vector<join_handle<void>> handles;
  for (int i = 0; i < count; ++i) {
    handles.push_back(rt.spawn(wait_record(&n, &seq, &served[i])));
    ASSERT_TRUE(wait_for_waiters(n, static_cast<std::size_t>(i) + 1));
  }
  for (int i = 0; i < count; ++i) {
    n.notify_one();
    wait_and_take(handles[static_cast<std::size_t>(i)]);
  }
  std::vector<int> expected(count);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(served, expected);
}

TEST(Notify, AwaitableCreatedBeforeNotifyAllCompletes) {
  spindle::runtime rt{{.workers = 2}};
  notify n;
  auto body = [](notify* n) -> task<int> {
    auto registered = n->wait();  // registered for notify_all from here
    n->notify_all();              // nobody is waiting yet
    co_await registered;          // completes at once
    co_return 1;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, body(&n)), 1);
  EXPECT_TRUE(fresh_waiter_suspends(rt, n)) << "notify_all stored a permit";
}

TEST(Notify, Misuse) {
  notify n;
  std::error_code code;
  sync_test::await_outside_a_task([&] { return n.wait(); }, &code);
  EXPECT_EQ(code, std::errc::operation_not_permitted);
  EXPECT_EQ(n.waiter_count(), 0u);
  spindle::runtime rt{{.workers = 1}};
  auto blocking_inside = [](notify* n) -> task<bool> {
    co_return system_error_of([&] { n->blocking_wait(); }) == std::errc::operation_not_permitted;
  };
  EXPECT_TRUE(spindle_test::run_on_worker(rt, blocking_inside(&n)));
}

struct queue_state {
  notify n;
  std::atomic<long> items{0};
  std::atomic<long> consumed{0};
  std::atomic<bool> done{false};
};

task<void> produce(queue_state* q, int count) {
  for (int i = 0; i < count; ++i) {
    q->items.fetch_add(1);
    q->n.notify_one();
    if (i % 8 == 0) co_await spindle::yield_now{};
  }
}

task<void> consume(queue_state* q) {
  for (;;) {
    long have = q->items.load();
    while (have > 0) {
      if (q->items.compare_exchange_weak(have, have - 1)) {
        q->consumed.fetch_add(1);
        have = q->items.load();
      }
    }
    // Registered before checking `done`, so a notify_all in between counts.
    auto w = q->n.wait();
    if (q->done.load() && q->items.load() == 0) co_return;
    if (q->items.load() > 0) continue;
    co_await w;
  }
}

TEST(Notify, ProducersAndConsumersOnAllWorkersAndThreads) {
  spindle::runtime rt{{.workers = 4}};
  queue_state q;
  int const producers = 16;
  int const per_producer = static_cast<int>(scaled(2000, 400));
  std::vector<join_handle<void>> consumers;
  for (int i = 0; i < 4; ++i)
    consumers.push_back(rt.spawn(consume(&q)));
  std::vector<join_handle<void>> handles;
  for (int i = 0; i < producers; ++i)
    handles.push_back(rt.spawn(produce(&q, per_producer)));
  std::thread outside([&] {
    for (int i = 0; i < per_producer; ++i) {
      q.items.fetch_add(1);
      q.n.notify_one();
    }
  });
  for (auto& h : handles)
    wait_and_take(h);
  outside.join();
  long const total = static_cast<long>(producers + 1) * per_producer;
  ASSERT_TRUE(spindle_test::wait_until([&] { return q.consumed.load() == total; }))
      << "consumed " << q.consumed.load() << " of " << total << " (lost wake-up?)";
  q.done.store(true);
  q.n.notify_all();
  for (auto& h : consumers)
    wait_and_take(h);
  EXPECT_EQ(q.consumed.load(), total);
}

TEST(Notify, BlockingWaitOnAPlainThread) {
  spindle::runtime rt{{.workers = 2}};
  notify n;
  std::atomic<bool> woken{false};
  std::thread t([&] {
    n.blocking_wait();
    woken.store(true);
  });
  ASSERT_TRUE(wait_for_waiters(n, 1));
  auto notifier = [](notify* n) -> task<void> {
    n->notify_one();
    co_return;
  };
  spindle_test::run_on_worker(rt, notifier(&n));
  t.join();
  EXPECT_TRUE(woken.load());
}

TEST(Notify, AbortedWaiterLeavesTheList) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  notify n;
  std::atomic<int> woken{0};
  auto a = rt.spawn(wait_then_count(&n, tracked(c), &woken));
  ASSERT_TRUE(wait_for_waiters(n, 1));
  auto b = rt.spawn(wait_then_count(&n, tracked(c), &woken));
  ASSERT_TRUE(wait_for_waiters(n, 2));
  a.abort();
  EXPECT_TRUE(ended_cancelled(a));
  EXPECT_EQ(n.waiter_count(), 1u);
  n.notify_one();  // goes to B, the only waiter
  EXPECT_FALSE(ended_cancelled(b));
  EXPECT_EQ(woken.load(), 1);
  EXPECT_TRUE(fresh_waiter_suspends(rt, n));
}

// notify_one picks A while the only worker is busy, so A cannot resume
// before it is aborted: the notification passes to B, or, with nobody
// left, becomes the stored permit.
TEST(Notify, NotifyOneHandedToAnAbortedTaskIsPassedOn) {
  for (bool with_second_waiter : {true, false}) {
    counts c;
    spindle::runtime rt{{.workers = 1}};
    notify n;
    std::atomic<int> woken{0};
    std::atomic<bool> running{false};
    std::atomic<bool> stop{false};
    auto a = rt.spawn(wait_then_count(&n, tracked(c), &woken));
    ASSERT_TRUE(wait_for_waiters(n, 1));
    join_handle<void> b;
    if (with_second_waiter) {
      b = rt.spawn(wait_then_count(&n, tracked(c), &woken));
      ASSERT_TRUE(wait_for_waiters(n, 2));
    }
    auto spinner = rt.spawn(sync_test::occupy_worker(&running, &stop));
    ASSERT_TRUE(spindle_test::wait_until([&] { return running.load(); }));
    n.notify_one();  // picks A, queued behind the spinner
    a.abort();
    stop.store(true);
    wait_and_take(spinner);
    EXPECT_TRUE(ended_cancelled(a));
    if (with_second_waiter) {
      EXPECT_FALSE(ended_cancelled(b)) << "the notification given to the aborted task was lost";
      EXPECT_EQ(woken.load(), 1);
      EXPECT_TRUE(fresh_waiter_suspends(rt, n));
    } else {
      EXPECT_EQ(woken.load(), 0);
      EXPECT_FALSE(fresh_waiter_suspends(rt, n)) << "the notification was not stored as a permit";
    }
  }
}

TEST(Notify, AbortRacingNotifyOneLosesAndDuplicatesNothing) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  long const rounds = scaled(300, 150);
  for (long r = 0; r < rounds; ++r) {
    notify n;
    std::atomic<int> woken{0};
    auto a = rt.spawn(wait_then_count(&n, tracked(c), &woken));
    ASSERT_TRUE(wait_for_waiters(n, 1));
    auto b = rt.spawn(wait_then_count(&n, tracked(c), &woken));
    ASSERT_TRUE(wait_for_waiters(n, 2));
    int skew = sync_test::skew_for(r);
    sync_test::race([&] { n.notify_one(); }, [&] { a.abort(); }, skew);
    bool cancelled = ended_cancelled(a);
    if (cancelled) {
      // Withdrawn before the notify (B got it), or picked and passed to B.
      ASSERT_FALSE(ended_cancelled(b)) << "round " << r << ": the notification was lost";
    } else {
      // A consumed it; B still waits.
      ASSERT_TRUE(wait_for_waiters(n, 1));
      EXPECT_FALSE(b.is_finished());
      n.notify_one();
      EXPECT_FALSE(ended_cancelled(b));
    }
    EXPECT_EQ(woken.load(), cancelled ? 1 : 2);
    ASSERT_TRUE(fresh_waiter_suspends(rt, n)) << "round " << r << ": a permit was duplicated";
    spindle_test::progress();
  }
}

TEST(Notify, RuntimeShutdownWithdrawsWaitingTasks) {
  notify n;
  counts c;
  {
    spindle::runtime rt{{.workers = 2}};
    std::atomic<int> woken{0};
    auto a = rt.spawn(wait_then_count(&n, tracked(c), &woken));
    ASSERT_TRUE(wait_for_waiters(n, 1));
  }
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(n.waiter_count(), 0u);
}

TEST(Notify, WaiterWokenFromAnotherWorkerResumesThere) {
  spindle::runtime rt{{.workers = 2}};
  notify n;
  for (int round = 0; round < 6; ++round) {
    sync_test::waiter_trace trace;
    auto h = rt.spawn(wait_traced(&n, &trace));
    ASSERT_TRUE(wait_for_waiters(n, 1));
    sync_test::wake_from_the_other_worker(rt, trace, [&, round] {
      if (round % 2 == 0) {
        n.notify_one();
      } else {
        n.notify_all();
      }
    });
    wait_and_take(h);
  }
}

}  // namespace
