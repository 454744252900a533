// scheduler_core: see core.hpp.
#include "core.hpp"

#include "clock.hpp"
#include "trace.hpp"

#include <algorithm>
#include <utility>

namespace spindle::detail {

scheduler_core::scheduler_core(core_platform& platform, std::size_t n, std::uint32_t budget,
                               std::uint64_t seed, idle_tiers tiers, spindle::placement where)
    : idle(n),
      platform_(&platform),
      budget_(budget == 0 ? 1 : budget),
      idle_spins_(tiers.spins),
      idle_yields_(tiers.yields),
      placement_(where),
      p2c_rng_((seed ^ 0xd1b54a32d192ed03ULL) | 1) {
  workers.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    workers.push_back(std::make_unique<worker>(i, seed + 0x9e3779b97f4a7c15ULL * (i + 1)));
}

void scheduler_core::schedule_local(worker* w, task_header* task, bool is_yield) noexcept {
  if (w->transitioning_to_park.load(std::memory_order_relaxed)) {
    // The worker is on its way to sleep: a task in its LIFO slot could be
    // stranded, so it goes to the global queue, which wakes someone.
    push_global(task, task, 1);
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

void scheduler_core::schedule_local_batch(worker* w, task_header* const* tasks,
                                          std::size_t n) noexcept {
  if (n == 0) return;
  if (w->transitioning_to_park.load(std::memory_order_relaxed)) {
    for (std::size_t i = 0; i + 1 < n; ++i)
      tasks[i]->next = tasks[i + 1];
    push_global(tasks[0], tasks[n - 1], n);
    return;
  }
  // As schedule_local's ring push: a sibling is notified when the ring was
  // empty before the batch (or it overflowed), once for the whole batch.
  bool was_empty = true;
  if (w->queue.push_back_batch(tasks, n, inject, &was_empty, &release_if_stale)) {
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
    if (!w->queue.is_empty() || !w->remote.is_empty()) {
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
  // Inbox and global queue on the EWMA interval, so that they are not
  // starved by local work; every other time the global queue first, so that
  // a full inbox does not starve the global queue either.
  if (++w->polls_since_global >= w->global_interval) {
    w->polls_since_global = 0;
    w->global_first = !w->global_first;
    task_header* task = w->global_first ? fetch_global(w) : nullptr;
    if (task == nullptr) task = fetch_remote(w);
    if (task != nullptr) return not_from_lifo(w, task);
  }
  // 2-3. LIFO slot (capped at a few polls in a row), ring.
  if (task_header* task = next_local(w)) return task;
  // 4. Inbox, global queue.
  if (task_header* task = fetch_remote(w)) return not_from_lifo(w, task);
  // 5. Steal half from a random victim, as one of at most half the workers.
  if (!w->is_searching) {
    if (!idle.transition_worker_to_searching()) return nullptr;
    w->is_searching = true;
  }
  if (task_header* task = steal_work(w)) return not_from_lifo(w, task);
  // 6. Inbox and global queue once more before parking.
  return not_from_lifo(w, fetch_remote(w));
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
  return take_batch(w, got);
}

task_header* scheduler_core::fetch_inbox(worker* w) noexcept {
  // The global queue's batch rule, for a queue of this worker alone: up to
  // a batch buffer (32) per look.
  if (w->remote.len() == 0) return nullptr;
  std::size_t got = w->remote.try_take(w->batch.data(), worker::batch_capacity);
  if (got == 0) return nullptr;
  return take_batch(w, got);
}

task_header* scheduler_core::fetch_remote(worker* w) noexcept {
  if (task_header* task = fetch_inbox(w)) return task;
  return fetch_global(w);
}

task_header* scheduler_core::take_batch(worker* w, std::size_t got) noexcept {
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
  return placement_ == spindle::placement::p2c ? steal_inbox(w) : nullptr;
}

task_header* scheduler_core::steal_inbox(worker* w) noexcept {
  // A task placed on a worker that is busy in a long poll (or that has not
  // woken yet) is taken here by a searcher instead of waiting for it.
  auto n = static_cast<std::uint32_t>(workers.size());
  std::uint32_t start = w->rng.below(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint32_t victim = (start + i) % n;
    if (victim == w->index) continue;
    inbox& box = workers[victim]->remote;
    std::size_t len = box.len();
    if (len == 0) continue;
    std::size_t want = std::min<std::size_t>(len - len / 2, worker::batch_capacity);
    std::size_t got = box.try_take(w->batch.data(), want);
    if (got == 0) continue;
    w->counters.stolen.add(got);
    w->counters.steal_operations.add();
    // The trace's steal event, as a steal from a ring (the victim's index).
    if (trace_ring* trace = tracing(w->trace)) [[unlikely]] {
      trace->push(
          {steady_now_ns(), 0, victim, static_cast<std::int64_t>(got), nullptr, trace_kind::steal});
    }
    return take_batch(w, got);
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
  if (w->has_local_tasks() || !w->remote.is_empty()) {
    // Woken by its own I/O completions: it is searching only if somebody
    // also claimed it (then it no longer is in the parked set).
    w->is_searching = !idle.unpark_worker_by_id(w->index);
    return true;
  }
  if (idle.is_parked(w->index)) return false;  // not claimed: sleep again
  w->is_searching = true;                      // claimed by a notifier, which counted us searching
  return true;
}

void scheduler_core::push_global(task_header* first, task_header* last,
                                 std::size_t count) noexcept {
  inject.push_batch(first, last, count);
  if (notify_parked()) return;
  // Nobody to wake: the platform may have other helpers (block_on threads).
  platform_->remote_push_unnoticed();
}

std::size_t scheduler_core::choose_p2c() noexcept {
  auto n = static_cast<std::uint32_t>(workers.size());
  if (n == 1) return 0;
  std::uint64_t x = p2c_rng_.load(std::memory_order_relaxed);
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  p2c_rng_.store(x, std::memory_order_relaxed);
  std::uint64_t const r = x * 0x2545f4914f6cdd1dULL;
  // Two distinct workers: a in [0, n), b in [0, n) \ {a}.
  auto a = static_cast<std::uint32_t>(((r >> 32) * n) >> 32);
  auto b = static_cast<std::uint32_t>(((r & 0xffffffffULL) * (n - 1)) >> 32);
  if (b >= a) ++b;
  auto load = [this](std::uint32_t i) {
    worker const& w = *workers[i];
    return std::size_t{w.queue.len()} + w.remote.len();
  };
  return load(b) < load(a) ? b : a;
}

void scheduler_core::push_remote_batch(task_header* first, task_header* last,
                                       std::size_t count) noexcept {
  if (placement_ == spindle::placement::global) {
    push_global(first, last, count);
    return;
  }
  std::size_t const target = choose_p2c();
  // The inbox's length is raised with a seq_cst RMW: a worker that
  // registers as parked after it re-reads its inbox (begin_park), and the
  // idle state read below sees the registration of one that parked before.
  workers[target]->remote.push(first, last, count);
  std::size_t const index = idle.worker_to_notify_preferring(target);
  if (index != not_a_worker) {
    platform_->unpark_worker(index);
    return;
  }
  platform_->remote_push_unnoticed();
}

task_header* scheduler_core::take_remote() noexcept {
  if (task_header* task = inject.pop()) return task;
  for (auto& w : workers) {
    if (w->remote.len() == 0) continue;
    task_header* task = nullptr;
    if (w->remote.try_take(&task, 1) == 1) return task;
  }
  return nullptr;
}

bool scheduler_core::remote_work_pending() const noexcept {
  if (!inject.is_empty()) return true;
  for (auto const& w : workers) {
    if (w->remote.len() != 0) return true;
  }
  return false;
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
  if (w->has_local_tasks() || !w->remote.is_empty()) {
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
  // A p2c push into this worker's inbox raises its length (a seq_cst RMW)
  // before it reads the idle state: one that read it before the
  // registration above did not see this worker parked, and its task is seen
  // here.
  if (!w->remote.is_empty()) {
    w->is_searching = !idle.unpark_worker_by_id(w->index);
    end_park(w);
    return false;
  }
  w->counters.parked.add();
  return true;
}

}  // namespace spindle::detail
