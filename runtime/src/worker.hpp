// One worker: its queues, its park word, its counters and its thread.
//
// Shape: LIFO slot (one task: the owner pushes and pops it; a searcher may
// take it when the worker is stalled, see scheduler_core::rescue_lifo), run
// queue (256-slot ring, stealable), inbox (placement::p2c's remote spawns,
// MPSC), global batch buffer (32 tasks taken from the global queue, owner
// only), park word, searching flag, transitioning-to-park guard, EWMA state
// of the global-check interval, the hoard counter, the steal RNG, the victim
// order (topology.hpp), the steal back-off and the worker's timer wheel.
// Thread-safety: everything but `queue`, `remote` (inbox.hpp), `lifo`,
// `stall_seen`, `park`, `transitioning_to_park`, `timers` (its own lock) and
// `counters` is touched only by the worker's own thread (`cpu` is written
// before the worker starts its loop; `victims` is an atomic pointer
// published later).
// Design source: Volt's per-worker resources, Tokio's worker.rs.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "inbox.hpp"
#include "lifo_slot.hpp"
#include "park.hpp"
#include "rng.hpp"
#include "run_queue.hpp"
#include "spindle/task_info.hpp"
#include "timer_shard.hpp"
#include "topology.hpp"
#include "worker_stats.hpp"

namespace spindle::detail {

class trace_ring;

struct worker {
  /// LIFO-slot polls in a row (no task taken from elsewhere in between)
  /// before the slot's task goes to the back of the ring, as Tokio counts
  /// MAX_LIFO_POLLS_PER_TICK.
  static constexpr std::uint32_t max_lifo_polls_in_a_row = 3;
  static constexpr std::uint32_t batch_capacity = 32;
  static constexpr std::uint32_t wake_on_hoard_threshold = 32;
  // Global-check interval before the first tick has been measured:
  // 1 ms / 50 us assumed per poll.
  static constexpr std::uint32_t initial_global_interval = 20;

  worker(std::size_t i, std::uint64_t seed) noexcept : index(i), rng(seed) {
    // The stats report the interval in use from the start, not 0 until the
    // first tick ends (a snapshot can see polls before their tick's end).
    counters.global_check_interval.store(global_interval, std::memory_order_relaxed);
  }

  std::size_t index;

  run_queue queue;
  /// Tasks placed on this worker from outside the workers (placement::p2c).
  inbox remote;
  /// The LIFO slot (lifo_slot.hpp): the owner fills and empties it with
  /// plain accesses; a searcher or the watcher that rescues a stalled
  /// worker's task (rescue_lifo) pays for the agreement, so every task
  /// leaves the slot exactly once.
  lifo_slot lifo;
  /// The last stall observation of this worker by a searcher or watcher:
  /// {low 32 bits of counters.polled: u32, time in us: u32}; written by any
  /// of them (one word, so a reader never pairs a count with another
  /// observation's time). A worker whose poll count stays the same for the
  /// stall threshold while its LIFO slot holds a task is stalled
  /// (scheduler_core::rescue_lifo); polls run inline (a join) count, so a
  /// task that awaits its children is not taken for a stalled one.
  /// (On a line of its own: searchers write it while the owner keeps
  /// storing into the LIFO slot.)
  alignas(64) std::atomic<std::uint64_t> stall_seen{~std::uint64_t{0} << 32};
  alignas(64) std::array<task_header*, batch_capacity> batch{};
  std::uint32_t batch_head = 0;
  std::uint32_t batch_len = 0;

  park_word park;
  std::atomic<bool> transitioning_to_park{false};
  bool is_searching = false;

