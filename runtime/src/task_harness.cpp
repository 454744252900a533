// The task harness: what the scheduler does with the answers of the task
// state machine (task_state.hpp). Polling a task (run_task, poll_inline,
// poll_held), completing it, aborting and cancelling it, dropping its
// references and freeing it, the join handle's side (join_register,
// join_detach, ...), waking, and the exceptions nobody observed.
//
// A spawn, followed through the code: scheduler::spawn (scheduler.cpp) queues
// the task; the worker loop (scheduler.cpp) pops it and calls run_task here,
// which polls it and, at its end, suspends, re-queues or completes it here.
//
// Thread-safety: as task_state.hpp: every entry point may race with every
// other on the same task; each state change is one CAS of task_state, but
// where nobody else can write the state (join_detach's, run_task's and
// complete's fast paths: a plain store).
// Design source: Tokio's task/harness.rs (poll, complete, cancel_task,
// drop_join_handle), with the transitions in task/state.rs's manner.
#include <cassert>
#include <cstdio>
#include <exception>
#include <mutex>
#include <new>
#include <utility>

#include "scheduler.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/runtime.hpp"
#include "task_state.hpp"

namespace spindle::detail {

namespace sb = state_bits;

namespace {

// Prints the exception a task ended with, which nobody joined.
void print_unjoined_exception(task_header* task, char const* what) noexcept {
  try {
    std::rethrow_exception(task->root_promise()->exception());
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle: %s: %s\n", what, e.what());
  } catch (...) {
    std::fprintf(stderr, "spindle: %s (not a std::exception)\n", what);
  }
}

// Guards every scheduler's unobserved_ list and the `sched` of the tasks in
// it: a join handle dropped on any thread may find its runtime destroyed.
// Taken only by tasks that fail while a handle holds them.
std::mutex& unobserved_lock() noexcept {
  static std::mutex lock;
  return lock;
}

// The hook of a suspension whose awaiter cannot withdraw: abort waits for
// the wake and destroys the frame then.
bool never_detached(cancel_hook* /*hook*/) noexcept {
  return false;
}
cancel_hook never_detached_hook{&never_detached};
}  // namespace

// ---------------------------------------------------------------------------
// The calls awaiters make (task_header.hpp)

// Not inlined on purpose: awaiters call these from coroutine bodies, which may
// resume on another thread; the thread_local must be looked up afresh.
[[gnu::noinline]] task_header* suspend_current(std::coroutine_handle<> resume_at) noexcept {
  task_header* task = this_thread_context_here().current;
  if (task != nullptr) {
    task->resume_point = resume_at;
    task->waits_on.store(wait_kind::other, std::memory_order_relaxed);
    task->cancel = &never_detached_hook;
  }
  return task;
}

[[gnu::noinline]] void yield_current() noexcept {
  this_thread_context_here().yielded = true;
}

sync_io_grant take_sync_io_budget() noexcept {
  // The budget counts down to 1 (spent); 0 is off (scheduler.hpp).
  thread_context& ctx = this_thread_context_here();
  if (ctx.sync_io_budget > 1) {
    --ctx.sync_io_budget;
    return sync_io_grant::granted;
  }
  return ctx.sync_io_budget == 1 ? sync_io_grant::spent : sync_io_grant::off;
}

[[gnu::noinline]] task_header* current_task() noexcept {
  return this_thread_context_here().current;
}

[[gnu::noinline]] scheduler* current_scheduler() noexcept {
  return this_thread_context_here().sched;
}

[[gnu::noinline]] std::size_t current_worker_index() noexcept {
  worker* w = this_thread_context_here().self;
  return w != nullptr ? w->index : not_a_worker;
}

void wake(task_header* task) noexcept {
  if (task_state::mark_woken(task)) scheduler_of(task)->schedule(task);
}

bool run_inline(task_header* task) noexcept {
  thread_context& ctx = this_thread_context_here();
  // The task's runtime is this worker's when its id matches the one in the
  // worker's spawn stamp (fewer loads than scheduler_of).
  if (ctx.self == nullptr ||
      ((task->state.load(std::memory_order_relaxed) ^ ctx.self->spawn_stamp) & sb::runtime_mask) !=
          0)
    return false;
  return ctx.sched->poll_inline(ctx.self, task);
}

// ---------------------------------------------------------------------------
// The join handle's side

bool join_register(task_header* task, join_waiter* waiter) noexcept {
  task->waiter = waiter;
  return task_state::set_join_waker(task);
}

bool join_unregister(task_header* task) noexcept {
  return task_state::clear_join_waker(task);
}

namespace {
// join_detach of a task that is not its worker's fresh spawn: out of line,
// so that the fresh spawn's path saves no register.
[[gnu::noinline]] void join_detach_general(task_header* task, std::uint64_t s) noexcept {
  // Not finished: clear the join bits and drop the handle's reference. The
  // scheduler's reference remains until the task completes, so this one is
  // never the last, and completion reports an exception nobody can take
  // any more.
  if ((s & sb::complete) == 0 && task_state::drop_join_if_running(task, s)) return;
  // Finished: nothing races for the join bits any more.
  if (task->unobserved) {
    // It finished with an exception: if nobody took it, do not lose it
    // silently (printed, and counted in runtime_stats::detached_exceptions
    // while its runtime exists).
    scheduler::release_unobserved(task);
  }
  if (task_state::drop_join_of_complete(task, s)) scheduler::free_task(task);
}
}  // namespace

void join_detach(task_header* task) noexcept {
  std::uint64_t const s = task->state.load(std::memory_order_acquire);
  if ((s & sb::complete) == 0) {
    // Not finished (a handle dropped at once: a detached spawn).
    if (worker* w = this_thread_context_here().self; w != nullptr && w->lifo.peek() == task) {
      // Spawned by this worker and never polled: once it is out of the LIFO
      // slot (where only a rescue of a stalled worker could take it,
      // scheduler_core::rescue_lifo) nobody else can reach the task
      // (nothing can wake or abort a task that never ran but through this
      // handle, the only one, and a stop_token's callback is registered by
      // the task's first poll), so a plain store does it, and the task goes
      // back. Every poll sets `polled` (scheduler::poll_held), so a task
      // back in the LIFO slot after a poll (woken, or yielded when it was
      // its worker's only work), which a waker, a timer, I/O or a stop
      // callback's abort from another thread can reach, always takes the
      // CAS of join_detach_general; a spawn from outside reaches a LIFO
      // slot only after its first poll.
      // `polled` and `listed` are read only once the task is out of the
      // slot: before that, a rescue may take it and its poll write the
      // same byte (TSan: join_detach's read against
      // owned_tasks::link_locked).
      if (w->lifo.take_if(task)) {
        bool const never_polled = !task->polled && !task->listed;
        if (never_polled) {
          task->state.store((s & ~task_state::join_bits) - sb::ref_one, std::memory_order_relaxed);
        }
        w->lifo.put(task);
        if (never_polled) return;
      }
    }
  }
  join_detach_general(task, s);
}

void task_abort(task_header* task) noexcept {
  // A finished task (every task once its runtime is gone) needs nothing, and
  // its scheduler may no longer exist.
  if ((task->state.load(std::memory_order_acquire) & (sb::complete | sb::cancelled)) != 0) return;
  scheduler_of(task)->abort(task);
}

abort_here_result task_abort_here(task_header* task) noexcept {
  if (task_is_complete(task)) return abort_here_result::gone;
  return scheduler_of(task)->abort_here(task);
}

// ---------------------------------------------------------------------------
// Polling

bool release_if_stale(task_header* task) noexcept {
  bool last = false;
  if (!task_state::release_stale(task, last)) return false;
  if (last) scheduler::free_task(task);
  return true;
}

void scheduler::run_stale_entry(worker* w, task_header* task) noexcept {
  if (!release_if_stale(task)) run_task(w, task);
}

void scheduler::run_task(worker* w, task_header* task) noexcept {
  std::uint64_t s;
  if (!task_state::take_entry_alone(task, s)) {
    switch (task_state::take_entry(task, s)) {
      case task_state::entry_action::poll:
        break;
      case task_state::entry_action::stale:
        // A tail call, so that this path costs the common one no saved
        // registers.
        return run_stale_entry(w, task);
      case task_state::entry_action::handed_back:
        return;  // abort_here completes it
    }
  }
  poll_held(w, task, s);
}

bool scheduler::poll_inline(worker* w, task_header* task) noexcept {
  // Bounded: the nesting (each level is a C++ stack frame of the awaiting
  // task's poll) and the tick's budget (a task that spawns and awaits in a
  // loop must still let the tick end, so I/O, timers and the global queue
  // are served), with inline polls counted against inline_budget_factor
  // times the budget (worker.hpp).
  if (w->inline_depth >= worker::max_inline_depth ||
      std::uint64_t{w->tick_polls} + 1 >=
          std::uint64_t{config_.budget} * worker::inline_budget_factor ||
      reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)) < w->inline_stack_limit) {
    return false;
  }
  if (shutdown_.load(std::memory_order_relaxed)) return false;
  // In this worker's LIFO slot (spawned just now): take it out, no entry is
  // left. Anywhere else (ring, global queue, another worker's ring): claim
  // it; its entry stays behind as a stale one holding a reference.
  // Out of the slot first (a rescue may race for it); put back if the
  // claim fails.
  bool const from_lifo = w->lifo.take_if(task);
  std::uint64_t next = 0;
  // Spawned by this worker and never polled: nobody else can write the
  // state (see claim_fresh_for_inline).
  bool const fresh = from_lifo && task_state::claim_fresh_for_inline(task, next);
  if (!fresh && !task_state::claim_for_inline(task, from_lifo, next)) {
    if (from_lifo) w->lifo.put(task);
    return false;
  }
  w->counters.inline_polls.add();
  ++w->inline_depth;
  if (fresh) {
    poll_held<true>(w, task, next);
  } else {
    poll_held(w, task, next);
  }
  --w->inline_depth;
  return task_is_complete(task);
}

