// Tests of spindle::mutex and spindle::mutex_guard: semantics, mutual
// exclusion under contention from every worker and from plain threads, FIFO
// hand-off, unlocking from outside the runtime, cancellation (withdrawal,
// a lock handed to an aborted task, the race of both), runtime shutdown and
// wakes that move a task to another worker.
#include "spindle/mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <numeric>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/event.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "sync_test_support.hpp"

namespace {

using spindle::join_handle;
using spindle::mutex;
using spindle::mutex_guard;
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

task<void> lock_then_flag(mutex* m, [[maybe_unused]] tracked local, std::atomic<bool>* resumed) {
  auto guard = co_await m->lock();
  resumed->store(true);
}

TEST(Mutex, LockTryLockAndUnlock) {
  spindle::runtime rt{{.workers = 2}};
  mutex m;
  auto body = [](mutex* m) -> task<int> {
    int checks = 0;
    {
      auto guard = co_await m->lock();
      checks += guard.owns_lock() && guard.mutex() == m;
      checks += !m->try_lock();
    }
    checks += m->try_lock();  // the guard unlocked
    m->unlock();
    {
      auto guard = co_await m->lock();
      guard.unlock();  // early unlock; the destructor does nothing more
      checks += !guard.owns_lock();
      checks += m->try_lock();
      m->unlock();
    }
    co_return checks;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, body(&m)), 5);
  EXPECT_EQ(rt.block_on(body(&m)), 5);
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(Mutex, GuardMovesAdoptsAndReleases) {
  mutex m;
  ASSERT_TRUE(m.try_lock());
  mutex_guard a{m, std::adopt_lock};
  mutex_guard b{std::move(a)};
  EXPECT_FALSE(a.owns_lock());
  EXPECT_TRUE(b.owns_lock());
  mutex_guard c;
  c = std::move(b);
  EXPECT_FALSE(m.try_lock());
  c = mutex_guard{};  // move-assigning unlocks the old lock
  EXPECT_TRUE(m.try_lock());
  mutex_guard d{m, std::adopt_lock};
  EXPECT_EQ(d.release(), &m);  // no longer managed: still locked
  EXPECT_FALSE(m.try_lock());
  m.unlock();
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(Mutex, MisuseThrowsOperationNotPermitted) {
  mutex m;
  EXPECT_EQ(system_error_of([&] { m.unlock(); }), std::errc::operation_not_permitted);
  std::error_code outside;
  sync_test::await_outside_a_task([&] { return m.lock(); }, &outside);
  EXPECT_EQ(outside, std::errc::operation_not_permitted);
  EXPECT_TRUE(m.try_lock()) << "a refused await took the lock";
  m.unlock();

  spindle::runtime rt{{.workers = 1}};
  auto blocking_inside = [](mutex* m) -> task<bool> {
    co_return system_error_of([&] { (void)m->blocking_lock(); }) ==
        std::errc::operation_not_permitted;
  };
  EXPECT_TRUE(spindle_test::run_on_worker(rt, blocking_inside(&m)));
  EXPECT_EQ(m.waiter_count(), 0u);
}

struct shared_counter {
  mutex m;
  long value = 0;  // not atomic: the mutex protects it
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
};

task<void> increment(shared_counter* s, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    auto guard = co_await s->m.lock();
    if (s->inside.fetch_add(1) != 0) s->overlap.store(true);
    long v = s->value;
    // Hold the lock across a suspension now and then, so that waiters queue.
    if (i % 4 == 0) co_await spindle::yield_now{};
    s->value = v + 1;
    s->inside.fetch_sub(1);
  }
}

TEST(Mutex, MutualExclusionUnderContentionFromAllWorkersAndThreads) {
  spindle::runtime rt{{.workers = 4}};
  shared_counter s;
  long const tasks = scaled(2000, 200);
  int const rounds = 10;
  int const thread_rounds = static_cast<int>(scaled(2000, 300));
  std::vector<join_handle<void>> handles;
  handles.reserve(static_cast<std::size_t>(tasks));
  for (long i = 0; i < tasks; ++i)
    handles.push_back(rt.spawn(increment(&s, rounds)));
  // Two plain threads take the same lock with blocking_lock.
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < thread_rounds; ++i) {
        auto guard = s.m.blocking_lock();
        if (s.inside.fetch_add(1) != 0) s.overlap.store(true);
        ++s.value;
        s.inside.fetch_sub(1);
      }
    });
  }
  for (auto& h : handles) {
    wait_and_take(h);
    spindle_test::progress();
  }
  for (auto& t : threads)
    t.join();
  EXPECT_FALSE(s.overlap.load()) << "two holders inside the critical section";
  EXPECT_EQ(s.value, tasks * rounds + 2L * thread_rounds);
  EXPECT_EQ(s.m.waiter_count(), 0u);
  EXPECT_TRUE(s.m.try_lock());
  s.m.unlock();
}

