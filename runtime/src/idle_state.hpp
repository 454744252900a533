// Which workers are searching for work and which are parked.
//
// Shape: one atomic u64 packs {num_unparked: u32, num_searching: u32} so that
// "is a wake-up needed?" is one load on the spawn path; a mutex-protected
// parked bitmap (one bit per worker, any number of workers, scanned a 64-bit
// word at a time with countr_zero) records who sleeps.
//
// Protocol ("last searcher must notify"):
//  - A producer that makes work visible calls worker_to_notify(): when no
//    worker is searching and some are parked it claims one parked worker,
//    counting it as unparked and searching, and the caller unparks it.
//  - At most half of the workers (rounded up) search at once
//    (transition_worker_to_searching, a CAS: never more, with any number of
//    workers up to max_workers).
//  - A searcher that finds work leaves the searching state; if it was the
//    last searcher it must notify another worker (there may be more work).
//  - A worker that parks while searching and was the last searcher must
//    re-check every queue after registering as parked, and notify if it
//    finds work (closes the race with producers that saw a searcher).
//
// Thread-safety: all members may be called from any thread.
// Design source: Volt's IdleState, Tokio's idle.rs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace spindle::detail {

class idle_state {
 public:
  explicit idle_state(std::size_t workers);

  /// Returns true when the worker may search (fewer than half search now).
  bool transition_worker_to_searching() noexcept;
  /// A searcher stops searching (it found work). Returns true when it was the
  /// last searcher: the caller must then notify a parked worker.
  bool transition_worker_from_searching() noexcept;
  /// Claims a parked worker to wake, or returns not_a_worker when a searcher
  /// is awake or nobody is parked.
  std::size_t worker_to_notify() noexcept;
  /// After a push into worker `preferred`'s inbox (placement::p2c): claims
  /// `preferred` when it is parked (counted as unparked and searching, as
  /// worker_to_notify counts the worker it claims, while fewer than half
  /// the workers search; beyond that bound as unparked only, see
  /// claimed_as_searcher), else what worker_to_notify would claim;
  /// not_a_worker when it claims nobody. One load when no worker is parked.
  /// The caller's push must be a seq_cst RMW (inbox::push's length).
  std::size_t worker_to_notify_preferring(std::size_t preferred) noexcept;
  /// Worker `index` parks. Returns true when it was the last searcher.
  bool transition_worker_to_parked(std::size_t index, bool is_searching) noexcept;
  /// Worker `index` woke without being claimed (I/O completion, spurious):
  /// removes it from the parked set. Returns true when it was there.
  bool unpark_worker_by_id(std::size_t index) noexcept;
  /// Some parked worker (the lowest index), without claiming it, or
  /// not_a_worker when none is parked.
  [[nodiscard]] std::size_t any_parked() noexcept;
  /// Worker `index`, woken and no longer registered as parked, was claimed
  /// by a waker (it did not unpark itself): whether the waker counted it
  /// searching (false only for worker_to_notify_preferring's claim beyond
  /// the searcher bound). Call once per claim.
  [[nodiscard]] bool claimed_as_searcher(std::size_t index) noexcept;
  /// True while worker `index` is registered as parked.
  [[nodiscard]] bool is_parked(std::size_t index) noexcept;

  [[nodiscard]] std::uint32_t num_searching() const noexcept {
    return searching_of(state_.load(std::memory_order_acquire));
  }
  [[nodiscard]] std::uint32_t num_unparked() const noexcept {
    return unparked_of(state_.load(std::memory_order_acquire));
  }

 private:
  static constexpr std::uint64_t searching_one = 1;
  static constexpr std::uint64_t unparked_one = std::uint64_t{1} << 32;
  static constexpr std::uint32_t searching_of(std::uint64_t s) noexcept {
    return static_cast<std::uint32_t>(s);
  }
  static constexpr std::uint32_t unparked_of(std::uint64_t s) noexcept {
    return static_cast<std::uint32_t>(s >> 32);
  }
  [[nodiscard]] bool notify_should_wakeup() const noexcept;
  /// Counts one more worker unparked and searching (a claimed parked
  /// worker) if fewer than `below` search, by a CAS; false otherwise.
  bool claim_searcher_locked(std::uint32_t below) noexcept;
  std::size_t pop_parked_locked() noexcept;
  bool test_and_clear_locked(std::size_t index) noexcept;

  std::uint32_t workers_;
  mutable std::atomic<std::uint64_t> state_;  // mutable: read with an RMW
  std::mutex mutex_;
  std::vector<std::uint64_t> parked_bitmap_;  // guarded by mutex_
  std::size_t num_parked_ = 0;                // guarded by mutex_
  // Claimed workers not counted searching (claimed_as_searcher); guarded
  // by mutex_.
  std::vector<std::uint64_t> unsearching_bitmap_;
};

}  // namespace spindle::detail
