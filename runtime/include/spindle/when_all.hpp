// spindle::when_all: run several tasks concurrently and wait for all.
//
//   auto [a, b] = co_await spindle::when_all(f(), g());  // std::tuple<A, B>
//   std::vector<int> v = co_await spindle::when_all(std::move(tasks));  // vector<task<int>>
//   auto h = spindle::spawn(f());  // already running
//   auto [x, y] = co_await spindle::when_all(std::move(h), g());  // handles and tasks mixed
//
// Shape: a lazy task. Accepts any mix of task<T> and join_handle<T>
// arguments (variadic), a std::vector<task<T>> or a
// std::vector<join_handle<T>>. When awaited it spawns every task argument on
// the runtime of the calling task (they run in parallel on the workers) and
// adopts the task of every join handle argument (spawned earlier, on any
// runtime, running or already finished): from then on an adopted task is a
// child exactly like a spawned one (its result, its exception, its abort).
// Then it waits for all of them and yields their results in argument order:
// a std::tuple for the variadic form, a std::vector for a vector. A void
// child gives std::monostate. Results are moved out (move-only types work).
// Until the returned task is awaited the handles are only held: destroying
// it unawaited, or an argument error, drops them (join_handle's drop: the
// tasks keep running, detached).
//
// Errors: when a child throws, the other children are aborted at once (from
// the thread that saw the failure) and awaited: when_all returns only after
// their frames are destroyed (destructors ran), adopted ones included. Then
// the first exception (in completion order) is rethrown; later exceptions
// and the values of children that finished are dropped. A child aborted by
// runtime shutdown, or an adopted task aborted before (join_handle::abort),
// counts as failing with spindle::task_cancelled. An empty task, an empty
// join handle (default-constructed or moved-from) or one whose result was
// already taken throws std::system_error(std::errc::invalid_argument) before
// anything is spawned or adopted. Awaiting outside a spindle runtime throws
// std::system_error(std::errc::operation_not_permitted) when there is a task
// to spawn or a child to wait for (join handles whose tasks all finished
// need neither); the children adopted by then are aborted and reaped first.
//
// Cancellation: when the task awaiting when_all is aborted, its children
// (spawned and adopted) are aborted with it; their frames are destroyed
// before the when_all frame is (see detail/child_set.hpp for the one
// exception: a child whose I/O is being cancelled).
//
// Thread-safety: the returned task is used like any task (one owner); the
// join handles handed over are owned by it, nobody else may use them.
// Design source: cppcoro's when_all (tuple / vector results), Trio's nursery
// rule (children never outlive the call), Tokio's try_join! (first error
// cancels the rest).
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "spindle/detail/child_set.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/task.hpp"

namespace spindle {

namespace detail {

template <class... Ts, std::size_t... I>
std::exception_ptr take_exception_at(std::tuple<std::unique_ptr<child<Ts>>...>& children,
                                     std::size_t index, std::index_sequence<I...>) {
  std::exception_ptr e;
  ((I == index ? (void)(e = std::get<I>(children)->take_exception()) : (void)0), ...);
  return e;
}

template <class... Ts, std::size_t... I>
std::tuple<result_t<Ts>...> take_all(std::tuple<std::unique_ptr<child<Ts>>...>& children,
                                     std::index_sequence<I...>) {
  return std::tuple<result_t<Ts>...>{std::get<I>(children)->take()...};
}

}  // namespace detail

/// Runs every task (and adopted join handle) concurrently; yields a tuple of
/// their results (see the file comment).
template <detail::child_arg... As>
SPINDLE_COROUTINE_TEMPLATE task<std::tuple<detail::result_t<detail::child_value_t<As>>...>>
when_all(As... args) {
  (detail::check_child(args, "spindle::when_all"), ...);
  std::tuple<As...> pending{std::move(args)...};
  // Declared before the set: destroyed after close() returned.
  std::tuple<std::unique_ptr<detail::child<detail::child_value_t<As>>>...> children;
  detail::child_set set{detail::child_set::abort_policy::on_failure};
  detail::add_children(set, pending, children, std::index_sequence_for<As...>{});
  co_await set.wait_all();
  if (std::size_t failed = set.first_failed_index(); failed != detail::child_set::npos) {
    std::rethrow_exception(
        detail::take_exception_at(children, failed, std::index_sequence_for<As...>{}));
  }
  co_return detail::take_all(children, std::index_sequence_for<As...>{});
}

/// Runs every task of `args` (std::vector<task<T>>) or adopts every task of
/// `args` (std::vector<join_handle<T>>) concurrently; yields their results in
/// order (see the file comment). An empty vector yields an empty vector.
template <detail::child_arg A>
SPINDLE_COROUTINE_TEMPLATE task<std::vector<detail::result_t<detail::child_value_t<A>>>> when_all(
    std::vector<A> args) {
  using T = detail::child_value_t<A>;
  for (auto const& a : args)
    detail::check_child(a, "spindle::when_all");
  std::vector<std::unique_ptr<detail::child<T>>> children;
  children.reserve(args.size());
  detail::child_set set{detail::child_set::abort_policy::on_failure};
  for (std::size_t i = 0; i < args.size(); ++i)
    children.push_back(detail::add_child(set, std::move(args[i]), i));
  co_await set.wait_all();
  if (std::size_t failed = set.first_failed_index(); failed != detail::child_set::npos) {
    std::rethrow_exception(children[failed]->take_exception());
  }
  std::vector<detail::result_t<T>> results;
  results.reserve(children.size());
  for (auto& c : children)
    results.push_back(c->take());
  co_return results;
}

}  // namespace spindle
