// Tests of spindle::task<T> (runtime/include/spindle/task.hpp): laziness,
// results, exceptions, symmetric transfer and frame ownership.
//
// Most tests drive tasks without a runtime: a small eager coroutine awaits
// the task on the calling thread (a task only suspends through symmetric
// transfer unless it awaits something that parks it).
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <coroutine>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/detail/frame_pool.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

using spindle::task;
using spindle_test::counts;
using spindle_test::tracked;

// ---------------------------------------------------------------------------
// A synchronous driver

template <class T>
struct outcome {
  std::optional<T> value;
  std::exception_ptr error;
  bool finished = false;
};
template <>
struct outcome<void> {
  bool value = false;
  std::exception_ptr error;
  bool finished = false;
};

/// Eager coroutine that starts at once and stays suspended at its end.
struct driver_coro {
  struct promise_type {
    driver_coro get_return_object() noexcept {
      return {std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
  std::coroutine_handle<promise_type> handle;
};

template <class T>
driver_coro drive(task<T> t, outcome<T>* out) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await std::move(t);
      out->value = true;
    } else {
      out->value.emplace(co_await std::move(t));
    }
  } catch (...) {
    out->error = std::current_exception();
  }
  out->finished = true;
}

/// Runs `t` to completion on this thread.
template <class T>
outcome<T> sync_run(task<T> t) {
  outcome<T> out;
  driver_coro d = drive(std::move(t), &out);
  EXPECT_TRUE(d.handle.done()) << "the task suspended outside symmetric transfer";
  d.handle.destroy();
  return out;
}

/// An awaitable that suspends and hands out the suspended handle.
struct manual_gate {
  std::coroutine_handle<> waiting{};
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) noexcept { waiting = h; }
  void await_resume() const noexcept {}
};

// ---------------------------------------------------------------------------
// Laziness

task<int> set_flag_and_return(bool* flag, int v) {
  *flag = true;
  co_return v;
}

TEST(Task, IsLazy) {
  bool ran = false;
  task<int> t = set_flag_and_return(&ran, 42);
  EXPECT_FALSE(ran) << "the body ran before the task was awaited";
  EXPECT_TRUE(t.valid());
  EXPECT_FALSE(t.done());
  outcome<int> out = sync_run(std::move(t));
  EXPECT_TRUE(ran);
  ASSERT_TRUE(out.value.has_value());
  EXPECT_EQ(*out.value, 42);
}

task<int> creates_but_does_not_await(bool* child_ran) {
  task<int> child = set_flag_and_return(child_ran, 1);
  co_return 7;
}

TEST(Task, UnawaitedChildNeverRuns) {
  bool child_ran = false;
  outcome<int> out = sync_run(creates_but_does_not_await(&child_ran));
  EXPECT_EQ(out.value, 7);
  EXPECT_FALSE(child_ran);
}

// ---------------------------------------------------------------------------
// Values

task<std::string> make_string() {
  co_return std::string(100, 'x');
}
task<void> void_task(int* counter) {
  ++*counter;
  co_return;
}
task<std::unique_ptr<int>> make_unique_value(int v) {
  co_return std::make_unique<int>(v);
}
task<std::unique_ptr<int>> forward_unique(int v) {
  std::unique_ptr<int> p = co_await make_unique_value(v);
  *p += 1;
  co_return p;
}

struct no_default {
  explicit no_default(int v) : value(v) {}
  int value;
};
task<no_default> make_no_default() {
  co_return no_default{5};
}

TEST(Task, ReturnsValues) {
  EXPECT_EQ(sync_run(make_string()).value, std::string(100, 'x'));
  EXPECT_EQ(sync_run(make_no_default()).value->value, 5);
}

TEST(Task, VoidTask) {
  int counter = 0;
  outcome<void> out = sync_run(void_task(&counter));
  EXPECT_TRUE(out.value);
  EXPECT_EQ(counter, 1);
  EXPECT_EQ(out.error, nullptr);
}

TEST(Task, MoveOnlyResult) {
  outcome<std::unique_ptr<int>> out = sync_run(forward_unique(41));
  ASSERT_TRUE(out.value.has_value());
  ASSERT_NE(*out.value, nullptr);
  EXPECT_EQ(**out.value, 42);
}

task<int> add(int a, int b) {
  co_return a + b;
}
task<long> sum_sequence(int n) {
  long total = 0;
  for (int i = 0; i < n; ++i)
    total += co_await add(i, 1);
  co_return total;
}

