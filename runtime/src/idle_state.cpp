#include "idle_state.hpp"

#include <bit>

#include "spindle/detail/task_header.hpp"  // not_a_worker

namespace spindle::detail {

idle_state::idle_state(std::size_t workers)
    : workers_(static_cast<std::uint32_t>(workers)),
      state_(unparked_one * workers),
      parked_bitmap_((workers + 63) / 64, 0),
      unsearching_bitmap_((workers + 63) / 64, 0) {}

bool idle_state::notify_should_wakeup() const noexcept {
  // A full fence before the load orders the caller's earlier push (a
  // release store to a ring's tail) before this read, as a searcher that
  // parks orders its state change (a seq_cst RMW) before re-reading the
  // rings. Tokio uses fetch_add(0) here; an RMW takes the cache line
  // exclusive, so two workers pushing at once bounce it between cores on
  // every push, while a fence and a load leave it shared.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::uint64_t s = state_.load(std::memory_order_seq_cst);
  return searching_of(s) == 0 && unparked_of(s) < workers_;
}

bool idle_state::transition_worker_to_searching() noexcept {
  std::uint64_t s = state_.load(std::memory_order_seq_cst);
  // A CAS (Tokio adds and tolerates a brief overshoot): with hundreds of
  // workers going idle at once, an overshoot is hundreds of searchers
  // probing every ring. Only idle workers come here, so the retry is cheap.
  do {
    if (2 * std::uint64_t{searching_of(s)} >= workers_) return false;
  } while (!state_.compare_exchange_weak(s, s + searching_one, std::memory_order_seq_cst,
                                         std::memory_order_seq_cst));
  return true;
}

bool idle_state::transition_worker_from_searching() noexcept {
  std::uint64_t prev = state_.fetch_sub(searching_one, std::memory_order_seq_cst);
  return searching_of(prev) == 1;
}

bool idle_state::claim_searcher_locked(std::uint32_t below) noexcept {
  std::uint64_t s = state_.load(std::memory_order_seq_cst);
  do {
    if (searching_of(s) >= below) return false;
  } while (!state_.compare_exchange_weak(s, s + searching_one + unparked_one,
                                         std::memory_order_seq_cst, std::memory_order_seq_cst));
  return true;
}

std::size_t idle_state::worker_to_notify() noexcept {
  if (!notify_should_wakeup()) return not_a_worker;
  std::lock_guard lock(mutex_);
  // Counted searching only while nobody searches, by a CAS: a worker that
  // turned searcher since the check above (transition_worker_to_searching
  // takes no lock) is seen, and the searcher bound holds.
  if (num_parked_ == 0 || !claim_searcher_locked(1)) return not_a_worker;
  return pop_parked_locked();
}

std::size_t idle_state::worker_to_notify_preferring(std::size_t preferred) noexcept {
  // No fence: the caller's push raised the inbox's length with a seq_cst
  // RMW, and this load is seq_cst too, as are the parking worker's
  // registration (transition_worker_to_parked's RMW) and its re-read of the
  // inbox: one of the two sides sees the other.
  if (unparked_of(state_.load(std::memory_order_seq_cst)) == workers_) return not_a_worker;
  std::lock_guard lock(mutex_);
  if (((parked_bitmap_[preferred / 64] >> (preferred % 64)) & 1) != 0) {
    // The preferred worker is claimed, counted searching as a notified one
    // is while transition_worker_to_searching's bound allows (at most half
    // the workers search, however many inbox pushes claim parked workers);
    // beyond it, counted unparked only, and it learns so when it wakes
    // (claimed_as_searcher).
    if (!claim_searcher_locked((workers_ + 1) / 2)) {
      state_.fetch_add(unparked_one, std::memory_order_seq_cst);
      unsearching_bitmap_[preferred / 64] |= std::uint64_t{1} << (preferred % 64);
    }
    test_and_clear_locked(preferred);
    return preferred;
  }
  if (num_parked_ == 0 || !claim_searcher_locked(1)) return not_a_worker;
  return pop_parked_locked();
}

bool idle_state::transition_worker_to_parked(std::size_t index, bool is_searching) noexcept {
  std::lock_guard lock(mutex_);
  std::uint64_t dec = unparked_one + (is_searching ? searching_one : 0);
  std::uint64_t prev = state_.fetch_sub(dec, std::memory_order_seq_cst);
  std::uint64_t& word = parked_bitmap_[index / 64];
  std::uint64_t bit = std::uint64_t{1} << (index % 64);
  if ((word & bit) == 0) {
    word |= bit;
    ++num_parked_;
  }
  return is_searching && searching_of(prev) == 1;
}

bool idle_state::unpark_worker_by_id(std::size_t index) noexcept {
  std::lock_guard lock(mutex_);
  if (!test_and_clear_locked(index)) return false;
  state_.fetch_add(unparked_one, std::memory_order_seq_cst);
  return true;
}

bool idle_state::is_parked(std::size_t index) noexcept {
  std::lock_guard lock(mutex_);
  return (parked_bitmap_[index / 64] >> (index % 64)) & 1;
}

std::size_t idle_state::any_parked() noexcept {
  std::lock_guard lock(mutex_);
  if (num_parked_ == 0) return not_a_worker;
  for (std::size_t w = 0; w < parked_bitmap_.size(); ++w) {
    if (parked_bitmap_[w] != 0) {
      return w * 64 + static_cast<std::size_t>(std::countr_zero(parked_bitmap_[w]));
    }
  }
  return not_a_worker;
}

bool idle_state::claimed_as_searcher(std::size_t index) noexcept {
  std::lock_guard lock(mutex_);
  std::uint64_t& word = unsearching_bitmap_[index / 64];
  std::uint64_t const bit = std::uint64_t{1} << (index % 64);
  if ((word & bit) == 0) return true;
  word &= ~bit;
  return false;
}

std::size_t idle_state::pop_parked_locked() noexcept {
  if (num_parked_ == 0) return not_a_worker;
  for (std::size_t w = 0; w < parked_bitmap_.size(); ++w) {
    if (parked_bitmap_[w] != 0) {
      std::size_t index = w * 64 + static_cast<std::size_t>(std::countr_zero(parked_bitmap_[w]));
      test_and_clear_locked(index);
      return index;
    }
  }
  return not_a_worker;
}

bool idle_state::test_and_clear_locked(std::size_t index) noexcept {
  std::uint64_t& word = parked_bitmap_[index / 64];
  std::uint64_t bit = std::uint64_t{1} << (index % 64);
  if ((word & bit) == 0) return false;
  word &= ~bit;
  --num_parked_;
  return true;
}

}  // namespace spindle::detail
