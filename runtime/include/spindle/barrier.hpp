// spindle::barrier: a reusable rendezvous of a fixed number of arrivals per
// phase, like std::barrier.
//
//   spindle::barrier b{4};
//   bool leader = co_await b.arrive_and_wait();  // suspends until 4 arrived
//
// Shape: a std::mutex guarding the arrival count, the phase number and an
// intrusive list of waiters (no allocation per wait). The arrival that makes
// the count reach `expected` completes the phase: it does not suspend, it
// wakes every waiter of the phase (outside the lock), the count restarts at 0
// for the next phase, and its arrive_and_wait() yields true: it is the phase's
// leader (exactly one per phase, like Tokio's BarrierWaitResult::is_leader).
// Every other arrival yields false once the phase completes.
//
// arrive_and_drop() (a plain call, as std::barrier's): arrives in the current
// phase without waiting and lowers the expected count of every later phase
// by one. When that arrival completes the phase, the phase's first waiter is
// its leader (a phase with no waiter then has none).
//
// Cancellation: a task aborted while waiting withdraws its arrival, as if it
// had not arrived: the phase then needs one more arrival. A task aborted after
// its phase completed but before it resumed changes nothing.
//
// Errors: an expected count < 1 throws std::system_error(
// std::errc::invalid_argument), as does arrive_and_drop() once the expected
// count is 0. co_await outside a spindle task and
// blocking_arrive_and_wait() inside one throw std::system_error(
// std::errc::operation_not_permitted) without arriving.
//
// Thread-safety: every member may be called from any thread; plain threads
// take part through blocking_arrive_and_wait(). Everything before an arrival
// happens-before the return of every arrive_and_wait() of its phase. The
// barrier must outlive its waiters.
// Design source: std::barrier (phases, expected count), Tokio's sync::Barrier
// (leader = the arrival that completes the phase).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "spindle/detail/sync_awaiter.hpp"
#include "spindle/detail/wait_list.hpp"

namespace spindle {

namespace detail {
struct barrier_node : sync_node {
  bool leader = false;  ///< completed the phase
};
}  // namespace detail

/// A reusable rendezvous: every phase completes when `expected` arrivals
/// came; arrive_and_wait() yields true for the one that completed it (the
/// leader). Any thread; plain threads use blocking_arrive_and_wait().
/// Cancellation, errors and ordering: the comment of spindle/barrier.hpp.
class barrier : public detail::sync_waiters {
 public:
  /// The name used in this primitive's error messages.
  static constexpr char const* type_name = "barrier";
  class arrive_awaiter;

  /// `expected` arrivals complete each phase; throws
  /// std::system_error(invalid_argument) when it is < 1.
  explicit barrier(std::ptrdiff_t expected);
  barrier(barrier const&) = delete;
  barrier& operator=(barrier const&) = delete;

  /// `co_await b.arrive_and_wait()` arrives (when awaited) and suspends until
  /// the phase completes; yields true for the arrival that completed it.
  [[nodiscard]] arrive_awaiter arrive_and_wait() noexcept;

  /// For plain threads outside the runtime: arrives and blocks until the
  /// phase completes; returns true for the leader.
  bool blocking_arrive_and_wait();

  /// Arrives without waiting and leaves: this phase and every later one
  /// expect one arrival fewer (std::barrier::arrive_and_drop). May complete
  /// the phase, waking its waiters. Any thread, also outside the runtime.
  /// Throws std::system_error(invalid_argument) when the expected count is
  /// already 0.
  void arrive_and_drop();

  /// Arrivals per phase (lowered by arrive_and_drop).
  [[nodiscard]] std::ptrdiff_t expected() const;
  /// Number of phases completed so far.
  [[nodiscard]] std::uint64_t phase() const;

 private:
  template <class, class>
  friend class detail::sync_awaiter;
  using node = detail::barrier_node;

  bool take_locked(node& n, detail::wake_batch& wakes) noexcept;
  void withdrawn_locked(node& n, detail::wake_batch& wakes) noexcept;
  void give_back_locked(node& n, detail::wake_batch& wakes) noexcept;

  std::ptrdiff_t expected_;     ///< per phase; lowered by arrive_and_drop
  std::ptrdiff_t arrived_ = 0;  ///< in the current phase, waiters included
  std::uint64_t phase_ = 0;
};

/// Awaiter of barrier::arrive_and_wait(); yields whether it is the leader.
class barrier::arrive_awaiter : public detail::sync_awaiter<barrier, detail::barrier_node> {
 public:
  using sync_awaiter::sync_awaiter;
  /// Awaiter protocol: true for the arrival that completed the phase.
  bool await_resume() noexcept {
    consumed();
    return leader;
  }

 private:
  friend class barrier;
  void block() { wait_blocking("blocking_arrive_and_wait"); }
};

inline barrier::arrive_awaiter barrier::arrive_and_wait() noexcept {
  return arrive_awaiter{*this};
}

}  // namespace spindle
