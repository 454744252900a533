// Tests of spindle::sleep_for, sleep_until and timeout on a running runtime:
// never early, cancellation removes timers, shutdown with pending timers,
// timers fire while a worker is busy, timeout's three outcomes, and races of
// a deadline against completion and against abort.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "spindle/time.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::task;
using spindle_test::counts;
using spindle_test::tracked;
using clock_type = std::chrono::steady_clock;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(60)));

task<clock_type::duration> timed_sleep(clock_type::duration d) {
  auto start = clock_type::now();
  co_await spindle::sleep_for(d);
  co_return clock_type::now() - start;
}

TEST(Sleep, SleepForWaitsAtLeastTheDuration) {
  spindle::runtime rt{{.workers = 2}};
  for (auto d : {1ms, 5ms, 20ms, 65ms}) {
    auto took = rt.block_on(timed_sleep(d));
    EXPECT_GE(took, d);
    EXPECT_LT(took, d + 5s) << "a sleep that never ends is a lost wake-up";
  }
  EXPECT_GE(rt.stats().timers_fired, 4u);
}

TEST(Sleep, SleepUntilAndPastDeadlinesDoNotSuspend) {
  spindle::runtime rt{{.workers = 1}};
  rt.block_on([]() -> task<void> {
    co_await spindle::sleep_for(0ms);
    co_await spindle::sleep_for(-5ms);
    co_await spindle::sleep_until(clock_type::now() - 1s);
    co_await spindle::sleep_until(clock_type::time_point::min());
    auto deadline = clock_type::now() + 10ms;
    co_await spindle::sleep_until(deadline);
    EXPECT_GE(clock_type::now(), deadline);
  }());
  EXPECT_EQ(rt.stats().timers_fired, 1u) << "only the one future deadline needed a timer";
}

TEST(Sleep, OutsideATaskIsAnError) {
  auto a = spindle::sleep_for(1ms);
  std::coroutine_handle<> none{};
  EXPECT_THROW(
      {
        try {
          (void)a.await_suspend(none);
        } catch (std::system_error const& e) {
          EXPECT_EQ(e.code(), std::errc::operation_not_permitted);
          throw;
        }
      },
      std::system_error);
}

TEST(Sleep, ManySleepersAllWakeNoneEarly) {
  spindle::runtime rt{{.workers = 2}};
  long const n = spindle_test::scaled(2000, 200);
  std::atomic<long> early{0}, done{0};
  auto sleeper = [&](int ms) -> task<void> {
    auto deadline = clock_type::now() + std::chrono::milliseconds(ms);
    co_await spindle::sleep_until(deadline);
    if (clock_type::now() < deadline) early.fetch_add(1);
    done.fetch_add(1);
  };
  rt.block_on([&]() -> task<void> {
    std::vector<join_handle<void>> hs;
    for (long i = 0; i < n; ++i)
      hs.push_back(spindle::spawn(sleeper(static_cast<int>(i % 97))));
    for (auto& h : hs)
      co_await h;
  }());
  EXPECT_EQ(done.load(), n);
  EXPECT_EQ(early.load(), 0);
}

TEST(Sleep, SleepersFromOutsideThreadsSpawnsOnEveryWorker) {
  // Tasks spawned from plain threads land on any worker; each arms its timer
  // on that worker's wheel. Every one must wake.
  spindle::runtime rt{{.workers = 3}};
  std::vector<join_handle<clock_type::duration>> hs;
  for (int i = 0; i < 60; ++i)
    hs.push_back(rt.spawn(timed_sleep(std::chrono::milliseconds(1 + i % 7))));
  for (std::size_t i = 0; i < hs.size(); ++i) {
    auto took = spindle_test::wait_and_take(hs[i]);
    EXPECT_GE(took, std::chrono::milliseconds(1 + static_cast<int>(i) % 7));
  }
}

