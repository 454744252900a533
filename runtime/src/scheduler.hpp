// The scheduler behind spindle::runtime: workers, the global queue, the idle
// state, the owned-task lists (which also keep the lifecycle) and the I/O driver.
//
// Thread-safety: spawn/schedule/stats from any thread; run_worker on the
// worker's own thread; the destructor from the owner of the runtime.
// Design source: Volt, Tokio's multi_thread scheduler, the scanner executor.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "block_on.hpp"
#include "blocking_pool.hpp"
#include "core.hpp"
#include "driver.hpp"
#include "owned_tasks.hpp"
#include "process_registry.hpp"
#include "spindle/runtime.hpp"
#include "trace.hpp"
#include "worker.hpp"

namespace spindle::detail {

/// What the calling thread is: a worker of some scheduler, a thread inside
/// block_on, or neither; and the task it is polling.
struct thread_context {
  scheduler* sched = nullptr;
  worker* self = nullptr;
  task_header* current = nullptr;
  /// The current task suspended in yield_now: its poll's end re-queues it
  /// (one state transition instead of a wake and then the poll's end).
  bool yielded = false;
  /// Operations the current poll may still complete synchronously
  /// (take_sync_io_budget), plus one: set at the start of each poll to
  /// sync_io_per_poll + 1, 1 once they are spent, and 0 outside a poll or
  /// when the runtime's try_cached_reads is off.
  std::uint32_t sync_io_budget = 0;
  /// The worker's trace ring when its runtime traces (trace.hpp), else null.
  trace_ring* trace = nullptr;
};
/// The calling thread's context. Not inlined: awaiters reach it from
/// coroutine bodies, which may resume on another thread, and an inlined
/// thread-local access there could be cached across the suspension.
thread_context& this_thread_context() noexcept;

/// The same context, read in place (one %fs-relative access instead of a
/// call). Only for the library's ordinary functions that run inside no
/// coroutine body (the spawn, poll and join-handle paths); everything else
/// calls this_thread_context().
// initial-exec: one %fs-relative load instead of a __tls_get_addr call
// (libspindle is a shared library linked at start-up, not dlopen'ed late;
// its TLS is a few hundred bytes of the static TLS block). constinit: no
// per-access initialization check in the files that only declare it.
[[gnu::tls_model("initial-exec")]] extern constinit thread_local thread_context t_thread_context;
[[gnu::always_inline]] inline thread_context& this_thread_context_here() noexcept {
  return t_thread_context;
}
/// Synchronous completions allowed per poll of a task.
inline constexpr std::uint32_t sync_io_per_poll = 64;

class scheduler final : public core_platform {
 public:
  /// Starts the workers and the driver `make_driver` makes. Throws
  /// std::system_error: invalid_argument for more than 65535 workers,
  /// resource_unavailable_try_again when a thread cannot start, or what
  /// the driver's setup throws.
  scheduler(runtime_config const& config, driver_factory make_driver);
  ~scheduler();
  scheduler(scheduler const&) = delete;
  scheduler& operator=(scheduler const&) = delete;

