// The scheduler: spawn, schedule, the worker loop, park, shutdown, stats.
#include "scheduler.hpp"

#include "task_state.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <latch>
#include <mutex>
#include <new>
#include <string_view>
#include <system_error>

namespace spindle::detail {

namespace sb = state_bits;

[[gnu::noinline]] thread_context& this_thread_context() noexcept {
  // initial-exec: one %fs-relative load instead of a __tls_get_addr call
  // (libspindle is a shared library linked at start-up, not dlopen'ed late;
  // its TLS is a few hundred bytes of the static TLS block).
  [[gnu::tls_model("initial-exec")]] thread_local thread_context ctx;
  return ctx;
}

namespace {

std::size_t resolve_workers(std::size_t requested) {
  // A task header keeps its owned-task shard (one per worker, one more for
  // spawns from elsewhere) in 16 bits.
  if (requested > max_workers) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: runtime_config::workers must be at most 65535");
  }
  if (requested != 0) return requested;
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : hc;
}

void pin_to_cpu(std::size_t index) noexcept {
  long ncpu = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu <= 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<int>(index % static_cast<std::size_t>(ncpu)), &set);
  ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set);  // best effort
}

void futex_wait_u32(std::atomic<std::uint32_t>* word, std::uint32_t expected) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
            nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX,
            nullptr, nullptr, 0);
}

// The address below which the calling thread's stack is more than half used
// (stacks grow down), or 0 when the stack's bounds cannot be read.
std::uintptr_t half_stack_mark() noexcept {
  pthread_attr_t attr;
  if (::pthread_getattr_np(::pthread_self(), &attr) != 0) return 0;
  void* low = nullptr;
  std::size_t size = 0;
  int rc = ::pthread_attr_getstack(&attr, &low, &size);
  ::pthread_attr_destroy(&attr);
  if (rc != 0 || low == nullptr || size == 0) return 0;
  return reinterpret_cast<std::uintptr_t>(low) + size / 2;
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// runtime_config's idle tiers, or SPINDLE_IDLE=spins,yields.
idle_tiers idle_tiers_of(runtime_config const& config) noexcept {
  idle_tiers t{config.idle_spins, config.idle_yields};
  if (char const* env = std::getenv("SPINDLE_IDLE"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    unsigned long spins = std::strtoul(env, &end, 10);
    unsigned long yields = *end == ',' ? std::strtoul(end + 1, nullptr, 10) : 0;
    t.spins = static_cast<std::uint32_t>(std::min(spins, 1'000'000UL));
    t.yields = static_cast<std::uint32_t>(std::min(yields, 1'000'000UL));
  }
  return t;
}

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

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

void unlink_unobserved(task_header*& head, task_header* task) noexcept {
  if (task->owned_prev != nullptr) {
    task->owned_prev->owned_next = task->owned_next;
  } else {
    head = task->owned_next;
  }
  if (task->owned_next != nullptr) task->owned_next->owned_prev = task->owned_prev;
  task->owned_prev = task->owned_next = nullptr;
}
}  // namespace

// ---------------------------------------------------------------------------
// Construction and shutdown

scheduler::scheduler(runtime_config const& config)
    : config_(config),
      epoch_(std::chrono::steady_clock::now()),
      core_(*this, resolve_workers(config.workers), config.budget, config.seed,
            idle_tiers_of(config)),
      owned_(resolve_workers(config.workers) + 1),
      blocking_(*this, config.max_blocking_threads, config.blocking_keep_alive) {
  config_.workers = resolve_workers(config.workers);
  config_.budget = core_.budget();
  idle_tiers const tiers = idle_tiers_of(config);
  config_.idle_spins = tiers.spins;
  config_.idle_yields = tiers.yields;
  // SPINDLE_CACHED_READS=0 turns the cached-read path off (for comparing
  // the I/O drivers themselves with an unchanged program).
  if (char const* env = std::getenv("SPINDLE_CACHED_READS");
      env != nullptr && std::string_view(env) == "0") {
    config_.try_cached_reads = false;
  }
  sync_io_per_poll_ = config_.try_cached_reads ? sync_io_per_poll : 0;
  std::size_t n = config_.workers;
  driver_ = make_driver(*this, config_, n);

  std::latch started(static_cast<std::ptrdiff_t>(n));
  std::vector<std::exception_ptr> errors(n);
  std::size_t launched = 0;
  std::exception_ptr launch_error;
  try {
    for (; launched < n; ++launched) {
      worker* w = core_.workers[launched].get();
      w->thread = std::thread([this, w, &started, &errors] {
        try {
          driver_->on_worker_start(w->index);
        } catch (...) {
          errors[w->index] = std::current_exception();
        }
        bool ok = errors[w->index] == nullptr;
        started.count_down();
        if (ok) run_worker(w);
      });
    }
  } catch (std::system_error const&) {
    launch_error = std::current_exception();
    for (std::size_t i = launched; i < n; ++i)
      started.count_down();
  }
  started.wait();
  std::exception_ptr first = launch_error;
  for (auto& e : errors) {
    if (first == nullptr && e != nullptr) first = e;
  }
  if (first != nullptr) {
    shutdown_.store(true, std::memory_order_release);
    for (std::size_t i = 0; i < launched; ++i)
      core_.workers[i]->park.unpark(*driver_, i);
    for (std::size_t i = 0; i < launched; ++i)
      core_.workers[i]->thread.join();
    driver_->shutdown();
    if (launch_error != nullptr) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "spindle: cannot start worker threads");
    }
    std::rethrow_exception(first);
  }
}

