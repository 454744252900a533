// The scheduler's decisions, apart from its threads: where a worker looks
// for work and in which order, the LIFO cap, the global-check interval, the
// budget, when to search, when to park and whom to notify.
//
// Shape: scheduler_core owns the workers' queues and state, the global
// (inject) queue and the idle state, and makes every decision through these
// calls; it never blocks, runs a task or touches a thread. What it needs from
// the world goes through core_platform: waking a parked worker, and hearing
// that a remote push found nobody to wake. The production scheduler
// (scheduler.cpp) drives it from worker threads, parks them on futexes or in
// the I/O driver and resumes coroutines; the deterministic simulator
// (tests/test_sim.cpp) drives the same object from one thread with virtual
// workers and a seeded interleaving, and checks the invariants after every
// step.
//
// A worker's loop, in terms of these calls:
//   tick: up to `budget` times { t = next_task(w); if (!t) break;
//           transition_from_searching(w); run t } ; end_tick(w, polls, ns);
//         reap I/O, fire timers
//   then by after_tick(w, progressed): run the next tick; spin or yield the
//         CPU, then run the next tick (tiered idle); or park:
//         if (begin_park(w)) { do { sleep until unparked; begin_wakeup(w);
//           reap I/O, fire timers } while (!finish_wakeup(w)) }
//
// Thread-safety: next_task, end_tick, begin_park, transition_from_parked,
// end_park and schedule_local for worker w run on w's thread only (or on
// the simulator's thread); push_remote and notify_parked from any thread.
// Design source: Volt's scheduler, Tokio's worker.rs; the split
// for deterministic simulation follows the scanner executor.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "clock.hpp"
#include "global_queue.hpp"
#include "idle_state.hpp"
#include "spindle/runtime.hpp"
#include "topology.hpp"
#include "worker.hpp"

namespace spindle::detail {
/// For a queue entry that leaves a ring by overflow: when the entry is stale
/// (CLAIMED: poll_inline took its task, task_header.hpp), drops the entry's
/// reference (freeing the task if it was the last) and returns true, so the
/// entry is not carried into the global queue; false for a live entry.
/// Defined in scheduler.cpp.
bool release_if_stale(task_header* task) noexcept;

/// What scheduler_core needs from whoever runs it.
class core_platform {
 public:
  /// Wakes worker `index` out of its park (or makes its next park return).
  virtual void unpark_worker(std::size_t index) noexcept = 0;
  /// push_remote found no parked worker to claim: every worker is awake or
  /// a searcher will find the task. Production kicks a block_on thread if
  /// every worker is busy.
  virtual void remote_push_unnoticed() noexcept = 0;
  /// Now, in ns (steady_clock; the simulator's virtual time).
  virtual std::uint64_t now_ns() noexcept { return steady_now_ns(); }

 protected:
  ~core_platform() = default;
};

/// The tiers of after_tick (runtime_config::idle_spins, idle_yields).
struct idle_tiers {
  std::uint32_t spins = 0;
  std::uint32_t yields = 0;
};

class scheduler_core {
 public:
  /// Steal back-off (backoff_ns): a searcher whose steal rounds keep
  /// failing waits base << (failures - 1) ns between rounds, at most
  /// max ns: 256, 512, ..., 16,384 ns. A task pushed while the only
  /// searcher backs off is therefore seen within 16,384 ns plus one round of
  /// probes (a push does not wake a parked worker while a searcher is out).
  static constexpr std::uint64_t steal_backoff_base_ns = 256;
  static constexpr std::uint64_t steal_backoff_max_ns = 16'384;
  /// The watcher of stalled LIFO slots (watch_deadline_ns) sleeps from the
  /// stall threshold, doubling while it finds nothing, up to this.
  static constexpr std::uint64_t watch_period_max_ns = 1'000'000;

  /// `workers` entries are made with `seed`-derived steal RNGs; the
  /// placement RNG (p2c) is seeded from `seed` too.
  /// `stalled_lifo_ns`: a task in the LIFO slot of a worker that has taken
  /// no new task for this long may be taken by a searcher or the watcher
  /// (0: never; runtime_config::stalled_lifo_threshold).
  scheduler_core(core_platform& platform, std::size_t workers, std::uint32_t budget,
                 std::uint64_t seed, idle_tiers tiers = {},
                 spindle::placement where = spindle::placement::global,
                 std::uint64_t stalled_lifo_ns = 0);
  /// Gives each worker its victim order (build_victim_orders), once; the
  /// workers may be running. Without it, victims are tried in a random flat
  /// order.
  void set_victim_orders(std::vector<victim_order> orders) noexcept;
  /// How long a searching worker that found nothing waits before its next
  /// steal round (0 when its last round succeeded): see steal_backoff_base_ns.
  [[nodiscard]] std::uint64_t backoff_ns(worker const* w) const noexcept;
  /// When parked worker `w` must wake to look for stalled LIFO slots
  /// (an absolute time from now_ns), or no_deadline. At most one parked
  /// worker watches, and only while some worker is awake; when none
  /// watches with a deadline, the next push into an empty LIFO slot wakes a
  /// parked worker to do it. Call after begin_park, before each sleep.
  [[nodiscard]] std::uint64_t watch_deadline_ns(worker* w) noexcept;
  /// Takes the task from the LIFO slot of a worker that has finished no
  /// poll for the stall threshold (Tokio #4941), looking at the victims in
  /// `w`'s order; nullptr when none is stalled (or rescue is off).
  task_header* rescue_lifo(worker* w) noexcept;
  [[nodiscard]] std::uint64_t stalled_lifo_ns() const noexcept { return stalled_lifo_us_ * 1000; }

