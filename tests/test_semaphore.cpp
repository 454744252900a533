// Tests of spindle::semaphore and spindle::semaphore_permit: counting,
// misuse, the bound on holders under contention from every worker and from
// plain threads, FIFO order (no starvation of large requests), releasing from
// outside the runtime, cancellation (withdrawal, permits handed to an aborted
// task, the race of both), runtime shutdown and cross-worker wakes.
#include "spindle/semaphore.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <limits>
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
using spindle::semaphore;
using spindle::semaphore_permit;
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

/// Acquires `n`, flags, releases them again.
task<void> acquire_flag_release(semaphore* sem, std::size_t n, [[maybe_unused]] tracked local,
                                std::atomic<bool>* resumed) {
  co_await sem->acquire(n);
  resumed->store(true);
  sem->release(n);
}

TEST(Semaphore, CountsPermits) {
  semaphore sem{2};
  EXPECT_EQ(sem.available(), 2u);
  EXPECT_TRUE(sem.try_acquire());
  EXPECT_TRUE(sem.try_acquire());
  EXPECT_FALSE(sem.try_acquire());
  EXPECT_EQ(sem.available(), 0u);
  sem.release(2);
  EXPECT_FALSE(sem.try_acquire(3));
  EXPECT_TRUE(sem.try_acquire(2));
  sem.release();
  EXPECT_EQ(sem.available(), 1u);

  spindle::runtime rt{{.workers = 2}};
  auto body = [](semaphore* sem) -> task<std::size_t> {
    co_await sem->acquire(0);  // nothing to wait for
    co_await sem->acquire();
    std::size_t left = sem->available();
    sem->release();
    co_return left;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, body(&sem)), 0u);
  EXPECT_EQ(sem.available(), 1u);
}

TEST(Semaphore, ScopedPermitsAreReleasedByTheirGuard) {
  spindle::runtime rt{{.workers = 2}};
  semaphore sem{3};
  auto body = [](semaphore* sem) -> task<int> {
    int checks = 0;
    {
      auto permit = co_await sem->scoped_acquire(2);
      checks += permit.count() == 2 && sem->available() == 1;
      semaphore_permit moved{std::move(permit)};
      checks += permit.count() == 0 && moved.count() == 2;
    }
    checks += sem->available() == 3;
    {
      auto permit = co_await sem->scoped_acquire();
      permit.release();
      checks += sem->available() == 3;
      auto lost = co_await sem->scoped_acquire();
      lost.forget();
    }
    checks += sem->available() == 2;
    co_return checks;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, body(&sem)), 5);
}

TEST(Semaphore, MisuseErrors) {
  semaphore full{std::numeric_limits<std::size_t>::max() - 1};
  EXPECT_EQ(system_error_of([&] { full.release(2); }), std::errc::value_too_large);
  EXPECT_EQ(full.available(), std::numeric_limits<std::size_t>::max() - 1);

  semaphore sem{1};
  std::error_code outside;
  sync_test::await_outside_a_task([&] { return sem.acquire(); }, &outside);
  EXPECT_EQ(outside, std::errc::operation_not_permitted);
  EXPECT_EQ(sem.available(), 1u) << "a refused await took a permit";

  spindle::runtime rt{{.workers = 1}};
  auto blocking_inside = [](semaphore* sem) -> task<bool> {
    co_return system_error_of([&] { sem->blocking_acquire(); }) ==
        std::errc::operation_not_permitted;
  };
  EXPECT_TRUE(spindle_test::run_on_worker(rt, blocking_inside(&sem)));
}

struct bounded {
  semaphore sem{3};
  std::atomic<int> holders{0};
  std::atomic<int> max_holders{0};
  std::atomic<long> acquisitions{0};

  void enter() {
    int now = holders.fetch_add(1) + 1;
    int seen = max_holders.load();
    while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
    }
    acquisitions.fetch_add(1);
  }
  void leave() { holders.fetch_sub(1); }
};

task<void> hold_permit(bounded* b, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    std::size_t n = 1 + static_cast<std::size_t>(i % 2);  // 1 or 2 permits
    co_await b->sem.acquire(n);
    b->enter();
    if (n == 2) b->enter();
    co_await spindle::yield_now{};
    if (n == 2) b->leave();
    b->leave();
    b->sem.release(n);
  }
}