scheduler::~scheduler() {
  // Blocking jobs: the queued ones are dropped before the gate closes (a job
  // that sees spawns refused knows that nothing queued behind it will run),
  // the running ones are waited for while the workers still run the tasks
  // they may wait for. Tasks suspended on them are destroyed below.
  blocking_.stop();
  owned_.close();
  blocking_.shutdown();
  shutdown_.store(true, std::memory_order_seq_cst);
  for (auto& w : core_.workers)
    w->park.unpark(*driver_, w->index);
  for (auto& w : core_.workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  // Every worker cancelled and reaped its I/O; the driver now waits for any
  // operation still running elsewhere (thread pool) before frames go away.
  driver_->shutdown();
  drain_queues();
  // Frames are destroyed in this runtime's context, so that a destructor that
  // spawns is refused (the gate is closed) instead of finding no runtime.
  thread_context& ctx = this_thread_context();
  thread_context saved = ctx;
  ctx = thread_context{this, nullptr, nullptr};
  while (task_header* task = owned_.pop_any()) {
    destroy_frame(task);
    // Completed without notifying its join waiter: clearing JOIN_WAKER tells
    // a waiter that polls the state (detail::child_set::close) that no
    // notify will come.
    std::uint64_t s = task->state.load(std::memory_order_relaxed);
    while (!task->state.compare_exchange_weak(
        s,
        (s & ~(sb::scheduled | sb::running | sb::notified | sb::join_waker)) | sb::complete |
            sb::cancelled,
        std::memory_order_acq_rel)) {
    }
    drop_reference(task);
  }
  ctx = saved;
  // Failed tasks whose join handles are still out: their handles must not
  // reach this scheduler any more.
  std::lock_guard lock(unobserved_lock());
  while (task_header* task = unobserved_) {
    unlink_unobserved(unobserved_, task);
    task->sched = nullptr;
  }
}

void scheduler::drain_queues() noexcept {
  // The workers have stopped: empty every queue. A task that was claimed by
  // poll_inline has one stale entry holding a reference, which nobody pops
  // any more; a completed task's header would leak with it. A live entry's
  // task is linked into an owned list if it is not listed yet (spawned on a
  // worker and never suspended), so that the caller destroys it with the rest.
  std::size_t const shard = core_.workers.size();
  auto consume = [this, shard](task_header* task) {
    if (!release_if_stale(task) && !task->listed) owned_.link(task, shard);
  };
  for (auto& w : core_.workers) {
    if (task_header* t = std::exchange(w->lifo_slot, nullptr)) consume(t);
    while (w->batch_head != w->batch_len)
      consume(w->batch[w->batch_head++]);
    while (task_header* t = w->queue.pop())
      consume(t);
  }
  while (task_header* t = core_.inject.pop())
    consume(t);
}

// ---------------------------------------------------------------------------
// Spawning and scheduling

task_header* scheduler::spawn(std::coroutine_handle<> root, promise_base* promise) {
  // The header is already there, in front of the frame (task_frame_allocate).
  task_header* task = task_header::of_frame(root.address());
  task->resume_point = root;
  // The promise follows the frame's resume and destroy pointers (16 bytes,
  // or its alignment): far below 256.
  std::ptrdiff_t const promise_offset = reinterpret_cast<char*>(promise) - task->frame_address();
  assert(promise_offset >= 0 && promise_offset < 256);
  task->promise_offset = static_cast<std::uint8_t>(promise_offset);
  task->sched = this;
  thread_context& ctx = this_thread_context();
  worker* w = ctx.sched == this ? ctx.self : nullptr;

  // A worker's spawn lists nothing (owned_tasks.hpp: the task is reached
  // through its queue until it first suspends); a spawn from elsewhere is
  // listed at once, under the gate's lock.
  if (w != nullptr ? owned_.closed() : !owned_.insert(task, core_.workers.size())) {
    // Refused atomically: the caller gets a handle to a cancelled task. The
    // state goes first: it makes the block the header's, so destroying the
    // frame leaves the block to the handle.
    task->state.store(sb::complete | sb::cancelled | sb::join_interest | sb::ref_one,
                      std::memory_order_release);
    task->cancelled_before_finish = true;
    root.destroy();
    return task;
  }
  task->state.store(sb::scheduled | sb::join_interest | 2 * sb::ref_one, std::memory_order_relaxed);
  if (w != nullptr) {
    w->counters.spawned.add();
    core_.schedule_local(w, task, false);
  } else {
    remote_spawned_.fetch_add(1, std::memory_order_release);
    core_.push_remote(task);
  }
  return task;
}

void scheduler::schedule(task_header* task) noexcept {
  // Shutting down: every unfinished task is about to be destroyed from the
  // owned lists, and frame destructors wake others (a dropped oneshot sender
  // wakes its receiver). Queueing them would leave queue links into headers
  // that are freed next (found by the stress test that shuts down in the
  // middle of random trees: a later push wrote through a freed header).
  if (shutdown_.load(std::memory_order_acquire)) return;
  thread_context& ctx = this_thread_context();
  if (ctx.self != nullptr && ctx.sched == this) {
    core_.schedule_local(ctx.self, task, false);
  } else {
    core_.push_remote(task);
  }
}

void scheduler::kick_block_on_sleeper() noexcept {
  std::lock_guard lock(block_on_mutex_);
  for (block_on_waiter* w = block_on_sleeping_; w != nullptr; w = w->next_sleeper) {
    std::uint32_t expected = 0;
    if (w->word.compare_exchange_strong(expected, 2, std::memory_order_acq_rel)) {
      futex_wake_all(&w->word);
      return;
    }
  }
}

void scheduler::unpark(std::size_t index) noexcept {
  core_.workers[index]->park.unpark(*driver_, index);
}

void scheduler::unpark_worker(std::size_t index) noexcept {
  unpark(index);
}

void scheduler::remote_push_unnoticed() noexcept {
  // Nobody to wake: if every worker is busy, a block_on thread that sleeps
  // may have to run this task (it may be the very task it waits for).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (block_on_sleepers_.load(std::memory_order_relaxed) != 0 && core_.every_worker_busy()) {
    kick_block_on_sleeper();
  }
}

