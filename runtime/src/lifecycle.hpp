// The runtime's lifecycle word: accepting bit + in-flight task count.
//
// Shape: one atomic u64, bit 0 = accepting new spawns, bits 1..63 = number of
// spawned tasks that have not completed. A spawn checks the bit and
// increments the count in one CAS, so a spawn racing shutdown is either
// refused or counted, never lost; the decrement that brings the count to zero
// after the bit is cleared (or the close that finds it zero) is the single
// observation of termination.
// Thread-safety: all members, any thread.
// Design source: seed 000 (combined atomic state word, ACCEPTING_BIT / COUNT_UNIT).
#pragma once

#include <atomic>
#include <cstdint>

namespace spindle::detail {

class lifecycle {
 public:
  static constexpr std::uint64_t accepting_bit = 1;
  static constexpr std::uint64_t count_unit = 2;

  /// Counts one more task if still accepting. Returns false when refused.
  bool try_increment() noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while ((s & accepting_bit) != 0) {
      if (state_.compare_exchange_weak(s, s + count_unit, std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }

  /// One task completed. Returns true when this observed termination.
  bool complete_one() noexcept {
    std::uint64_t prev = state_.fetch_sub(count_unit, std::memory_order_acq_rel);
    return prev == count_unit;  // count 1 -> 0 with the accepting bit clear
  }

  /// Stops accepting. Returns true when this observed termination (no task
  /// was in flight).
  bool close() noexcept {
    std::uint64_t prev = state_.fetch_and(~accepting_bit, std::memory_order_acq_rel);
    return prev == accepting_bit;
  }

  [[nodiscard]] bool is_accepting() const noexcept {
    return (state_.load(std::memory_order_acquire) & accepting_bit) != 0;
  }
  [[nodiscard]] std::uint64_t in_flight() const noexcept {
    return state_.load(std::memory_order_acquire) / count_unit;
  }

 private:
  std::atomic<std::uint64_t> state_{accepting_bit};
};

}  // namespace spindle::detail
