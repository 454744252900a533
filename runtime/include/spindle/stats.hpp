// spindle::runtime_stats: a snapshot of the scheduler's counters.
//
// Shape: per-worker counters (kept by each worker without read-modify-write:
// the owner stores with release, stats() loads with acquire, so a completion
// counted implies its spawn counted) merged into totals. All counts are
// events since the runtime started.
//
// Thread-safety: runtime::stats() may be called from any thread at any time;
// the snapshot is not atomic across counters.
// Design source: Volt's Stats, Tokio's RuntimeMetrics.
#pragma once

#include <cstdint>
#include <vector>

namespace spindle {

/// Counters of one worker.
struct worker_stats {
  std::uint64_t spawned = 0;               ///< tasks spawned from this worker
  std::uint64_t polled = 0;                ///< task polls (resumptions)
  std::uint64_t stolen = 0;                ///< tasks stolen from other workers
  std::uint64_t steal_operations = 0;      ///< successful steal operations
  std::uint64_t parked = 0;                ///< times the worker parked
  std::uint64_t lifo_hits = 0;             ///< polls served from the LIFO slot
  std::uint64_t global_batch_fetches = 0;  ///< batches taken from the global queue
  std::uint64_t overflows = 0;             ///< ring overflows (128 tasks moved to the global queue)
  std::uint64_t io_completions = 0;        ///< I/O completions reaped from this worker's ring
  std::uint64_t timers_fired = 0;          ///< timers of this worker's wheel that fired
  std::uint64_t inline_polls =
      0;  ///< of `polled`: tasks polled by a task awaiting them (join fast path)
  std::uint32_t global_check_interval = 0;  ///< current EWMA-derived interval (polls)
};

/// Totals over all workers, plus per-worker counters.
struct runtime_stats {
  std::uint64_t total_spawned = 0;         ///< tasks spawned (workers and other threads)
  std::uint64_t total_polled = 0;          ///< task polls (resumptions)
  std::uint64_t total_stolen = 0;          ///< tasks stolen from other workers
  std::uint64_t total_parked = 0;          ///< times a worker parked
  std::uint64_t lifo_hits = 0;             ///< polls served from a LIFO slot
  std::uint64_t global_batch_fetches = 0;  ///< batches taken from the global queue
  std::uint64_t detached_exceptions = 0;   ///< exceptions ended with by detached tasks
  std::uint64_t tasks_alive = 0;           ///< spawned tasks not yet complete
  std::uint64_t timers_fired = 0;          ///< timers fired (sleeps and timeouts that elapsed)
  std::uint64_t inline_polls = 0;          ///< polls by the join fast path (see worker_stats)
  /// I/O operations the driver completed: those the workers reaped from
  /// their io_uring rings (the sum of worker_stats::io_completions) plus
  /// those the thread-pool backend's threads completed. A read that
  /// io::file::read_at copied from the page cache in the task's poll is
  /// not one.
  std::uint64_t io_completions = 0;
  std::vector<worker_stats> workers;  ///< per worker, by worker index
  // The spawn_blocking pool (not the thread-pool I/O backend's threads). The
  // first three are values now, not event counts.
  std::uint64_t blocking_threads = 0;       ///< pool threads alive now (busy or idle)
  std::uint64_t blocking_idle_threads = 0;  ///< of those, waiting for a job
  std::uint64_t blocking_queue_depth = 0;   ///< jobs queued that no thread has started
  std::uint64_t blocking_jobs = 0;          ///< jobs run to the end (returned or threw)
  // Processes (spindle/process.hpp): the first four are values now (alive
  // processes per state), the rest counts; all from counters the processes
  // keep as they park, unpark, take messages and end (summed over shards,
  // no scan of the pid table: stats() costs the same for 10 or 10^6
  // processes). state_of(pid) gives one process's exact state.
  std::uint64_t processes_ready = 0;  ///< queued to run: 0 (a woken process counts as idle until
                                      ///< it runs, a queued one as running)
  std::uint64_t processes_running =
      0;  ///< alive and not parked in receive: being polled, queued,
          ///< or suspended on something else (I/O, a sleep, a monitor)
  std::uint64_t processes_blocked = 0;    ///< step processes parked until their commands complete
  std::uint64_t processes_idle = 0;       ///< parked in receive / receive_for
  std::uint64_t processes_completed = 0;  ///< bodies ended (returned, threw or destroyed)
  std::uint64_t messages_sent = 0;  ///< messages put into mailboxes and since taken, or left in a
                                    ///< mailbox when its process ended (a message waiting in a
                                    ///< live mailbox counts once taken)
  std::uint64_t messages_received = 0;  ///< messages taken by receive / receive_for
};

}  // namespace spindle