// ---------------------------------------------------------------------------
// The worker loop

void scheduler::run_worker(worker* w) {
  thread_context& ctx = this_thread_context();
  ctx.sched = this;
  ctx.self = w;
  if (config_.pin_threads) pin_to_cpu(w->index);
  w->inline_stack_limit = half_stack_mark();

  while (!shutdown_.load(std::memory_order_acquire)) {
    std::uint64_t start = now_ns();
    // run_task counts each poll in tick_polls, and so do the polls that
    // tasks run inline while awaiting a join handle (poll_inline).
    w->tick_polls = 0;
    while (w->tick_polls < config_.budget) {
      task_header* task = core_.next_task(w);
      if (task == nullptr) break;
      core_.transition_from_searching(w);
      run_task(w, task);
      if (shutdown_.load(std::memory_order_relaxed)) break;
    }
    std::uint32_t polls = w->tick_polls;
    core_.end_tick(w, polls, polls != 0 ? now_ns() - start : 0);
    // Tick end: submit this tick's I/O and reap completions (their tasks go
    // to this worker's LIFO slot and ring).
    std::size_t reaped = driver_->poll(w->index);
    if (reaped != 0) w->counters.io_completions.add(reaped);
    // Then the timers that came due (their tasks go to this worker's queues).
    std::size_t fired = fire_timers(w);
    switch (core_.after_tick(w, polls != 0 || reaped != 0 || fired != 0)) {
      case scheduler_core::idle_step::run:
        break;
      case scheduler_core::idle_step::spin:
        for (std::uint32_t i = 0; i < worker::idle_spin_pauses; ++i)
          cpu_relax();
        break;
      case scheduler_core::idle_step::yield:
        ::sched_yield();
        break;
      case scheduler_core::idle_step::park:
        park_worker(w);
        break;
    }
  }
  if (w->is_searching) {
    w->is_searching = false;
    core_.idle.transition_worker_from_searching();
  }
  driver_->on_worker_stop(w->index);
  ctx = thread_context{};
}

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
  bool from_lifo = w->lifo_slot == task;
  std::uint64_t next = 0;
  if (!task_state::claim_for_inline(task, from_lifo, next)) return false;
  if (from_lifo) w->lifo_slot = nullptr;
  w->counters.inline_polls.add();
  ++w->inline_depth;
  poll_held(w, task, next);
  --w->inline_depth;
  return task_is_complete(task);
}

