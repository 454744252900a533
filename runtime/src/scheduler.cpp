// The scheduler: spawn, schedule, the worker loop, park, shutdown, stats.
#include "scheduler.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <latch>
#include <mutex>
#include <new>
#include <system_error>

namespace spindle::detail {

namespace sb = state_bits;

[[gnu::noinline]] thread_context& this_thread_context() noexcept {
  thread_local thread_context ctx;
  return ctx;
}

namespace {

std::size_t resolve_workers(std::size_t requested) noexcept {
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

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

// ---------------------------------------------------------------------------
// Construction and shutdown

scheduler::scheduler(runtime_config const& config)
    : config_(config),
      idle_(resolve_workers(config.workers)),
      owned_(resolve_workers(config.workers) + 1) {
  config_.workers = resolve_workers(config.workers);
  if (config_.budget == 0) config_.budget = 1;
  std::size_t n = config_.workers;
  workers_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    workers_.push_back(
        std::make_unique<worker>(this, i, config_.seed + 0x9e3779b97f4a7c15ULL * (i + 1)));
  }
  driver_ = make_driver(*this, config_, n);

  std::latch started(static_cast<std::ptrdiff_t>(n));
  std::vector<std::exception_ptr> errors(n);
  std::size_t launched = 0;
  std::exception_ptr launch_error;
  try {
    for (; launched < n; ++launched) {
      worker* w = workers_[launched].get();
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
      workers_[i]->park.unpark(*driver_, i);
    for (std::size_t i = 0; i < launched; ++i)
      workers_[i]->thread.join();
    driver_->shutdown();
    if (launch_error != nullptr) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "spindle: cannot start worker threads");
    }
    std::rethrow_exception(first);
  }
}

scheduler::~scheduler() {
  if (lifecycle_.close()) observe_termination();
  shutdown_.store(true, std::memory_order_seq_cst);
  for (auto& w : workers_)
    w->park.unpark(*driver_, w->index);
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
  // Every worker cancelled and reaped its I/O; the driver now waits for any
  // operation still running elsewhere (thread pool) before frames go away.
  driver_->shutdown();
  // Frames are destroyed in this runtime's context, so that a destructor that
  // spawns is refused (the gate is closed) instead of finding no runtime.
  thread_context& ctx = this_thread_context();
  thread_context saved = ctx;
  ctx = thread_context{this, nullptr, nullptr};
  while (task_header* task = owned_.pop_any()) {
    if (task->root) {
      auto root = std::exchange(task->root, {});
      task->cancelled_before_finish = true;
      root.destroy();
    }
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
    if (lifecycle_.complete_one()) observe_termination();
    drop_reference(task);
  }
  ctx = saved;
}

void scheduler::observe_termination() noexcept {
  terminations_.fetch_add(1, std::memory_order_acq_rel);
}

// ---------------------------------------------------------------------------
// Spawning and scheduling

task_header* scheduler::spawn(std::coroutine_handle<> root, promise_base* promise) {
  void* mem = frame_allocate(sizeof(task_header));
  auto* task = ::new (mem) task_header;
  task->root = root;
  task->resume_point = root;
  task->promise = promise;
  task->sched = this;
  thread_context& ctx = this_thread_context();
  worker* w = ctx.sched == this ? ctx.self : nullptr;

  if (!lifecycle_.try_increment()) {
    // Refused atomically: the caller gets a handle to a cancelled task.
    task->root = {};
    task->cancelled_before_finish = true;
    root.destroy();
    task->state.store(sb::complete | sb::cancelled | sb::join_interest | sb::ref_one,
                      std::memory_order_release);
    return task;
  }
  task->state.store(sb::scheduled | sb::join_interest | 2 * sb::ref_one, std::memory_order_relaxed);
  owned_.insert(task, w != nullptr ? w->index : workers_.size());
  if (w != nullptr) {
    w->counters.spawned.add();
    schedule_local(w, task, false);
  } else {
    remote_spawned_.fetch_add(1, std::memory_order_relaxed);
    push_remote(task);
  }
  return task;
}

void scheduler::schedule(task_header* task) noexcept {
  thread_context& ctx = this_thread_context();
  if (ctx.self != nullptr && ctx.sched == this) {
    schedule_local(ctx.self, task, false);
  } else {
    push_remote(task);
  }
}

void scheduler::schedule_local(worker* w, task_header* task, bool is_yield) noexcept {
  if (w->transitioning_to_park.load(std::memory_order_relaxed)) {
    // The worker is on its way to sleep: a task in its LIFO slot could be
    // stranded, so it goes to the global queue, which wakes someone.
    push_remote(task);
    return;
  }
  task_header* to_ring = task;
  if (!is_yield) {
    to_ring = std::exchange(w->lifo_slot, task);
    if (to_ring == nullptr) {
      // Wake-on-hoard (seed 000): a worker that keeps scheduling locally
      // wakes a sibling now and then even when nothing reached its ring.
      if (++w->hoard >= worker::wake_on_hoard_threshold) {
        w->hoard = 0;
        notify_parked();
      }
      return;
    }
  }
  if (w->queue.push_back(to_ring, inject_)) w->counters.overflows.add();
  w->hoard = 0;
  notify_parked();
}

void scheduler::push_remote(task_header* task) noexcept {
  inject_.push(task);
  if (notify_parked()) return;
  // Nobody to wake: if every worker is busy, a block_on thread that sleeps
  // may have to run this task (it may be the very task it waits for).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (block_on_sleepers_.load(std::memory_order_relaxed) != 0 && every_worker_busy()) {
    kick_block_on_sleeper();
  }
}

