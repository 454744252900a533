// spindle::when_any: run several tasks concurrently; the first to finish wins.
//
//   auto r = co_await spindle::when_any(fetch_a(), fetch_b());
//   // r.index: 0 or 1; r.value: std::variant<A, B> holding alternative r.index
//   auto r = co_await spindle::when_any(std::move(tasks));  // vector<task<T>>
//   // r.index: position in the vector; r.value: T
//   auto r = co_await spindle::when_any(std::move(handle), fetch_b());  // join_handle<A>, task<B>
//
// Shape: a lazy task. Accepts any mix of task<T> and join_handle<T>
// arguments (variadic), a std::vector<task<T>> or a
// std::vector<join_handle<T>>. When awaited it spawns every task argument on
// the runtime of the calling task and adopts the task of every join handle
// argument (spawned earlier, on any runtime, running or already finished):
// from then on an adopted task is a child exactly like a spawned one. The
// first child to complete (with a value or with an exception) wins; every
// other child, adopted ones included, is aborted at once
// (join_handle::abort, from the thread that completed the winner) and
// awaited: when_any returns only after their frames are destroyed
// (destructors ran). An adopted task that had already finished completes
// as it is adopted (in argument order), so it wins unless a child before it
// in the arguments completed already; the children after it are then
// aborted as they are spawned or adopted.
// A void child gives std::monostate. Values of losers that finished anyway
// are dropped. Until the returned task is awaited the handles are only held:
// destroying it unawaited, or an argument error, drops them (join_handle's
// drop: the tasks keep running, detached).
//
// Errors: the winner's exception is rethrown (after the losers are gone); an
// adopted task aborted before (join_handle::abort) fails with
// spindle::task_cancelled. Zero arguments (an empty vector) throw
// std::system_error(std::errc::invalid_argument), as does an empty task, an
// empty join handle (default-constructed or moved-from) or one whose result
// was already taken, before anything is spawned or adopted. Awaiting outside
// a spindle runtime throws std::system_error(std::errc::operation_not_permitted)
// when there is a task to spawn or a child to wait for (join handles whose
// tasks all finished need neither); the children adopted by then are
// aborted and reaped first.
//
// Cancellation: when the task awaiting when_any is aborted, every child
// (spawned and adopted) is aborted with it and destroyed before the when_any
// frame is (see detail/child_set.hpp for the one exception: a child whose
// I/O is being cancelled).
//
// Thread-safety: the returned task is used like any task (one owner); the
// join handles handed over are owned by it, nobody else may use them.
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
#include "spindle/join_handle.hpp"
#include "spindle/task.hpp"

namespace spindle {

/// The winner of when_any: its position among the arguments and its value.
/// For the variadic form `value` is a std::variant whose active alternative
/// is `index`.
template <class T>
struct when_any_result {
  std::size_t index;  ///< which argument (or range element) finished first, from 0
  T value;            ///< its value
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

/// Runs every task (and adopted join handle) concurrently; yields the first
/// to finish (see the file comment).
template <detail::child_arg... As>
SPINDLE_COROUTINE_TEMPLATE
    task<when_any_result<std::variant<detail::result_t<detail::child_value_t<As>>...>>>
    when_any(As... args) {
  static_assert(sizeof...(As) > 0, "spindle::when_any needs at least one task");
  using variant_type = std::variant<detail::result_t<detail::child_value_t<As>>...>;
  (detail::check_child(args, "spindle::when_any"), ...);
  std::tuple<As...> pending{std::move(args)...};
  // Declared before the set: destroyed after close() returned.
  std::tuple<std::unique_ptr<detail::child<detail::child_value_t<As>>>...> children;
  detail::child_set set{detail::child_set::abort_policy::on_first_done};
  detail::add_children(set, pending, children, std::index_sequence_for<As...>{});
  co_await set.wait_all();
  std::size_t winner = set.first_done_index();
  co_return when_any_result<variant_type>{winner,
                                          detail::take_winner<variant_type, 0>(children, winner)};
}

/// Runs every task of `args` (std::vector<task<T>>) or adopts every task of
/// `args` (std::vector<join_handle<T>>) concurrently; yields the first to
/// finish and its position (see the file comment).
template <detail::child_arg A>
SPINDLE_COROUTINE_TEMPLATE task<when_any_result<detail::result_t<detail::child_value_t<A>>>>
when_any(std::vector<A> args) {
  using T = detail::child_value_t<A>;
  if (args.empty()) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle::when_any: no tasks");
  }
  for (auto const& a : args)
    detail::check_child(a, "spindle::when_any");
  std::vector<std::unique_ptr<detail::child<T>>> children;
  children.reserve(args.size());
  detail::child_set set{detail::child_set::abort_policy::on_first_done};
  for (std::size_t i = 0; i < args.size(); ++i)
    children.push_back(detail::add_child(set, std::move(args[i]), i));
  co_await set.wait_all();
  std::size_t winner = set.first_done_index();
  co_return when_any_result<detail::result_t<T>>{winner, children[winner]->take()};
}

}  // namespace spindle
