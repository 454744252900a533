// Tests of spawn and spindle::join_handle<T>: results, exceptions, detach,
// abort, misuse errors, and spawning from foreign threads.
#include <gtest/gtest.h>

#include <atomic>
#include <coroutine>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

using spindle_test::eager;

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::task;
using spindle_test::await_handle;
using spindle_test::counts;
using spindle_test::test_event;
using spindle_test::tracked;
using spindle_test::value_of;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

struct custom_error : std::runtime_error {
  explicit custom_error(int c) : std::runtime_error("custom error " + std::to_string(c)), code(c) {}
  int code;
};

task<void> nothing() {
  co_return;
}
task<int> throw_code(int code) {
  throw custom_error(code);
  co_return 0;
}

/// Errno-style code of a std::system_error thrown by `fn`, or a default error_code.
template <class Fn>
std::error_code system_error_of(Fn fn) {
  try {
    fn();
  } catch (std::system_error const& e) {
    return e.code();
  }
  return {};
}

TEST(Join, SpawnAndAwaitReturnsTheValue) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<int> {
    auto a = spindle::spawn(value_of(20));
    auto b = spindle::spawn(value_of(22));
    // Awaited in the opposite order of spawning.
    int vb = co_await b;
    int va = co_await a;
    co_return va + vb;
  };
  EXPECT_EQ(rt.block_on(outer()), 42);
  EXPECT_EQ(spindle_test::run_on_worker(rt, outer()), 42);
}

TEST(Join, VoidAndMoveOnlyResults) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<int> {
    co_await spindle::spawn(nothing());
    auto make = []() -> task<std::unique_ptr<int>> { co_return std::make_unique<int>(9); };
    std::unique_ptr<int> p = co_await spindle::spawn(make());
    co_return *p;
  };
  EXPECT_EQ(rt.block_on(outer()), 9);
}

TEST(Join, ExceptionIsRethrownAtJoin) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<int> {
    auto h = spindle::spawn(throw_code(7));
    try {
      co_await h;
    } catch (custom_error const& e) {
      co_return e.code;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(outer()), 7);
  // Through block_on on the spawning thread.
  auto h = rt.spawn(throw_code(8));
  try {
    rt.block_on(await_handle(std::move(h)));
    ADD_FAILURE() << "no exception";
  } catch (custom_error const& e) {
    EXPECT_EQ(e.code, 8);
  }
  EXPECT_EQ(rt.stats().detached_exceptions, 0u) << "a joined exception was counted as detached";
}

task<int> wait_then_return(test_event* ev, int v) {
  co_await *ev;
  co_return v;
}

TEST(Join, IsFinishedTracksCompletion) {
  test_event ev;
  spindle::runtime rt{{.workers = 2}};
  join_handle<int> empty;
  EXPECT_FALSE(empty.is_finished());
  EXPECT_FALSE(empty.valid());

  auto h = rt.spawn(wait_then_return(&ev, 5));
  EXPECT_TRUE(h.valid());
  EXPECT_FALSE(h.is_finished()) << "finished before its event was set";
  ev.set();  // wakes the task from this foreign thread
  ASSERT_TRUE(spindle_test::wait_until([&] { return h.is_finished(); }));
  EXPECT_EQ(h.take(), 5);
}

TEST(Join, AwaitBeforeAndAfterCompletion) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<int> {
    // Completes after the await suspended (the waiter path).
    test_event ev;
    auto slow = spindle::spawn(wait_then_return(&ev, 1));
    auto setter = [](test_event* e) -> task<void> {
      e->set();
      co_return;
    };
    auto s = spindle::spawn(setter(&ev));
    int a = co_await slow;
    co_await s;
    // Completed before the await (the ready path).
    auto fast = spindle::spawn(value_of(2));
    while (!fast.is_finished())
      co_await spindle::yield_now();
    int b = co_await fast;
    co_return a * 10 + b;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, outer()), 12);
}

task<void> wait_then_count(test_event* ev, std::atomic<int>* counter,
                           [[maybe_unused]] tracked local) {
  co_await *ev;
  counter->fetch_add(1);
}