  task_header* spawn(std::coroutine_handle<> root, promise_base* promise, spawn_location where);
  /// spawn() when the caller knows its thread: `w` is this scheduler's
  /// worker running the calling thread, or nullptr for any other thread.
  task_header* spawn_on(worker* w, std::coroutine_handle<> root, promise_base* promise,
                        spawn_location where);
  /// schedule_local(w, task, false); returns `task`.
  task_header* schedule_spawned(worker* w, task_header* task) noexcept;
  /// spawn_on() from worker `w`'s own thread (a spawn from a task): the
  /// common case (the site of w's last spawn, the gate open, an empty LIFO
  /// slot) without a call or a saved register, the rest through
  /// spawn_from_worker_slow.
  task_header* spawn_from_worker(worker* w, std::coroutine_handle<> root, promise_base* promise,
                                 spawn_location where);
  /// spawn_from_worker at a site other than w's last, or with the gate
  /// closed (refused).
  task_header* spawn_from_worker_slow(worker* w, std::coroutine_handle<> root,
                                      promise_base* promise, spawn_location where);
  /// spawn_on() from a thread that is not one of this scheduler's workers:
  /// listed, then into the global queue or (p2c) an inbox.
  [[gnu::noinline]] task_header* spawn_from_outside(std::coroutine_handle<> root,
                                                    promise_base* promise, spawn_location where);
  /// spawn() of roots[0..n) with one look at the gate, one queue operation
  /// and at most one wake (spawn_batch); out[i] gets roots[i]'s header.
  void spawn_batch(spawn_root_entry const* roots, task_header** out, std::size_t n,
                   spawn_location where);
  /// Queues a task that was just marked SCHEDULED.
  void schedule(task_header* task) noexcept;
  void block_until_complete(task_header* task);
  /// Throws std::system_error(resource_deadlock_would_occur) on this
  /// scheduler's own workers.
  void check_block_on_allowed() const;

  [[nodiscard]] runtime_stats stats() const;
  /// runtime::dump() (dump.cpp).
  [[nodiscard]] runtime_dump dump(std::chrono::milliseconds timeout);
  [[nodiscard]] std::size_t worker_count() const noexcept { return core_.worker_count(); }
  [[nodiscard]] driver& io_driver() noexcept { return *driver_; }
  [[nodiscard]] io_backend backend() const noexcept { return driver_->backend(); }
  [[nodiscard]] runtime_config const& config() const noexcept { return config_; }
  /// The trace (runtime_config::trace_path), or null when off.
  [[nodiscard]] tracer* trace() const noexcept { return tracer_.get(); }
  /// The spawn_blocking pool.
  [[nodiscard]] blocking_pool& blocking() noexcept { return blocking_; }
  /// The processes of this runtime (spindle/process.hpp).
  [[nodiscard]] process_registry& processes() noexcept { return processes_; }
  [[nodiscard]] process_registry const& processes() const noexcept { return processes_; }

  // What the driver's io_host calls (driver.hpp).
  /// The calling thread's worker index if it is one of ours, else not_a_worker.
  [[nodiscard]] std::size_t current_worker() const noexcept;
  void unpark(std::size_t index) noexcept;
  /// `index` not_a_worker: completions on a thread of the thread-pool
  /// backend (one shared counter, runtime_stats::io_completions only).
  void count_completions(std::size_t index, std::size_t n) noexcept {
    if (index == not_a_worker) {
      offworker_io_completions_.fetch_add(n, std::memory_order_relaxed);
      return;
    }
    core_.workers[index]->counters.io_completions.add(n);
  }

  // Task transitions (task_harness.cpp).
  void complete(task_header* task, worker* w) noexcept;
  /// complete() of a task claimed by claim_fresh_for_inline.
  void complete_fresh_inline(task_header* task, worker* w) noexcept;
  /// complete() of a listed or failed task.
  [[gnu::noinline]] void complete_general(task_header* task, worker* w) noexcept;
  /// complete() of a task that is not listed and did not fail, which others
  /// may reach (a join handle, a waker's reference).
  [[gnu::noinline]] void complete_joined(task_header* task, worker* w) noexcept;
  /// complete() of a task that is not listed (any more) and that others
  /// may reach; `has_failed`: failed(task). Inlined into complete_general
  /// and complete_joined.
  void complete_shared(task_header* task, worker* w, bool has_failed) noexcept;
  /// The task ended with an exception (not by cancellation).
  [[nodiscard]] static bool failed(task_header* task) noexcept {
    return !task->cancelled_before_finish && task->root_promise()->has_exception();
  }
  /// Drops one reference; frees the frame and header at zero. Static: join
  /// handles may outlive the runtime.
  static void drop_reference(task_header* task) noexcept;
  /// Destroys the frame (if still there) and frees the header: the last
  /// reference is gone.
  static void free_task(task_header* task) noexcept;
  /// Counts and prints the exception of a task nobody joined: a detached
  /// task's at completion, or one a join handle dropped without taking it
  /// (join_detach, through release_unobserved).
  void report_detached_exception(
      task_header* task, char const* what = "a detached task ended with an exception") noexcept;
  /// join_detach of a finished task that was held as unobserved (see
  /// task_header::unobserved): unlinks it and, when its exception was not
  /// taken, reports it, counted in its runtime's stats while the runtime
  /// exists (its destructor detaches the list). Static: a join handle may
  /// outlive its runtime.
  static void release_unobserved(task_header* task) noexcept;
  void abort(task_header* task) noexcept;
  /// run_inline on worker `w` (its own thread).
  bool poll_inline(worker* w, task_header* task) noexcept;
  /// abort(), destroying the frame on the calling thread when the task is
  /// queued or suspended in an awaiter that withdraws (task_abort_here).
  abort_here_result abort_here(task_header* task) noexcept;

