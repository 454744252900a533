// A worker's park word: how a worker sleeps and how others wake it.
//
// Shape: one atomic u32 with the states UNPARKED, PARKED (sleeping in a futex
// wait on this word), PARKED_IN_DRIVER (sleeping inside the I/O driver, woken
// through driver::unpark) and NOTIFIED (an unpark arrived; the next park
// returns at once). unpark() swaps in NOTIFIED and wakes the sleeper the
// previous state names, so an unpark before, during or after park is never
// lost. The only timeout is the worker's next timer deadline (an absolute
// steady_clock time in ns, CLOCK_MONOTONIC): the idle protocol guarantees
// every other wake-up, and an idle runtime without timers uses no CPU.
//
// Thread-safety: park/park_in_driver: the owning worker only. unpark: any thread.
// Design source: Volt's ParkState, Tokio's park.rs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "driver.hpp"

namespace spindle::detail {

class driver;

class park_word {
 public:
  static constexpr std::uint32_t unparked = 0;
  static constexpr std::uint32_t parked = 1;
  static constexpr std::uint32_t parked_in_driver = 2;
  static constexpr std::uint32_t notified = 3;

  /// Sleeps on the futex until unpark() or `deadline_ns` (steady_clock ns;
  /// no_deadline: none). Returns at once if notified.
  void park(std::uint64_t deadline_ns = no_deadline) noexcept;
  /// Sleeps inside `drv` (driver::park) until a completion, unpark() or
  /// `deadline_ns`.
  void park_in_driver(driver& drv, std::size_t index,
                      std::uint64_t deadline_ns = no_deadline) noexcept;
  /// Wakes the worker (now, or makes its next park return at once).
  void unpark(driver& drv, std::size_t index) noexcept;

 private:
  alignas(64) std::atomic<std::uint32_t> state_{unparked};
};

}  // namespace spindle::detail