TEST(Join, DroppingTheHandleDetaches) {
  counts c;
  std::atomic<int> counter{0};
  test_event ev;
  spindle::runtime rt{{.workers = 2}};
  {
    auto h = rt.spawn(wait_then_count(&ev, &counter, tracked(c)));
  }  // dropped while the task waits
  EXPECT_EQ(counter.load(), 0);
  ev.set();
  ASSERT_TRUE(spindle_test::wait_until([&] { return counter.load() == 1; }))
      << "a detached task did not run to completion";
  ASSERT_TRUE(spindle_test::wait_until([&] { return c.alive() == 0; }))
      << "the detached task's frame was not freed";
}

TEST(Join, MoveAssignOverALiveHandleDetachesTheOldTask) {
  std::atomic<int> counter{0};
  counts c;
  test_event ev;
  spindle::runtime rt{{.workers = 2}};
  auto h = rt.spawn(wait_then_count(&ev, &counter, tracked(c)));
  join_handle<void> other = rt.spawn(nothing());
  h = std::move(other);
  EXPECT_FALSE(other.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(system_error_of([&] { (void)other.take(); }), std::errc::invalid_argument);
  ev.set();
  ASSERT_TRUE(spindle_test::wait_until([&] { return counter.load() == 1; }));
  spindle_test::wait_and_take(h);
}

task<void> wait_then_throw(test_event* ev) {
  co_await *ev;
  throw custom_error(99);
}

TEST(Join, DetachedExceptionIsCountedAndReported) {
  test_event ev;
  spindle::runtime rt{{.workers = 2}};
  testing::internal::CaptureStderr();
  { auto h = rt.spawn(wait_then_throw(&ev)); }
  EXPECT_EQ(rt.stats().detached_exceptions, 0u);
  ev.set();
  // The report is printed before the task stops counting as alive.
  bool counted = spindle_test::wait_until([&] {
    auto s = rt.stats();
    return s.detached_exceptions == 1 && s.tasks_alive == 0;
  });
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(counted) << "detached exception not counted";
  EXPECT_NE(err.find("custom error 99"), std::string::npos) << "stderr: " << err;
}

TEST(Join, UnobservedExceptionOfADroppedFinishedHandleIsReported) {
  spindle::runtime rt{{.workers = 2}};
  testing::internal::CaptureStderr();
  {
    auto h = rt.spawn(throw_code(55));
    ASSERT_TRUE(spindle_test::wait_until([&] { return h.is_finished(); }));
    EXPECT_EQ(rt.stats().detached_exceptions, 0u) << "counted while a handle can still take it";
  }  // dropped without taking the exception
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("custom error 55"), std::string::npos) << "stderr: " << err;
  EXPECT_EQ(rt.stats().detached_exceptions, 1u) << "a dropped handle's exception was not counted";
}

TEST(Join, ATakenExceptionIsNotCountedWhenTheHandleIsDropped) {
  spindle::runtime rt{{.workers = 2}};
  {
    auto h = rt.spawn(throw_code(56));
    ASSERT_TRUE(spindle_test::wait_until([&] { return h.is_finished(); }));
    EXPECT_THROW(h.take(), custom_error);
  }
  EXPECT_EQ(rt.stats().detached_exceptions, 0u);
}

TEST(Join, AHandleOfAFailedTaskMayOutliveItsRuntime) {
  // The handle is dropped after the runtime is destroyed: the exception is
  // still reported, with no runtime left to count it in (ASan: no use of the
  // destroyed scheduler), and a later runtime counts nothing of it.
  testing::internal::CaptureStderr();
  std::optional<join_handle<int>> h;
  {
    spindle::runtime rt{{.workers = 2}};
    h.emplace(rt.spawn(throw_code(57)));
    ASSERT_TRUE(spindle_test::wait_until([&] { return h->is_finished(); }));
  }
  spindle::runtime later{{.workers = 1}};
  h.reset();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("custom error 57"), std::string::npos) << "stderr: " << err;
  EXPECT_EQ(later.stats().detached_exceptions, 0u);
}

task<int> victim([[maybe_unused]] tracked param, bool* body_ran) {
  *body_ran = true;
  co_return 1;
}