  [[nodiscard]] std::size_t worker_count() const noexcept { return workers.size(); }
  [[nodiscard]] std::uint32_t budget() const noexcept { return budget_; }
  [[nodiscard]] spindle::placement placement() const noexcept { return placement_; }

  /// Queues a task made runnable by worker `w`'s thread: the LIFO slot
  /// (the displaced task to the ring), or the back of the ring for a yield
  /// (or a task woken while it ran), after which the next pick checks the
  /// global queue first.
  void schedule_local(worker* w, task_header* task, bool is_yield) noexcept;
  /// schedule_local(w, task, false) in its common case, inlined into the
  /// spawn path: `task` into w's empty LIFO slot while w is not on its way
  /// to park. False, having done nothing, in every other case. On w's
  /// thread only.
  [[gnu::always_inline]] bool schedule_into_empty_slot(worker* w, task_header* task) noexcept {
    if (w->transitioning_to_park.load(std::memory_order_relaxed) || w->lifo.peek() != nullptr)
      return false;
    // Only the owner fills the slot, so an empty slot stays empty until
    // this store.
    w->lifo.put(task);
    slot_filled(w);
    return true;
  }
  /// A task that yielded (or was woken while it ran) on worker w, after its
  /// poll: schedule_local(w, task, true), or under placement::p2c the back
  /// of w's inbox while tasks wait there. On w's thread only.
  void schedule_yield(worker* w, task_header* task) noexcept;
  /// schedule_local of tasks[0..n) (new spawns, spawn_batch): the back of
  /// the ring with one publication, the overflow to the global queue in one
  /// batch, and at most one wake.
  void schedule_local_batch(worker* w, task_header* const* tasks, std::size_t n) noexcept;
  /// Queues a task from outside the workers: placement::global, the global
  /// queue, then wakes a parked worker if nobody searches; placement::p2c,
  /// the inbox of the less loaded of two workers drawn by the placement RNG,
  /// then wakes that worker if it is parked (else any parked worker, if
  /// nobody searches: a searcher takes from inboxes too).
  void push_remote(task_header* task) noexcept { push_remote_batch(task, task, 1); }
  /// push_remote of the list first..last (linked through next) of `count`
  /// tasks, with one queue operation and at most one wake.
  void push_remote_batch(task_header* first, task_header* last, std::size_t count) noexcept;
  /// push_remote_batch into the inbox of worker `target` (placement::p2c, a
  /// target choose_p2c drew).
  void push_inbox_batch(std::size_t target, task_header* first, task_header* last,
                        std::size_t count) noexcept;
  /// The worker push_remote's p2c placement picks for `count` tasks (the
  /// placement RNG advances, and the count is added to that worker's load
  /// in the producers' view of the loads). A worker's load is read from
  /// its lines at most once every p2c_refresh_draws draws; the draws in
  /// between use the value read plus the tasks placed on it since. Any
  /// thread.
  [[nodiscard]] std::size_t choose_p2c(std::size_t count = 1) noexcept;
  /// How many draws one read of a worker's load serves (choose_p2c).
  static constexpr std::uint64_t p2c_refresh_draws = 16;
  /// For a helper outside the workers (block_on): one task from the global
  /// queue or any inbox, or nullptr.
  [[nodiscard]] task_header* take_remote() noexcept;
  /// The global queue or some inbox holds tasks.
  [[nodiscard]] bool remote_work_pending() const noexcept;
  /// Claims and unparks a parked worker when no one searches. True if it did.
  bool notify_parked() noexcept;
  /// Notifies a parked worker when any queue holds work.
  void notify_if_work_pending() noexcept;
  /// No worker searching and none parked.
  [[nodiscard]] bool every_worker_busy() const noexcept;

