// Helpers shared by the when_all and when_any tests: children that finish
// after some yields (with a value or an exception) and children that only an
// abort ends (suspended, or running and yielding).
#pragma once

#include <stdexcept>
#include <string>

#include "runtime_test_support.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

// The coroutines are static, not inline: clang 14 with -fsanitize=address
// cannot emit an inline (comdat) coroutine ("Cannot represent a difference
// across sections").
namespace combinator_test {

struct custom_error : std::runtime_error {
  explicit custom_error(int c) : std::runtime_error("custom error " + std::to_string(c)), code(c) {}
  int code;
};

/// Yields `yields` times, then returns `v`.
template <class T>
[[maybe_unused]] static spindle::task<T> after_yields(T v, int yields) {
  for (int i = 0; i < yields; ++i)
    co_await spindle::yield_now{};
  co_return v;
}

/// Yields `yields` times, then throws custom_error(code).
[[maybe_unused]] static spindle::task<int> throw_after_yields(int code, int yields) {
  for (int i = 0; i < yields; ++i)
    co_await spindle::yield_now{};
  throw custom_error(code);
  co_return 0;
}

/// Holds a tracked object and never finishes: suspended until aborted.
template <class T = int>
[[maybe_unused]] static spindle::task<T> park_forever(spindle_test::counts* c) {
  spindle_test::tracked t{*c};
  co_await spindle_test::suspend_forever{};
  co_return T{};
}

/// Holds a tracked object and yields forever: running or queued (never
/// suspended in an awaiter) until aborted.
template <class T = int>
[[maybe_unused]] static spindle::task<T> spin_forever(spindle_test::counts* c) {
  spindle_test::tracked t{*c};
  for (;;)
    co_await spindle::yield_now{};
}

}  // namespace combinator_test
