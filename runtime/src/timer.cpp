// The scheduler's timers: arming on a worker's wheel, firing at tick end and
// on park timeouts, and the park deadline. See timer_shard.hpp.
#include <chrono>
#include <mutex>
#include <system_error>

#include "clock.hpp"
#include "scheduler.hpp"
#include "spindle/detail/timer_entry.hpp"

namespace spindle::detail {

using std::chrono::steady_clock;

std::uint64_t scheduler::now_tick() const noexcept {
  auto since = steady_clock::now() - epoch_;
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(since).count());
}

bool scheduler::arm_timer(timer_entry& e, steady_clock::time_point deadline) noexcept {
  if (deadline <= epoch_) return false;
  // Whole ticks, rounded up: never early. Deadlines past ~584 years saturate.
  auto since = std::chrono::ceil<std::chrono::milliseconds>(deadline - epoch_);
  e.deadline = static_cast<std::uint64_t>(since.count());

  thread_context const& ctx = this_thread_context();
  bool own = ctx.self != nullptr && ctx.sched == this;
  worker* w = own ? ctx.self
                  : core_
                        .workers[timer_round_robin_.fetch_add(1, std::memory_order_relaxed) %
                                 core_.workers.size()]
                        .get();
  timer_shard& shard = w->timers;
  bool earlier = false;
  {
    std::lock_guard lock(shard.mutex);
    // A wheel that has not been advanced for a while lags real time; an
    // entry due before `now` is still inserted and fires at the owner's next
    // tick end. Only one due before the wheel's own tick is refused.
    if (!shard.wheel.insert(&e)) return false;
    e.shard = &shard;
    std::uint64_t next = shard.wheel.next_expiration();
    earlier = next < shard.next_due.load(std::memory_order_relaxed);
    shard.next_due.store(next, std::memory_order_relaxed);
  }
  // The owner may be asleep with a later deadline: make it re-read.
  if (!own && earlier) unpark(w->index);
  return true;
}

std::size_t scheduler::fire_timers(worker* w) noexcept {
  timer_shard& shard = w->timers;
  if (shard.next_due.load(std::memory_order_relaxed) == timer_wheel::never) return 0;
  std::uint64_t now = now_tick();
  if (now < shard.next_due.load(std::memory_order_relaxed)) return 0;
  {
    std::lock_guard lock(shard.mutex);
    shard.wheel.advance(now, [&](timer_entry* e) {
      // The entry is unlinked now; under the lock its owner cannot see it
      // until we are done. Claimed timers wake only if they won the race.
      if (e->claim == nullptr || e->claim->fetch_add(1, std::memory_order_acq_rel) == 0) {
        shard.fired.push_back(e->task);
      }
    });
    shard.next_due.store(shard.wheel.next_expiration(), std::memory_order_relaxed);
  }
  // Woken outside the lock; entries are not touched any more.
  std::size_t n = shard.fired.size();
  for (task_header* task : shard.fired) {
    if (trace_ring* trace = tracing(w->trace)) [[unlikely]] {
      trace->push({steady_now_ns(), 0, task_id(task), 0, nullptr, trace_kind::timer_fire});
    }
    wake(task);
  }
  shard.fired.clear();
  if (n != 0) w->counters.timers_fired.add(n);
  return n;
}

std::uint64_t scheduler::timer_deadline_ns(worker* w) const noexcept {
  std::uint64_t due = w->timers.next_due.load(std::memory_order_relaxed);
  if (due == timer_wheel::never) return no_deadline;
  // `due` is at most ~12.4 days past the wheel's tick: no overflow.
  return steady_ns(epoch_) + due * 1'000'000;
}

bool timer_arm(timer_entry& entry, steady_clock::time_point deadline) {
  scheduler* sched = current_scheduler();
  if (sched == nullptr) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle: timer armed outside a spindle runtime");
  }
  return sched->arm_timer(entry, deadline);
}

bool timer_disarm(timer_entry& entry) noexcept {
  timer_shard* shard = entry.shard;
  if (shard == nullptr) return false;
  std::lock_guard lock(shard->mutex);
  if (!entry.linked) return false;
  shard->wheel.remove(&entry);
  // next_due may now be early: the owner's next check finds nothing due.
  return true;
}

}  // namespace spindle::detail
