// Tests of spindle::barrier: one leader per phase, reuse across phases by
// tasks on every worker and a plain thread, misuse, cancellation (an aborted
// waiter withdraws its arrival; an abort racing the phase's completion),
// runtime shutdown and cross-worker wakes.
#include "spindle/barrier.hpp"

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

using spindle::barrier;
using spindle::join_handle;
using spindle::task;
using spindle_test::counts;
using spindle_test::scaled;
using spindle_test::tracked;
using spindle_test::wait_and_take;
using sync_test::ended_cancelled;
using sync_test::system_error_of;
using sync_test::wait_for_waiters;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

task<bool> arrive(barrier* b, [[maybe_unused]] tracked local, std::atomic<int>* passed) {
  bool leader = co_await b->arrive_and_wait();
  passed->fetch_add(1);
  co_return leader;
}

TEST(Barrier, SingleParticipantLeadsEveryPhaseWithoutWaiting) {
  spindle::runtime rt{{.workers = 1}};
  barrier b{1};
  auto body = [](barrier* b) -> task<int> {
    int leaders = 0;
    for (int i = 0; i < 5; ++i)
      leaders += co_await b->arrive_and_wait();
    co_return leaders;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, body(&b)), 5);
  EXPECT_EQ(b.phase(), 5u);
  EXPECT_EQ(b.expected(), 1);
}

TEST(Barrier, TheLastArrivalLeadsAndReleasesThePhase) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  barrier b{3};
  std::atomic<int> passed{0};
  auto first = rt.spawn(arrive(&b, tracked(c), &passed));
  auto second = rt.spawn(arrive(&b, tracked(c), &passed));
  ASSERT_TRUE(wait_for_waiters(b, 2));
  EXPECT_EQ(passed.load(), 0);
  EXPECT_EQ(b.phase(), 0u);
  bool leader = b.blocking_arrive_and_wait();  // the last arrival: does not block
  EXPECT_TRUE(leader);
  EXPECT_FALSE(wait_and_take(first));
  EXPECT_FALSE(wait_and_take(second));
  EXPECT_EQ(passed.load(), 2);
  EXPECT_EQ(b.phase(), 1u);
}

TEST(Barrier, ArriveAndDropCompletesThePhaseAndLowersLaterOnes) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  barrier b{3};
  std::atomic<int> passed{0};
  auto first = rt.spawn(arrive(&b, tracked(c), &passed));
  auto second = rt.spawn(arrive(&b, tracked(c), &passed));
  ASSERT_TRUE(wait_for_waiters(b, 2));
  // The third participant leaves: its arrival completes phase 0 without
  // waiting, and the earliest waiter leads it.
  b.arrive_and_drop();
  bool const l1 = wait_and_take(first);
  bool const l2 = wait_and_take(second);
  EXPECT_EQ(static_cast<int>(l1) + static_cast<int>(l2), 1) << "exactly one leader";
  EXPECT_EQ(passed.load(), 2);
  EXPECT_EQ(b.phase(), 1u);
  EXPECT_EQ(b.expected(), 2);
  // Phase 1 needs two arrivals now.
  auto third = rt.spawn(arrive(&b, tracked(c), &passed));
  ASSERT_TRUE(wait_for_waiters(b, 1));
  EXPECT_EQ(b.phase(), 1u);
  EXPECT_TRUE(b.blocking_arrive_and_wait()) << "the second arrival completes phase 1";
  EXPECT_FALSE(wait_and_take(third));
  EXPECT_EQ(b.phase(), 2u);
}

TEST(Barrier, ArriveAndDropWithoutWaitersAndDownToZero) {
  barrier b{2};
  b.arrive_and_drop();  // phase 0 now waits for the one participant left
  EXPECT_EQ(b.phase(), 0u);
  EXPECT_EQ(b.expected(), 1);
  EXPECT_TRUE(b.blocking_arrive_and_wait()) << "completes phase 0 without blocking";
  EXPECT_EQ(b.phase(), 1u);
  b.arrive_and_drop();  // the last participant leaves
  EXPECT_EQ(b.expected(), 0);
  EXPECT_EQ(b.phase(), 1u);
  EXPECT_EQ(system_error_of([&] { b.arrive_and_drop(); }), std::errc::invalid_argument);
}

