// Tests of spindle::event (manual reset): set wakes every waiter and stays
// set, reset, misuse, a chain of tasks handing an event to the next across
// every worker, setting from outside the runtime and blocking threads,
// cancellation (withdrawal, an abort racing set()), runtime shutdown and
// cross-worker wakes.
#include "spindle/event.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "sync_test_support.hpp"

namespace {

using spindle::event;
using spindle::join_handle;
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

TEST(Event, SetWakesEveryWaiterAndStaysSet) {
  counts c;
  spindle::runtime rt{{.workers = 4}};
  event ev;
  EXPECT_FALSE(ev.is_set());
  std::atomic<int> woken{0};
  int const n = 64;
  std::vector<join_handle<void>> handles;
  for (int i = 0; i < n; ++i)
    handles.push_back(rt.spawn(wait_then_count(&ev, tracked(c), &woken)));
  ASSERT_TRUE(wait_for_waiters(ev, n));
  EXPECT_EQ(woken.load(), 0);
  std::thread([&] { ev.set(); }).join();  // from outside the runtime
  for (auto& h : handles)
    wait_and_take(h);
  EXPECT_EQ(woken.load(), n);
  EXPECT_TRUE(ev.is_set());
  EXPECT_EQ(ev.waiter_count(), 0u);
  // Stays set: a later wait completes at once.
  auto late = rt.spawn(wait_then_count(&ev, tracked(c), &woken));
  wait_and_take(late);
  EXPECT_EQ(woken.load(), n + 1);
  // Reset: waits suspend again until the next set.
  ev.reset();
  EXPECT_FALSE(ev.is_set());
  auto again = rt.spawn(wait_then_count(&ev, tracked(c), &woken));
  ASSERT_TRUE(wait_for_waiters(ev, 1));
  EXPECT_FALSE(again.is_finished());
  ev.set();
  wait_and_take(again);
  EXPECT_EQ(woken.load(), n + 2);
}

TEST(Event, MisuseAndInitiallySet) {
  event unset;
  std::error_code code;
  bool done = false;
  sync_test::await_outside_a_task([&] { return unset.wait(); }, &code, &done);
  EXPECT_EQ(code, std::errc::operation_not_permitted);
  EXPECT_FALSE(done);
  EXPECT_EQ(unset.waiter_count(), 0u);

  event set{true};
  EXPECT_TRUE(set.is_set());
  code = {};
  // Completes without suspending:
  sync_test::await_outside_a_task([&] { return set.wait(); }, &code, &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(code, std::error_code{});
  set.blocking_wait();

  spindle::runtime rt{{.workers = 1}};
  auto blocking_inside = [](event* ev) -> task<bool> {
    co_return system_error_of([&] { ev->blocking_wait(); }) == std::errc::operation_not_permitted;
  };
  EXPECT_TRUE(spindle_test::run_on_worker(rt, blocking_inside(&unset)));
}

TEST(Event, WaitersWokenBySetCompleteEvenIfResetFollows) {
  counts c;
  spindle::runtime rt{{.workers = 1}};
  event ev;
  std::atomic<int> woken{0};
  std::atomic<bool> running{false};
  std::atomic<bool> stop{false};
  auto a = rt.spawn(wait_then_count(&ev, tracked(c), &woken));
  auto b = rt.spawn(wait_then_count(&ev, tracked(c), &woken));
  ASSERT_TRUE(wait_for_waiters(ev, 2));
  auto spinner = rt.spawn(sync_test::occupy_worker(&running, &stop));
  ASSERT_TRUE(spindle_test::wait_until([&] { return running.load(); }));
  ev.set();
  ev.reset();  // before the woken waiters run
  stop.store(true);
  wait_and_take(spinner);
  wait_and_take(a);
  wait_and_take(b);
  EXPECT_EQ(woken.load(), 2);
}

/// Waits for its event, then sets the next one.
task<void> relay(event* mine, event* next, std::atomic<long>* passed) {
  co_await mine->wait();
  passed->fetch_add(1);
  next->set();
}

TEST(Event, RelayAcrossAllWorkers) {
  spindle::runtime rt{{.workers = 4}};
  long const n = scaled(2000, 400);
  std::vector<std::unique_ptr<event>> events;
  for (long i = 0; i <= n; ++i)
    events.push_back(std::make_unique<event>());
  std::atomic<long> passed{0};
  std::vector<join_handle<void>> handles;
  // Spawned last-first, so that most wait before their predecessor sets them.
  for (long i = n - 1; i >= 0; --i) {
    handles.push_back(rt.spawn(relay(events[static_cast<std::size_t>(i)].get(),
                                     events[static_cast<std::size_t>(i) + 1].get(), &passed)));
  }
  events[0]->set();
  events[static_cast<std::size_t>(n)]->blocking_wait();
  EXPECT_EQ(passed.load(), n);
  for (auto& h : handles)
    wait_and_take(h);
}

TEST(Event, BlockingWaitersOnPlainThreads) {
  spindle::runtime rt{{.workers = 2}};
  event ev;
  std::atomic<int> woken{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      ev.blocking_wait();
      woken.fetch_add(1);
    });
  }
  ASSERT_TRUE(wait_for_waiters(ev, 3));
  auto setter = [](event* ev) -> task<void> {
    ev->set();
    co_return;
  };
  spindle_test::run_on_worker(rt, setter(&ev));
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(woken.load(), 3);
}