  /// The next task for `w`: batch buffer, its inbox and the global queue
  /// every global-check interval, LIFO slot (capped at 3 polls in a row),
  /// ring, inbox, global queue, steal (as a searcher: other rings, then other
  /// inboxes), inbox and global queue again. nullptr: nothing found.
  task_header* next_task(worker* w) noexcept;
  /// `w` found a task: leaves the searching state (the last searcher to find
  /// work notifies another worker).
  void transition_from_searching(worker* w) noexcept {
    if (w->is_searching) [[unlikely]]
      stop_searching(w);
  }
  /// End of a tick of `polls` polls that took `elapsed_ns`: updates the
  /// EWMA global-check interval and resets the count of LIFO polls in a row.
  void end_tick(worker* w, std::uint32_t polls, std::uint64_t elapsed_ns) noexcept;

  /// `w` found nothing: registers it as parked (false, registering nothing,
  /// when it has local tasks after all). After true the caller sleeps until
  /// transition_from_parked() says it may run, then calls end_park().
  bool begin_park(worker* w) noexcept;
  /// After a wake-up: true when `w` may run again (it has local tasks, or a
  /// notifier claimed it), false when it must sleep again.
  bool transition_from_parked(worker* w) noexcept;
  /// Leaves the parking sequence.
  void end_park(worker* w) noexcept {
    w->transitioning_to_park.store(false, std::memory_order_relaxed);
  }
  /// A parked worker returned from its sleep (unparked, a completion, a
  /// timer deadline or spuriously): its own I/O completions and timers may
  /// now queue tasks locally (they would go to the global queue while it is
  /// transitioning to park).
  void begin_wakeup(worker* w) noexcept {
    w->transitioning_to_park.store(false, std::memory_order_relaxed);
  }
  /// After begin_wakeup and the worker's reaping: true when `w` leaves the
  /// park (transition_from_parked, end_park), false when it sleeps again.
  [[nodiscard]] bool finish_wakeup(worker* w) noexcept {
    if (transition_from_parked(w)) {
      end_park(w);
      return true;
    }
    w->transitioning_to_park.store(true, std::memory_order_seq_cst);
    return false;
  }

  /// What a worker does after a tick (tiered idle, the scanner executor).
  enum class idle_step : std::uint8_t {
    run,    ///< the tick made progress or local work waits: the next tick at once
    spin,   ///< found nothing: spin a little (the CPU's pause), then tick again
    yield,  ///< still nothing: give the CPU away (sched_yield), then tick again
    park,   ///< nothing for a while: park (begin_park)
  };
  /// `progressed`: the tick polled a task, reaped a completion or fired a
  /// timer. Counts empty ticks in a row: the first `spins` of the tiers
  /// spin, the next `yields` yield, then the worker parks.
  [[nodiscard]] idle_step after_tick(worker* w, bool progressed) noexcept;

  std::vector<std::unique_ptr<worker>> workers;
  global_queue inject;
  idle_state idle;

