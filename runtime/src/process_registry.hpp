// The per-runtime side of spindle processes (spindle/process.hpp): what the
// scheduler keeps so that its destructor can cancel its processes and wait
// for them, and stats() can count them. The pids themselves live in the
// process-wide pid table (process.cpp).
//
// Thread-safety: atomics, any thread.
// Design source: seed 004 (cancel on shutdown, wait with a timeout).
#pragma once

#include <atomic>
#include <cstdint>

#include "spindle/stats.hpp"

namespace spindle::detail {

class scheduler;

struct process_registry {
  std::atomic<bool> closing{false};        ///< set by shutdown: new processes start cancelled
  std::atomic<std::uint64_t> alive{0};     ///< issued and not finished
  std::atomic<std::uint64_t> finished{0};  ///< bodies ended (or destroyed)
  std::atomic<std::uint64_t> finished_received{0};  ///< messages received by finished processes
  std::atomic<std::uint64_t> finished_sent{0};      ///< messages counted into them
};

/// At the start of ~scheduler: cancels every process of `sched` (their
/// receives throw task_cancelled) and waits up to
/// runtime_config::process_shutdown_timeout for their bodies to end.
void shutdown_processes(scheduler& sched) noexcept;

/// Adds the process counters of `sched` to `out` (scans the pid table).
void collect_process_stats(scheduler const& sched, runtime_stats& out) noexcept;

}  // namespace spindle::detail
