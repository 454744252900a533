// One worker's timers: a timer wheel behind a lock, and the earliest tick at
// which anything in it can fire, published for the worker's park timeout.
//
// Shape: every worker owns one shard. A task arms its timers on the shard of
// the worker it runs on (no contention in the common case); a block_on thread
// arms on a shard picked round-robin and unparks its owner when the new
// deadline is earlier than anything the owner sleeps towards. Only the owner
// fires a shard's timers (at the end of every tick and when its park times
// out), so the wake of a fired task lands in the firing worker's queues.
//
// Thread-safety: `wheel` is guarded by `mutex`; `next_due` is written under
// it and read without it (a stale read is early, never late: it only costs a
// needless lock); `fired` belongs to the owner's thread.
// Design source: Tokio's per-worker timer wheels (tokio 1.4x), Volt.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "timer_wheel.hpp"

namespace spindle::detail {

class timer_shard {
 public:
  std::mutex mutex;
  timer_wheel wheel;
  std::atomic<std::uint64_t> next_due{timer_wheel::never};
  std::vector<task_header*> fired;
};

}  // namespace spindle::detail
