// Any awaitable in runtime::block_on, runtime::spawn and spindle::spawn
// (spindle/awaitable.hpp): sleeps, join handles, when_all/when_any, a
// user's awaiter with operator co_await, and a void result.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>

#include "spindle/awaitable.hpp"
#include "spindle/errors.hpp"
#include "spindle/runtime.hpp"
#include "spindle/time.hpp"
#include "spindle/when_all.hpp"
#include "spindle/when_any.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::runtime;
using spindle::task;

task<int> value_after(int v, std::chrono::milliseconds d) {
  co_await spindle::sleep_for(d);
  co_return v;
}

/// A user's awaiter that completes at once with a string.
struct ready_string {
  std::string text;
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  std::string await_resume() const { return text; }
};

/// A type with a member operator co_await.
struct answer {
  ready_string operator co_await() const { return ready_string{"42"}; }
};

/// An awaiter that throws from await_resume.
struct throwing {
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  int await_resume() const { throw std::runtime_error("from await_resume"); }
};

static_assert(spindle::awaitable<spindle::sleep_awaiter>);
static_assert(spindle::awaitable<join_handle<int>>);
static_assert(spindle::awaitable<task<int>>);
static_assert(spindle::awaitable<answer>);
static_assert(!spindle::awaitable<int>);
static_assert(!spindle::awaitable<std::string>);
static_assert(std::is_same_v<spindle::await_result_t<answer>, std::string>);
static_assert(std::is_same_v<spindle::await_result_t<join_handle<int>>, int>);
static_assert(std::is_same_v<spindle::await_result_t<spindle::sleep_awaiter>, void>);

TEST(Awaitable, BlockOnSleepFor) {
  runtime rt{{.workers = 2}};
  auto const start = std::chrono::steady_clock::now();
  rt.block_on(spindle::sleep_for(30ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms) << "never early";
}

TEST(Awaitable, BlockOnJoinHandleAndWhenAll) {
  runtime rt{{.workers = 2}};
  join_handle<int> h = rt.spawn(value_after(7, 5ms));
  EXPECT_EQ(rt.block_on(std::move(h)), 7);
  join_handle<int> lvalue = rt.spawn(value_after(8, 1ms));
  EXPECT_EQ(rt.block_on(lvalue), 8) << "an lvalue handle is awaited in place";
  auto [a, b] = rt.block_on(spindle::when_all(value_after(1, 2ms), value_after(2, 1ms)));
  EXPECT_EQ(a + b, 3);
  auto any = rt.block_on(spindle::when_any(value_after(3, 200ms), value_after(4, 1ms)));
  EXPECT_EQ(any.index, 1u);
}

TEST(Awaitable, BlockOnUserAwaitersAndExceptions) {
  runtime rt{{.workers = 1}};
  EXPECT_EQ(rt.block_on(ready_string{"hi"}), "hi");
  EXPECT_EQ(rt.block_on(answer{}), "42");
  EXPECT_THROW(rt.block_on(throwing{}), std::runtime_error);
}

TEST(Awaitable, SpawnAnyAwaitableFromAnyThreadAndInsideTasks) {
  runtime rt{{.workers = 2}};
  join_handle<void> slept = rt.spawn(spindle::sleep_for(5ms));
  join_handle<std::string> s = rt.spawn(answer{});
  auto nested = []() -> task<std::string> {
    join_handle<std::string> h = spindle::spawn(ready_string{"nested"});
    join_handle<void> z = spindle::spawn(spindle::sleep_for(1ms));
    co_await z;
    co_return co_await h;
  };
  EXPECT_EQ(rt.block_on(nested()), "nested");
  rt.block_on(std::move(slept));
  EXPECT_EQ(rt.block_on(std::move(s)), "42");
}

TEST(Awaitable, SpawnedAwaitableCanBeAborted) {
  runtime rt{{.workers = 2}};
  join_handle<void> h = rt.spawn(spindle::sleep_for(10s));
  std::this_thread::sleep_for(5ms);
  h.abort();
  EXPECT_THROW(rt.block_on(std::move(h)), spindle::task_cancelled);
}

}  // namespace