void scheduler::poll_held(worker* w, task_header* task, std::uint64_t s) noexcept {
  if ((s & sb::cancelled) != 0) {
    cancel_task(task, w);
    return;
  }
  thread_context& ctx = this_thread_context();
  task_header* outer = ctx.current;  // the awaiting task when polled inline
  std::uint32_t const outer_budget = ctx.sync_io_budget;
  ctx.current = task;
  ctx.sync_io_budget = sync_io_per_poll_;
  task->cancel_fn = nullptr;  // until an awaiter says how to withdraw
  task->resume_point.resume();
  ctx.current = outer;
  ctx.sync_io_budget = outer_budget;
  bool const yielded = std::exchange(ctx.yielded, false);
  if (w != nullptr) {
    w->counters.polled.add();
    ++w->tick_polls;
  }

  if (task->frame().done()) {
    complete(task, w);
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
        core_.schedule_local(w, task, true);
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
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & (sb::complete | sb::cancelled)) != 0) return;
    if ((s & (sb::scheduled | sb::running)) != 0) {
      // Queued: its next poll destroys it. Running: the poll's end does.
      if (task->state.compare_exchange_weak(s, s | sb::cancelled, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        return;
      }
      continue;
    }
    // Suspended: take it as if to poll it (RUNNING), so that nobody resumes
    // or destroys it while its awaiter withdraws.
    if (task->state.compare_exchange_weak(s, s | sb::cancelled | sb::running,
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      cancel_owned(task, nullptr);
      return;
    }
  }
}

