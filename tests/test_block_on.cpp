// Tests of runtime::block_on: results, exceptions, worker counts, concurrent
// callers, nested spawns, the caller helping, refusal from a worker, and
// yield_now.
#include <gtest/gtest.h>

#include <atomic>
#include <coroutine>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

using spindle_test::eager;

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::task;
using spindle_test::test_event;
using spindle_test::value_of;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

struct custom_error : std::runtime_error {
  explicit custom_error(int c) : std::runtime_error("custom"), code(c) {}
  int code;
};

task<std::string> string_of(std::string s) {
  co_return s + "!";
}
task<void> increment(std::atomic<int>* counter) {
  counter->fetch_add(1);
  co_return;
}
task<int> throw_code(int code) {
  throw custom_error(code);
  co_return 0;
}

// Binary spawn tree: returns the number of leaves.
task<long> tree(int depth) {
  if (depth == 0) co_return 1;
  auto left = spindle::spawn(tree(depth - 1));
  long right = co_await tree(depth - 1);
  co_return right + co_await left;
}

TEST(BlockOn, ReturnsValues) {
  std::atomic<int> counter{0};
  spindle::runtime rt{{.workers = 2}};
  EXPECT_EQ(rt.block_on(value_of(5)), 5);
  EXPECT_EQ(rt.block_on(string_of("hi")), "hi!");
  rt.block_on(increment(&counter));
  EXPECT_EQ(counter.load(), 1);
  auto make = []() -> task<std::unique_ptr<int>> { co_return std::make_unique<int>(3); };
  std::unique_ptr<int> p = rt.block_on(make());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 3);
}

TEST(BlockOn, RethrowsTheTasksException) {
  spindle::runtime rt{{.workers = 2}};
  try {
    rt.block_on(throw_code(12));
    ADD_FAILURE() << "no exception";
  } catch (custom_error const& e) {
    EXPECT_EQ(e.code, 12);
  }
  // The runtime stays usable, and the exception was not counted as detached.
  EXPECT_EQ(rt.block_on(value_of(1)), 1);
  EXPECT_EQ(rt.stats().detached_exceptions, 0u);
}

TEST(BlockOn, EmptyTaskThrowsInvalidArgument) {
  spindle::runtime rt{{.workers = 1}};
  try {
    rt.block_on(task<int>{});
    ADD_FAILURE() << "no exception";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::invalid_argument);
  }
}

TEST(BlockOn, WorksWithOneAndManyWorkers) {
  for (std::size_t workers : {1u, 2u, 3u, 8u}) {
    spindle::runtime rt{{.workers = workers}};
    EXPECT_EQ(rt.worker_count(), workers);
    EXPECT_EQ(rt.block_on(tree(10)), 1024) << "workers=" << workers;
    for (int i = 0; i < 100; ++i)
      ASSERT_EQ(rt.block_on(value_of(i)), i);
  }
}

TEST(BlockOn, FromSeveralThreadsAtOnce) {
  spindle::runtime rt{{.workers = 2}};
  constexpr int threads = 4;
  int const calls = static_cast<int>(spindle_test::scaled(50, 5));
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < calls; ++i) {
        if (rt.block_on(tree(6)) != 64) wrong.fetch_add(1);
        if (rt.block_on(value_of(t * 1000 + i)) != t * 1000 + i) wrong.fetch_add(1);
      }
    });
  }
  for (auto& t : ts)
    t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(BlockOn, NestedSpawnsInside) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<long> {
    std::vector<join_handle<long>> hs;
    for (int i = 0; i < 100; ++i) {
      auto mid = [](int i) -> task<long> {
        std::vector<join_handle<int>> inner;
        for (int j = 0; j < 10; ++j)
          inner.push_back(spindle::spawn(value_of(i * 10 + j)));
        long s = 0;
        for (auto& h : inner)
          s += co_await h;
        co_return s;
      };
      hs.push_back(spindle::spawn(mid(i)));
    }
    long sum = 0;
    for (auto& h : hs)
      sum += co_await h;
    co_return sum;
  };
  EXPECT_EQ(rt.block_on(outer()), 999L * 1000 / 2);
}

TEST(BlockOn, TaskWokenFromAForeignThread) {
  test_event ev;
  spindle::runtime rt{{.workers = 2}};
  auto waiter = [](test_event* ev) -> task<int> {
    co_await *ev;
    co_return 8;
  };
  std::thread setter([&] {
    std::this_thread::sleep_for(5ms);  // usually after the task suspended
    ev.set();
  });
  EXPECT_EQ(rt.block_on(waiter(&ev)), 8);
  setter.join();
}

// docs/design.md: block_on "runs a task to completion from a non-worker thread,
// the caller helps (block-on-complete)". With the only worker busy, the
// caller must run the task itself.
TEST(BlockOn, CallerRunsTheTaskWhenEveryWorkerIsBusy) {
  for (spindle::placement where : {spindle::placement::global, spindle::placement::p2c}) {
    SCOPED_TRACE(where == spindle::placement::p2c ? "p2c" : "global");
    std::atomic<bool> started{false};
    std::atomic<bool> released{false};
    spindle::runtime rt{{.workers = 1, .placement = where}};
    auto blocker = [](std::atomic<bool>* started, std::atomic<bool>* released) -> task<bool> {
      started->store(true);
      // Blocks the worker thread on purpose (bounded, so a failure ends).
      co_return spindle_test::wait_until([&] { return released->load(); }, 10s);
    };
    auto h = rt.spawn(blocker(&started, &released));
    ASSERT_TRUE(spindle_test::wait_until([&] { return started.load(); }));
    auto releaser = [](std::atomic<bool>* released) -> task<int> {
      released->store(true);
      co_return 1;
    };
    EXPECT_EQ(rt.block_on(releaser(&released)), 1);
    EXPECT_TRUE(spindle_test::wait_and_take(h)) << "block_on waited for the busy worker";
  }
}

