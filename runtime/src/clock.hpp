// steady_clock time as the nanosecond counts the scheduler, the park word
// and the I/O drivers pass around (deadlines, tick lengths).
//
// Shape: a time is std::uint64_t ns since steady_clock's epoch, which on
// Linux is CLOCK_MONOTONIC's (what futex FUTEX_WAIT_BITSET and io_uring
// timeouts take); no_deadline means none. coarse_now_ns() reads the same
// clock as of the kernel's last tick (CLOCK_MONOTONIC_COARSE).
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include <limits>

namespace spindle::detail {

/// A park or wait without a deadline.
inline constexpr std::uint64_t no_deadline = std::numeric_limits<std::uint64_t>::max();

/// `t` in ns since steady_clock's epoch.
[[nodiscard]] inline std::uint64_t steady_ns(std::chrono::steady_clock::time_point t) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

/// Now, in ns since steady_clock's epoch.
[[nodiscard]] inline std::uint64_t steady_now_ns() noexcept {
  return steady_ns(std::chrono::steady_clock::now());
}

/// Now by the coarse monotonic clock, in ns since steady_clock's epoch: the
/// same clock as steady_now_ns(), read at the kernel's last scheduler tick
/// (a few ms behind at most). Cheaper where the clock source is slow: a
/// full read costs a spawn from outside a third more there (measured on
/// spawn_many_remote_idle).
[[nodiscard]] inline std::uint64_t coarse_now_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000U +
         static_cast<std::uint64_t>(now.tv_nsec);
}

}  // namespace spindle::detail