  // Timers (timer.cpp).
  /// Arms `e` on the calling worker's wheel (round-robin from other threads).
  /// Returns false when the deadline has passed already.
  bool arm_timer(timer_entry& e, std::chrono::steady_clock::time_point deadline) noexcept;

 private:
  /// Fires the due timers of `w`'s wheel (owner thread). Returns how many woke a task.
  std::size_t fire_timers(worker* w) noexcept;
  /// When `w` must wake for its next timer: steady_clock ns, or no_deadline.
  [[nodiscard]] std::uint64_t timer_deadline_ns(worker* w) const noexcept;
  [[nodiscard]] std::uint64_t now_tick() const noexcept;

  void run_worker(worker* w);
  /// The fixed state fields of the tasks `w` spawns in a tick that starts
  /// at `now_ns` (worker::spawn_stamp).
  void stamp_tick(worker* w, std::uint64_t now_ns) const noexcept {
    w->spawn_stamp = state_bits::fixed_fields(slot_.id(), spawn_time_of(now_ns));
  }
  // core_platform
  void unpark_worker(std::size_t index) noexcept override;
  void remote_push_unnoticed() noexcept override;
  void run_task(worker* w, task_header* task) noexcept;
  /// run_task's cold path: a stale (CLAIMED) entry, released, or run when a
  /// wake turned it live meanwhile.
  [[gnu::noinline]] void run_stale_entry(worker* w, task_header* task) noexcept;
  /// poll_held's resume when tracing: the same, inside a poll span.
  [[gnu::noinline, gnu::cold]] static void resume_traced(task_header* task,
                                                         trace_ring* trace) noexcept;
  /// Polls a task whose RUNNING bit the caller set (state `s` then).
  /// `FreshInline`: poll_inline claimed it with claim_fresh_for_inline (its
  /// join handle's holder is the caller, waiting on this thread).
  template <bool FreshInline = false>
  void poll_held(worker* w, task_header* task, std::uint64_t s) noexcept;
  /// At shutdown, after the workers stopped: empties the queues, dropping
  /// the references of stale (CLAIMED) entries and listing the live entries'
  /// tasks that are not listed yet.
  void drain_queues() noexcept;
  void cancel_task(task_header* task, worker* w) noexcept;
  /// Destroys the root frame if it is still there. The caller holds RUNNING.
  static void destroy_frame(task_header* task) noexcept;
  void cancel_owned(task_header* task, worker* w) noexcept;
  /// At shutdown, after drain_queues: destroys the frame of every task that
  /// did not finish (the owned lists) and drops the scheduler's references.
  void destroy_unfinished_tasks() noexcept;
  /// At shutdown: unlinks the failed tasks whose join handles are still out
  /// and clears their runtime id, so that the handles never reach this
  /// scheduler again (release_unobserved).
  void detach_unobserved() noexcept;
  void park_worker(worker* w) noexcept;
  /// A worker's answer to a dump request: lists its queued tasks in
  /// w->dump_found and acknowledges (dump.cpp). Owner thread.
  [[gnu::noinline]] void answer_dump(worker* w) noexcept;
  /// One predictable branch: is a dump waiting for `w`'s answer?
  [[nodiscard]] bool dump_requested(worker const* w) const noexcept {
    return dump_gen_.load(std::memory_order_relaxed) != w->dump_seen;
  }
  /// Lists a task that is about to be suspended with nobody queueing it
  /// (owned_tasks.hpp), in `w`'s list or the other threads' one.
  void list_task(task_header* task, worker* w) noexcept;
  /// One more task completed (stats().tasks_alive), counted by `w` (this
  /// thread's worker) or, off the workers, in remote_completed_.
  void count_completion(worker* w) noexcept;
  /// complete()'s side of release_unobserved: links a task that finishes
  /// with an exception, before COMPLETE is published; unhold_unobserved
  /// undoes it when the task turned out to be detached.
  void hold_unobserved(task_header* task) noexcept;
  void unhold_unobserved(task_header* task) noexcept;