  /// Nesting of join-await fast-path polls (run_inline) on this thread:
  /// each level is a C++ stack frame chain of the awaiting task's poll. A
  /// nested poll is refused beyond max_inline_depth levels, or once the
  /// stack is more than half used (below inline_stack_limit; oneTBB's rule
  /// for nesting stolen tasks), whichever comes first.
  static constexpr std::uint32_t max_inline_depth = 256;
  /// A tick may poll up to this many times its budget when the polls past
  /// the budget are nested join polls (a task's children run inline where it
  /// awaits them); plain polls still stop at the budget. A refused join
  /// suspends the awaiting task and its awaiting ancestors, and the ring,
  /// served oldest first, then starts the oldest pending subtree; with the
  /// plain budget a deep fork-join tree is walked breadth-first (why 8:
  /// docs/tuning.md). 1,024 nested polls of small tasks are tens of
  /// microseconds between two I/O reaps.
  static constexpr std::uint32_t inline_budget_factor = 8;
  std::uint32_t inline_depth = 0;
  /// Lowest stack address a nested poll may start from (0: unknown, the
  /// depth bound alone applies). Set by the worker thread at start.
  std::uintptr_t inline_stack_limit = 0;
  /// Polls in the current tick, inline ones included (the budget counts both).
  std::uint32_t tick_polls = 0;
  std::uint32_t lifo_polls_in_a_row = 0;
  std::uint32_t polls_since_global = 0;
  std::uint32_t global_interval = initial_global_interval;
  double avg_task_ns = 1'000'000.0 / initial_global_interval;
  std::uint32_t hoard = 0;
  /// Which of inbox and global queue the next global-check interval looks at
  /// first (they alternate).
  bool global_first = false;
  /// Tiered idle (scheduler_core::after_tick): an idle worker's spin tier
  /// pauses the CPU this many times between two looks for work (about a
  /// microsecond).
  static constexpr std::uint32_t idle_spin_pauses = 32;
  /// Empty ticks in a row (after_tick).
  std::uint32_t idle_ticks = 0;
  xorshift64 rng;
  /// The fixed fields of the state of a task spawned in the current tick
  /// (state_bits::fixed_fields: the runtime's id, and the tick's start as
  /// the spawn time for runtime::dump()'s age), made once per tick.
  std::uint64_t spawn_stamp = 0;
  /// The last spawn site this worker interned (spawn_sites.hpp), and its
  /// id: a loop of spawns from one site compares one word here instead of
  /// reading the thread's site cache.
  std::uint64_t last_site_key = 0;
  std::uint32_t last_site_id = 0;
  /// Whom to steal from, nearest first (nullptr, or no victims: every
  /// other worker, in a random order from `rng`). Published once, after
  /// every worker has started (scheduler_core::set_victim_orders); the
  /// worker may already search meanwhile.
  std::atomic<victim_order const*> victims{nullptr};
  /// The CPU the worker runs on (pinned) or started on; -1 unknown.
  int cpu = -1;
  /// Steal rounds in a row that found nothing (the back-off's exponent;
  /// scheduler_core::backoff_ns).
  std::uint32_t steal_failures = 0;
  /// placement::p2c's help with another worker's inbox on the interval
  /// (scheduler_core::help_inbox): looks to skip before the next, and the
  /// skip after the next look that finds nothing (doubled up to
  /// max_help_skip, 0 after a look that finds tasks).
  static constexpr std::uint32_t max_help_skip = 32;
  std::uint32_t help_skip = 0;
  std::uint32_t help_backoff = 0;
  /// This worker holds the watch over stalled LIFO slots while it is parked
  /// (scheduler_core::watch_deadline_ns), and the period it sleeps for.
  bool watching = false;
  std::uint64_t watch_period_ns = 0;
  /// Owner-only figures for the simulation and tests: victims probed,
  /// tasks stolen per level of the victim order, LIFO tasks rescued.
  std::uint64_t steal_probes = 0;
  std::array<std::uint64_t, steal_levels> steals_by_level{};
  std::uint64_t lifo_rescues = 0;
  /// Before this time (ns) rescue_lifo does not look at the other workers
  /// again: a stall takes the threshold to show, and every look reads lines
  /// their owners keep writing (the LIFO slot, the poll count).
  std::uint64_t next_rescue_look_ns = 0;

  /// runtime::dump(): the last request this worker answered (owner only),
  /// the request its answer in `dump_found` is for (release; the dumping
  /// thread reads the answer after seeing its own request here).
  std::uint64_t dump_seen = 0;
  std::atomic<std::uint64_t> dump_ack{0};
  struct dump_entry {
    task_header* task;
    std::uint64_t state;  ///< also holds the spawn's time (spawn_time_in)
    std::uint32_t spawn_site;
    wait_kind waits_on;
  };
  std::vector<dump_entry> dump_found;

  /// The task this worker is polling, for runtime::dump() when the worker
  /// does not answer (a task that blocks its thread or polls for long): the
  /// task's address (the dump computes its id from it and never reads the
  /// task), its state word at the poll's start and its spawn site; `task` is
  /// null between polls. The owner stores them at each poll's start (task
  /// last, release) and clears `task` at its end; a poll run inline (a
  /// join) leaves the awaiting task there, which is running too. A task
  /// polled again after another may, in a rare race, be shown with the
  /// other's site. On a line of its own: the owner writes it at every poll,
  /// the dump alone reads it.
  struct running_task {
    std::atomic<task_header const*> task{nullptr};
    std::atomic<std::uint64_t> state{0};
    std::atomic<std::uint32_t> spawn_site{0};
  };
  alignas(64) running_task running;
  void publish_running(task_header const* task, std::uint64_t state) noexcept {
    // Pairs with dump()'s acquire fence: a dump that reads a field stored
    // here then sees `task` changed since (a seqlock's check, the previous
    // store to `task` standing for its odd count). No instruction on x86.
    std::atomic_thread_fence(std::memory_order_release);
    running.state.store(state, std::memory_order_relaxed);
    running.spawn_site.store(task->spawn_site, std::memory_order_relaxed);
    running.task.store(task, std::memory_order_release);
  }

  /// Tracing (trace.hpp): this worker's ring, or null when off.
  trace_ring* trace = nullptr;
  timer_shard timers;
  worker_counters counters;
  std::thread thread;

  [[nodiscard]] bool has_local_tasks() const noexcept {
    return lifo.peek() != nullptr || batch_head != batch_len || !queue.is_empty();
  }
};

}  // namespace spindle::detail
