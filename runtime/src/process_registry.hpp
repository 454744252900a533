// The per-runtime side of spindle processes (spindle/process.hpp): what the
// scheduler keeps so that its destructor can cancel its processes and wait
// for them, and stats() can count them. The pids themselves live in the
// process-wide pid table (process.cpp).
//
// Thread-safety: atomics, any thread.
// Design source: the Go process scheduler (cancel on shutdown, wait with a timeout).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "spindle/stats.hpp"

namespace spindle::detail {

class scheduler;

/// Counters kept in 16 shards picked by the calling thread (a hash of its
/// id), so that spawning and finishing processes on several workers do not
/// fight over one cache line; readers sum them.
struct process_registry {
  /// Each counter is added to by the thread that sees the event, so one
  /// shard's value may be negative; only the sum over the shards means
  /// something.
  struct alignas(64) shard {
    std::atomic<std::int64_t> alive{0};       ///< issued minus finished
    std::atomic<std::uint64_t> finished{0};   ///< bodies ended (or destroyed)
    std::atomic<std::int64_t> unreceived{0};  ///< left in mailboxes whose process ended
    std::atomic<std::int64_t> received{0};    ///< messages taken by receive / receive_for
    std::atomic<std::int64_t> idle{0};        ///< parked in receive (parks minus unparks)
    std::atomic<std::int64_t> blocked{0};     ///< step processes parked waiting for commands
  };
  static constexpr std::size_t shard_count = 16;

  std::atomic<bool> closing{false};  ///< set by shutdown: new processes start cancelled
  std::array<shard, shard_count> shards;

  /// The calling thread's shard.
  [[nodiscard]] shard& mine() noexcept;
  /// Issued and not finished, summed (a snapshot).
  [[nodiscard]] std::int64_t alive() const noexcept {
    std::int64_t n = 0;
    for (auto const& s : shards)
      n += s.alive.load(std::memory_order_acquire);
    return n;
  }
};

/// At the start of ~scheduler: cancels every process of `sched` (their
/// receives throw task_cancelled) and waits up to
/// runtime_config::process_shutdown_timeout for their bodies to end.
void shutdown_processes(scheduler& sched) noexcept;

/// Adds the process counters of `sched` to `out` (sums the shards: O(1)
/// in the number of processes).
void collect_process_stats(scheduler const& sched, runtime_stats& out) noexcept;

}  // namespace spindle::detail