task<void> lock_and_record(mutex* m, std::vector<int>* order, int id) {
  auto guard = co_await m->lock();
  order->push_back(id);  // guarded by the mutex
}

TEST(Mutex, HandOffOrderIsArrivalOrder) {
  spindle::runtime rt{{.workers = 4}};
  for (int round = 0; round < 3; ++round) {
    mutex m;
    ASSERT_TRUE(m.try_lock());
    std::vector<int> order;
    std::vector<join_handle<void>> handles;
    int const n = 16;
    for (int i = 0; i < n; ++i) {
      handles.push_back(rt.spawn(lock_and_record(&m, &order, i)));
      ASSERT_TRUE(wait_for_waiters(m, static_cast<std::size_t>(i) + 1));
    }
    m.unlock();  // from the test thread, outside the runtime
    for (auto& h : handles)
      wait_and_take(h);
    std::vector<int> expected(n);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(order, expected);
  }
}

task<void> lock_hold_until(mutex* m, spindle::event* got, spindle::event* release) {
  auto guard = co_await m->lock();
  got->set();
  co_await release->wait();
}

TEST(Mutex, UnlockHandsTheLockToTheWaiterWithoutBarging) {
  spindle::runtime rt{{.workers = 2}};
  mutex m;
  spindle::event got;
  spindle::event release;
  ASSERT_TRUE(m.try_lock());
  auto h = rt.spawn(lock_hold_until(&m, &got, &release));
  ASSERT_TRUE(wait_for_waiters(m, 1));
  // Unlocked from a plain thread: the lock passes to the waiter, so it is
  // never free in between, even before the waiter runs.
  std::thread([&] { m.unlock(); }).join();
  EXPECT_FALSE(m.try_lock()) << "try_lock barged past a waiter the lock was handed to";
  got.blocking_wait();
  EXPECT_FALSE(m.try_lock());
  release.set();
  wait_and_take(h);
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(Mutex, AbortedWaiterLeavesTheQueue) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  mutex m;
  std::atomic<bool> a_resumed{false};
  std::atomic<bool> b_resumed{false};
  ASSERT_TRUE(m.try_lock());
  auto a = rt.spawn(lock_then_flag(&m, tracked(c), &a_resumed));
  ASSERT_TRUE(wait_for_waiters(m, 1));
  auto b = rt.spawn(lock_then_flag(&m, tracked(c), &b_resumed));
  ASSERT_TRUE(wait_for_waiters(m, 2));
  a.abort();
  EXPECT_TRUE(ended_cancelled(a));
  EXPECT_FALSE(a_resumed.load());
  EXPECT_EQ(m.waiter_count(), 1u);
  m.unlock();
  EXPECT_FALSE(ended_cancelled(b));
  EXPECT_TRUE(b_resumed.load());
  EXPECT_TRUE(m.try_lock()) << "the lock was lost";
  m.unlock();
  a = join_handle<void>{};  // a finished frame lives until its handle is dropped
  b = join_handle<void>{};
  EXPECT_EQ(c.alive(), 0);
}

