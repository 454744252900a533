// scheduler_core: see core.hpp.
#include "core.hpp"

#include "clock.hpp"
#include "trace.hpp"

#include <algorithm>
#include <utility>

namespace spindle::detail {

scheduler_core::scheduler_core(core_platform& platform, std::size_t n, std::uint32_t budget,
                               std::uint64_t seed, idle_tiers tiers)
    : idle(n),
      platform_(&platform),
      budget_(budget == 0 ? 1 : budget),
      idle_spins_(tiers.spins),
      idle_yields_(tiers.yields) {
  workers.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    workers.push_back(std::make_unique<worker>(i, seed + 0x9e3779b97f4a7c15ULL * (i + 1)));
}

void scheduler_core::schedule_local(worker* w, task_header* task, bool is_yield) noexcept {
  if (w->transitioning_to_park.load(std::memory_order_relaxed)) {
    // The worker is on its way to sleep: a task in its LIFO slot could be
    // stranded, so it goes to the global queue, which wakes someone.
    push_remote(task);
    return;
  }
  task_header* to_ring = task;
  if (is_yield) {
    // A task that yields (or was woken while it ran) lets the global queue
    // in: the next pick checks it, whatever the interval says. Without this
    // a worker whose ring holds only tasks that yield in a loop took 32
    // remote tasks per interval (about 1 ms of their polls), and a burst of
    // remote spawns waited tens of milliseconds (spawn_many_remote_busy).
    w->polls_since_global = w->global_interval;
  } else {
    to_ring = std::exchange(w->lifo_slot, task);
    if (to_ring == nullptr) {
      // Wake-on-hoard (the scanner executor): a worker that keeps scheduling locally
      // wakes a sibling now and then, so that the work piling up in its ring
      // gets stolen even if the wake for it was missed. Only when the ring
      // holds work: the LIFO slot cannot be stolen, so in a chain of spawns
      // (one task at a time) a woken sibling would find nothing, and the
      // futex wake would cost the chain a system call every 32 links.
      if (++w->hoard >= worker::wake_on_hoard_threshold) {
        w->hoard = 0;
        if (!w->queue.is_empty()) notify_parked();
      }
      return;
    }
  }
  // A sibling is notified only when the ring was empty before this push
  // (or it overflowed into the global queue). A ring that already held work
  // was notified for when that work arrived: an idle sibling was then woken,
  // or every worker was busy or a searcher was out (so the idle check's fence
  // would only find the same). Liveness never depends on it: this worker is
  // awake and runs its own ring. Saves a full fence per push while a worker
  // keeps its ring busy (a yield loop pays it on every yield otherwise).
  bool was_empty = true;
  if (w->queue.push_back(to_ring, inject, &was_empty, &release_if_stale)) {
    w->counters.overflows.add();
    was_empty = true;
  }
  w->hoard = 0;
  if (was_empty) notify_parked();
}

bool scheduler_core::notify_parked() noexcept {
  std::size_t index = idle.worker_to_notify();
  if (index == not_a_worker) return false;
  platform_->unpark_worker(index);
  return true;
}

bool scheduler_core::every_worker_busy() const noexcept {
  return idle.num_searching() == 0 && idle.num_unparked() == workers.size();
}

void scheduler_core::notify_if_work_pending() noexcept {
  for (auto& w : workers) {
    if (!w->queue.is_empty()) {
      notify_parked();
      return;
    }
  }
  if (!inject.is_empty()) notify_parked();
}

void scheduler_core::end_tick(worker* w, std::uint32_t polls, std::uint64_t elapsed_ns) noexcept {
  w->lifo_polls_in_a_row = 0;
  if (polls == 0) return;
  // EWMA of the time per poll; the global queue is checked every
  // clamp(1 ms / avg, 8, 255) polls (Volt's adaptive interval).
  double per_poll = static_cast<double>(elapsed_ns) / polls;
  w->avg_task_ns = 0.1 * per_poll + 0.9 * w->avg_task_ns;
  double interval = 1'000'000.0 / std::max(w->avg_task_ns, 1.0);
  w->global_interval = static_cast<std::uint32_t>(std::clamp(interval, 8.0, 255.0));
  w->counters.global_check_interval.store(w->global_interval, std::memory_order_relaxed);
}

task_header* scheduler_core::next_task(worker* w) noexcept {
  // 1. Global batch buffer.
  if (w->batch_head != w->batch_len) {
    w->lifo_polls_in_a_row = 0;
    return w->batch[w->batch_head++];
  }
  // Global queue on the EWMA interval, so it is not starved by local work.
  if (++w->polls_since_global >= w->global_interval) {
    w->polls_since_global = 0;
    if (task_header* task = fetch_global(w)) return not_from_lifo(w, task);
  }
  // 2-3. LIFO slot (capped at a few polls in a row), ring.
  if (task_header* task = next_local(w)) return task;
  // 4. Global queue.
  if (task_header* task = fetch_global(w)) return not_from_lifo(w, task);
  // 5. Steal half from a random victim, as one of at most half the workers.
  if (!w->is_searching) {
    if (!idle.transition_worker_to_searching()) return nullptr;
    w->is_searching = true;
  }
  if (task_header* task = steal_work(w)) return not_from_lifo(w, task);
  // 6. Global queue once more before parking.
  return not_from_lifo(w, fetch_global(w));
}

task_header* scheduler_core::not_from_lifo(worker* w, task_header* task) noexcept {
  if (task != nullptr) w->lifo_polls_in_a_row = 0;
  return task;
}

task_header* scheduler_core::next_local(worker* w) noexcept {
  bool flushed = false;
  if (w->lifo_slot != nullptr) {
    if (w->lifo_polls_in_a_row < worker::max_lifo_polls_in_a_row) {
      ++w->lifo_polls_in_a_row;
      w->counters.lifo_hits.add();
      return std::exchange(w->lifo_slot, nullptr);
    }
    // Cap reached: flush the slot to the ring, where stealers can see it,
    // and take the ring's oldest task below.
    if (w->queue.push_back(std::exchange(w->lifo_slot, nullptr), inject)) {
      w->counters.overflows.add();
    }
    flushed = true;
  }
  task_header* task = w->queue.pop();
  if (task != nullptr) w->lifo_polls_in_a_row = 0;
  // After a flush a sibling is woken only when the ring still holds work:
  // when the flushed task was the only one (a chain of spawns), this worker
  // runs it now and a woken sibling would find nothing, costing a futex
  // wake and a search for nothing.
  if (flushed && !w->queue.is_empty()) notify_parked();
  return task;
}

task_header* scheduler_core::fetch_global(worker* w) noexcept {
  std::size_t len = inject.len();
  if (len == 0) return nullptr;
  std::size_t n = std::clamp<std::size_t>(len / workers.size(), 4, 64);
  n = std::min<std::size_t>(n, worker::batch_capacity);
  std::size_t got = inject.pop_batch(w->batch.data(), n);
  if (got == 0) return nullptr;
  w->counters.global_batch_fetches.add();
  if (got > 1 && idle.num_unparked() < workers.size()) {
    // Some worker sleeps: the batch buffer is private, so a long poll of
    // this worker would strand the rest of the batch there. Put it in the
    // ring, where it can be stolen, and wake a helper (Tokio moves every
    // batch to its run queue; this keeps Volt's lock-free buffer when all
    // workers are busy anyway).
    for (std::size_t i = 1; i < got; ++i) {
      if (w->queue.push_back(w->batch[i], inject)) w->counters.overflows.add();
    }
    notify_parked();
    w->batch_head = w->batch_len = 0;
    return w->batch[0];
  }
  w->batch_head = 1;
  w->batch_len = static_cast<std::uint32_t>(got);
  return w->batch[0];
}

task_header* scheduler_core::steal_work(worker* w) noexcept {
  auto n = static_cast<std::uint32_t>(workers.size());
  if (n < 2) return nullptr;
  std::uint32_t start = w->rng.below(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint32_t victim = (start + i) % n;
    if (victim == w->index) continue;
    std::uint32_t stolen = 0;
    if (task_header* task = workers[victim]->queue.steal_into(w->queue, &stolen)) {
      w->counters.stolen.add(stolen);
      w->counters.steal_operations.add();
      if (trace_ring* trace = tracing(w->trace)) [[unlikely]] {
        trace->push({steady_now_ns(), 0, victim, stolen, nullptr, trace_kind::steal});
      }
      return task;
    }
  }
  return nullptr;
}

void scheduler_core::transition_from_searching(worker* w) noexcept {
  if (!w->is_searching) return;
  w->is_searching = false;
  // The last searcher to find work wakes another: there may be more.
  if (idle.transition_worker_from_searching()) notify_parked();
}

bool scheduler_core::transition_from_parked(worker* w) noexcept {
  if (w->has_local_tasks()) {
    // Woken by its own I/O completions: it is searching only if somebody
    // also claimed it (then it no longer is in the parked set).
    w->is_searching = !idle.unpark_worker_by_id(w->index);
    return true;
  }
  if (idle.is_parked(w->index)) return false;  // not claimed: sleep again
  w->is_searching = true;                      // claimed by a notifier, which counted us searching
  return true;
}

void scheduler_core::push_remote(task_header* task) noexcept {
  inject.push(task);
  if (notify_parked()) return;
  // Nobody to wake: the platform may have other helpers (block_on threads).
  platform_->remote_push_unnoticed();
}

scheduler_core::idle_step scheduler_core::after_tick(worker* w, bool progressed) noexcept {
  if (progressed || w->has_local_tasks()) {
    w->idle_ticks = 0;
    return idle_step::run;
  }
  std::uint32_t const n = ++w->idle_ticks;
  if (n <= idle_spins_) return idle_step::spin;
  if (n <= idle_spins_ + idle_yields_) return idle_step::yield;
  w->idle_ticks = 0;
  return idle_step::park;
}

bool scheduler_core::begin_park(worker* w) noexcept {
  w->transitioning_to_park.store(true, std::memory_order_seq_cst);
  if (w->has_local_tasks()) {
    w->transitioning_to_park.store(false, std::memory_order_relaxed);
    return false;
  }
  bool was_last_searcher = idle.transition_worker_to_parked(w->index, w->is_searching);
  w->is_searching = false;
  // The last searcher re-checks every queue after registering as parked: a
  // producer that saw it searching did not wake anyone. So does any worker
  // that parks while nobody searches: it may have been refused the search
  // by a searcher that has since found work and handed the search to
  // nobody (no worker was parked yet), while work was pushed behind it.
  // (Found by the deterministic simulation: a stealable task waited on a
  // busy worker's ring while this worker slept.)
  if (was_last_searcher || idle.num_searching() == 0) notify_if_work_pending();
  w->counters.parked.add();
  return true;
}

}  // namespace spindle::detail