TEST(Barrier, MisuseErrors) {
  EXPECT_EQ(system_error_of([] { barrier bad{0}; }), std::errc::invalid_argument);
  EXPECT_EQ(system_error_of([] { barrier bad{-3}; }), std::errc::invalid_argument);
  barrier b{2};
  std::error_code code;
  sync_test::await_outside_a_task([&] { return b.arrive_and_wait(); }, &code);
  EXPECT_EQ(code, std::errc::operation_not_permitted);
  spindle::runtime rt{{.workers = 1}};
  auto blocking_inside = [](barrier* b) -> task<bool> {
    co_return system_error_of([&] { (void)b->blocking_arrive_and_wait(); }) ==
        std::errc::operation_not_permitted;
  };
  EXPECT_TRUE(spindle_test::run_on_worker(rt, blocking_inside(&b)));
  // Neither refused call arrived: two real arrivals complete the phase.
  counts c;
  std::atomic<int> passed{0};
  auto h = rt.spawn(arrive(&b, tracked(c), &passed));
  ASSERT_TRUE(wait_for_waiters(b, 1));
  EXPECT_TRUE(b.blocking_arrive_and_wait());
  EXPECT_FALSE(wait_and_take(h));
  EXPECT_EQ(b.phase(), 1u);
}

struct phased {
  explicit phased(int n) : b(n), slots(static_cast<std::size_t>(n)) {}
  barrier b;
  std::vector<std::atomic<long>> slots;  // the phase each participant last finished
  std::atomic<long> leaders{0};
  std::atomic<int> early{0};  // saw a participant that had not arrived yet

  // Arrive at phase `r` as participant `me`, then check everyone did.
  void check_after(long r) {
    for (auto& s : slots) {
      if (s.load() < r) early.fetch_add(1);
    }
  }
};

task<void> run_phases(phased* p, std::size_t me, long rounds) {
  for (long r = 1; r <= rounds; ++r) {
    p->slots[me].store(r);
    if (co_await p->b.arrive_and_wait()) p->leaders.fetch_add(1);
    p->check_after(r);
    if (r % 3 == 0) co_await spindle::yield_now{};
  }
}

TEST(Barrier, ReusableAcrossPhasesOnAllWorkersWithAPlainThread) {
  spindle::runtime rt{{.workers = 4}};
  int const tasks = 15;
  phased p{tasks + 1};
  long const rounds = scaled(400, 150);
  std::vector<join_handle<void>> handles;
  for (int i = 0; i < tasks; ++i) {
    handles.push_back(rt.spawn(run_phases(&p, static_cast<std::size_t>(i), rounds)));
  }
  std::thread outside([&] {
    for (long r = 1; r <= rounds; ++r) {
      p.slots[static_cast<std::size_t>(tasks)].store(r);
      if (p.b.blocking_arrive_and_wait()) p.leaders.fetch_add(1);
      p.check_after(r);
      spindle_test::progress();
    }
  });
  outside.join();
  for (auto& h : handles)
    wait_and_take(h);
  EXPECT_EQ(p.early.load(), 0) << "a phase completed before every participant arrived";
  EXPECT_EQ(p.leaders.load(), rounds) << "not exactly one leader per phase";
  EXPECT_EQ(p.b.phase(), static_cast<std::uint64_t>(rounds));
  EXPECT_EQ(p.b.waiter_count(), 0u);
}

TEST(Barrier, AbortedWaiterWithdrawsItsArrival) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  barrier b{3};
  std::atomic<int> passed{0};
  auto a = rt.spawn(arrive(&b, tracked(c), &passed));
  ASSERT_TRUE(wait_for_waiters(b, 1));
  a.abort();
  EXPECT_TRUE(ended_cancelled(a));
  EXPECT_EQ(b.waiter_count(), 0u);
  auto x = rt.spawn(arrive(&b, tracked(c), &passed));
  auto y = rt.spawn(arrive(&b, tracked(c), &passed));
  ASSERT_TRUE(wait_for_waiters(b, 2));  // A no longer counts: two arrivals wait
  EXPECT_EQ(b.phase(), 0u);
  EXPECT_TRUE(b.blocking_arrive_and_wait());
  EXPECT_FALSE(wait_and_take(x));
  EXPECT_FALSE(wait_and_take(y));
  EXPECT_EQ(passed.load(), 2);
  EXPECT_EQ(b.phase(), 1u);
}