bool scheduler::notify_parked() noexcept {
  std::size_t index = idle_.worker_to_notify();
  if (index == not_a_worker) return false;
  workers_[index]->park.unpark(*driver_, index);
  return true;
}

bool scheduler::every_worker_busy() const noexcept {
  return idle_.num_searching() == 0 && idle_.num_unparked() == workers_.size();
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

void scheduler::notify_if_work_pending() noexcept {
  for (auto& w : workers_) {
    if (!w->queue.is_empty()) {
      notify_parked();
      return;
    }
  }
  if (!inject_.is_empty()) notify_parked();
}

void scheduler::unpark(std::size_t index) noexcept {
  workers_[index]->park.unpark(*driver_, index);
}

// ---------------------------------------------------------------------------
// The worker loop

void scheduler::run_worker(worker* w) {
  thread_context& ctx = this_thread_context();
  ctx.sched = this;
  ctx.self = w;
  if (config_.pin_threads) pin_to_cpu(w->index);

  while (!shutdown_.load(std::memory_order_acquire)) {
    std::uint64_t start = now_ns();
    std::uint32_t polls = 0;
    while (polls < config_.budget) {
      task_header* task = next_task(w);
      if (task == nullptr) break;
      transition_from_searching(w);
      run_task(w, task);
      ++polls;
      if (shutdown_.load(std::memory_order_relaxed)) break;
    }
    if (polls != 0) end_tick(w, polls, now_ns() - start);
    w->lifo_polls_this_tick = 0;
    // Tick end: submit this tick's I/O and reap completions (their tasks go
    // to this worker's LIFO slot and ring).
    std::size_t reaped = driver_->poll(w->index);
    if (reaped != 0) w->counters.io_completions.add(reaped);
    if (polls == 0 && reaped == 0 && !w->has_local_tasks()) park_worker(w);
  }
  if (w->is_searching) {
    w->is_searching = false;
    idle_.transition_worker_from_searching();
  }
  driver_->on_worker_stop(w->index);
  ctx = thread_context{};
}

void scheduler::end_tick(worker* w, std::uint32_t polls, std::uint64_t elapsed_ns) noexcept {
  // EWMA of the time per poll; the global queue is checked every
  // clamp(1 ms / avg, 8, 255) polls (Volt's adaptive interval).
  double per_poll = static_cast<double>(elapsed_ns) / polls;
  w->avg_task_ns = 0.1 * per_poll + 0.9 * w->avg_task_ns;
  double interval = 1'000'000.0 / std::max(w->avg_task_ns, 1.0);
  w->global_interval = static_cast<std::uint32_t>(std::clamp(interval, 8.0, 255.0));
  w->counters.global_check_interval.store(w->global_interval, std::memory_order_relaxed);
}

task_header* scheduler::next_task(worker* w) noexcept {
  // 1. Global batch buffer.
  if (w->batch_head != w->batch_len) return w->batch[w->batch_head++];
  // Global queue on the EWMA interval, so it is not starved by local work.
  if (++w->polls_since_global >= w->global_interval) {
    w->polls_since_global = 0;
    if (task_header* task = fetch_global(w)) return task;
  }
  // 2-3. LIFO slot (capped per tick), ring.
  if (task_header* task = next_local(w)) return task;
  // 4. Global queue.
  if (task_header* task = fetch_global(w)) return task;
  // 5. Steal half from a random victim, as one of at most half the workers.
  if (!w->is_searching) {
    if (!idle_.transition_worker_to_searching()) return nullptr;
    w->is_searching = true;
  }
  if (task_header* task = steal_work(w)) return task;
  // 6. Global queue once more before parking.
  return fetch_global(w);
}

task_header* scheduler::next_local(worker* w) noexcept {
  if (w->lifo_slot != nullptr) {
    if (w->lifo_polls_this_tick < worker::max_lifo_polls_per_tick) {
      ++w->lifo_polls_this_tick;
      w->counters.lifo_hits.add();
      return std::exchange(w->lifo_slot, nullptr);
    }
    // Cap reached: flush the slot to the ring, where stealers can see it.
    if (w->queue.push_back(std::exchange(w->lifo_slot, nullptr), inject_)) {
      w->counters.overflows.add();
    }
    notify_parked();
  }
  return w->queue.pop();
}

task_header* scheduler::fetch_global(worker* w) noexcept {
  std::size_t len = inject_.len();
  if (len == 0) return nullptr;
  std::size_t n = std::clamp<std::size_t>(len / workers_.size(), 4, 64);
  n = std::min<std::size_t>(n, worker::batch_capacity);
  std::size_t got = inject_.pop_batch(w->batch.data(), n);
  if (got == 0) return nullptr;
  w->counters.global_batch_fetches.add();
  w->batch_head = 1;
  w->batch_len = static_cast<std::uint32_t>(got);
  return w->batch[0];
}

task_header* scheduler::steal_work(worker* w) noexcept {
  auto n = static_cast<std::uint32_t>(workers_.size());
  if (n < 2) return nullptr;
  std::uint32_t start = w->rng.below(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint32_t victim = (start + i) % n;
    if (victim == w->index) continue;
    std::uint32_t stolen = 0;
    if (task_header* task = workers_[victim]->queue.steal_into(w->queue, &stolen)) {
      w->counters.stolen.add(stolen);
      w->counters.steal_operations.add();
      return task;
    }
  }
  return nullptr;
}

void scheduler::transition_from_searching(worker* w) noexcept {
  if (!w->is_searching) return;
  w->is_searching = false;
  // The last searcher to find work wakes another: there may be more.
  if (idle_.transition_worker_from_searching()) notify_parked();
}

void scheduler::run_task(worker* w, task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::running) != 0) {
      // Queued, but abort_here holds it and is destroying its frame: hand
      // the queue entry back (clear SCHEDULED); abort_here completes it.
      if (task->state.compare_exchange_weak(s, s & ~sb::scheduled, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        return;
      }
      continue;
    }
    if (task->state.compare_exchange_weak(s, (s & ~sb::scheduled) | sb::running,
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      break;
    }
  }
  if ((s & sb::cancelled) != 0) {
    cancel_task(task, w);
    return;
  }
  thread_context& ctx = this_thread_context();
  ctx.current = task;
  task->cancel_fn = nullptr;  // until an awaiter says how to withdraw
  task->resume_point.resume();
  ctx.current = nullptr;
  if (w != nullptr) w->counters.polled.add();

  if (task->root.done()) {
    complete(task, w);
    return;
  }
  s = task->state.load(std::memory_order_acquire);
  std::uint64_t next;
  do {
    if ((s & (sb::cancelled | sb::notified)) == sb::cancelled) {
      // Aborted while it ran and now suspended: we still hold RUNNING.
      cancel_owned(task, w);
      return;
    }
    next = s & ~sb::running;
    if ((s & sb::notified) != 0) next = (next & ~sb::notified) | sb::scheduled;
  } while (!task->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                              std::memory_order_acquire));
  if ((s & sb::notified) != 0) {
    // Woken while it ran (or yielded): back of the run queue.
    if (w != nullptr) {
      schedule_local(w, task, true);
    } else {
      push_remote(task);
    }
  }
}