TEST(Join, AbortBeforeTheTaskRanCancelsIt) {
  counts c;
  bool body_ran = false;
  spindle::runtime rt{{.workers = 2}};
  auto outer = [](counts* c, bool* body_ran) -> task<int> {
    // Spawned from a worker: the child sits in this worker's LIFO slot and
    // cannot run before this task suspends.
    auto h = spindle::spawn(victim(tracked(*c), body_ran));
    h.abort();
    try {
      co_await h;
    } catch (spindle::task_cancelled const&) {
      co_return 1;
    }
    co_return 0;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, outer(&c, &body_ran)), 1) << "no task_cancelled";
  EXPECT_FALSE(body_ran) << "the aborted task's body ran";
  EXPECT_EQ(c.alive(), 0) << "the aborted task's frame (parameters) was not destroyed";
}

task<void> yield_forever([[maybe_unused]] tracked local, std::atomic<bool>* started,
                         bool* passed_loop) {
  started->store(true);
  for (int i = 0; i < 1'000'000'000; ++i)
    co_await spindle::yield_now();
  *passed_loop = true;
}

TEST(Join, AbortStopsARunningTaskAtItsNextResumption) {
  counts c;
  std::atomic<bool> started{false};
  bool passed_loop = false;
  spindle::runtime rt{{.workers = 2}};
  auto outer = [](counts* c, std::atomic<bool>* started, bool* passed) -> task<int> {
    auto h = spindle::spawn(yield_forever(tracked(*c), started, passed));
    while (!started->load())
      co_await spindle::yield_now();
    h.abort();
    try {
      co_await h;
    } catch (spindle::task_cancelled const&) {
      co_return 1;
    }
    co_return 0;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, outer(&c, &started, &passed_loop)), 1);
  EXPECT_FALSE(passed_loop);
  EXPECT_EQ(c.alive(), 0);
}

TEST(Join, AbortOnAFinishedTaskIsANoOp) {
  spindle::runtime rt{{.workers = 2}};
  auto h = rt.spawn(value_of(3));
  ASSERT_TRUE(spindle_test::wait_until([&] { return h.is_finished(); }));
  h.abort();
  EXPECT_TRUE(h.is_finished());
  EXPECT_EQ(h.take(), 3);
  // Same from inside the runtime, through co_await.
  auto outer = []() -> task<int> {
    auto h = spindle::spawn(value_of(4));
    while (!h.is_finished())
      co_await spindle::yield_now();
    h.abort();
    co_return co_await h;
  };
  EXPECT_EQ(rt.block_on(outer()), 4);
}

task<void> park_forever([[maybe_unused]] tracked local, std::atomic<bool>* started) {
  started->store(true);
  co_await spindle_test::suspend_forever{};
}

task<void> await_join_forever(join_handle<void> inner, [[maybe_unused]] tracked local,
                              std::atomic<bool>* started, bool* resumed) {
  started->store(true);
  co_await inner;
  *resumed = true;
}

// Like Tokio's JoinHandle::abort: a task suspended on a join handle is
// cancelled at once, even though the awaited task never finishes.
TEST(Join, AbortCancelsATaskSuspendedOnAJoinAtOnce) {
  counts c;
  std::atomic<bool> inner_started{false};
  std::atomic<bool> outer_started{false};
  bool resumed = false;
  spindle::runtime rt{{.workers = 2}};
  auto inner = rt.spawn(park_forever(tracked(c), &inner_started));
  auto outer = rt.spawn(await_join_forever(std::move(inner), tracked(c), &outer_started, &resumed));
  ASSERT_TRUE(
      spindle_test::wait_until([&] { return outer_started.load() && inner_started.load(); }));
  // Aborted suspended on the join, or (rarely) still running just before
  // the await: both end cancelled without resuming.
  outer.abort();
  // Deadline only against a hang: the cancelled task completes at once.
  bool finished = spindle_test::wait_until([&] { return outer.is_finished(); }, 10s);
  ASSERT_TRUE(finished) << "abort() left a task suspended on a join handle: awaiting it hangs";
  EXPECT_THROW(outer.take(), spindle::task_cancelled);
  EXPECT_FALSE(resumed) << "the aborted task resumed";
  // Only the never-finishing inner task's frame is left.
  EXPECT_TRUE(spindle_test::wait_until([&] { return c.alive() == 1; }));
}

/// An awaitable that knows nothing of spindle: nothing will ever resume it.
struct foreign_suspend {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  void await_resume() const noexcept {}
};

task<void> foreign_forever([[maybe_unused]] tracked local, std::atomic<bool>* started) {
  started->store(true);
  co_await foreign_suspend{};
}