template <bool FreshInline>
void scheduler::poll_held(worker* w, task_header* task, std::uint64_t s) noexcept {
  if ((s & sb::cancelled) != 0) {
    cancel_task(task, w);
    return;
  }
  thread_context& ctx = this_thread_context_here();
  task_header* outer = ctx.current;  // the awaiting task when polled inline
  std::uint32_t const outer_budget = ctx.sync_io_budget;
  ctx.current = task;
  ctx.sync_io_budget = sync_io_per_poll_;
  task->cancel = nullptr;  // until an awaiter says how to withdraw
  task->polled = true;
  // For dump() (worker::running): a poll run inline stays under the task
  // that awaits it, which is running too, and costs nothing here.
  bool const publish = w != nullptr && outer == nullptr;
  if (publish) w->publish_running(task, s | sb::running);
  // Tracing (trace.hpp): the one branch of the poll's span, off the path.
  if (tracing(ctx.trace) == nullptr) [[likely]] {
    task->resume_point.resume();
  } else {
    resume_traced(task, ctx.trace);
  }
  // The task may be gone: only the slot is cleared.
  if (publish) w->running.task.store(nullptr, std::memory_order_relaxed);
  ctx.current = outer;
  ctx.sync_io_budget = outer_budget;
  bool const yielded = std::exchange(ctx.yielded, false);
  if (w != nullptr) {
    w->counters.polled.add();
    ++w->tick_polls;
  }

  if (task->frame().done()) {
    if constexpr (FreshInline) {
      complete_fresh_inline(task, w);
    } else {
      complete(task, w);
    }
    return;
  }
  // About to be suspended with no queue holding it: from here on only its
  // waker and the owned list reach it (owned_tasks.hpp).
  auto list_it = [this, task, w]() noexcept {
    if (!task->listed) list_task(task, w);
  };
  switch (task_state::finish_poll(task, yielded, list_it)) {
    case task_state::poll_end::suspended:
    case task_state::poll_end::turned_live:  // its stale entry holds it again
      return;
    case task_state::poll_end::requeue:
      // Woken while it ran (or yielded): back of the run queue.
      if (w != nullptr) {
        core_.schedule_yield(w, task);
      } else {
        core_.push_remote(task);
      }
      return;
    case task_state::poll_end::cancelled:
      // Aborted while it ran and now suspended: we still hold RUNNING.
      // cancel_owned may leave it suspended for a pending wake: list it.
      list_it();
      cancel_owned(task, w);
      return;
  }
}