TEST(Sleep, AnIdleRuntimeSleepsInsteadOfSpinning) {
  // While the only task sleeps, the workers park until the deadline: the
  // process uses (far) less CPU time than the wall time that passes.
  spindle::runtime rt{{.workers = 2}};
  auto cpu = [] {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return std::chrono::microseconds(ru.ru_utime.tv_sec * 1'000'000L + ru.ru_utime.tv_usec +
                                     ru.ru_stime.tv_sec * 1'000'000L + ru.ru_stime.tv_usec);
  };
  auto cpu_before = cpu();
  auto took = rt.block_on(timed_sleep(300ms));
  auto cpu_used = cpu() - cpu_before;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(cpu_used, 150ms) << "busy polling while waiting for a timer";
}

TEST(Sleep, FiresWhileItsWorkerIsBusy) {
  // One worker: a task that keeps yielding never lets the worker park, so
  // the sleeper's timer must fire from the tick-end check.
  spindle::runtime rt{{.workers = 1}};
  std::atomic<bool> woke{false};
  // Named, so that the coroutine's captures outlive it.
  auto sleep_then_flag = [&]() -> task<void> {
    co_await spindle::sleep_for(10ms);
    woke.store(true);
  };
  rt.block_on([&]() -> task<void> {
    auto sleeper = spindle::spawn(sleep_then_flag());
    auto give_up = clock_type::now() + 20s;
    while (!woke.load() && clock_type::now() < give_up)
      co_await spindle::yield_now{};
    co_await sleeper;
  }());
  EXPECT_TRUE(woke.load());
}

TEST(Sleep, AbortRemovesTheTimerAndRunsDestructors) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto sleeper = [&]() -> task<void> {
    tracked t{c};
    co_await spindle::sleep_for(1h);
  };
  std::vector<join_handle<void>> hs;
  for (int i = 0; i < 100; ++i)
    hs.push_back(rt.spawn(sleeper()));
  ASSERT_TRUE(spindle_test::wait_until([&] { return c.constructed.load() == 100; }));
  for (auto& h : hs)
    h.abort();
  for (auto& h : hs)
    EXPECT_THROW(spindle_test::wait_and_take(h), spindle::task_cancelled);
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(rt.stats().timers_fired, 0u);
}

TEST(Sleep, ShutdownWithPendingTimersDestroysTheSleepers) {
  counts c;
  {
    spindle::runtime rt{{.workers = 2}};
    long const n = spindle_test::scaled(10'000, 500);
    for (long i = 0; i < n; ++i) {
      rt.spawn([](counts& cc, long k) -> task<void> {
          tracked t{cc};
          co_await spindle::sleep_for(std::chrono::minutes(1 + k % 1000));
        }(c, i))
          .abort();  // abort half of them...
      if (i % 2 == 0) continue;
      (void)rt.spawn([](counts& cc) -> task<void> {
        tracked t{cc};
        co_await spindle::sleep_for(24h);
      }(c));  // ...and detach the others, still sleeping at shutdown
    }
  }
  EXPECT_EQ(c.alive(), 0);
}

TEST(Sleep, AbortRacingTheTimerIsCleanEitherWay) {
  spindle::runtime rt{{.workers = 2}};
  long const rounds = spindle_test::scaled(2000, 100);
  counts c;
  long finished = 0, cancelled = 0;
  for (long i = 0; i < rounds; ++i) {
    auto h = rt.spawn([](counts& cc) -> task<int> {
      tracked t{cc};
      co_await spindle::sleep_for(1ms);
      co_return 7;
    }(c));
    if (i % 3 != 0) std::this_thread::sleep_for(std::chrono::microseconds(200 * (i % 8)));
    h.abort();
    try {
      EXPECT_EQ(spindle_test::wait_and_take(h), 7);
      ++finished;
    } catch (spindle::task_cancelled const&) {
      ++cancelled;
    }
    spindle_test::progress();
  }
  EXPECT_EQ(finished + cancelled, rounds);
  EXPECT_EQ(c.alive(), 0);
  std::printf("abort vs timer: %ld finished, %ld cancelled\n", finished, cancelled);
}

// ---------------------------------------------------------------------------
// timeout

task<int> slow_value(int v, clock_type::duration d, counts* c = nullptr) {
  std::optional<tracked> t;
  if (c != nullptr) t.emplace(*c);
  co_await spindle::sleep_for(d);
  co_return v;
}

struct work_error : std::runtime_error {
  work_error() : std::runtime_error("work failed") {}
};

TEST(Timeout, ReturnsTheValueWhenWorkFinishesFirst) {
  spindle::runtime rt{{.workers = 2}};
  EXPECT_EQ(rt.block_on(spindle::timeout(5s, slow_value(42, 1ms))), 42);
  EXPECT_EQ(rt.block_on(spindle::timeout(5s, []() -> task<int> { co_return 9; }())), 9);
  rt.block_on(spindle::timeout(1s, []() -> task<void> { co_return; }()));
}

TEST(Timeout, ThrowsTimedOutAndCancelsTheWork) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto start = clock_type::now();
  EXPECT_THROW(rt.block_on(spindle::timeout(20ms, slow_value(1, 1h, &c))), spindle::timed_out);
  EXPECT_GE(clock_type::now() - start, 20ms);
  EXPECT_EQ(c.constructed.load(), 1);
  EXPECT_EQ(c.alive(), 0) << "the work was cancelled and awaited before timed_out";
}