TEST(Join, AbortCancelsATaskSuspendedInAnAwaitableUnknownToSpindle) {
  counts c;
  std::atomic<bool> started{false};
  spindle::runtime rt{{.workers = 2}};
  auto h = rt.spawn(foreign_forever(tracked(c), &started));
  ASSERT_TRUE(spindle_test::wait_until([&] { return started.load(); }));
  h.abort();
  ASSERT_TRUE(spindle_test::wait_until([&] { return h.is_finished(); }, 10s))
      << "abort() did not cancel a task suspended in a foreign awaitable";
  EXPECT_THROW(h.take(), spindle::task_cancelled);
  EXPECT_EQ(c.alive(), 0);
}

task<int> wait_event_then_flag(test_event* ev, [[maybe_unused]] tracked local, bool* resumed) {
  co_await *ev;
  *resumed = true;
  co_return 1;
}

// A suspension that can't withdraw (a wake is still coming: here a
// test_event built on suspend_current + wake): abort takes effect at that
// wake, and the task is destroyed instead of resumed.
TEST(Join, AbortOfATaskThatCannotWithdrawTakesEffectAtItsWake) {
  counts c;
  test_event ev;
  bool resumed = false;
  spindle::runtime rt{{.workers = 2}};
  auto h = rt.spawn(wait_event_then_flag(&ev, tracked(c), &resumed));
  ASSERT_TRUE(spindle_test::wait_until([&] { return ev.has_waiter(); }));
  // Aborted suspended, or (rarely) while its poll is ending: either way
  // nothing destroys it before the wake.
  h.abort();
  EXPECT_EQ(c.alive(), 1) << "destroyed before its pending wake";
  ev.set();
  ASSERT_TRUE(spindle_test::wait_until([&] { return h.is_finished(); }, 10s));
  EXPECT_THROW(h.take(), spindle::task_cancelled);
  EXPECT_FALSE(resumed) << "an aborted task was resumed by its wake";
  EXPECT_EQ(c.alive(), 0);
}

TEST(Join, AwaitingAHandleTwiceThrowsInvalidArgument) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<int> {
    auto h = spindle::spawn(value_of(1));
    int v = co_await h;
    try {
      (void)co_await h;
    } catch (std::system_error const& e) {
      if (e.code() == std::errc::invalid_argument) co_return v + 10;
      co_return -2;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(outer()), 11);

  auto h = rt.spawn(value_of(2));
  EXPECT_EQ(spindle_test::wait_and_take(h), 2);
  EXPECT_EQ(system_error_of([&] { (void)h.take(); }), std::errc::invalid_argument);

  // An empty handle cannot be awaited either.
  auto empty_await = []() -> task<int> {
    join_handle<int> empty;
    try {
      co_await empty;
    } catch (std::system_error const& e) {
      co_return e.code() == std::errc::invalid_argument ? 1 : -2;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(empty_await()), 1);
}

TEST(Join, AwaitingACancelledHandleTwiceThrowsInvalidArgumentTheSecondTime) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<int> {
    auto h = spindle::spawn(value_of(1));
    h.abort();
    int result = 0;
    try {
      co_await h;
    } catch (spindle::task_cancelled const&) {
      result += 1;
    }
    try {
      co_await h;
    } catch (std::system_error const& e) {
      if (e.code() == std::errc::invalid_argument) result += 10;
    }
    co_return result;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, outer()), 11);
}

TEST(Join, SpawnOutsideARuntimeThrowsOperationNotPermitted) {
  EXPECT_EQ(system_error_of([] { (void)spindle::spawn(value_of(1)); }),
            std::errc::operation_not_permitted);
  std::error_code from_thread;
  std::thread([&] {
    from_thread = system_error_of([] { (void)spindle::spawn(value_of(1)); });
  }).join();
  EXPECT_EQ(from_thread, std::errc::operation_not_permitted);
}

