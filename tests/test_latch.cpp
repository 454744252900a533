// Tests of spindle::latch: counting down to zero, misuse, many waiters
// released by count-downs from tasks on every worker and from plain threads,
// arrive_and_wait, blocking waiters, cancellation (withdrawal, an abort
// racing the last count_down), runtime shutdown and cross-worker wakes.
#include "spindle/latch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
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
using spindle::latch;
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

TEST(Latch, CountsDownToZero) {
  latch l{3};
  EXPECT_FALSE(l.try_wait());
  l.count_down();
  EXPECT_FALSE(l.try_wait());
  l.count_down(2);
  EXPECT_TRUE(l.try_wait());
  l.count_down(0);  // allowed at zero
  l.blocking_wait();
  latch zero{0};
  EXPECT_TRUE(zero.try_wait());

  spindle::runtime rt{{.workers = 2}};
  counts c;
  std::atomic<int> woken{0};
  auto h = rt.spawn(wait_then_count(&l, tracked(c), &woken));
  wait_and_take(h);  // completes at once
  EXPECT_EQ(woken.load(), 1);
}

TEST(Latch, MisuseErrors) {
  EXPECT_EQ(system_error_of([] { latch bad{-1}; }), std::errc::invalid_argument);
  latch l{2};
  EXPECT_EQ(system_error_of([&] { l.count_down(3); }), std::errc::invalid_argument);
  EXPECT_EQ(system_error_of([&] { l.count_down(-1); }), std::errc::invalid_argument);
  EXPECT_FALSE(l.try_wait()) << "a refused count_down changed the count";
  l.count_down(2);
  EXPECT_TRUE(l.try_wait());
  EXPECT_EQ(system_error_of([&] { l.count_down(); }), std::errc::invalid_argument);

  latch pending{1};
  std::error_code code;
  sync_test::await_outside_a_task([&] { return pending.wait(); }, &code);
  EXPECT_EQ(code, std::errc::operation_not_permitted);
  spindle::runtime rt{{.workers = 1}};
  auto blocking_inside = [](latch* l) -> task<bool> {
    co_return system_error_of([&] { l->blocking_wait(); }) == std::errc::operation_not_permitted;
  };
  EXPECT_TRUE(spindle_test::run_on_worker(rt, blocking_inside(&pending)));
}

task<void> count_down_task(latch* l, std::atomic<long>* done) {
  done->fetch_add(1);
  l->count_down();
  co_return;
}

task<void> wait_and_check(latch* l, std::atomic<long>* done, long expected, std::atomic<int>* bad) {
  co_await l->wait();
  if (done->load() != expected) bad->fetch_add(1);  // released early
}

TEST(Latch, ReleasedByCountDownsFromAllWorkersAndThreads) {
  spindle::runtime rt{{.workers = 4}};
  for (int round = 0; round < 5; ++round) {
    long const tasks = scaled(600, 60);
    long const per_thread = scaled(200, 20);
    long const total = tasks + 2 * per_thread;
    latch l{total};
    std::atomic<long> done{0};
    std::atomic<int> bad{0};
    std::vector<join_handle<void>> waiters;
    for (int i = 0; i < 32; ++i)
      waiters.push_back(rt.spawn(wait_and_check(&l, &done, total, &bad)));
    std::vector<join_handle<void>> handles;
    for (long i = 0; i < tasks; ++i)
      handles.push_back(rt.spawn(count_down_task(&l, &done)));
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&] {
        for (long i = 0; i < per_thread; ++i) {
          done.fetch_add(1);
          l.count_down();
        }
      });
    }
    std::thread blocked([&] { l.blocking_wait(); });
    for (auto& h : handles)
      wait_and_take(h);
    for (auto& t : threads)
      t.join();
    blocked.join();
    for (auto& h : waiters)
      wait_and_take(h);
    EXPECT_EQ(bad.load(), 0) << "a waiter was released before the count reached zero";
    EXPECT_TRUE(l.try_wait());
    EXPECT_EQ(l.waiter_count(), 0u);
    spindle_test::progress();
  }
}

task<void> arrive_then_count(latch* l, std::atomic<int>* passed) {
  co_await l->arrive_and_wait();
  passed->fetch_add(1);
}

TEST(Latch, ArriveAndWaitReleasesEveryoneAtTheLastArrival) {
  spindle::runtime rt{{.workers = 4}};
  int const n = 16;
  latch l{n};
  std::atomic<int> passed{0};
  std::vector<join_handle<void>> handles;
  for (int i = 0; i < n - 1; ++i)
    handles.push_back(rt.spawn(arrive_then_count(&l, &passed)));
  ASSERT_TRUE(wait_for_waiters(l, n - 1));
  EXPECT_EQ(passed.load(), 0);
  handles.push_back(rt.spawn(arrive_then_count(&l, &passed)));
  for (auto& h : handles)
    wait_and_take(h);
  EXPECT_EQ(passed.load(), n);
}

TEST(Latch, AbortedWaiterLeavesTheList) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  latch l{1};
  std::atomic<int> woken{0};
  auto a = rt.spawn(wait_then_count(&l, tracked(c), &woken));
  auto b = rt.spawn(wait_then_count(&l, tracked(c), &woken));
  ASSERT_TRUE(wait_for_waiters(l, 2));
  a.abort();
  EXPECT_TRUE(ended_cancelled(a));
  EXPECT_EQ(l.waiter_count(), 1u);
  std::thread([&] { l.count_down(); }).join();
  EXPECT_FALSE(ended_cancelled(b));
  EXPECT_EQ(woken.load(), 1);
}

TEST(Latch, AbortRacingTheLastCountDown) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  long const rounds = scaled(400, 150);
  for (long r = 0; r < rounds; ++r) {
    latch l{1};
    std::atomic<int> woken{0};
    auto a = rt.spawn(wait_then_count(&l, tracked(c), &woken));
    auto b = rt.spawn(wait_then_count(&l, tracked(c), &woken));
    ASSERT_TRUE(wait_for_waiters(l, 2));
    int skew = sync_test::skew_for(r);
    sync_test::race([&] { l.count_down(); }, [&] { a.abort(); }, skew);
    bool cancelled = ended_cancelled(a);
    ASSERT_FALSE(ended_cancelled(b)) << "round " << r;
    EXPECT_EQ(woken.load(), cancelled ? 1 : 2);
    EXPECT_EQ(l.waiter_count(), 0u);
    spindle_test::progress();
  }
  EXPECT_EQ(c.alive(), 0);
}

TEST(Latch, RuntimeShutdownWithdrawsWaitingTasks) {
  latch l{1};
  counts c;
  {
    spindle::runtime rt{{.workers = 2}};
    std::atomic<int> woken{0};
    auto a = rt.spawn(wait_then_count(&l, tracked(c), &woken));
    ASSERT_TRUE(wait_for_waiters(l, 1));
  }
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(l.waiter_count(), 0u);
  l.count_down();
}

TEST(Latch, WaiterWokenFromAnotherWorkerResumesThere) {
  spindle::runtime rt{{.workers = 2}};
  for (int round = 0; round < 5; ++round) {
    latch l{1};
    sync_test::waiter_trace trace;
    auto h = rt.spawn(wait_traced(&l, &trace));
    ASSERT_TRUE(wait_for_waiters(l, 1));
    sync_test::wake_from_the_other_worker(rt, trace, [&] { l.count_down(); });
    wait_and_take(h);
  }
}

}  // namespace
