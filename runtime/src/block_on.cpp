// runtime::block_on's machinery: a thread outside the workers waits for a
// task, running queued tasks itself while every worker is busy. See
// block_on.hpp.
#include "block_on.hpp"

#include <system_error>

#include "futex.hpp"
#include "scheduler.hpp"

namespace spindle::detail {

void block_on_sleepers::add(block_on_waiter* w) noexcept {
  {
    std::lock_guard lock(mutex_);
    w->next_sleeper = head_;
    head_ = w;
  }
  count_.fetch_add(1, std::memory_order_seq_cst);
}

void block_on_sleepers::remove(block_on_waiter* w) noexcept {
  count_.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  for (block_on_waiter** link = &head_; *link != nullptr; link = &(*link)->next_sleeper) {
    if (*link == w) {
      *link = w->next_sleeper;
      break;
    }
  }
}

void block_on_sleepers::kick_one() noexcept {
  std::lock_guard lock(mutex_);
  for (block_on_waiter* w = head_; w != nullptr; w = w->next_sleeper) {
    std::uint32_t expected = 0;
    if (w->word.compare_exchange_strong(expected, 2, std::memory_order_acq_rel)) {
      futex_wake(&w->word);
      return;
    }
  }
}

namespace {
void block_on_complete(join_waiter* self) noexcept {
  auto* me = static_cast<block_on_waiter*>(self);
  me->word.store(1, std::memory_order_release);
  futex_wake(&me->word);
}
}  // namespace

void scheduler::remote_push_unnoticed() noexcept {
  // Nobody to wake: if every worker is busy, a block_on thread that sleeps
  // may have to run this task (it may be the very task it waits for).
  // No fence of its own: the push is already ordered before the read of
  // the sleepers, against a sleeper's registration (a seq_cst RMW, then a
  // seq_cst fence, then its look at the queues). A global push is followed
  // by notify_should_wakeup's fence; an inbox push raises the inbox's
  // length with a seq_cst RMW, and any() is a seq_cst load.
  if (block_on_sleepers_.any() && core_.every_worker_busy()) block_on_sleepers_.kick_one();
}

void scheduler::check_block_on_allowed() const {
  thread_context& ctx = this_thread_context();
  if (ctx.self != nullptr && ctx.sched == this) {
    throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                            "spindle: block_on called from a worker of the same runtime");
  }
}

void scheduler::block_until_complete(task_header* task) {
  check_block_on_allowed();
  thread_context& ctx = this_thread_context();
  thread_context saved = ctx;
  ctx = thread_context{this, nullptr, nullptr};
  block_on_waiter waiter;
  waiter.notify = &block_on_complete;
  if (join_register(task, &waiter)) {
    // Block-on-complete: while every worker is busy (none searching, none
    // parked) and the global queue holds work, run it inline so that the
    // task makes progress even when no worker is free. Otherwise sleep until
    // the task completes or a push finds every worker busy (kick): tasks run
    // inline here cannot use a worker's LIFO slot and ring, so helping while
    // a worker is idle would only slow them down.
    auto may_help = [this] { return core_.remote_work_pending() && core_.every_worker_busy(); };
    for (;;) {
      std::uint32_t word = waiter.word.load(std::memory_order_acquire);
      if (word == 1) break;
      if (word == 2) {
        std::uint32_t kicked = 2;
        waiter.word.compare_exchange_strong(kicked, 0, std::memory_order_acq_rel);
        continue;
      }
      if (may_help()) {
        if (task_header* queued = core_.take_remote()) {
          run_task(nullptr, queued);
          continue;
        }
      }
      // Register as a sleeper, then look again (a push after this point
      // sees us and kicks), then sleep.
      block_on_sleepers_.add(&waiter);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!may_help()) futex_wait(&waiter.word, 0);
      block_on_sleepers_.remove(&waiter);
    }
  }
  ctx = saved;
}

// The calls the public templates make (runtime.hpp).

void check_block_on_allowed(scheduler* sched) {
  sched->check_block_on_allowed();
}

void block_until_complete(scheduler* sched, task_header* task) {
  sched->block_until_complete(task);
}

}  // namespace spindle::detail