// The lock is handed to A while the only worker is busy, so A cannot resume
// before it is aborted: A's destroyed awaiter must pass the lock on to B.
TEST(Mutex, LockHandedToAnAbortedTaskIsPassedOn) {
  counts c;
  spindle::runtime rt{{.workers = 1}};
  mutex m;
  std::atomic<bool> a_resumed{false};
  std::atomic<bool> b_resumed{false};
  std::atomic<bool> running{false};
  std::atomic<bool> stop{false};
  ASSERT_TRUE(m.try_lock());
  auto a = rt.spawn(lock_then_flag(&m, tracked(c), &a_resumed));
  ASSERT_TRUE(wait_for_waiters(m, 1));
  auto b = rt.spawn(lock_then_flag(&m, tracked(c), &b_resumed));
  ASSERT_TRUE(wait_for_waiters(m, 2));
  auto spinner = rt.spawn(sync_test::occupy_worker(&running, &stop));
  ASSERT_TRUE(spindle_test::wait_until([&] { return running.load(); }));
  m.unlock();  // handed to A, which is queued behind the spinner
  EXPECT_EQ(m.waiter_count(), 1u);
  EXPECT_FALSE(m.try_lock());
  a.abort();
  stop.store(true);
  wait_and_take(spinner);
  EXPECT_TRUE(ended_cancelled(a));
  EXPECT_FALSE(a_resumed.load()) << "an aborted task resumed";
  EXPECT_FALSE(ended_cancelled(b)) << "the lock handed to the aborted task was lost";
  EXPECT_TRUE(b_resumed.load());
  EXPECT_TRUE(m.try_lock());
  m.unlock();
  a = join_handle<void>{};
  b = join_handle<void>{};
  EXPECT_EQ(c.alive(), 0);
}

TEST(Mutex, AbortRacingTheHandOffNeverLosesTheLock) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  mutex m;
  long const rounds = scaled(400, 150);
  int a_cancelled = 0;
  for (long r = 0; r < rounds; ++r) {
    std::atomic<bool> a_resumed{false};
    std::atomic<bool> b_resumed{false};
    ASSERT_TRUE(m.try_lock());
    auto a = rt.spawn(lock_then_flag(&m, tracked(c), &a_resumed));
    ASSERT_TRUE(wait_for_waiters(m, 1));
    auto b = rt.spawn(lock_then_flag(&m, tracked(c), &b_resumed));
    ASSERT_TRUE(wait_for_waiters(m, 2));
    int skew = sync_test::skew_for(r);
    sync_test::race([&] { m.unlock(); }, [&] { a.abort(); }, skew);
    bool cancelled = ended_cancelled(a);
    a_cancelled += cancelled;
    EXPECT_EQ(a_resumed.load(), !cancelled);
    ASSERT_FALSE(ended_cancelled(b)) << "round " << r << ": the lock was lost";
    EXPECT_TRUE(b_resumed.load());
    ASSERT_TRUE(m.try_lock()) << "round " << r << ": the lock was not released";
    m.unlock();
    spindle_test::progress();
  }
  EXPECT_EQ(c.alive(), 0);
  RecordProperty("aborted_before_resuming", a_cancelled);
}

TEST(Mutex, RuntimeShutdownWithdrawsWaitingTasks) {
  mutex m;
  counts c;
  ASSERT_TRUE(m.try_lock());
  {
    spindle::runtime rt{{.workers = 2}};
    std::atomic<bool> resumed{false};
    auto a = rt.spawn(lock_then_flag(&m, tracked(c), &resumed));
    auto b = rt.spawn(lock_then_flag(&m, tracked(c), &resumed));
    ASSERT_TRUE(wait_for_waiters(m, 2));
  }  // destroys both waiting frames
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(m.waiter_count(), 0u);
  m.unlock();
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

task<void> lock_traced(mutex* m, sync_test::waiter_trace* trace, long* value) {
  trace->before();
  auto guard = co_await m->lock();
  trace->after();
  ++*value;
}

TEST(Mutex, WaiterWokenFromAnotherWorkerResumesThere) {
  spindle::runtime rt{{.workers = 2}};
  mutex m;
  long value = 0;
  for (int round = 0; round < 5; ++round) {
    sync_test::waiter_trace trace;
    ASSERT_TRUE(m.try_lock());
    auto h = rt.spawn(lock_traced(&m, &trace, &value));
    ASSERT_TRUE(wait_for_waiters(m, 1));
    sync_test::wake_from_the_other_worker(rt, trace, [&] { m.unlock(); });
    wait_and_take(h);
  }
  EXPECT_EQ(value, 5);
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

}  // namespace
