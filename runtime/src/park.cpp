#include "park.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "spindle/detail/driver.hpp"

namespace spindle::detail {
namespace {

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
            nullptr, nullptr, 0);
}

void futex_wake_one(std::atomic<std::uint32_t>* word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr,
            nullptr, 0);
}

}  // namespace

void park_word::park() noexcept {
  std::uint32_t expected = unparked;
  if (state_.compare_exchange_strong(expected, parked, std::memory_order_acq_rel)) {
    while (state_.load(std::memory_order_acquire) == parked)
      futex_wait(&state_, parked);
  }
  state_.store(unparked, std::memory_order_release);
}

void park_word::park_in_driver(driver& drv, std::size_t index) noexcept {
  std::uint32_t expected = unparked;
  if (state_.compare_exchange_strong(expected, parked_in_driver, std::memory_order_acq_rel)) {
    drv.park(index);  // returns on a completion or on drv.unpark(index)
  }
  state_.store(unparked, std::memory_order_release);
}

void park_word::unpark(driver& drv, std::size_t index) noexcept {
  std::uint32_t prev = state_.exchange(notified, std::memory_order_acq_rel);
  if (prev == parked) {
    futex_wake_one(&state_);
  } else if (prev == parked_in_driver) {
    drv.unpark(index);
  }
}

}  // namespace spindle::detail