  /// This runtime's id in runtime_slots (task_header.hpp): taken first and
  /// given back last, after every task of the runtime is gone or detached.
  /// Throws std::system_error(resource_unavailable_try_again) when
  /// max_runtimes - 1 runtimes exist already.
  class runtime_slot {
   public:
    explicit runtime_slot(scheduler* owner);
    ~runtime_slot();
    runtime_slot(runtime_slot const&) = delete;
    runtime_slot& operator=(runtime_slot const&) = delete;
    [[nodiscard]] std::uint16_t id() const noexcept { return id_; }

   private:
    std::uint16_t id_;
  };
  runtime_slot slot_;

  runtime_config config_;
  /// What the driver is given to reach back here.
  io_host host_;
  /// Tick 0 of every timer wheel (ticks are whole ms after it).
  std::chrono::steady_clock::time_point epoch_;
  std::atomic<std::size_t> timer_round_robin_{0};
  scheduler_core core_;
  owned_tasks owned_;
  std::unique_ptr<driver> driver_;
  std::atomic<bool> shutdown_{false};
  // Bumped by each dump() (dump.cpp); read once per tick by every worker.
  std::atomic<std::uint64_t> dump_gen_{0};
  // Each poll's sync_io_budget: sync_io_per_poll + 1, or 0 when
  // runtime_config::try_cached_reads is off.
  std::uint32_t sync_io_per_poll_ = 0;
  // Completions off the workers (block_on threads, abort_here); the workers
  // count theirs in worker_counters::completed, and the spawns off the
  // workers are counted by the gate (owned_tasks::spawned_from_outside). A line
  // apart from shutdown_ and the driver pointer, which every worker reads
  // per poll.
  alignas(64) std::atomic<std::uint64_t> remote_completed_{0};
  std::atomic<std::uint64_t> detached_exceptions_{0};
  // I/O completions counted off the workers (count_completions).
  std::atomic<std::uint64_t> offworker_io_completions_{0};
  // Tasks finished with an exception that a join handle may still take,
  // linked through owned_prev/owned_next; guarded by the process-wide
  // unobserved_lock() (scheduler.cpp), because a handle dropped on another
  // thread must learn whether this runtime still exists.
  task_header* unobserved_ = nullptr;
  // Tracing (trace.hpp); null when off. Made before the workers start,
  // written after they stopped.
  std::unique_ptr<tracer> tracer_;
  // One dump at a time.
  std::mutex dump_mutex_;
  // block_on threads asleep while their task may still need help (block_on.cpp).
  block_on_sleepers block_on_sleepers_;
  // spawn_blocking jobs; shut down after the workers stop, before frames go.
  blocking_pool blocking_;
  process_registry processes_;
};

}  // namespace spindle::detail