TEST(Event, AbortedWaiterLeavesTheList) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  event ev;
  std::atomic<int> woken{0};
  auto a = rt.spawn(wait_then_count(&ev, tracked(c), &woken));
  auto b = rt.spawn(wait_then_count(&ev, tracked(c), &woken));
  ASSERT_TRUE(wait_for_waiters(ev, 2));
  a.abort();
  EXPECT_TRUE(ended_cancelled(a));
  EXPECT_EQ(ev.waiter_count(), 1u);
  ev.set();
  EXPECT_FALSE(ended_cancelled(b));
  EXPECT_EQ(woken.load(), 1);
}

TEST(Event, AbortRacingSet) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  long const rounds = scaled(400, 150);
  for (long r = 0; r < rounds; ++r) {
    event ev;
    std::atomic<int> woken{0};
    auto a = rt.spawn(wait_then_count(&ev, tracked(c), &woken));
    auto b = rt.spawn(wait_then_count(&ev, tracked(c), &woken));
    ASSERT_TRUE(wait_for_waiters(ev, 2));
    int skew = sync_test::skew_for(r);
    sync_test::race([&] { ev.set(); }, [&] { a.abort(); }, skew);
    bool cancelled = ended_cancelled(a);
    ASSERT_FALSE(ended_cancelled(b)) << "round " << r;
    EXPECT_EQ(woken.load(), cancelled ? 1 : 2);
    EXPECT_EQ(ev.waiter_count(), 0u);
    spindle_test::progress();
  }
  EXPECT_EQ(c.alive(), 0);
}

TEST(Event, RuntimeShutdownWithdrawsWaitingTasks) {
  event ev;
  counts c;
  {
    spindle::runtime rt{{.workers = 2}};
    std::atomic<int> woken{0};
    auto a = rt.spawn(wait_then_count(&ev, tracked(c), &woken));
    ASSERT_TRUE(wait_for_waiters(ev, 1));
  }
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(ev.waiter_count(), 0u);
  ev.set();
}

TEST(Event, WaiterWokenFromAnotherWorkerResumesThere) {
  spindle::runtime rt{{.workers = 2}};
  for (int round = 0; round < 5; ++round) {
    event ev;
    sync_test::waiter_trace trace;
    auto h = rt.spawn(wait_traced(&ev, &trace));
    ASSERT_TRUE(wait_for_waiters(ev, 1));
    sync_test::wake_from_the_other_worker(rt, trace, [&] { ev.set(); });
    wait_and_take(h);
  }
}

}  // namespace