abort_here_result scheduler::abort_here(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::complete) != 0) return abort_here_result::gone;
    if ((s & sb::running) != 0) {
      // Polled on another thread (its poll's end destroys it), or held for
      // a moment by another abort: mark it, the caller retries.
      if ((s & sb::cancelled) != 0 ||
          task->state.compare_exchange_weak(s, s | sb::cancelled, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        return abort_here_result::running;
      }
      continue;
    }
    if ((s & (sb::scheduled | sb::cancelled)) == sb::cancelled) {
      // Suspended, and an earlier abort's hook said its wake is still coming.
      return abort_here_result::pending;
    }
    // Queued or suspended: hold it (RUNNING) so that nobody polls, resumes or
    // destroys it meanwhile.
    if (task->state.compare_exchange_weak(s, s | sb::cancelled | sb::running,
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      break;
    }
  }
  if ((s & sb::scheduled) != 0) {
    // Queued: destroy the frame now; the queue entry stays, and the poll that
    // pops it finds CANCELLED and no frame and completes the task. If that
    // poll came while we held the task, it handed the entry back by clearing
    // SCHEDULED: then we complete it.
    destroy_frame(task);
    s = task->state.load(std::memory_order_acquire);
    for (;;) {
      if ((s & sb::scheduled) == 0) {
        complete(task, nullptr);
        return abort_here_result::gone;
      }
      if (task->state.compare_exchange_weak(s, s & ~(sb::running | sb::notified),
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
        return abort_here_result::gone;
      }
    }
  }
  // Suspended: withdraw it from its waker, as abort() does.
  bool (*fn)(void*) noexcept = task->cancel_fn;
  if (fn != nullptr && !fn(task->cancel_arg)) {
    // Its wake is still coming. If it came while we held the task (NOTIFIED),
    // nothing else will wake it: finish here. Else leave it to that wake.
    s = task->state.load(std::memory_order_acquire);
    for (;;) {
      if ((s & sb::notified) != 0) break;
      if (task->state.compare_exchange_weak(s, s & ~sb::running, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        return abort_here_result::pending;
      }
    }
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
  bool (*fn)(void*) noexcept = task->cancel_fn;
  bool detached = fn == nullptr || fn(task->cancel_arg);
  if (detached && w != nullptr) {
    cancel_task(task, w);  // on a worker: destroy the frame now
    return;
  }
  // Release the task: queue it (detached, or woken meanwhile) so that a
  // worker's poll destroys the frame, or leave it for the pending wake.
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  std::uint64_t next;
  bool push = false;
  do {
    next = s & ~(sb::running | sb::notified);
    push = false;
    if (detached || (s & sb::notified) != 0) next = sb::mark_scheduled(next, push);
  } while (!task->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                              std::memory_order_acquire));
  if (push) schedule(task);
}

void scheduler::complete(task_header* task, worker* w) noexcept {
  // The caller holds the task (RUNNING): unlink it while nobody else can.
  if (task->listed) owned_.remove(task);
  // Failed: held where a join handle dropped later finds it (rare path).
  bool const failed = !task->cancelled_before_finish && task->root_promise()->has_exception();
  if (failed) hold_unobserved(task);
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
  if (failed && (prev & sb::join_interest) == 0) {
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
  std::uint64_t prev = task->state.fetch_sub(sb::ref_one, std::memory_order_acq_rel);
  if (prev / sb::ref_one != 1) return;
  free_task(task);
}

void scheduler::free_task(task_header* task) noexcept {
  // The state is not 0 (COMPLETE at least), so destroying the frame leaves
  // its block to us.
  if (auto root = task->frame()) root.destroy();
  std::size_t bytes = task->block_bytes;
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
  task->owned_prev = nullptr;
  task->owned_next = unobserved_;
  if (unobserved_ != nullptr) unobserved_->owned_prev = task;
  unobserved_ = task;
}

void scheduler::unhold_unobserved(task_header* task) noexcept {
  std::lock_guard lock(unobserved_lock());
  unlink_unobserved(unobserved_, task);
  task->unobserved = false;
}

void scheduler::release_unobserved(task_header* task) noexcept {
  // The handle's owner, after seeing COMPLETE: the exception is still there
  // unless the handle took it (join_handle's await moves it out).
  bool const untaken = task->root_promise()->has_exception();
  std::lock_guard lock(unobserved_lock());
  task->unobserved = false;
  scheduler* sched = task->sched;
  if (sched == nullptr) {
    // Its runtime is gone (~scheduler cleared `sched`): nothing to count in.
    if (untaken) print_unjoined_exception(task, "join_handle dropped with an unobserved exception");
    return;
  }
  unlink_unobserved(sched->unobserved_, task);
  if (untaken)
    sched->report_detached_exception(task, "join_handle dropped with an unobserved exception");
}

// ---------------------------------------------------------------------------
// Parking

void scheduler::park_worker(worker* w) noexcept {
  if (!core_.begin_park(w)) return;
  while (!shutdown_.load(std::memory_order_acquire)) {
    // Sleep until the next timer of this worker's wheel at the latest; a
    // timer armed from another thread meanwhile unparks us to re-read it.
    std::uint64_t deadline = timer_deadline_ns(w);
    if (driver_->park_in_driver(w->index)) {
      w->park.park_in_driver(*driver_, w->index, deadline);
    } else {
      w->park.park(deadline);
    }
    core_.begin_wakeup(w);
    std::size_t reaped = driver_->poll(w->index);
    if (reaped != 0) w->counters.io_completions.add(reaped);
    fire_timers(w);
    if (core_.finish_wakeup(w)) return;
  }
  core_.end_park(w);  // shutting down
}

// ---------------------------------------------------------------------------
// block_on

namespace {
void block_on_complete(join_waiter* self) noexcept {
  auto* me = static_cast<block_on_waiter*>(self);
  me->word.store(1, std::memory_order_release);
  futex_wake_all(&me->word);
}
}  // namespace

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
    for (;;) {
      std::uint32_t word = waiter.word.load(std::memory_order_acquire);
      if (word == 1) break;
      if (word == 2) {
        std::uint32_t kicked = 2;
        waiter.word.compare_exchange_strong(kicked, 0, std::memory_order_acq_rel);
        continue;
      }
      if (!core_.inject.is_empty() && core_.every_worker_busy()) {
        if (task_header* queued = core_.inject.pop()) {
          run_task(nullptr, queued);
          continue;
        }
      }
      // Register as a sleeper, then look again (a push after this point
      // sees us and kicks), then sleep.
      {
        std::lock_guard lock(block_on_mutex_);
        waiter.next_sleeper = block_on_sleeping_;
        block_on_sleeping_ = &waiter;
      }
      block_on_sleepers_.fetch_add(1, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!(!core_.inject.is_empty() && core_.every_worker_busy())) futex_wait_u32(&waiter.word, 0);
      block_on_sleepers_.fetch_sub(1, std::memory_order_relaxed);
      std::lock_guard lock(block_on_mutex_);
      for (block_on_waiter** link = &block_on_sleeping_; *link != nullptr;
           link = &(*link)->next_sleeper) {
        if (*link == &waiter) {
          *link = waiter.next_sleeper;
          break;
        }
      }
    }
  }
  ctx = saved;
}

// ---------------------------------------------------------------------------
// Stats

runtime_stats scheduler::stats() const {
  runtime_stats out;
  out.workers.reserve(core_.workers.size());
  for (auto const& w : core_.workers) {
    worker_stats s = w->counters.snapshot();
    out.total_spawned += s.spawned;
    out.total_polled += s.polled;
    out.total_stolen += s.stolen;
    out.total_parked += s.parked;
    out.lifo_hits += s.lifo_hits;
    out.global_batch_fetches += s.global_batch_fetches;
    out.timers_fired += s.timers_fired;
    out.inline_polls += s.inline_polls;
    out.workers.push_back(s);
  }
  out.total_spawned += remote_spawned_.load(std::memory_order_relaxed);
  out.detached_exceptions = detached_exceptions_.load(std::memory_order_relaxed);
  // Completions first (acquire): a completion seen implies its spawn seen,
  // so the difference never goes below the truth.
  std::uint64_t completed = remote_completed_.load(std::memory_order_acquire);
  for (auto const& w : core_.workers)
    completed += w->counters.completed.get();
  std::uint64_t spawned = remote_spawned_.load(std::memory_order_acquire);
  for (auto const& w : core_.workers)
    spawned += w->counters.spawned.get();
  out.tasks_alive = spawned > completed ? spawned - completed : 0;
  blocking_pool_stats const b = blocking_.stats();
  out.blocking_threads = b.threads;
  out.blocking_idle_threads = b.idle;
  out.blocking_queue_depth = b.queue_depth;
  out.blocking_jobs = b.completed;
  return out;
}

}  // namespace spindle::detail
