// Task state transitions called by awaiters and join handles, and the glue
// between the public templates and the scheduler.
#include <cstdio>
#include <exception>

#include "scheduler.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/runtime.hpp"
#include "task_state.hpp"

namespace spindle::detail {

namespace sb = state_bits;

namespace {
// The hook of a suspension whose awaiter cannot withdraw: abort waits for
// the wake and destroys the frame then.
bool never_detached(void* /*arg*/) noexcept {
  return false;
}
}  // namespace

// Not inlined on purpose: awaiters call these from coroutine bodies, which may
// resume on another thread; the thread_local must be looked up afresh.
[[gnu::noinline]] task_header* suspend_current(std::coroutine_handle<> resume_at) noexcept {
  task_header* task = this_thread_context().current;
  if (task != nullptr) {
    task->resume_point = resume_at;
    task->cancel_fn = &never_detached;
    task->cancel_arg = nullptr;
  }
  return task;
}

[[gnu::noinline]] void yield_current() noexcept {
  this_thread_context().yielded = true;
}

bool take_sync_io_budget() noexcept {
  thread_context& ctx = this_thread_context();
  if (ctx.sync_io_budget == 0) return false;
  --ctx.sync_io_budget;
  return true;
}

[[gnu::noinline]] task_header* current_task() noexcept {
  return this_thread_context().current;
}

[[gnu::noinline]] scheduler* current_scheduler() noexcept {
  return this_thread_context().sched;
}

[[gnu::noinline]] std::size_t current_worker_index() noexcept {
  worker* w = this_thread_context().self;
  return w != nullptr ? w->index : not_a_worker;
}

void wake(task_header* task) noexcept {
  if (task_state::mark_woken(task)) task->sched->schedule(task);
}

bool run_inline(task_header* task) noexcept {
  thread_context& ctx = this_thread_context();
  if (ctx.self == nullptr || ctx.sched != task->sched) return false;
  return ctx.sched->poll_inline(ctx.self, task);
}

bool join_register(task_header* task, join_waiter* waiter) noexcept {
  task->waiter = waiter;
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::complete) != 0) return false;
    if (task->state.compare_exchange_weak(s, s | sb::join_waker, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return true;
    }
  }
}

bool join_unregister(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::complete) != 0 || (s & sb::join_waker) == 0) return false;
    if (task->state.compare_exchange_weak(s, s & ~sb::join_waker, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return true;
    }
  }
}

void join_detach(task_header* task) noexcept {
  constexpr std::uint64_t join_bits = sb::join_interest | sb::join_waker;
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  if ((s & sb::complete) == 0) {
    // Not finished (a handle dropped at once: a detached spawn): clear the
    // join bits and drop the handle's reference. The scheduler's reference
    // remains until the task completes, so this one is never the last, and
    // completion reports an exception nobody can take any more.
    if (worker* w = this_thread_context().self;
        w != nullptr && w->lifo_slot == task && !task->listed) {
      // Spawned by this worker and never polled: nobody else can reach the
      // task yet (a LIFO slot is not stolen, nothing can wake or abort a
      // task that never ran but through this handle, the only one, and a
      // stop_token's callback is registered by the task's first poll), so a
      // plain store does it. A task is listed by the end of its first poll
      // that does not complete it (scheduler::poll_held), so a task woken
      // into the LIFO slot, which a waker, a timer, I/O or an abort from
      // another thread can reach, always takes the CAS below.
      task->state.store((s & ~join_bits) - sb::ref_one, std::memory_order_relaxed);
      return;
    }
    do {
      if (task->state.compare_exchange_weak(s, (s & ~join_bits) - sb::ref_one,
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
        return;
      }
    } while ((s & sb::complete) == 0);
  }
  // Finished: nothing races for the join bits any more.
  if (task->unobserved) {
    // It finished with an exception: if nobody took it, do not lose it
    // silently (printed, and counted in runtime_stats::detached_exceptions
    // while its runtime exists).
    scheduler::release_unobserved(task);
  }
  // Clearing the join bits and dropping the handle's reference: one RMW.
  while (!task->state.compare_exchange_weak(s, (s & ~join_bits) - sb::ref_one,
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
  }
  if (s / sb::ref_one == 1) scheduler::free_task(task);
}

void task_abort(task_header* task) noexcept {
  // A finished task (every task once its runtime is gone) needs nothing, and
  // its scheduler may no longer exist.
  if ((task->state.load(std::memory_order_acquire) & (sb::complete | sb::cancelled)) != 0) return;
  task->sched->abort(task);
}

abort_here_result task_abort_here(task_header* task) noexcept {
  if (task_is_complete(task)) return abort_here_result::gone;
  return task->sched->abort_here(task);
}

task_header* spawn_root(scheduler* sched, std::coroutine_handle<> root, promise_base* promise) {
  return sched->spawn(root, promise);
}

void check_block_on_allowed(scheduler* sched) {
  sched->check_block_on_allowed();
}

void block_until_complete(scheduler* sched, task_header* task) {
  sched->block_until_complete(task);
}

driver& scheduler_driver(scheduler* sched) noexcept {
  return sched->io_driver();
}

std::size_t scheduler_worker_count(scheduler* sched) noexcept {
  return sched->worker_count();
}

void unpark_worker(scheduler* sched, std::size_t index) noexcept {
  sched->unpark(index);
}

void count_io_completions(scheduler* sched, std::size_t index, std::size_t n) noexcept {
  sched->count_io(index, n);
}

}  // namespace spindle::detail