TEST(Timeout, PropagatesTheWorksException) {
  spindle::runtime rt{{.workers = 2}};
  EXPECT_THROW(rt.block_on(spindle::timeout(5s,
                                            []() -> task<int> {
                                              co_await spindle::sleep_for(1ms);
                                              throw work_error{};
                                            }())),
               work_error);
}

TEST(Timeout, ADeadlineAlreadyPassedStillReturnsFinishedWork) {
  spindle::runtime rt{{.workers = 1}};
  // The work cannot finish before the (passed) deadline is seen: timed_out.
  EXPECT_THROW(rt.block_on(spindle::timeout(-1ms, slow_value(1, 1h))), spindle::timed_out);
  EXPECT_THROW(rt.block_on(spindle::timeout_at(clock_type::now(), slow_value(1, 1h))),
               spindle::timed_out);
}

TEST(Timeout, CancellingTheWaiterCancelsTheWork) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto h = rt.spawn(spindle::timeout(1h, slow_value(1, 1h, &c)));
  ASSERT_TRUE(spindle_test::wait_until([&] { return c.constructed.load() == 1; }));
  h.abort();
  EXPECT_THROW(spindle_test::wait_and_take(h), spindle::task_cancelled);
  EXPECT_TRUE(spindle_test::wait_until([&] { return c.alive() == 0; }))
      << "the child outlived the cancelled timeout";
}

TEST(Timeout, DeadlineRacingCompletion) {
  // Deadline and completion land in the same millisecond or two: every
  // round ends with the value or timed_out, the work never outlives the
  // call, and nothing hangs.
  spindle::runtime rt{{.workers = 2}};
  long const rounds = spindle_test::scaled(1000, 60);
  counts c;
  long values = 0, timeouts = 0;
  for (long i = 0; i < rounds; ++i) {
    try {
      int v = rt.block_on(spindle::timeout(std::chrono::milliseconds(1 + i % 2),
                                           slow_value(5, std::chrono::milliseconds(1), &c)));
      EXPECT_EQ(v, 5);
      ++values;
    } catch (spindle::timed_out const&) {
      ++timeouts;
    }
    EXPECT_EQ(c.alive(), 0);
    spindle_test::progress();
  }
  EXPECT_EQ(values + timeouts, rounds);
  std::printf("deadline vs completion: %ld values, %ld timeouts\n", values, timeouts);
}

TEST(Timeout, AbortRacingTheTimeout) {
  spindle::runtime rt{{.workers = 2}};
  long const rounds = spindle_test::scaled(1000, 60);
  counts c;
  for (long i = 0; i < rounds; ++i) {
    auto h = rt.spawn(spindle::timeout(1ms, slow_value(3, std::chrono::milliseconds(i % 3), &c)));
    if (i % 2 != 0) std::this_thread::sleep_for(std::chrono::microseconds(300 * (i % 7)));
    h.abort();
    try {
      EXPECT_EQ(spindle_test::wait_and_take(h), 3);
    } catch (spindle::timed_out const&) {
    } catch (spindle::task_cancelled const&) {
    }
    EXPECT_TRUE(spindle_test::wait_until([&] { return c.alive() == 0; }));
    spindle_test::progress();
  }
}

}  // namespace