// The same with a task that suspends first: it is woken (from another
// thread) while the caller already sleeps in block_on and the only worker is
// still busy. Block-on-complete means the caller runs it; otherwise it waits
// for the worker. (The 50 ms pause only makes it likely that the caller is
// asleep by then; a correct runtime passes whatever the timing.)
TEST(BlockOn, CallerRunsItsTaskWokenWhileEveryWorkerIsBusy) {
  // Either placement: the wake goes to the global queue, or to the only
  // worker's inbox under p2c; either push must kick the sleeping caller.
  for (spindle::placement where : {spindle::placement::global, spindle::placement::p2c}) {
    SCOPED_TRACE(where == spindle::placement::p2c ? "p2c" : "global");
    std::atomic<bool> started{false};
    std::atomic<bool> released{false};
    test_event ev;
    spindle::runtime rt{{.workers = 1, .placement = where}};
    auto blocker = [](std::atomic<bool>* started, std::atomic<bool>* released) -> task<bool> {
      started->store(true);
      co_return spindle_test::wait_until([&] { return released->load(); }, 5s);
    };
    auto h = rt.spawn(blocker(&started, &released));
    ASSERT_TRUE(spindle_test::wait_until([&] { return started.load(); }));
    auto waits = [](test_event* ev, std::atomic<bool>* released) -> task<int> {
      co_await *ev;
      released->store(true);
      co_return 1;
    };
    std::thread waker([&] {
      if (spindle_test::wait_until([&] { return ev.has_waiter(); })) {
        std::this_thread::sleep_for(50ms);
      }
      ev.set();
    });
    EXPECT_EQ(rt.block_on(waits(&ev, &released)), 1);
    waker.join();
    EXPECT_TRUE(spindle_test::wait_and_take(h))
        << "block_on slept while its woken task sat in the global queue and the only worker was "
           "busy: the caller did not help";
  }
}

TEST(BlockOn, FromInsideAWorkerThrowsResourceDeadlock) {
  spindle::runtime rt{{.workers = 2}};
  auto inner = [](spindle::runtime* rt) -> task<int> {
    try {
      (void)rt->block_on(value_of(1));
    } catch (std::system_error const& e) {
      co_return e.code() == std::errc::resource_deadlock_would_occur ? 1 : -2;
    }
    co_return -1;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, inner(&rt)), 1);
  EXPECT_EQ(rt.block_on(value_of(2)), 2) << "the runtime must stay usable";
}

// A refused block_on must not have spawned its task: a caller that catches
// the error expects the task not to run (it may touch the caller's stack).
TEST(BlockOn, RefusedFromAWorkerDoesNotSpawnTheTask) {
  spindle::runtime rt{{.workers = 1}};
  auto inner = [](spindle::runtime* rt) -> task<long> {
    std::uint64_t before = rt->stats().total_spawned;
    try {
      (void)rt->block_on(value_of(1));
    } catch (std::system_error const&) {
    }
    co_return static_cast<long>(rt->stats().total_spawned - before);
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, inner(&rt)), 0)
      << "block_on spawned the task before refusing: it runs detached";
}

TEST(BlockOn, FromAWorkerOfAnotherRuntimeIsAllowed) {
  spindle::runtime rt1{{.workers = 1}};
  spindle::runtime rt2{{.workers = 1}};
  auto inner = [](spindle::runtime* other) -> task<long> { co_return other->block_on(tree(5)); };
  EXPECT_EQ(spindle_test::run_on_worker(rt1, inner(&rt2)), 32);
}

TEST(BlockOn, YieldNowLoops) {
  spindle::runtime rt{{.workers = 2}};
  auto yielder = [](int n) -> task<int> {
    int i = 0;
    for (; i < n; ++i)
      co_await spindle::yield_now();
    co_return i;
  };
  EXPECT_EQ(rt.block_on(yielder(10'000)), 10'000);
  EXPECT_EQ(spindle_test::run_on_worker(rt, yielder(10'000)), 10'000);
}

TEST(BlockOn, YieldLetsOtherTasksRun) {
  // With one worker, a task that yields until another task ran must see it
  // run (yield re-queues behind it).
  spindle::runtime rt{{.workers = 1}};
  auto waiter = []() -> task<int> {
    std::atomic<int> counter{0};
    auto h = spindle::spawn(increment(&counter));
    int yields = 0;
    while (counter.load() == 0) {
      co_await spindle::yield_now();
      ++yields;
      if (yields > 1'000'000) co_return -1;  // starvation
    }
    co_await h;
    co_return 1;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, waiter()), 1);
  EXPECT_EQ(rt.block_on(waiter()), 1);
}

eager yield_outside(int* steps) {
  ++*steps;
  co_await spindle::yield_now();
  ++*steps;
}

TEST(BlockOn, YieldNowOutsideATaskCompletesAtOnce) {
  int steps = 0;
  yield_outside(&steps);
  EXPECT_EQ(steps, 2);
}

TEST(BlockOn, ManySequentialCalls) {
  spindle::runtime rt{{.workers = 2}};
  long sum = 0;
  int const n = static_cast<int>(spindle_test::scaled(5'000, 500));
  for (int i = 0; i < n; ++i)
    sum += rt.block_on(value_of(i));
  EXPECT_EQ(sum, static_cast<long>(n) * (n - 1) / 2);
}

}  // namespace
