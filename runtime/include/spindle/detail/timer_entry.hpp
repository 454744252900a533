// One pending timer: the node a sleeping awaiter keeps in its frame, and the
// calls that arm and disarm it.
//
// Shape: a timer_entry is intrusive (list links, deadline, wheel position)
// and lives inside the awaiter, so arming a timer never allocates. Deadlines
// are whole ticks of 1 ms counted from the runtime's clock epoch, rounded up:
// a timer never fires before its deadline, and fires within about one tick
// after it when its worker is not held up by a long poll.
//
// Firing: the worker that owns the entry's wheel takes it out of the wheel
// under the wheel's lock and, when `claim` is null or its fetch_add(1)
// returns 0 (the timer won a race with another wake source), wakes `task`
// after releasing the lock. The entry is not touched after the lock is
// released, so its owner may destroy it as soon as timer_disarm() returns
// false or its task has been woken.
//
// Thread-safety: arm/disarm from any thread of the runtime (worker or
// block_on thread); the fields are guarded by the wheel's lock once armed.
// Design source: Volt's hierarchical timer wheel, Tokio's
// time::Entry (intrusive, lock-guarded, wakers collected then woken unlocked).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "spindle/detail/task_header.hpp"

namespace spindle::detail {

class timer_shard;

struct timer_entry {
  timer_entry* prev = nullptr;
  timer_entry* next = nullptr;
  std::uint64_t deadline = 0;   ///< tick (ms since the runtime's epoch, rounded up)
  task_header* task = nullptr;  ///< woken when the timer fires
  /// Optional: shared with another wake source; the first to bump it wakes.
  std::atomic<std::uint32_t>* claim = nullptr;
  timer_shard* shard = nullptr;  ///< the wheel it is armed on (nullptr: never armed)
  std::uint8_t level = 0;        ///< wheel position, guarded by the shard's lock
  std::uint8_t slot = 0;
  bool linked = false;  ///< in a wheel (guarded by the shard's lock)
};

/// Arms `entry` (task and claim set by the caller) on the current runtime's
/// timer wheel: the calling worker's own wheel, or one picked round-robin on a
/// block_on thread. Returns false, arming nothing, when the deadline has
/// already passed. Throws std::system_error(operation_not_permitted) outside
/// a spindle runtime thread.
[[nodiscard]] bool timer_arm(timer_entry& entry, std::chrono::steady_clock::time_point deadline);

/// Takes an armed entry out of its wheel. Returns true when it was removed
/// before firing (no wake will come from it), false when it has fired (or was
/// never armed). Any thread.
bool timer_disarm(timer_entry& entry) noexcept;

}  // namespace spindle::detail
