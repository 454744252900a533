// spindle::when_any: run several tasks concurrently; the first to finish wins.
//
//   auto r = co_await spindle::when_any(fetch_a(), fetch_b());
//   // r.index: 0 or 1; r.value: std::variant<A, B> holding alternative r.index
//   auto r = co_await spindle::when_any(std::move(tasks));  // vector<task<T>>
//   // r.index: position in the vector; r.value: T
//
// Shape: a lazy task. When awaited it spawns every argument on the runtime of
// the calling task. The first child to complete (with a value or with an
// exception) wins; every other child is aborted at once (join_handle::abort,
// from the thread that completed the winner) and awaited: when_any returns
// only after their frames are destroyed (destructors ran). A task<void> gives
// std::monostate. Values of losers that finished anyway are dropped.
//
// Errors: the winner's exception is rethrown (after the losers are gone).
// Zero tasks throw std::system_error(std::errc::invalid_argument), as does an
// empty task, before anything is spawned; awaiting outside a spindle runtime
// throws std::system_error(std::errc::operation_not_permitted).
//
// Cancellation: when the task awaiting when_any is aborted, every child is
// aborted with it and destroyed before the when_any frame is (see
// detail/child_set.hpp for the one exception: a child whose I/O is being
// cancelled).
//
// Thread-safety: the returned task is used like any task (one owner).
// Design source: Tokio's select! (losers dropped), cppcoro-style
// tuple/vector forms, Trio's nursery rule (children never outlive the call).
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "spindle/detail/child_set.hpp"
#include "spindle/task.hpp"

namespace spindle {

/// The winner of when_any: its position among the arguments and its value.
/// For the variadic form `value` is a std::variant whose active alternative
/// is `index`.
template <class T>
struct when_any_result {
  std::size_t index;
  T value;
};

namespace detail {

template <class V, std::size_t I, class... Ts>
V take_winner(std::tuple<std::unique_ptr<child<Ts>>...>& children, std::size_t winner) {
  if constexpr (I + 1 < sizeof...(Ts)) {
    if (winner != I) return take_winner<V, I + 1>(children, winner);
  }
  return V{std::in_place_index<I>, std::get<I>(children)->take()};
}

}  // namespace detail

/// Runs every task concurrently; yields the first to finish (see the file
/// comment).
template <class... Ts>
SPINDLE_COROUTINE_TEMPLATE task<when_any_result<std::variant<detail::result_t<Ts>...>>> when_any(
    task<Ts>... tasks) {
  static_assert(sizeof...(Ts) > 0, "spindle::when_any needs at least one task");
  using variant_type = std::variant<detail::result_t<Ts>...>;
  (detail::check_child(tasks, "spindle::when_any: empty task"), ...);
  std::tuple<task<Ts>...> pending{std::move(tasks)...};
  // Declared before the set: destroyed after close() returned.
  std::tuple<std::unique_ptr<detail::child<Ts>>...> children;
  detail::child_set set{detail::child_set::abort_policy::on_first_done};
  detail::spawn_children(set, pending, children, std::index_sequence_for<Ts...>{});
  co_await set.wait_all();
  std::size_t winner = set.first_done_index();
  co_return when_any_result<variant_type>{winner,
                                          detail::take_winner<variant_type, 0>(children, winner)};
}

/// Runs every task of `tasks` concurrently; yields the first to finish and
/// its position (see the file comment).
template <class T>
SPINDLE_COROUTINE_TEMPLATE task<when_any_result<detail::result_t<T>>> when_any(
    std::vector<task<T>> tasks) {
  if (tasks.empty()) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle::when_any: no tasks");
  }
  for (auto const& t : tasks)
    detail::check_child(t, "spindle::when_any: empty task");
  std::vector<std::unique_ptr<detail::child<T>>> children;
  children.reserve(tasks.size());
  detail::child_set set{detail::child_set::abort_policy::on_first_done};
  for (std::size_t i = 0; i < tasks.size(); ++i)
    children.push_back(detail::spawn_child(set, std::move(tasks[i]), i));
  co_await set.wait_all();
  std::size_t winner = set.first_done_index();
  co_return when_any_result<detail::result_t<T>>{winner, children[winner]->take()};
}

}  // namespace spindle
