// Linux futex waits and wakes on a std::atomic<std::uint32_t>, process-private.
//
// Used by the park word (park.cpp) and by threads inside block_on
// (block_on.cpp). Thread-safety: any thread.
// Design source: futex(2); Volt's and Tokio's parkers sleep the same way.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

#include "clock.hpp"

namespace spindle::detail {

/// Sleeps while `*word == expected`, until a wake or `deadline_ns`
/// (steady_clock ns, CLOCK_MONOTONIC; no_deadline: none). May return
/// spuriously (EINTR, a changed word). Returns false once the deadline passed.
inline bool futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       std::uint64_t deadline_ns = no_deadline) noexcept {
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

/// Wakes up to `count` threads sleeping in futex_wait on `word`.
inline void futex_wake(std::atomic<std::uint32_t>* word, int count = INT_MAX) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, count, nullptr,
            nullptr, 0);
}

}  // namespace spindle::detail