void scheduler::resume_traced(task_header* task, trace_ring* trace) noexcept {
  // The task may be freed once its poll ended: its id is taken first.
  std::uint64_t const id = task_id(task);
  std::uint64_t const start = steady_now_ns();
  task->resume_point.resume();
  trace->push({start, steady_now_ns() - start, id, 0, nullptr, trace_kind::poll});
}

void scheduler::list_task(task_header* task, worker* w) noexcept {
  owned_.link(task, w != nullptr ? w->index : core_.workers.size());
}

void scheduler::cancel_task(task_header* task, worker* w) noexcept {
  destroy_frame(task);
  complete(task, w);
}

void scheduler::abort(task_header* task) noexcept {
  // During shutdown every task is being destroyed anyway (a frame destructor
  // may abort a child): nothing may be queued any more.
  if (shutdown_.load(std::memory_order_acquire)) return;
  // Queued: its next poll destroys it. Running: the poll's end does.
  // Suspended: we hold it now; withdraw it from its waker.
  if (task_state::mark_aborted(task) == task_state::abort_step::held) cancel_owned(task, nullptr);
}

abort_here_result scheduler::abort_here(task_header* task) noexcept {
  switch (task_state::hold_for_abort_here(task)) {
    case task_state::abort_here_step::gone:
      return abort_here_result::gone;
    case task_state::abort_here_step::running:
      // Polled on another thread (its poll's end destroys it), or held for
      // a moment by another abort: the caller retries.
      return abort_here_result::running;
    case task_state::abort_here_step::pending:
      return abort_here_result::pending;
    case task_state::abort_here_step::held_queued:
      // Queued: destroy the frame now; the queue entry stays, and the poll
      // that pops it finds CANCELLED and no frame and completes the task. If
      // that poll came while we held the task, it handed the entry back by
      // clearing SCHEDULED: then we complete it.
      destroy_frame(task);
      if (!task_state::release_to_entry(task)) complete(task, nullptr);
      return abort_here_result::gone;
    case task_state::abort_here_step::held_suspended:
      break;
  }
  // Suspended: withdraw it from its waker, as abort() does.
  cancel_hook* hook = task->cancel;
  if (hook != nullptr && !hook->withdraw(hook)) {
    // Its wake is still coming: leave the task to it, unless it came while
    // we held the task (NOTIFIED): then nothing else will wake it.
    if (task_state::release_to_pending_wake(task)) return abort_here_result::pending;
  }
  destroy_frame(task);
  complete(task, nullptr);
  return abort_here_result::gone;
}

