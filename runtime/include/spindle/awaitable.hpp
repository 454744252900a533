// spindle/awaitable.hpp: what "any awaitable" means to block_on and spawn.
//
//   rt.block_on(spindle::sleep_for(30ms));          // not a task: wrapped in one
//   auto h = spindle::spawn(spindle::when_all(a(), b()));
//
// Shape: `spindle::awaitable<A>` holds for a type whose awaiter (its
// operator co_await's result, member or free, or the object itself) has
// await_ready() (convertible to bool) and await_resume(); await_result_t<A>
// is what `co_await a` yields, without reference or cv qualifiers.
// detail::await_as_task(a) is a task that co_awaits `a` and yields (a copy
// of) its result or rethrows. runtime::block_on and spawn use it for
// anything that is not already a task<T>; a non-awaitable argument stops
// the build at a static_assert that says so.
//
// Lifetimes: block_on keeps a reference to its argument (it returns before
// the full-expression ends, so a temporary such as sleep_for(...) is still
// alive); spawn moves the argument into the new task's frame, so its type
// must be move-constructible.
//
// Design source: cppcoro's awaitable_traits and sync_wait (any awaitable),
// Tokio's block_on/spawn (any future).
#pragma once

#include <concepts>
#include <type_traits>
#include <utility>

#include "spindle/task.hpp"

namespace spindle {

namespace detail {

template <class A>
concept has_member_co_await = requires(A&& a) {
  std::forward<A>(a).operator co_await();
};
template <class A>
concept has_free_co_await = requires(A&& a) {
  operator co_await(std::forward<A>(a));
};

/// The awaiter of `a`: its operator co_await's result, or `a` itself.
template <class A>
decltype(auto) get_awaiter(A&& a) {
  if constexpr (has_member_co_await<A>) {
    return std::forward<A>(a).operator co_await();
  } else if constexpr (has_free_co_await<A>) {
    return operator co_await(std::forward<A>(a));
  } else {
    return std::forward<A>(a);
  }
}

template <class T>
inline constexpr bool is_task_v = false;
template <class T>
inline constexpr bool is_task_v<task<T>> = true;

}  // namespace detail

/// A type `co_await` accepts inside a spindle task (see the file comment).
template <class A>
concept awaitable = requires(A&& a) {
  { detail::get_awaiter(std::forward<A>(a)).await_ready() } -> std::convertible_to<bool>;
  detail::get_awaiter(std::forward<A>(a)).await_resume();
};

/// What `co_await a` yields for an `A`, cv- and reference-stripped.
template <awaitable A>
using await_result_t =
    std::remove_cvref_t<decltype(detail::get_awaiter(std::declval<A>()).await_resume())>;

namespace detail {

/// A task that awaits `a` (held as `A`: a reference for an lvalue or, when
/// A is a reference type, for the caller's object; a value otherwise).
template <class A>
SPINDLE_COROUTINE_TEMPLATE task<await_result_t<A>> await_as_task(A a) {
  if constexpr (std::is_void_v<await_result_t<A>>) {
    co_await std::forward<A>(a);
  } else {
    co_return co_await std::forward<A>(a);
  }
}

}  // namespace detail

}  // namespace spindle
