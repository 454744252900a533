#include "park.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "spindle/detail/driver.hpp"

namespace spindle::detail {
namespace {

// Waits while *word == expected, until `deadline_ns` (CLOCK_MONOTONIC, the
// clock of std::chrono::steady_clock). Returns false once the deadline passed.
bool futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::uint64_t deadline_ns) noexcept {
  if (deadline_ns == no_deadline) {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
              nullptr, nullptr, 0);
    return true;
  }
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time.
  timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000),
              static_cast<long>(deadline_ns % 1'000'000'000)};
  long r = ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_BITSET_PRIVATE,
                     expected, &ts, nullptr, FUTEX_BITSET_MATCH_ANY);
  return !(r != 0 && errno == ETIMEDOUT);
}

void futex_wake_one(std::atomic<std::uint32_t>* word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr,
            nullptr, 0);
}

}  // namespace

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
    futex_wake_one(&state_);
  } else if (prev == parked_in_driver) {
    drv.unpark(index);
  }
}

}  // namespace spindle::detail