void scheduler::destroy_frame(task_header* task) noexcept {
  if (auto root = task->frame()) {
    task->cancelled_before_finish = true;
    root.destroy();  // destructors of the whole await chain run here; the block stays
  }
}

void scheduler::cancel_owned(task_header* task, worker* w) noexcept {
  // The caller holds RUNNING on a suspended task with CANCELLED set.
  cancel_hook* hook = task->cancel;
  bool detached = hook == nullptr || hook->withdraw(hook);
  if (detached && w != nullptr) {
    cancel_task(task, w);  // on a worker: destroy the frame now
    return;
  }
  // Release the task: queue it (detached, or woken meanwhile) so that a
  // worker's poll destroys the frame, or leave it for the pending wake.
  if (task_state::release_cancelled(task, detached)) schedule(task);
}

void scheduler::complete(task_header* task, worker* w) noexcept {
  // The caller holds the task (RUNNING). The common cases here without a
  // saved register, the rest out of line.
  if (!task->listed && !failed(task)) [[likely]] {
    // Detached, ours the last reference (every link of a chain of
    // spawns): no other thread will look at it again
    // (task_state::mark_complete_alone).
    if (task_state::mark_complete_alone(task)) {
      count_completion(w);
      free_task(task);
      return;
    }
    // Joined, no waiter registered (awaited and run inline: spawn then
    // co_await): the join handle keeps the block.
    if (task_state::mark_complete_dropped(task)) {
      count_completion(w);
      return;
    }
    return complete_joined(task, w);
  }
  complete_general(task, w);
}

void scheduler::complete_fresh_inline(task_header* task, worker* w) noexcept {
  // Its first poll finished it, run inline by the task that holds its join
  // handle and waits on this thread: the handle does nothing meanwhile
  // (task_state::mark_complete_inline_alone).
  if (!task->listed && !failed(task) && task_state::mark_complete_inline_alone(task)) [[likely]] {
    count_completion(w);
    return;
  }
  complete(task, w);
}

void scheduler::complete_joined(task_header* task, worker* w) noexcept {
  complete_shared(task, w, false);
}

void scheduler::complete_general(task_header* task, worker* w) noexcept {
  // Unlinked while nobody else can (we hold RUNNING). Failed: held where a
  // join handle dropped later finds it (rare path).
  if (task->listed) owned_.remove(task);
  complete_shared(task, w, failed(task));
}