void scheduler::cancel_task(task_header* task, worker* w) noexcept {
  destroy_frame(task);
  complete(task, w);
}

void scheduler::abort(task_header* task) noexcept {
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
  if (task->root) {
    auto root = std::exchange(task->root, {});
    task->cancelled_before_finish = true;
    root.destroy();  // destructors of the whole await chain run here
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
  bool queue = false;
  do {
    queue = detached || (s & sb::notified) != 0;
    next = s & ~(sb::running | sb::notified);
    if (queue) next |= sb::scheduled;
  } while (!task->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                              std::memory_order_acquire));
  if (queue) schedule(task);
}

void scheduler::complete(task_header* task, worker* /*w*/) noexcept {
  owned_.remove(task);
  std::uint64_t prev = task->state.load(std::memory_order_acquire);
  while (!task->state.compare_exchange_weak(
      prev, (prev & ~(sb::running | sb::notified | sb::scheduled)) | sb::complete,
      std::memory_order_acq_rel, std::memory_order_acquire)) {
  }
  // The task stops counting as alive after its detached exception is
  // reported, and before its joiner runs (a block_on that returns sees it gone).
  if ((prev & sb::join_interest) == 0) {
    if (!task->cancelled_before_finish && task->promise->has_exception()) {
      report_detached_exception(task);
    }
    if (lifecycle_.complete_one()) observe_termination();
  } else {
    if (lifecycle_.complete_one()) observe_termination();
    if ((prev & sb::join_waker) != 0) task->waiter->notify(task->waiter);
  }
  drop_reference(task);
}