TEST(Semaphore, NeverMoreHoldersThanPermitsUnderContention) {
  spindle::runtime rt{{.workers = 4}};
  bounded b;
  long const tasks = scaled(1000, 200);
  int const rounds = 8;
  int const thread_rounds = static_cast<int>(scaled(1000, 200));
  std::vector<join_handle<void>> handles;
  for (long i = 0; i < tasks; ++i)
    handles.push_back(rt.spawn(hold_permit(&b, rounds)));
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < thread_rounds; ++i) {
        b.sem.blocking_acquire();
        b.enter();
        b.leave();
        b.sem.release();
      }
    });
  }
  for (auto& h : handles) {
    wait_and_take(h);
    spindle_test::progress();
  }
  for (auto& t : threads)
    t.join();
  EXPECT_LE(b.max_holders.load(), 3);
  EXPECT_EQ(b.acquisitions.load(), tasks * rounds * 3 / 2 + 2L * thread_rounds);
  EXPECT_EQ(b.sem.available(), 3u);
  EXPECT_EQ(b.sem.waiter_count(), 0u);
}

task<void> acquire_record(semaphore* sem, std::size_t n, std::atomic<int>* seq, int* slot) {
  co_await sem->acquire(n);
  *slot = seq->fetch_add(1);
}

TEST(Semaphore, ServesWaitersInArrivalOrder) {
  spindle::runtime rt{{.workers = 4}};
  semaphore sem{0};
  std::atomic<int> seq{0};
  int const n = 12;
  std::vector<int> served(n, -1);
  std::vector<join_handle<void>> handles;
  for (int i = 0; i < n; ++i) {
    handles.push_back(rt.spawn(acquire_record(&sem, 1, &seq, &served[i])));
    ASSERT_TRUE(wait_for_waiters(sem, static_cast<std::size_t>(i) + 1));
  }
  for (int i = 0; i < n; ++i) {
    sem.release();  // one permit at a time, from outside the runtime
    wait_and_take(handles[static_cast<std::size_t>(i)]);
  }
  std::vector<int> expected(n);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(served, expected);
}

TEST(Semaphore, ALargeRequestIsNotStarvedBySmallOnes) {
  spindle::runtime rt{{.workers = 2}};
  semaphore sem{0};
  std::atomic<int> seq{0};
  int order[3] = {-1, -1, -1};
  auto big = rt.spawn(acquire_record(&sem, 3, &seq, &order[0]));
  ASSERT_TRUE(wait_for_waiters(sem, 1));
  auto small = rt.spawn(acquire_record(&sem, 1, &seq, &order[1]));
  ASSERT_TRUE(wait_for_waiters(sem, 2));
  auto medium = rt.spawn(acquire_record(&sem, 2, &seq, &order[2]));
  ASSERT_TRUE(wait_for_waiters(sem, 3));
  sem.release();  // enough for `small`, but `big` is first
  EXPECT_EQ(sem.waiter_count(), 3u);
  EXPECT_EQ(sem.available(), 1u);
  EXPECT_FALSE(sem.try_acquire()) << "try_acquire barged past queued waiters";
  sem.release(2);
  wait_and_take(big);
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_EQ(sem.waiter_count(), 2u);
  std::thread([&] { sem.release(3); }).join();
  wait_and_take(small);
  wait_and_take(medium);
  EXPECT_EQ(order[0], 0);
  EXPECT_EQ(sem.available(), 0u);
}

TEST(Semaphore, AbortedFrontWaiterUnblocksTheWaitersBehindIt) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  semaphore sem{0};
  std::atomic<bool> big_resumed{false};
  std::atomic<bool> small_resumed{false};
  auto big = rt.spawn(acquire_flag_release(&sem, 3, tracked(c), &big_resumed));
  ASSERT_TRUE(wait_for_waiters(sem, 1));
  auto small = rt.spawn(acquire_flag_release(&sem, 1, tracked(c), &small_resumed));
  ASSERT_TRUE(wait_for_waiters(sem, 2));
  sem.release(2);  // `small` waits behind `big`
  EXPECT_EQ(sem.waiter_count(), 2u);
  big.abort();
  EXPECT_TRUE(ended_cancelled(big));
  EXPECT_FALSE(ended_cancelled(small)) << "the waiter behind an aborted one was not served";
  EXPECT_FALSE(big_resumed.load());
  EXPECT_TRUE(small_resumed.load());
  EXPECT_EQ(sem.available(), 2u);
  EXPECT_EQ(sem.waiter_count(), 0u);
}

