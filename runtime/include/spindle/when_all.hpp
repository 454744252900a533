// spindle::when_all: run several tasks concurrently and wait for all.
//
//   auto [a, b] = co_await spindle::when_all(f(), g());  // std::tuple<A, B>
//   std::vector<int> v = co_await spindle::when_all(std::move(tasks));  // vector<task<int>>
//
// Shape: a lazy task. When awaited it spawns every argument on the runtime of
// the calling task (they run in parallel on the workers), then waits for all
// of them and yields their results in argument order: a std::tuple for the
// variadic form, a std::vector for a std::vector<task<T>>. A task<void>
// gives std::monostate. Results are moved out (move-only types work).
//
// Errors: when a child throws, the other children are aborted at once (from
// the thread that saw the failure) and awaited: when_all returns only after
// their frames are destroyed (destructors ran). Then the first exception (in
// completion order) is rethrown; later exceptions and the values of children
// that finished are dropped. A child aborted by runtime shutdown counts as
// failing with spindle::task_cancelled. An empty task in the arguments throws
// std::system_error(std::errc::invalid_argument) before anything is spawned;
// awaiting outside a spindle runtime throws
// std::system_error(std::errc::operation_not_permitted).
//
// Cancellation: when the task awaiting when_all is aborted, its children are
// aborted with it; their frames are destroyed before the when_all frame is
// (see detail/child_set.hpp for the one exception: a child whose I/O is being
// cancelled).
//
// Thread-safety: the returned task is used like any task (one owner).
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

/// Runs every task concurrently; yields a tuple of their results (see the
/// file comment).
template <class... Ts>
SPINDLE_COROUTINE_TEMPLATE task<std::tuple<detail::result_t<Ts>...>> when_all(task<Ts>... tasks) {
  (detail::check_child(tasks, "spindle::when_all: empty task"), ...);
  std::tuple<task<Ts>...> pending{std::move(tasks)...};
  // Declared before the set: destroyed after close() returned.
  std::tuple<std::unique_ptr<detail::child<Ts>>...> children;
  detail::child_set set{detail::child_set::abort_policy::on_failure};
  detail::spawn_children(set, pending, children, std::index_sequence_for<Ts...>{});
  co_await set.wait_all();
  if (std::size_t failed = set.first_failed_index(); failed != detail::child_set::npos) {
    std::rethrow_exception(
        detail::take_exception_at(children, failed, std::index_sequence_for<Ts...>{}));
  }
  co_return detail::take_all(children, std::index_sequence_for<Ts...>{});
}

/// Runs every task of `tasks` concurrently; yields their results in order
/// (see the file comment). An empty vector yields an empty vector.
template <class T>
SPINDLE_COROUTINE_TEMPLATE task<std::vector<detail::result_t<T>>> when_all(
    std::vector<task<T>> tasks) {
  for (auto const& t : tasks)
    detail::check_child(t, "spindle::when_all: empty task");
  std::vector<std::unique_ptr<detail::child<T>>> children;
  children.reserve(tasks.size());
  detail::child_set set{detail::child_set::abort_policy::on_failure};
  for (std::size_t i = 0; i < tasks.size(); ++i)
    children.push_back(detail::spawn_child(set, std::move(tasks[i]), i));
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