TEST(Join, SpawnOfAnEmptyTaskThrowsInvalidArgument) {
  spindle::runtime rt{{.workers = 1}};
  EXPECT_EQ(system_error_of([&] { (void)rt.spawn(task<int>{}); }), std::errc::invalid_argument);
  auto inside = []() -> task<int> {
    try {
      (void)spindle::spawn(task<int>{});
    } catch (std::system_error const& e) {
      co_return e.code() == std::errc::invalid_argument ? 1 : -2;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(inside()), 1);
}

eager await_outside(join_handle<int>* h, std::error_code* code) {
  try {
    (void)co_await *h;
  } catch (std::system_error const& e) {
    *code = e.code();
  }
}

TEST(Join, AwaitingOutsideATaskThrowsOperationNotPermitted) {
  test_event ev;
  spindle::runtime rt{{.workers = 1}};
  auto h = rt.spawn(wait_then_return(&ev, 3));
  std::error_code code;
  await_outside(&h, &code);
  EXPECT_EQ(code, std::errc::operation_not_permitted);
  ev.set();
  EXPECT_EQ(spindle_test::wait_and_take(h), 3) << "a refused await must leave the handle usable";
}

TEST(Join, SpawnFromAForeignThreadAndJoinWithBlockOn) {
  spindle::runtime rt{{.workers = 2}};
  std::vector<join_handle<int>> handles(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back(
        [&, i] { handles[static_cast<std::size_t>(i)] = rt.spawn(value_of(i * 100)); });
  }
  for (auto& t : threads)
    t.join();
  int sum = 0;
  for (auto& h : handles)
    sum += rt.block_on(await_handle(std::move(h)));
  EXPECT_EQ(sum, 600);
  EXPECT_GE(rt.stats().total_spawned, 4u);
}

TEST(Join, ChainOfJoinsAcrossWorkers) {
  spindle::runtime rt{{.workers = 3}};
  // Each task spawns the next and awaits it: 2,000 nested joins.
  struct chain {
    static task<long> link(int depth) {
      if (depth == 0) co_return 0;
      auto h = spindle::spawn(link(depth - 1));
      co_await spindle::yield_now();  // let the child move to another worker
      co_return 1 + co_await h;
    }
  };
  EXPECT_EQ(rt.block_on(chain::link(2'000)), 2'000);
}

TEST(Join, ManyHandlesAwaitedInAnyOrder) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<long> {
    std::vector<join_handle<int>> hs;
    for (int i = 0; i < 1000; ++i)
      hs.push_back(spindle::spawn(value_of(i)));
    long sum = 0;
    for (std::size_t i = 0; i < hs.size(); i += 2)
      sum += co_await hs[i];
    for (std::size_t i = 1; i < hs.size(); i += 2)
      sum += co_await hs[i];
    co_return sum;
  };
  EXPECT_EQ(rt.block_on(outer()), 999 * 1000 / 2);
}

// A handle dropped on a thread that is not a worker lets go of its task
// whichever way it finds it: still queued or running (an RMW, and the
// completion frees the task) or finished (the handle's is the last
// reference, and the drop frees the task with no RMW: task_state::
// drop_join_of_complete). Each frame holds a string the task filled with
// plain writes, freed with the frame: under TSan the free must come after
// the writes, under ASan the block is freed once, and every frame is
// destroyed exactly once. The dropping thread learns that the bodies ended
// from a relaxed counter, so that nothing but the drop itself orders the
// free after the writes (is_finished() would).
task<std::size_t> fills(std::string text, tracked /*counted*/, std::size_t n,
                        std::atomic<std::size_t>* ended) {
  text.assign(n, 'x');
  ended->fetch_add(1, std::memory_order_relaxed);
  co_return text.size();
}

TEST(Join, AHandleDroppedOnAnotherThreadFreesItsTaskOnceWhetherRunningOrFinished) {
  counts c;
  {
    spindle::runtime rt{{.workers = 2}};
    for (int round = 0; round < 50; ++round) {
      std::atomic<std::size_t> ended{0};
      std::vector<join_handle<std::size_t>> hs;
      for (std::size_t i = 0; i < 200; ++i)
        hs.push_back(rt.spawn(fills(std::string(), tracked(c), 64 + i, &ended)));
      // Every other handle goes at once, mostly before its task finished.
      for (std::size_t i = 1; i < hs.size(); i += 2)
        hs[i] = join_handle<std::size_t>{};
      // The rest once every body has ended, from another thread.
      while (ended.load(std::memory_order_relaxed) != hs.size())
        std::this_thread::yield();
      std::thread([&hs] { hs.clear(); }).join();
    }
  }
  EXPECT_GT(c.constructed.load(), 0);
  EXPECT_EQ(c.alive(), 0) << "a frame destroyed twice, or never";
}

}  // namespace