 private:
  task_header* next_local(worker* w) noexcept;
  /// transition_from_searching of a searching worker.
  void stop_searching(worker* w) noexcept;
  /// Leaves the watch (a watcher that wakes to run).
  void stop_watching(worker* w) noexcept;
  /// A push into an empty LIFO slot while nobody watches with a deadline:
  /// wakes the watcher (or any parked worker, which takes the watch).
  void wake_watcher() noexcept;
  /// After a task went into w's empty LIFO slot: the watcher and the
  /// wake-on-hoard (schedule_local).
  [[gnu::always_inline]] void slot_filled(worker* w) noexcept {
    // A task now waits in the slot, where only a rescue can reach it if
    // this worker stalls: the watcher must be awake to see it.
    // (seq_cst: ordered after the claim that woke this worker, see
    // watch_deadline_ns.)
    if (watch_wanted_.load(std::memory_order_seq_cst)) [[unlikely]]
      wake_watcher();
    // Wake-on-hoard (the scanner executor): a worker that keeps scheduling
    // locally wakes a sibling now and then, so that the work piling up in
    // its ring gets stolen even if the wake for it was missed. Only when
    // the ring holds work: the LIFO slot cannot be stolen, so in a chain of
    // spawns (one task at a time) a woken sibling would find nothing, and
    // the futex wake would cost the chain a system call every 32 links.
    if (++w->hoard >= worker::wake_on_hoard_threshold) [[unlikely]] {
      w->hoard = 0;
      if (!w->queue.is_empty()) notify_parked();
    }
  }
  /// Returns `task`; a task taken from anywhere but the LIFO slot ends a run of
  /// LIFO polls.
  static task_header* not_from_lifo(worker* w, task_header* task) noexcept;
  /// w's share of the global queue (len / workers, at least 4): up
  /// to a batch into the batch buffer, the rest into the ring
  /// (take_spilling).
  task_header* fetch_global(worker* w) noexcept;
  /// `w`'s own inbox: up to a batch into the batch buffer (as
  /// fetch_global's), and what is left beyond it into the ring, up to
  /// spill_room. With one batch per look, a worker whose ring always held
  /// work (tasks that yield) took 32 tasks between two of their polls, and
  /// 10,000 spawns into its inbox waited for about 300 such polls.
  task_header* fetch_inbox(worker* w) noexcept;
  /// How many tasks a look at a remote queue may move into w's ring beyond
  /// the batch buffer: half its free slots, at most run_queue::overflow_batch
  /// (Tokio moves up to half its run queue from the inject queue at once);
  /// 0 when nothing local waits or the ring is half full or more.
  static std::size_t spill_room(worker const* w) noexcept;
  /// The most one look at a remote queue takes: a batch buffer, and a spill.
  static constexpr std::size_t max_remote_take = worker::batch_capacity + run_queue::overflow_batch;
  using remote_take = std::array<task_header*, max_remote_take>;
  /// `got` tasks taken from a remote queue: the first returned, up to a
  /// batch buffer's worth as take_batch does, the rest pushed to the back
  /// of the ring in their order (a wake when the ring was empty: they can
  /// be stolen there).
  task_header* take_spilling(worker* w, task_header* const* tasks, std::size_t got) noexcept;
  /// Inbox, then global queue.
  task_header* fetch_remote(worker* w) noexcept;
  /// The first of `got` tasks in w->batch, the rest left in the batch
  /// buffer, or moved to the ring (with a wake) when some worker sleeps.
  task_header* take_batch(worker* w, std::size_t got) noexcept;
  /// Calls take(victim, level) for each other worker in `w`'s victim order
  /// (nearest level first, a random start within each level; without a
  /// topology every other worker from a random start, as the farthest
  /// level) until it returns a task; that task, or nullptr. Ring steals,
  /// inbox steals and LIFO rescues all look at the victims this way.
  template <class Take>
  task_header* for_each_victim(worker* w, Take&& take) noexcept;
  /// A searcher's round: half of a victim's ring, then (placement::p2c)
  /// half of a victim's inbox, then a stalled worker's LIFO task
  /// (rescue_lifo); counts the round for the back-off.
  task_header* steal_work(worker* w) noexcept;
  /// Half of another worker's inbox (at most a batch), as a searcher.
  task_header* steal_inbox(worker* w) noexcept;
  /// Half of `victim`'s inbox (at most a batch) into w's batch buffer; the
  /// first task, or nullptr when the inbox is empty.
  task_header* take_from_inbox(worker* w, std::uint32_t victim) noexcept;
  /// placement::p2c, on the global-check interval of a worker whose own
  /// inbox and the global queue are empty: take_from_inbox of one other
  /// worker chosen at random. Without it a busy worker never helps with
  /// another's inbox (only searchers do), and a spawn_batch from outside,
  /// which lands in one inbox, was drained by its owner alone. After a look
  /// that finds nothing the next looks are skipped, 1, 2, 4, ... up to
  /// worker::max_help_skip of them.
  task_header* help_inbox(worker* w) noexcept;
  /// The global queue, then a wake (schedule_local of a parking worker).
  void push_global(task_header* first, task_header* last, std::size_t count) noexcept;

  core_platform* platform_;
  std::uint32_t budget_;
  std::uint32_t idle_spins_;
  std::uint32_t idle_yields_;
  std::uint32_t stalled_lifo_us_;
  /// The victim orders the workers point to (set once).
  std::vector<victim_order> victim_orders_;
  /// The watching worker, or not_a_worker.
  std::atomic<std::size_t> watcher_{not_a_worker};
  /// Nobody watches with a deadline (the watcher sleeps without one because
  /// every worker was parked, or it left to run): the next push into an
  /// empty LIFO slot wakes a parked worker to watch.
  std::atomic<bool> watch_wanted_{false};
  spindle::placement placement_;
  // The placement RNG's state (xorshift64*): a relaxed load and store, no
  // RMW; two producers racing may draw the same pair, which is harmless.
  // Deterministic for one producer (the simulation).
  alignas(64) std::atomic<std::uint64_t> p2c_rng_;
  // Draws made (the first is 1), on the RNG's line: written by the same
  // producers.
  std::atomic<std::uint64_t> p2c_draws_{0};
  // The producers' view of each worker's load (choose_p2c): the value last
  // read from the worker's lines plus the tasks placed on it since, and the
  // draw that read it (0: never). Relaxed loads and stores, no RMW, as the
  // RNG: producers racing may lose a count, which the next read corrects.
  struct seen_load {
    std::atomic<std::uint64_t> load{0};
    std::atomic<std::uint64_t> read_at{0};
  };
  std::unique_ptr<seen_load[]> p2c_seen_;
};

}  // namespace spindle::detail
