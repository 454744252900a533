// scheduler_core: see core.hpp.
#include "core.hpp"

#include "clock.hpp"
#include "trace.hpp"

#include <algorithm>
#include <utility>

namespace spindle::detail {

scheduler_core::scheduler_core(core_platform& platform, std::size_t n, std::uint32_t budget,
                               std::uint64_t seed, idle_tiers tiers, spindle::placement where,
                               std::uint64_t stalled_lifo_ns)
    : idle(n),
      platform_(&platform),
      budget_(budget == 0 ? 1 : budget),
      idle_spins_(tiers.spins),
      idle_yields_(tiers.yields),
      stalled_lifo_us_(stalled_lifo_ns == 0
                           ? 0
                           : static_cast<std::uint32_t>(std::clamp<std::uint64_t>(
                                 stalled_lifo_ns / 1000, 1, std::uint64_t{1} << 30))),
      placement_(where),
      p2c_rng_((seed ^ 0xd1b54a32d192ed03ULL) | 1),
      p2c_seen_(std::make_unique<seen_load[]>(n)) {
  workers.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    workers.push_back(std::make_unique<worker>(i, seed + 0x9e3779b97f4a7c15ULL * (i + 1)));
}

void scheduler_core::set_victim_orders(std::vector<victim_order> orders) noexcept {
  if (!victim_orders_.empty()) return;  // once: the workers read them without a lock
  victim_orders_ = std::move(orders);
  for (std::size_t i = 0; i < workers.size() && i < victim_orders_.size(); ++i)
    workers[i]->victims.store(&victim_orders_[i], std::memory_order_release);
}

std::uint64_t scheduler_core::backoff_ns(worker const* w) const noexcept {
  if (w->steal_failures == 0) return 0;
  std::uint32_t const shift = std::min<std::uint32_t>(w->steal_failures - 1, 16);
  return std::min(steal_backoff_base_ns << shift, steal_backoff_max_ns);
}

void scheduler_core::schedule_yield(worker* w, task_header* task) noexcept {
  // With p2c the worker's queue is its ring and its inbox: a task that
  // yields while tasks wait in the inbox goes behind them, as it goes
  // behind the ring's. At the ring's back it ran again after at most a
  // look's take (32 + spill_room), and a loop of yields took that share of
  // the worker while a burst of remote spawns waited
  // (spawn_many_remote_busy: README). More than one: the owner's take
  // leaves the newest task in the inbox (inbox::take), and with "any" two
  // tasks that yield in a loop took turns through the inbox and never let
  // the ring run. (A function of its own: inside
  // schedule_local, GCC gave the spawn path through it a worse register
  // allocation, which reloaded `this` from the stack.)
  if (placement_ == spindle::placement::p2c && w->remote.len() > 1 &&
      !w->transitioning_to_park.load(std::memory_order_relaxed)) {
    w->polls_since_global = w->global_interval;
    w->remote.push(task);
    return;
  }
  schedule_local(w, task, true);
}

void scheduler_core::schedule_local(worker* w, task_header* task, bool is_yield) noexcept {
  if (w->transitioning_to_park.load(std::memory_order_relaxed)) {
    // The worker is on its way to sleep: a task in its LIFO slot could be
    // stranded, so it goes to the global queue, which wakes someone.
    push_global(task, task, 1);
    return;
  }
  task_header* to_ring = task;
  bool to_slot = !is_yield;
  if (is_yield) {
    // A task that yields (or was woken while it ran) lets the global queue
    // in: the next pick checks it, whatever the interval says. Without this
    // a worker whose ring holds only tasks that yield in a loop took 32
    // remote tasks per interval (about 1 ms of their polls), and a burst of
    // remote spawns waited tens of milliseconds (spawn_many_remote_busy).
    w->polls_since_global = w->global_interval;
    // It goes to the back of the ring, unless it is this worker's only work
    // (the slot, the ring, the inbox and the global queue empty): then its
    // next pick takes it anyway, after the remote queues, and it waits in
    // the LIFO slot, not the ring. In the ring it woke an idle sibling (a
    // push into an empty ring notifies), which could only take it away: a
    // loop of cached reads (io::file::read_at) yields every 65th read, and
    // paid a futex wake, a search and often a migration each time.
    to_slot = w->lifo.peek() == nullptr && w->queue.is_empty() && w->remote.is_empty() &&
              inject.is_empty();
  }
  if (to_slot) {
    // Only the owner fills the slot, so an empty slot stays empty until
    // this store; a full one may be emptied by a rescue meanwhile (to_ring
    // is then nullptr).
    if (w->lifo.peek() == nullptr) {
      w->lifo.put(task);
      to_ring = nullptr;
    } else {
      to_ring = w->lifo.replace(task);
    }
    if (to_ring == nullptr) {
      slot_filled(w);
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
    task_chain chain(task_chain::chunk_room(inject.len()));
    for (std::size_t i = 0; i < n; ++i)
      chain.append(tasks[i]);
    push_global(chain.first(), chain.last(), chain.count());
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
    if (task == nullptr && placement_ == spindle::placement::p2c) task = help_inbox(w);
    if (task != nullptr) return not_from_lifo(w, task);
  }
  // 2-3. LIFO slot (capped at a few polls in a row), ring. The slot's
  // common case here, the rest in next_local.
  if (w->lifo.peek() != nullptr && w->lifo_polls_in_a_row < worker::max_lifo_polls_in_a_row) {
    // A rescue may take the task at the same moment (then the slot gives
    // nullptr and next_local looks at the ring).
    if (task_header* task = w->lifo.take()) [[likely]] {
      ++w->lifo_polls_in_a_row;
      w->counters.lifo_hits.add();
      return task;
    }
  }
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
  if (w->lifo.peek() != nullptr) {
    // A rescue may take the task at the same moment (then the slot gives
    // nullptr and the ring is next).
    task_header* lifo = w->lifo.take();
    if (lifo != nullptr) {
      if (w->lifo_polls_in_a_row < worker::max_lifo_polls_in_a_row) {
        ++w->lifo_polls_in_a_row;
        w->counters.lifo_hits.add();
        return lifo;
      }
      if (w->queue.is_empty()) {
        // Cap reached, but nothing waits in the ring: the flush below would
        // push the task and pop it straight back (a chain of spawns, every
        // fourth link). As that pop would, the count starts again.
        w->lifo_polls_in_a_row = 0;
        return lifo;
      }
      // Cap reached: flush the slot to the ring, where stealers can see it,
      // and take the ring's oldest task below.
      if (w->queue.push_back(lifo, inject)) w->counters.overflows.add();
      flushed = true;
    }
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

std::size_t scheduler_core::spill_room(worker const* w) noexcept {
  // No local work: the batch buffer runs dry before anything else here
  // waits, and the next pick looks again. A ring half full or more: it may
  // be what overflowed into the global queue, and a spill would fill it
  // for the next overflow (fib_fork_join: 1.2x slower).
  std::uint32_t const len = w->queue.len();
  if (len == 0 && w->lifo.peek() == nullptr) return 0;
  if (len >= run_queue::capacity / 2) return 0;
  return std::min<std::size_t>(run_queue::overflow_batch, (run_queue::capacity - len) / 2);
}

task_header* scheduler_core::fetch_global(worker* w) noexcept {
  std::size_t len = inject.len();
  if (len == 0) return nullptr;
  // This worker's share, at least a few: a batch buffer, and beyond it up
  // to spill_room more (take_spilling).
  std::size_t const share = std::clamp<std::size_t>(len / workers.size(), 4, max_remote_take);
  std::size_t const n = std::min(share, worker::batch_capacity + spill_room(w));
  remote_take taken;
  std::size_t got = inject.pop_batch(taken.data(), n);
  if (got == 0) return nullptr;
  w->counters.global_batch_fetches.add();
  return take_spilling(w, taken.data(), got);
}

task_header* scheduler_core::fetch_inbox(worker* w) noexcept {
  // The global queue's rule, for a queue of this worker alone: a batch
  // buffer per look, and what is left beyond it up to spill_room.
  // The look reads the consumer's end, not len(): len() reads the
  // producers' count, and a look at every tick took their line away from
  // them at every push (spawn_many_remote_idle with p2c, README).
  if (!w->remote.may_hold_tasks()) return nullptr;
  remote_take taken;
  std::size_t got = w->remote.try_take(taken.data(), worker::batch_capacity + spill_room(w), true);
  if (got == 0) return nullptr;
  return take_spilling(w, taken.data(), got);
}

task_header* scheduler_core::take_spilling(worker* w, task_header* const* tasks,
                                           std::size_t got) noexcept {
  std::size_t const buffered = std::min<std::size_t>(got, worker::batch_capacity);
  std::copy_n(tasks, buffered, w->batch.data());
  task_header* first = take_batch(w, buffered);
  // After take_batch, which may have put the buffered ones in the ring:
  // the ring stays in the order the queue gave them.
  if (got > buffered) {
    bool was_empty = true;
    if (w->queue.push_back_batch(tasks + buffered, got - buffered, inject, &was_empty,
                                 &release_if_stale)) {
      w->counters.overflows.add();
      was_empty = true;
    }
    if (was_empty) notify_parked();
  }
  return first;
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

template <class Take>
task_header* scheduler_core::for_each_victim(worker* w, Take&& take) noexcept {
  auto const n = static_cast<std::uint32_t>(workers.size());
  victim_order const* order = w->victims.load(std::memory_order_acquire);
  if (order == nullptr || order->victims.empty()) {
    // No topology: every other worker, from a random start.
    std::uint32_t start = w->rng.below(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      std::uint32_t victim = (start + i) % n;
      if (victim == w->index) continue;
      if (task_header* task = take(victim, steal_levels - 1)) return task;
    }
    return nullptr;
  }
  // Nearest level first; within a level from a random start (the levels
  // are shuffled once, the start differs per round).
  for (std::size_t l = 0; l < steal_levels; ++l) {
    auto level = order->level(l);
    auto const m = static_cast<std::uint32_t>(level.size());
    if (m == 0) continue;
    std::uint32_t start = m == 1 ? 0 : w->rng.below(m);
    for (std::uint32_t i = 0; i < m; ++i) {
      if (task_header* task = take(level[(start + i) % m], l)) return task;
    }
  }
  return nullptr;
}

task_header* scheduler_core::steal_work(worker* w) noexcept {
  if (workers.size() < 2) return nullptr;
  task_header* task = for_each_victim(w, [this, w](std::uint32_t victim, std::size_t level) {
    ++w->steal_probes;
    std::uint32_t stolen = 0;
    task_header* got = workers[victim]->queue.steal_into(w->queue, &stolen);
    if (got != nullptr) {
      w->counters.stolen.add(stolen);
      w->counters.steal_operations.add();
      ++w->steals_by_level[level];
      if (trace_ring* trace = tracing(w->trace)) [[unlikely]] {
        trace->push({steady_now_ns(), 0, victim, stolen, nullptr, trace_kind::steal});
      }
    }
    return got;
  });
  if (task == nullptr && placement_ == spindle::placement::p2c) task = steal_inbox(w);
  if (task == nullptr) task = rescue_lifo(w);
  if (task == nullptr) {
    ++w->steal_failures;
    return nullptr;
  }
  w->steal_failures = 0;
  return task;
}

task_header* scheduler_core::steal_inbox(worker* w) noexcept {
  // A task placed on a worker that is busy in a long poll (or that has not
  // woken yet) is taken here by a searcher instead of waiting for it.
  return for_each_victim(
      w, [this, w](std::uint32_t victim, std::size_t) { return take_from_inbox(w, victim); });
}

task_header* scheduler_core::help_inbox(worker* w) noexcept {
  auto const n = static_cast<std::uint32_t>(workers.size());
  if (n < 2) return nullptr;
  // Backed off after looks that found nothing: a task that yields makes
  // its worker look at the remote queues on its next pick, and a look at
  // every one of them (a draw and another worker's inbox lines) made
  // yield_many with p2c about 1.1-1.2x slower.
  if (w->help_skip != 0) {
    --w->help_skip;
    return nullptr;
  }
  std::uint32_t victim = w->rng.below(n - 1);
  if (victim >= w->index) ++victim;
  task_header* task = take_from_inbox(w, victim);
  if (task != nullptr) {
    w->help_backoff = 0;
  } else {
    w->help_backoff = std::min(std::max(2 * w->help_backoff, 1u), worker::max_help_skip);
    w->help_skip = w->help_backoff;
  }
  return task;
}

task_header* scheduler_core::take_from_inbox(worker* w, std::uint32_t victim) noexcept {
  inbox& box = workers[victim]->remote;
  std::size_t len = box.len();
  if (len == 0) return nullptr;
  std::size_t want = std::min<std::size_t>(len - len / 2, worker::batch_capacity);
  std::size_t got = box.try_take(w->batch.data(), want);
  if (got == 0) return nullptr;
  w->counters.stolen.add(got);
  w->counters.steal_operations.add();
  // The trace's steal event, as a steal from a ring (the victim's index).
  if (trace_ring* trace = tracing(w->trace)) [[unlikely]] {
    trace->push(
        {steady_now_ns(), 0, victim, static_cast<std::int64_t>(got), nullptr, trace_kind::steal});
  }
  return take_batch(w, got);
}

task_header* scheduler_core::rescue_lifo(worker* w) noexcept {
  if (stalled_lifo_us_ == 0 || workers.size() < 2) return nullptr;
  // At most four looks per threshold: a searcher that kept looking on
  // every failed steal round read the owners' LIFO slots and poll counts
  // (and wrote stall_seen) while they kept writing them, which made a
  // spawn+await loop about 1.45x slower.
  std::uint64_t const now_ns = platform_->now_ns();
  if (now_ns < w->next_rescue_look_ns) return nullptr;
  w->next_rescue_look_ns = now_ns + stalled_lifo_ns() / 4;
  return for_each_victim(w, [&](std::uint32_t v, std::size_t) -> task_header* {
    worker& x = *workers[v];
    if (x.lifo.peek() == nullptr) return nullptr;
    auto const now_us = static_cast<std::uint32_t>(now_ns / 1000);
    auto const polls = static_cast<std::uint32_t>(x.counters.polled.get());
    std::uint64_t const seen = x.stall_seen.load(std::memory_order_relaxed);
    if (static_cast<std::uint32_t>(seen >> 32) != polls) {
      // First sight of this poll count: a stall (if it is one) starts now.
      x.stall_seen.store((std::uint64_t{polls} << 32) | now_us, std::memory_order_relaxed);
      return nullptr;
    }
    if (now_us - static_cast<std::uint32_t>(seen) < stalled_lifo_us_) return nullptr;
    task_header* task = x.lifo.rescue();
    if (task != nullptr) ++w->lifo_rescues;
    return task;
  });
}

std::uint64_t scheduler_core::watch_deadline_ns(worker* w) noexcept {
  if (stalled_lifo_us_ == 0 || workers.size() < 2) return no_deadline;
  if (!w->watching) {
    std::size_t none = not_a_worker;
    if (!watcher_.compare_exchange_strong(none, w->index, std::memory_order_seq_cst)) {
      return no_deadline;
    }
    w->watching = true;
    w->watch_period_ns = stalled_lifo_ns();
  }
  // Nobody awake, nothing can stall: sleep without a deadline until a push
  // into an empty LIFO slot wakes us. The flag is raised before the count is
  // read, and that push reads the flag after the claim that woke its worker
  // (seq_cst on both sides): either we see the worker awake here, or it
  // sees the flag.
  watch_wanted_.store(true, std::memory_order_seq_cst);
  if (idle.num_unparked() == 0) return no_deadline;
  watch_wanted_.store(false, std::memory_order_relaxed);
  return platform_->now_ns() + w->watch_period_ns;
}

void scheduler_core::stop_watching(worker* w) noexcept {
  if (!w->watching) return;
  w->watching = false;
  watcher_.store(not_a_worker, std::memory_order_seq_cst);
  // Nobody watches now: the next push into an empty LIFO slot wakes a
  // parked worker, which takes the watch when it parks again.
  watch_wanted_.store(true, std::memory_order_seq_cst);
}

void scheduler_core::wake_watcher() noexcept {
  if (!watch_wanted_.exchange(false, std::memory_order_seq_cst)) return;
  std::size_t target = watcher_.load(std::memory_order_seq_cst);
  if (target == not_a_worker) target = idle.any_parked();
  // Not claimed: it wakes, finds itself still parked and sleeps again,
  // with the watch's deadline (watch_deadline_ns).
  if (target != not_a_worker) platform_->unpark_worker(target);
}

void scheduler_core::stop_searching(worker* w) noexcept {
  w->is_searching = false;
  // The last searcher to find work wakes another: there may be more.
  if (idle.transition_worker_from_searching()) notify_parked();
}

bool scheduler_core::transition_from_parked(worker* w) noexcept {
  if (!w->has_local_tasks() && w->remote.is_empty() && w->watching && idle.is_parked(w->index)) {
    // The watcher's deadline (or any wake of it): a stalled worker's LIFO
    // task becomes this worker's own, and it wakes to run it.
    if (task_header* task = rescue_lifo(w)) {
      w->lifo.put(task);
      w->watch_period_ns = stalled_lifo_ns();
      // Awake to run it, and searching as a notified worker would be: the
      // stalled worker may hold more, and other producers see a searcher.
      // A notifier may have claimed us since the look above (it then
      // counted us, searching or not): no second count.
      w->is_searching = idle.unpark_worker_by_id(w->index) ? idle.transition_worker_to_searching()
                                                           : idle.claimed_as_searcher(w->index);
      stop_watching(w);
      return true;
    } else {
      w->watch_period_ns = std::min(2 * w->watch_period_ns, watch_period_max_ns);
    }
  }
  if (w->has_local_tasks() || !w->remote.is_empty()) {
    // Woken by its own I/O completions: it is searching only if somebody
    // also claimed it (then it no longer is in the parked set) and counted
    // it searching.
    w->is_searching = !idle.unpark_worker_by_id(w->index) && idle.claimed_as_searcher(w->index);
    stop_watching(w);
    return true;
  }
  if (idle.is_parked(w->index)) return false;  // not claimed: sleep again
  // Claimed by a notifier, which counted us searching (or, for an inbox
  // push beyond the searcher bound, unparked only).
  w->is_searching = idle.claimed_as_searcher(w->index);
  stop_watching(w);
  return true;
}

void scheduler_core::push_global(task_header* first, task_header* last,
                                 std::size_t count) noexcept {
  inject.push_batch(first, last, count);
  if (notify_parked()) return;
  // Nobody to wake: the platform may have other helpers (block_on threads).
  platform_->remote_push_unnoticed();
}

std::size_t scheduler_core::choose_p2c(std::size_t count) noexcept {
  auto n = static_cast<std::uint32_t>(workers.size());
  if (n == 1) return 0;
  std::uint64_t x = p2c_rng_.load(std::memory_order_relaxed);
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  p2c_rng_.store(x, std::memory_order_relaxed);
  std::uint64_t const draw = p2c_draws_.load(std::memory_order_relaxed) + 1;
  p2c_draws_.store(draw, std::memory_order_relaxed);
  std::uint64_t const r = x * 0x2545f4914f6cdd1dULL;
  // Two distinct workers: a in [0, n), b in [0, n) \ {a}.
  auto a = static_cast<std::uint32_t>(((r >> 32) * n) >> 32);
  auto b = static_cast<std::uint32_t>(((r & 0xffffffffULL) * (n - 1)) >> 32);
  if (b >= a) ++b;
  // A worker's ring and inbox counts sit on lines its thread writes at
  // every take: read at every spawn, they were two cache misses per spawn
  // from outside (perf: 12% of spawn_many_remote_idle's samples, the
  // spawner's largest cost after the push). One read serves
  // p2c_refresh_draws draws, with this view's own placements added: the
  // power of two choices stays balanced on loads this old (Mitzenmacher,
  // "How useful is old information?", 2000), where picking the least
  // loaded of all workers would not.
  auto load = [this, draw](std::uint32_t i) {
    seen_load& seen = p2c_seen_[i];
    std::uint64_t const read_at = seen.read_at.load(std::memory_order_relaxed);
    if (read_at != 0 && draw - read_at < p2c_refresh_draws)
      return seen.load.load(std::memory_order_relaxed);
    worker const& w = *workers[i];
    std::uint64_t const now = std::uint64_t{w.queue.len()} + w.remote.len();
    seen.load.store(now, std::memory_order_relaxed);
    seen.read_at.store(draw, std::memory_order_relaxed);
    return now;
  };
  std::uint32_t const chosen = load(b) < load(a) ? b : a;
  seen_load& seen = p2c_seen_[chosen];
  seen.load.store(seen.load.load(std::memory_order_relaxed) + count, std::memory_order_relaxed);
  return chosen;
}

void scheduler_core::push_remote_batch(task_header* first, task_header* last,
                                       std::size_t count) noexcept {
  if (placement_ == spindle::placement::global) {
    push_global(first, last, count);
    return;
  }
  push_inbox_batch(choose_p2c(count), first, last, count);
}

void scheduler_core::push_inbox_batch(std::size_t target, task_header* first, task_header* last,
                                      std::size_t count) noexcept {
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
    w->steal_failures = 0;
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
  w->steal_failures = 0;
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
    w->is_searching = !idle.unpark_worker_by_id(w->index) && idle.claimed_as_searcher(w->index);
    end_park(w);
    return false;
  }
  w->counters.parked.add();
  return true;
}

}  // namespace spindle::detail