// The permits are handed to A while the only worker is busy, so A cannot
// resume before it is aborted: its destroyed awaiter gives them back and B
// gets them.
TEST(Semaphore, PermitsHandedToAnAbortedTaskAreGivenBack) {
  counts c;
  spindle::runtime rt{{.workers = 1}};
  semaphore sem{0};
  std::atomic<bool> a_resumed{false};
  std::atomic<bool> b_resumed{false};
  std::atomic<bool> running{false};
  std::atomic<bool> stop{false};
  auto a = rt.spawn(acquire_flag_release(&sem, 2, tracked(c), &a_resumed));
  ASSERT_TRUE(wait_for_waiters(sem, 1));
  auto b = rt.spawn(acquire_flag_release(&sem, 2, tracked(c), &b_resumed));
  ASSERT_TRUE(wait_for_waiters(sem, 2));
  auto spinner = rt.spawn(sync_test::occupy_worker(&running, &stop));
  ASSERT_TRUE(spindle_test::wait_until([&] { return running.load(); }));
  sem.release(2);  // handed to A, queued behind the spinner
  EXPECT_EQ(sem.waiter_count(), 1u);
  EXPECT_EQ(sem.available(), 0u);
  a.abort();
  stop.store(true);
  wait_and_take(spinner);
  EXPECT_TRUE(ended_cancelled(a));
  EXPECT_FALSE(a_resumed.load());
  EXPECT_FALSE(ended_cancelled(b)) << "permits handed to the aborted task were lost";
  EXPECT_TRUE(b_resumed.load());
  EXPECT_EQ(sem.available(), 2u);
}

TEST(Semaphore, AbortRacingReleaseNeverLosesAPermit) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  semaphore sem{0};
  long const rounds = scaled(400, 150);
  for (long r = 0; r < rounds; ++r) {
    std::atomic<bool> a_resumed{false};
    std::atomic<bool> b_resumed{false};
    auto a = rt.spawn(acquire_flag_release(&sem, 1, tracked(c), &a_resumed));
    ASSERT_TRUE(wait_for_waiters(sem, 1));
    auto b = rt.spawn(acquire_flag_release(&sem, 1, tracked(c), &b_resumed));
    ASSERT_TRUE(wait_for_waiters(sem, 2));
    int skew = sync_test::skew_for(r);
    sync_test::race([&] { sem.release(); }, [&] { a.abort(); }, skew);
    bool cancelled = ended_cancelled(a);
    EXPECT_EQ(a_resumed.load(), !cancelled);
    ASSERT_FALSE(ended_cancelled(b)) << "round " << r << ": the permit was lost";
    ASSERT_EQ(sem.available(), 1u) << "round " << r;
    ASSERT_TRUE(sem.try_acquire());
    spindle_test::progress();
  }
  EXPECT_EQ(c.alive(), 0);
}

TEST(Semaphore, RuntimeShutdownWithdrawsWaitingTasks) {
  semaphore sem{1};
  counts c;
  {
    spindle::runtime rt{{.workers = 2}};
    std::atomic<bool> resumed{false};
    auto a = rt.spawn(acquire_flag_release(&sem, 2, tracked(c), &resumed));
    // b queues behind a only once a waits (run first, b takes the permit).
    ASSERT_TRUE(wait_for_waiters(sem, 1));
    auto b = rt.spawn(acquire_flag_release(&sem, 1, tracked(c), &resumed));
    ASSERT_TRUE(wait_for_waiters(sem, 2));
  }
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(sem.waiter_count(), 0u);
  EXPECT_EQ(sem.available(), 1u);
}

task<void> acquire_traced(semaphore* sem, sync_test::waiter_trace* trace) {
  trace->before();
  co_await sem->acquire();
  trace->after();
  sem->release();
}

TEST(Semaphore, WaiterWokenFromAnotherWorkerResumesThere) {
  spindle::runtime rt{{.workers = 2}};
  semaphore sem{0};
  for (int round = 0; round < 5; ++round) {
    sync_test::waiter_trace trace;
    auto h = rt.spawn(acquire_traced(&sem, &trace));
    ASSERT_TRUE(wait_for_waiters(sem, 1));
    sync_test::wake_from_the_other_worker(rt, trace, [&] { sem.release(); });
    wait_and_take(h);
    ASSERT_TRUE(sem.try_acquire());
  }
}

}  // namespace
