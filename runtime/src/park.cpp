#include "park.hpp"

#include "futex.hpp"

namespace spindle::detail {

void park_word::park(std::uint64_t deadline_ns) noexcept {
  std::uint32_t expected = unparked;
  if (state_.compare_exchange_strong(expected, parked, std::memory_order_acq_rel)) {
    while (state_.load(std::memory_order_acquire) == parked) {
      if (!futex_wait(&state_, parked, deadline_ns)) break;
    }
  }
  state_.store(unparked, std::memory_order_release);
}

void park_word::park_in_driver(driver& drv, std::size_t index, std::uint64_t deadline_ns) noexcept {
  std::uint32_t expected = unparked;
  if (state_.compare_exchange_strong(expected, parked_in_driver, std::memory_order_acq_rel)) {
    drv.park(index, deadline_ns);  // returns on a completion, drv.unpark(index) or the deadline
  }
  state_.store(unparked, std::memory_order_release);
}

void park_word::unpark(driver& drv, std::size_t index) noexcept {
  std::uint32_t prev = state_.exchange(notified, std::memory_order_acq_rel);
  if (prev == parked) {
    futex_wake(&state_, 1);
  } else if (prev == parked_in_driver) {
    drv.unpark(index);
  }
}

}  // namespace spindle::detail