TEST(Task, ManySequentialAwaits) {
  // One million child tasks awaited in a loop: each completes synchronously
  // and transfers back without growing the stack.
  int const n = static_cast<int>(spindle_test::scaled(1'000'000, 10'000));
  long expected = static_cast<long>(n) * (n + 1) / 2;
  outcome<long> out = sync_run(sum_sequence(n));
  EXPECT_EQ(*out.value, expected);
}

TEST(Task, LvalueAwaitKeepsTheTaskObject) {
  auto parent = []() -> task<int> {
    task<int> t = add(2, 3);
    int v = co_await t;
    co_return v + (t.valid() && t.done() ? 100 : 0);
  };
  EXPECT_EQ(sync_run(parent()).value, 105);
}

// ---------------------------------------------------------------------------
// Exceptions

struct custom_error : std::runtime_error {
  explicit custom_error(int c) : std::runtime_error("custom"), code(c) {}
  int code;
};

task<int> throws_at_depth(int depth, counts* c) {
  tracked local(*c);
  if (depth == 0) throw custom_error(17);
  int v = co_await throws_at_depth(depth - 1, c);
  co_return v + 1;  // never reached
}

TEST(Task, ExceptionsPropagateThroughCoAwait) {
  counts c;
  outcome<int> out = sync_run(throws_at_depth(3, &c));
  ASSERT_NE(out.error, nullptr);
  EXPECT_FALSE(out.value.has_value());
  try {
    std::rethrow_exception(out.error);
  } catch (custom_error const& e) {
    EXPECT_EQ(e.code, 17);
  } catch (...) {
    ADD_FAILURE() << "wrong exception type";
  }
  EXPECT_EQ(c.constructed.load(), 4);
  EXPECT_EQ(c.alive(), 0) << "locals of the unwound frames were not destroyed";
}

task<void> throws_int() {
  throw 5;
  co_return;
}
task<int> catches_and_continues() {
  try {
    co_await throws_int();
  } catch (int v) {
    co_return v * 2;
  }
  co_return -1;
}

TEST(Task, ExceptionCanBeCaughtInsideAndNonStdTypesWork) {
  EXPECT_EQ(sync_run(catches_and_continues()).value, 10);
  outcome<void> out = sync_run(throws_int());
  ASSERT_NE(out.error, nullptr);
  EXPECT_THROW(std::rethrow_exception(out.error), int);
}

// ---------------------------------------------------------------------------
// A failure with no memory left for its box (promise_base: the task then
// reports std::bad_alloc, with its continuation kept)

// The size of promise_base's failure box: a continuation and an exception.
constexpr std::size_t failure_box_bytes =
    sizeof(std::coroutine_handle<>) + sizeof(std::exception_ptr);

task<int> fails_with_no_memory_for_its_box(int depth, counts* c) {
  tracked local(*c);
  if (depth == 0) {
    // The box for this failure is the calling thread's next allocation of
    // its size: it throws std::bad_alloc.
    spindle::detail::frame_pool_fail_next_allocation(failure_box_bytes);
    throw custom_error(17);
  }
  int v = co_await fails_with_no_memory_for_its_box(depth - 1, c);
  co_return v + 1;  // never reached
}

task<int> recovers_from_bad_alloc(counts* c) {
  try {
    co_return co_await fails_with_no_memory_for_its_box(2, c);
  } catch (std::bad_alloc const&) {
    co_return -1;
  }
}

TEST(Task, AFailureWithNoMemoryForItsBoxReportsBadAllocToItsCaller) {
  counts c;
  outcome<int> out = sync_run(fails_with_no_memory_for_its_box(3, &c));
  ASSERT_NE(out.error, nullptr);
  EXPECT_THROW(std::rethrow_exception(out.error), std::bad_alloc)
      << "the task's own exception, so its box was allocated after all";
  EXPECT_EQ(c.constructed.load(), 4);
  EXPECT_EQ(c.alive(), 0) << "locals of the unwound frames were not destroyed";
  // The continuation was kept: the caller catches it and goes on (sync_run
  // also checks that the chain finished).
  EXPECT_EQ(sync_run(recovers_from_bad_alloc(&c)).value, -1);
  EXPECT_EQ(c.alive(), 0);
  // The hook is spent: the next failure keeps its own exception.
  outcome<int> again = sync_run(throws_at_depth(1, &c));
  EXPECT_THROW(std::rethrow_exception(again.error), custom_error);
}

task<long> nested_in_runtime(int depth);

task<int> spawned_fails_with_no_memory_for_its_box() {
  spindle::detail::frame_pool_fail_next_allocation(failure_box_bytes);
  throw custom_error(17);
  co_return 0;
}

task<int> joins_a_task_that_lost_its_exception() {
  spindle::join_handle<int> h = spindle::spawn(spawned_fails_with_no_memory_for_its_box());
  try {
    co_return co_await h;
  } catch (std::bad_alloc const&) {
    co_return -1;
  }
}

TEST(Task, ASpawnedTaskWithNoMemoryForItsBoxReportsBadAllocThroughItsJoinHandle) {
  spindle::runtime rt{{.workers = 2}};
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(rt.block_on(joins_a_task_that_lost_its_exception()), -1) << "round " << i;
  // The runtime goes on.
  EXPECT_EQ(rt.block_on(nested_in_runtime(1'000)), 1'000);
}

// ---------------------------------------------------------------------------
// Symmetric transfer: deep recursion on a small stack

task<long> nested(int depth) {
  if (depth == 0) co_return 0;
  long below = co_await nested(depth - 1);
  co_return below + 1;
}

/// Runs `fn` on a thread with a `stack_bytes` stack.
template <class Fn>
void on_small_stack(std::size_t stack_bytes, Fn fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, stack_bytes), 0);
  pthread_t thread;
  auto* heap_fn = new Fn(std::move(fn));
  auto trampoline = [](void* arg) -> void* {
    auto* f = static_cast<Fn*>(arg);
    (*f)();
    delete f;
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, trampoline, heap_fn), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

// A failing frame keeps its continuation and its exception in one word
// of its promise (a box on the exception path: promise_base): every level
// here fails, catches its child's failure and fails again, so that each
// level's box is made, read through the await, and freed (ASan: no leak,
// no use after free), and the continuation of every level is still found.
task<int> rethrows_at_every_level(int depth) {
  if (depth == 0) throw custom_error(0);
  try {
    co_return co_await rethrows_at_every_level(depth - 1);
  } catch (custom_error const& e) {
    throw custom_error(e.code + 1);
  }
}

task<int> recovers_from_every_other_level(int depth) {
  if (depth == 0) throw custom_error(0);
  int below = 0;
  try {
    below = co_await recovers_from_every_other_level(depth - 1);
  } catch (custom_error const& e) {
    below = e.code;
  }
  if (depth % 2 == 1) throw custom_error(below + 1);
  co_return below + 1;
}

TEST(Task, EveryLevelOfAChainCanFailAndEachFailureReachesItsCaller) {
  outcome<int> out = sync_run(rethrows_at_every_level(500));
  ASSERT_NE(out.error, nullptr);
  try {
    std::rethrow_exception(out.error);
  } catch (custom_error const& e) {
    EXPECT_EQ(e.code, 500);
  }
  // Values and failures alternate up the chain.
  outcome<int> mixed = sync_run(recovers_from_every_other_level(200));
  ASSERT_EQ(mixed.error, nullptr);
  EXPECT_EQ(mixed.value, 200);
}

TEST(Task, DeepRecursionDoesNotGrowTheStack) {
  // 100,000 nested co_await on a 1 MiB stack: without symmetric transfer
  // each level would keep a native frame alive and overflow it.
  constexpr int depth = 100'000;
  long result = -1;
  on_small_stack(1 << 20, [&] {
    outcome<long> out = sync_run(nested(depth));
    result = out.value.value_or(-2);
  });
  EXPECT_EQ(result, depth);
}

// ---------------------------------------------------------------------------
// Frame ownership

// noinline: clang may otherwise elide the heap allocation of a frame whose
// whole lifetime it sees (HALO), and these tests observe the frame pool.
[[gnu::noinline]] task<int> body_with_param([[maybe_unused]] tracked param, bool* ran) {
  *ran = true;
  co_return 1;
}

TEST(Task, DestroyingAnUnawaitedTaskRunsNoBodyAndFreesTheFrame) {
  counts c;
  bool ran = false;
  std::thread([&] {  // a fresh thread: a clean frame pool
    void* frame_address = nullptr;
    {
      task<int> t = body_with_param(tracked(c), &ran);
      EXPECT_GE(c.alive(), 1) << "the parameter copy lives in the frame";
      frame_address = t.release().address();
      std::coroutine_handle<>::from_address(frame_address).destroy();
    }
    EXPECT_EQ(c.alive(), 0) << "destroying the frame did not destroy its parameter";
    // The frame memory went back to this thread's pool: the next frame of
    // the same size reuses it.
    auto before = spindle::detail::frame_pool_thread_counters();
    task<int> again = body_with_param(tracked(c), &ran);
    auto after = spindle::detail::frame_pool_thread_counters();
    EXPECT_EQ(after.pool_hits, before.pool_hits + 1);
    EXPECT_EQ(again.release().address(), frame_address);
    std::coroutine_handle<>::from_address(frame_address).destroy();
  })
      .join();
  EXPECT_FALSE(ran);
  EXPECT_EQ(c.alive(), 0);
}

TEST(Task, DroppingATaskObjectDestroysItsFrame) {
  counts c;
  bool ran = false;
  {
    task<int> t = body_with_param(tracked(c), &ran);
    EXPECT_GE(c.alive(), 1);
  }
  EXPECT_FALSE(ran);
  EXPECT_EQ(c.alive(), 0);
  EXPECT_GE(c.constructed.load(), 2) << "argument and frame copy";
}

TEST(Task, MoveTransfersOwnership) {
  counts c;
  bool ran = false;
  task<int> a = body_with_param(tracked(c), &ran);
  task<int> b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(a.done());
  EXPECT_TRUE(b.valid());
  long alive = c.alive();
  EXPECT_GE(alive, 1);
  // Move-assigning over a live task destroys the old frame.
  b = body_with_param(tracked(c), &ran);
  EXPECT_EQ(c.alive(), alive);
  b = task<int>{};
  EXPECT_EQ(c.alive(), 0);
  EXPECT_FALSE(ran);
}

TEST(Task, AwaitingAnEmptyTaskThrowsInvalidArgument) {
  task<int> empty;
  EXPECT_FALSE(empty.valid());
  outcome<int> out = sync_run(std::move(empty));
  ASSERT_NE(out.error, nullptr);
  EXPECT_THROW(std::rethrow_exception(out.error), std::invalid_argument);
}

task<int> gated_inner(manual_gate* gate, counts* c, bool throw_after) {
  tracked local(*c);
  co_await *gate;
  if (throw_after) throw custom_error(3);
  co_return 10;
}
task<int> gated_middle(manual_gate* gate, counts* c, bool throw_after) {
  tracked local(*c);
  co_return 1 + co_await gated_inner(gate, c, throw_after);
}
task<int> gated_outer(manual_gate* gate, counts* c, bool throw_after) {
  tracked local(*c);
  co_return 1 + co_await gated_middle(gate, c, throw_after);
}

TEST(Task, DestroyingASuspendedChainDestroysEveryFrame) {
  counts c;
  manual_gate gate;
  outcome<int> out;
  driver_coro d = drive(gated_outer(&gate, &c, false), &out);
  ASSERT_TRUE(gate.waiting);
  EXPECT_FALSE(d.handle.done());
  EXPECT_EQ(c.alive(), 3);
  // The driver's frame owns the outer task, which owns the awaited chain.
  d.handle.destroy();
  EXPECT_EQ(c.alive(), 0) << "locals of the suspended chain leaked";
  EXPECT_FALSE(out.finished);
}

TEST(Task, ResumedOnAnotherThreadCompletesTheChain) {
  for (bool throw_after : {false, true}) {
    counts c;
    manual_gate gate;
    outcome<int> out;
    driver_coro d = drive(gated_outer(&gate, &c, throw_after), &out);
    ASSERT_TRUE(gate.waiting);
    std::thread([&] { gate.waiting.resume(); }).join();
    EXPECT_TRUE(d.handle.done());
    EXPECT_TRUE(out.finished);
    if (throw_after) {
      ASSERT_NE(out.error, nullptr);
      EXPECT_THROW(std::rethrow_exception(out.error), custom_error);
    } else {
      EXPECT_EQ(out.value, 12);
    }
    d.handle.destroy();
    EXPECT_EQ(c.alive(), 0);
  }
}

[[gnu::noinline]] task<int> pooled_add(int a, int b) {
  co_return a + b;
}

TEST(Task, FramesComeFromTheFramePool) {
  std::thread([] {
    auto before = spindle::detail::frame_pool_thread_counters();
    for (int i = 0; i < 100; ++i) {
      task<int> t = pooled_add(i, i);
    }
    auto after = spindle::detail::frame_pool_thread_counters();
    EXPECT_EQ(after.pool_misses - before.pool_misses, 1u) << "first frame only";
    EXPECT_EQ(after.pool_hits - before.pool_hits, 99u);
  }).join();
}

// ---------------------------------------------------------------------------
// Inside a runtime

task<long> nested_in_runtime(int depth) {
  if (depth == 0) co_return 0;
  co_return 1 + co_await nested_in_runtime(depth - 1);
}

TEST(Task, AwaitedInsideARuntime) {
  spindle::runtime rt{{.workers = 2}};
  EXPECT_EQ(rt.block_on(nested_in_runtime(10'000)), 10'000);
  EXPECT_EQ(spindle_test::run_on_worker(rt, nested_in_runtime(10'000)), 10'000);
  EXPECT_EQ(*rt.block_on(forward_unique(1)), 2);
}

}  // namespace