TEST(Barrier, AbortRacingThePhaseCompletion) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  long const rounds = scaled(300, 150);
  int withdrawn = 0;
  for (long r = 0; r < rounds; ++r) {
    barrier b{2};
    std::atomic<int> passed{0};
    auto a = rt.spawn(arrive(&b, tracked(c), &passed));
    ASSERT_TRUE(wait_for_waiters(b, 1));
    std::atomic<bool> ready{false};
    std::atomic<bool> go{false};
    bool t_leader = false;
    int skew = sync_test::skew_for(r);
    // A plain thread arrives (it blocks if A's arrival was withdrawn first).
    std::thread t([&] {
      ready.store(true);
      while (!go.load()) {
      }
      if (skew < 0) sync_test::spin(-skew);
      t_leader = b.blocking_arrive_and_wait();
    });
    while (!ready.load()) {
    }
    go.store(true);
    if (skew > 0) sync_test::spin(skew);
    a.abort();
    bool cancelled = ended_cancelled(a);
    join_handle<bool> extra;
    if (cancelled &&
        spindle_test::wait_until([&] { return b.phase() == 1 || b.waiter_count() == 1; }) &&
        b.phase() == 0) {
      // A withdrew before the thread arrived: the thread waits for a partner.
      ++withdrawn;
      extra = rt.spawn(arrive(&b, tracked(c), &passed));
    }
    t.join();
    int leaders = t_leader ? 1 : 0;
    if (extra.valid()) leaders += wait_and_take(extra) ? 1 : 0;
    EXPECT_EQ(b.phase(), 1u) << "round " << r;
    EXPECT_EQ(b.waiter_count(), 0u);
    // The arrival that completed the phase led it: the thread, or the extra
    // task; A only waited, so never led.
    EXPECT_EQ(leaders, 1) << "round " << r;
    spindle_test::progress();
  }
  EXPECT_EQ(c.alive(), 0);
  RecordProperty("withdrawn_before_the_completion", withdrawn);
}

TEST(Barrier, RuntimeShutdownWithdrawsWaitingArrivals) {
  barrier b{2};
  counts c;
  {
    spindle::runtime rt{{.workers = 2}};
    std::atomic<int> passed{0};
    auto a = rt.spawn(arrive(&b, tracked(c), &passed));
    ASSERT_TRUE(wait_for_waiters(b, 1));
  }
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(b.waiter_count(), 0u);
  std::thread t([&] { (void)b.blocking_arrive_and_wait(); });
  ASSERT_TRUE(wait_for_waiters(b, 1)) << "the destroyed task's arrival still counted";
  EXPECT_TRUE(b.blocking_arrive_and_wait());
  t.join();
}

task<void> arrive_traced(barrier* b, sync_test::waiter_trace* trace) {
  trace->before();
  co_await b->arrive_and_wait();
  trace->after();
}

task<void> lead(barrier* b) {
  bool leader = co_await b->arrive_and_wait();
  EXPECT_TRUE(leader);
}

TEST(Barrier, WaiterWokenFromAnotherWorkerResumesThere) {
  spindle::runtime rt{{.workers = 2}};
  barrier b{2};
  for (int round = 0; round < 5; ++round) {
    sync_test::waiter_trace trace;
    auto h = rt.spawn(arrive_traced(&b, &trace));
    ASSERT_TRUE(wait_for_waiters(b, 1));
    sync_test::wake_from_the_other_worker_async(rt, trace, [&] { return lead(&b); });
    wait_and_take(h);
  }
  EXPECT_EQ(b.phase(), 5u);
}

}  // namespace