void scheduler::drop_reference(task_header* task) noexcept {
  std::uint64_t prev = task->state.fetch_sub(sb::ref_one, std::memory_order_acq_rel);
  if (prev / sb::ref_one != 1) return;
  if (task->root) task->root.destroy();
  task->~task_header();
  frame_deallocate(task, sizeof(task_header));
}

void scheduler::report_detached_exception(task_header* task) noexcept {
  detached_exceptions_.fetch_add(1, std::memory_order_relaxed);
  try {
    std::rethrow_exception(task->promise->exception());
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle: a detached task ended with an exception: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "spindle: a detached task ended with a non-standard exception\n");
  }
}

// ---------------------------------------------------------------------------
// Parking

void scheduler::park_worker(worker* w) noexcept {
  w->transitioning_to_park.store(true, std::memory_order_seq_cst);
  if (w->has_local_tasks()) {
    w->transitioning_to_park.store(false, std::memory_order_relaxed);
    return;
  }
  bool was_last_searcher = idle_.transition_worker_to_parked(w->index, w->is_searching);
  w->is_searching = false;
  // The last searcher re-checks every queue after registering as parked:
  // a producer that saw it searching did not wake anyone.
  if (was_last_searcher) notify_if_work_pending();
  w->counters.parked.add();
  while (!shutdown_.load(std::memory_order_acquire)) {
    if (driver_->park_in_driver(w->index)) {
      w->park.park_in_driver(*driver_, w->index);
    } else {
      w->park.park();
    }
    w->transitioning_to_park.store(false, std::memory_order_relaxed);
    std::size_t reaped = driver_->poll(w->index);
    if (reaped != 0) w->counters.io_completions.add(reaped);
    if (transition_from_parked(w)) break;
    w->transitioning_to_park.store(true, std::memory_order_seq_cst);
  }
  w->transitioning_to_park.store(false, std::memory_order_relaxed);
}

bool scheduler::transition_from_parked(worker* w) noexcept {
  if (w->has_local_tasks()) {
    // Woken by its own I/O completions: it is searching only if somebody
    // also claimed it (then it no longer is in the parked set).
    w->is_searching = !idle_.unpark_worker_by_id(w->index);
    return true;
  }
  if (idle_.is_parked(w->index)) return false;  // not claimed: sleep again
  w->is_searching = true;                       // claimed by a notifier, which counted us searching
  return true;
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
      if (!inject_.is_empty() && every_worker_busy()) {
        if (task_header* queued = inject_.pop()) {
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
      if (!(!inject_.is_empty() && every_worker_busy())) futex_wait_u32(&waiter.word, 0);
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
  out.workers.reserve(workers_.size());
  for (auto const& w : workers_) {
    worker_stats s = w->counters.snapshot();
    out.total_spawned += s.spawned;
    out.total_polled += s.polled;
    out.total_stolen += s.stolen;
    out.total_parked += s.parked;
    out.lifo_hits += s.lifo_hits;
    out.global_batch_fetches += s.global_batch_fetches;
    out.workers.push_back(s);
  }
  out.total_spawned += remote_spawned_.load(std::memory_order_relaxed);
  out.detached_exceptions = detached_exceptions_.load(std::memory_order_relaxed);
  out.tasks_alive = lifecycle_.in_flight();
  return out;
}

}  // namespace spindle::detail