[[gnu::always_inline]] inline void scheduler::complete_shared(task_header* task, worker* w,
                                                              bool has_failed) noexcept {
  if (has_failed) hold_unobserved(task);
  // A join handle that holds a reference and has no waiter registered (the
  // awaiting task ran this one inline, or will look later): the scheduler's
  // reference goes in the same transition, the handle's keeps the block,
  // and nothing here touches the task afterwards (dropped). Detached, with
  // ours the only reference: it goes too, nobody else can reach the block
  // afterwards (last).
  auto const [prev, dropped, last] = task_state::mark_complete(task);
  if (dropped) {
    count_completion(w);
    return;
  }
  if (has_failed && (prev & sb::join_interest) == 0) {
    // Detached after all: nobody can take the exception.
    unhold_unobserved(task);
    report_detached_exception(task);
  }
  if (last) {
    count_completion(w);
    free_task(task);
    return;
  }
  // The task stops counting as alive after its detached exception is
  // reported, and before its join waiter is notified (a block_on that
  // returns sees it gone).
  count_completion(w);
  if ((prev & (sb::join_interest | sb::join_waker)) == (sb::join_interest | sb::join_waker)) {
    task->waiter->notify(task->waiter);
  }
  drop_reference(task);
}

void scheduler::count_completion(worker* w) noexcept {
  if (w != nullptr) {
    w->counters.completed.add();
  } else {
    remote_completed_.fetch_add(1, std::memory_order_release);
  }
}

void scheduler::drop_reference(task_header* task) noexcept {
  if (task_state::drop_ref(task)) free_task(task);
}

void scheduler::free_task(task_header* task) noexcept {
  // The state is not 0 (COMPLETE at least), so destroying the frame leaves
  // its block to us.
  if (auto root = task->frame()) root.destroy();
  // The frame's deallocation left the block's size where the frame was
  // (task_frame_deallocate).
  std::size_t bytes = *std::launder(reinterpret_cast<std::size_t const*>(task->frame_address()));
  task->~task_header();
  frame_deallocate(task, bytes);
}

void scheduler::report_detached_exception(task_header* task, char const* what) noexcept {
  detached_exceptions_.fetch_add(1, std::memory_order_relaxed);
  print_unjoined_exception(task, what);
}

void scheduler::hold_unobserved(task_header* task) noexcept {
  std::lock_guard lock(unobserved_lock());
  task->unobserved = true;
  owned_links::push_front(unobserved_, task);
}

void scheduler::unhold_unobserved(task_header* task) noexcept {
  std::lock_guard lock(unobserved_lock());
  owned_links::unlink(unobserved_, task);
  task->unobserved = false;
}

void scheduler::release_unobserved(task_header* task) noexcept {
  // The handle's owner, after seeing COMPLETE: the exception is still there
  // unless the handle took it (join_handle's await moves it out).
  bool const untaken = task->root_promise()->has_exception();
  std::lock_guard lock(unobserved_lock());
  task->unobserved = false;
  scheduler* sched = scheduler_of(task);
  if (sched == nullptr) {
    // Its runtime is gone (~scheduler cleared its id): nothing to count in.
    if (untaken) print_unjoined_exception(task, "join_handle dropped with an unobserved exception");
    return;
  }
  owned_links::unlink(sched->unobserved_, task);
  if (untaken)
    sched->report_detached_exception(task, "join_handle dropped with an unobserved exception");
}

// ---------------------------------------------------------------------------
// Shutdown

void scheduler::destroy_unfinished_tasks() noexcept {
  // Frames are destroyed in this runtime's context, so that a destructor that
  // spawns is refused (the gate is closed) instead of finding no runtime.
  thread_context& ctx = this_thread_context_here();
  thread_context saved = ctx;
  ctx = thread_context{this, nullptr, nullptr};
  while (task_header* task = owned_.pop_any()) {
    destroy_frame(task);
    task_state::mark_destroyed(task);
    drop_reference(task);
  }
  ctx = saved;
}

void scheduler::detach_unobserved() noexcept {
  // Failed tasks whose join handles are still out: their handles must not
  // reach this scheduler any more.
  std::lock_guard lock(unobserved_lock());
  while (task_header* task = unobserved_) {
    owned_links::unlink(unobserved_, task);
    task->state.fetch_and(~sb::runtime_mask, std::memory_order_relaxed);
  }
}

}  // namespace spindle::detail
