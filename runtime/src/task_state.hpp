// The task state machine: every transition of task_header::state that
// scheduling makes, as functions of the state word alone.
//
// Shape: each function is one compare-and-swap loop over the 64-bit state
// word (bits and reference count: spindle/detail/task_header.hpp) and
// returns what the caller must do next (queue the task, poll it, release a
// stale entry, ...). None touches a queue, a thread or a frame: the
// scheduler (task_harness.cpp) acts on the answers, and so does the
// deterministic simulation (tests/test_sim.cpp), which drives these same
// functions on real headers with virtual workers.
//
// The transitions, by who makes them:
//   take_entry        a worker popped an entry: SCHEDULED -> RUNNING, or the
//                     entry is stale (CLAIMED), or handed back to abort_here
//   claim_for_inline  a task awaiting a queued one polls it inline: SCHEDULED
//                     -> RUNNING, leaving a stale entry (CLAIMED, one
//                     reference) unless it came out of the caller's LIFO slot
//   claim_fresh_for_inline  claim_for_inline without a CAS, for a task out of
//                     the caller's LIFO slot that nobody else can reach
//                     (never polled, not listed)
//   take_entry_alone  take_entry without a CAS, for a task nobody else can
//                     write to (detached, one reference, never polled)
//   finish_poll       a poll ended with the task suspended: RUNNING -> idle,
//                     or re-queued (NOTIFIED while running, or yielded)
//   mark_woken        a waker: idle -> SCHEDULED (the caller queues it, or its
//                     stale entry turns live), RUNNING -> RUNNING|NOTIFIED
//   mark_complete     the poll that finished the task: -> COMPLETE, dropping
//                     the scheduler's reference in the same step when nobody
//                     waits for the join
//   mark_complete_alone  mark_complete without a CAS, for a task nobody else
//                     can reach (not listed, detached, one reference)
//   mark_complete_dropped  mark_complete's case of a join handle without a
//                     waiter (one CAS, no struct of results)
//   mark_complete_inline_alone  mark_complete_dropped without a CAS, for a
//                     task claim_fresh_for_inline claimed and its first
//                     poll finished
//   release_stale     a stale entry leaves a queue: drops CLAIMED and its
//                     reference
//   mark_aborted      abort(): CANCELLED on a queued or running task, or
//                     CANCELLED|RUNNING (held) on a suspended one
//   hold_for_abort_here, release_to_entry, release_to_pending_wake
//                     abort_here(): hold the task, destroy its frame, then
//                     hand it to its queue entry or its pending wake
//   release_cancelled the holder of a cancelled suspended task lets it go:
//                     queued to be destroyed, or left for its pending wake
//   set_join_waker, clear_join_waker, drop_join_if_running,
//   drop_join_of_complete
//                     a join handle registers, withdraws, lets go
//   drop_ref          one reference goes
//   mark_destroyed    shutdown: a task whose frame the runtime destroyed
//
// Thread-safety: every function may race with every other on the same task
// from any thread; each is linearized by its CAS.
// Design source: Tokio's task/state.rs (transition_to_running,
// transition_to_idle, transition_to_notified_by_val), Volt's packed state.
#pragma once

#include <cstdint>

#include "spindle/detail/task_header.hpp"

namespace spindle::detail::task_state {

namespace sb = state_bits;

/// What a worker does with an entry it popped from a queue.
enum class entry_action : std::uint8_t {
  poll,         ///< RUNNING is now held: poll the task (cancel it when CANCELLED)
  stale,        ///< a stale entry (CLAIMED): release it (release_stale)
  handed_back,  ///< abort_here holds the task: the entry went back to it (SCHEDULED cleared)
};

/// A worker popped `task`'s entry. On `poll`, `s` is the state before the
/// transition (SCHEDULED set, RUNNING clear).
[[nodiscard]] inline entry_action take_entry(task_header* task, std::uint64_t& s) noexcept {
  s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::claimed) != 0) [[unlikely]] {
      // The task was taken out of this entry's hands (poll_inline). A wake
      // since would have turned the entry live and cleared CLAIMED.
      return entry_action::stale;
    }
    if ((s & sb::running) != 0) [[unlikely]] {
      // Queued, but abort_here holds it and is destroying its frame: hand
      // the entry back by clearing SCHEDULED; abort_here completes it.
      if (task->state.compare_exchange_weak(s, s & ~sb::scheduled, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        return entry_action::handed_back;
      }
      continue;
    }
    if (task->state.compare_exchange_weak(s, (s & ~sb::scheduled) | sb::running,
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      return entry_action::poll;
    }
  }
}

/// take_entry's path for a task nobody else can write to: detached, with
/// the entry's holder (the scheduler) the only reference, and never polled.
/// Without a reference only a waker or a stop callback's abort writes the
/// state; neither exists before the first poll (a stop callback is
/// registered by it; after a poll, an abort of the queued task would set
/// CANCELLED, which a plain store could lose). No handle can abort, claim
/// or join the task, no stale entry holds it: a plain store takes RUNNING (a
/// detached spawn's first poll, as every link of a chain of spawns).
/// `polled` and `listed` are read only after the state said so: nobody can
/// be polling the task then. False, changing nothing, when take_entry must
/// run.
[[nodiscard]] inline bool take_entry_alone(task_header* task, std::uint64_t& s) noexcept {
  s = task->state.load(std::memory_order_acquire);
  if ((s & (sb::claimed | sb::running | sb::join_interest)) != 0 || sb::refs(s) != 1) {
    return false;
  }
  if (task->polled || task->listed) return false;
  task->state.store((s & ~sb::scheduled) | sb::running, std::memory_order_relaxed);
  return true;
}

/// A stale entry of `task` leaves a queue (popped, or carried off by an
/// overflow or at shutdown): clears CLAIMED and drops the entry's reference.
/// Returns false, changing nothing, when the entry is live (no CLAIMED: a
/// wake turned it live). On true, `last` says the dropped reference was the
/// last one (the caller frees the task).
[[nodiscard]] inline bool release_stale(task_header* task, bool& last) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  while ((s & sb::claimed) != 0) {
    if (task->state.compare_exchange_weak(s, (s & ~sb::claimed) - sb::ref_one,
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      last = sb::refs(s) == 1;
      return true;
    }
  }
  return false;
}

/// A task awaiting `task` polls it inline: claims it when it is queued and
/// not started (SCHEDULED only). `from_lifo`: the caller takes it out of its
/// own LIFO slot, so no entry remains; otherwise its entry stays behind as a
/// stale one (CLAIMED) holding a reference. On true, `next` is the new state
/// (RUNNING held); false when the task cannot be claimed.
[[nodiscard]] inline bool claim_for_inline(task_header* task, bool from_lifo,
                                           std::uint64_t& next) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    constexpr std::uint64_t mask =
        sb::scheduled | sb::running | sb::complete | sb::cancelled | sb::claimed;
    if ((s & mask) != sb::scheduled) return false;
    next = (s & ~sb::scheduled) | sb::running;
    if (!from_lifo) next = (next | sb::claimed) + sb::ref_one;
    if (task->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return true;
    }
  }
}

/// claim_for_inline without a CAS, for a task the caller has just taken
/// out of its own LIFO slot that was never polled and is not listed: its
/// spawn there by this worker, its join handle held by the caller (the
/// awaiting task), and nothing else can reach it. Nothing can wake it (no
/// poll has handed out a waker), abort it (only through its join handle) or
/// stop it (a stop callback is registered by the first poll); no entry is
/// left in a queue, and shutdown finds it only through the queues and the
/// owned lists. join_detach's fast path rests on the same facts. `polled`
/// and `listed` are read only once the task is out of the slot, where a
/// rescue could have taken it and its poll written the same byte. On true,
/// `next` is the new state (RUNNING held); false, changing nothing, when
/// claim_for_inline must run.
[[nodiscard]] inline bool claim_fresh_for_inline(task_header* task, std::uint64_t& next) noexcept {
  std::uint64_t const s = task->state.load(std::memory_order_relaxed);
  constexpr std::uint64_t mask =
      sb::scheduled | sb::running | sb::complete | sb::cancelled | sb::claimed;
  if ((s & mask) != sb::scheduled || task->polled || task->listed) return false;
  next = (s & ~sb::scheduled) | sb::running;
  task->state.store(next, std::memory_order_relaxed);
  return true;
}

/// How a poll that did not complete its task ended.
enum class poll_end : std::uint8_t {
  suspended,    ///< RUNNING released: only its waker (and the owned list) reach it now
  requeue,      ///< SCHEDULED again: the caller queues it at the back of the run queue
  turned_live,  ///< SCHEDULED again through its stale entry: nothing to queue
  cancelled,    ///< aborted while it ran: RUNNING is still held, the caller cancels it
};

/// The end of a poll whose task suspended. `yielded`: it suspended in
/// yield_now (re-queued as a wake during the poll would be). `on_suspend`
/// is called before the task is left suspended with nobody queueing it (the
/// scheduler lists it in an owned list: owned_tasks.hpp); it may be called
/// more than once if the CAS retries, and must be idempotent.
template <class OnSuspend>
[[nodiscard]] poll_end finish_poll(task_header* task, bool yielded,
                                   OnSuspend&& on_suspend) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  std::uint64_t next;
  bool push;
  bool notified;
  do {
    notified = (s & sb::notified) != 0 || yielded;
    if ((s & sb::cancelled) != 0 && !notified) return poll_end::cancelled;
    next = s & ~sb::running;
    push = false;
    if (notified) {
      next = sb::mark_scheduled(next & ~sb::notified, push);
    } else {
      on_suspend();
    }
  } while (!task->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                              std::memory_order_acquire));
  if (!notified) return poll_end::suspended;
  return push ? poll_end::requeue : poll_end::turned_live;
}

/// A wake: marks an idle task SCHEDULED (true: the caller queues it; when
/// the task has a stale entry, that entry turns live and this returns false),
/// a running one NOTIFIED (its poll's end re-queues it). Nothing for a task
/// already scheduled, notified or complete.
[[nodiscard]] inline bool mark_woken(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::complete) != 0) return false;
    if ((s & sb::running) != 0) {
      if ((s & sb::notified) != 0) return false;
      if (task->state.compare_exchange_weak(s, s | sb::notified, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        return false;
      }
      continue;
    }
    if ((s & sb::scheduled) != 0) return false;
    bool push = true;
    if (task->state.compare_exchange_weak(s, sb::mark_scheduled(s, push), std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return push;
    }
  }
}

/// What mark_complete did.
struct completion {
  std::uint64_t prev = 0;  ///< the state before
  /// A join handle holds a reference and no waiter is registered: the
  /// scheduler's reference was dropped in the transition (the handle's keeps
  /// the block; the caller must not touch the task afterwards).
  bool dropped = false;
  /// Detached, and the scheduler's was the only reference: dropped too; the
  /// caller frees the task.
  bool last = false;
};

/// `s` finished: COMPLETE, with RUNNING, NOTIFIED and SCHEDULED cleared.
[[nodiscard]] constexpr std::uint64_t completed(std::uint64_t s) noexcept {
  return (s & ~(sb::running | sb::notified | sb::scheduled)) | sb::complete;
}

/// The holder of RUNNING finishes the task: COMPLETE, with RUNNING,
/// NOTIFIED and SCHEDULED cleared.
[[nodiscard]] inline completion mark_complete(task_header* task) noexcept {
  completion c;
  c.prev = task->state.load(std::memory_order_acquire);
  std::uint64_t next;
  do {
    next = completed(c.prev);
    c.dropped = (c.prev & (sb::join_interest | sb::join_waker)) == sb::join_interest;
    c.last = (c.prev & sb::join_interest) == 0 && sb::refs(c.prev) == 1;
    if (c.dropped || c.last) next -= sb::ref_one;
  } while (!task->state.compare_exchange_weak(c.prev, next, std::memory_order_acq_rel,
                                              std::memory_order_acquire));
  return c;
}

/// mark_complete's path for a task whose join handle holds a reference and
/// has no waiter registered (its awaiting task ran it inline, or will look
/// later): COMPLETE and the scheduler's reference dropped in one CAS, as
/// mark_complete's `dropped`. True when it did; false, changing nothing,
/// when the state is not that (mark_complete must run).
[[nodiscard]] inline bool mark_complete_dropped(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  while ((s & (sb::join_interest | sb::join_waker)) == sb::join_interest) {
    if (task->state.compare_exchange_weak(s, completed(s) - sb::ref_one, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return true;
    }
  }
  return false;
}

/// mark_complete's path for a finished task that is not listed, detached,
/// with the holder's the only reference (no join handle, no stale entry):
/// no other thread will look at it again. The only writers without a
/// reference are a late waker (NOTIFIED) and a stop callback's abort
/// (CANCELLED, spindle/stop_token.hpp), and neither matters now: the
/// callback went with the frame's locals before the frame finished
/// (std::stop_callback waits for a running one), and the task is finished
/// and freed either way, as mark_complete's CAS would. So a plain store
/// completes it, dropping the last reference: true, and the caller frees
/// the task (a detached spawn that finishes at once, as every link of a
/// chain of spawns). False, changing nothing, when mark_complete must run.
/// The caller checked `listed` while holding RUNNING.
[[nodiscard]] inline bool mark_complete_alone(task_header* task) noexcept {
  std::uint64_t const s = task->state.load(std::memory_order_acquire);
  if ((s & sb::join_interest) != 0 || sb::refs(s) != 1) return false;
  task->state.store(completed(s) - sb::ref_one, std::memory_order_relaxed);
  return true;
}

/// mark_complete_dropped without a CAS, for a task that claim_fresh_for_inline
/// claimed and whose first poll finished it, not listed and not failed:
/// its join handle's holder is the task that polled it inline, waiting on
/// this thread, so the handle registers no waiter and lets go of nothing
/// meanwhile. With two references (the handle's and the scheduler's) no
/// one else holds one, and none can be taken without one. The writers
/// without a reference, a late waker and a stop callback's abort, do not
/// matter, as for mark_complete_alone. COMPLETE, and the scheduler's
/// reference dropped (the handle's keeps the block): true. False, changing
/// nothing, when the state is not that (a waiter registered, or other than
/// the two references): mark_complete runs then.
[[nodiscard]] inline bool mark_complete_inline_alone(task_header* task) noexcept {
  std::uint64_t const s = task->state.load(std::memory_order_acquire);
  if ((s & (sb::join_interest | sb::join_waker)) != sb::join_interest || sb::refs(s) != 2) {
    return false;
  }
  task->state.store(completed(s) - sb::ref_one, std::memory_order_release);
  return true;
}

/// What mark_aborted did.
enum class abort_step : std::uint8_t {
  none,    ///< complete or cancelled already: nothing to do
  marked,  ///< queued or running: CANCELLED set; its next poll (or its poll's end) cancels it
  held,    ///< suspended: CANCELLED|RUNNING set; the caller withdraws it (cancel_owned)
};

/// abort(): asks `task` to stop.
[[nodiscard]] inline abort_step mark_aborted(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & (sb::complete | sb::cancelled)) != 0) return abort_step::none;
    if ((s & (sb::scheduled | sb::running)) != 0) {
      if (task->state.compare_exchange_weak(s, s | sb::cancelled, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        return abort_step::marked;
      }
      continue;
    }
    // Suspended: take it as if to poll it (RUNNING), so that nobody resumes
    // or destroys it while its awaiter withdraws.
    if (task->state.compare_exchange_weak(s, s | sb::cancelled | sb::running,
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      return abort_step::held;
    }
  }
}

/// What hold_for_abort_here did.
enum class abort_here_step : std::uint8_t {
  gone,            ///< complete already
  running,         ///< polled (or held) on another thread: CANCELLED is set, its poll's end
                   ///< destroys it
  pending,         ///< suspended, and an earlier abort's hook said its wake is still coming
  held_queued,     ///< queued: CANCELLED|RUNNING now held; its entry stays in the queue
  held_suspended,  ///< suspended: CANCELLED|RUNNING now held
};

/// abort_here's first step: holds `task` (RUNNING) when it is queued or
/// suspended, so that nobody polls, resumes or destroys it meanwhile.
[[nodiscard]] inline abort_here_step hold_for_abort_here(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::complete) != 0) return abort_here_step::gone;
    if ((s & sb::running) != 0) {
      if ((s & sb::cancelled) != 0 ||
          task->state.compare_exchange_weak(s, s | sb::cancelled, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        return abort_here_step::running;
      }
      continue;
    }
    if ((s & (sb::scheduled | sb::cancelled)) == sb::cancelled) return abort_here_step::pending;
    if (task->state.compare_exchange_weak(s, s | sb::cancelled | sb::running,
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      return (s & sb::scheduled) != 0 ? abort_here_step::held_queued
                                      : abort_here_step::held_suspended;
    }
  }
}

/// abort_here destroyed the frame of a task it held while queued: lets the
/// queue entry complete it (RUNNING and NOTIFIED cleared; true), or finds
/// that the entry was popped meanwhile and handed back (take_entry cleared
/// SCHEDULED; false: the caller completes the task).
[[nodiscard]] inline bool release_to_entry(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::scheduled) == 0) return false;
    if (task->state.compare_exchange_weak(s, s & ~(sb::running | sb::notified),
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      return true;
    }
  }
}

/// abort_here holds a suspended task whose awaiter could not withdraw (its
/// wake is still coming): releases RUNNING and leaves the task to that wake
/// (true), or finds that the wake came while it was held (NOTIFIED; false:
/// nothing else will wake it, the caller finishes it).
[[nodiscard]] inline bool release_to_pending_wake(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::notified) != 0) return false;
    if (task->state.compare_exchange_weak(s, s & ~sb::running, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return true;
    }
  }
}

/// The holder of RUNNING on a cancelled, suspended task lets it go:
/// SCHEDULED when `detached` (nothing will wake it) or when it was woken
/// meanwhile (NOTIFIED), so that a worker's poll destroys the frame; idle
/// otherwise, left for its pending wake. True: the caller queues it.
[[nodiscard]] inline bool release_cancelled(task_header* task, bool detached) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  std::uint64_t next;
  bool push = false;
  do {
    next = s & ~(sb::running | sb::notified);
    push = false;
    if (detached || (s & sb::notified) != 0) next = sb::mark_scheduled(next, push);
  } while (!task->state.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                              std::memory_order_acquire));
  return push;
}

/// join_register: publishes the waiter (JOIN_WAKER). False when the task is
/// complete already (nothing registered).
[[nodiscard]] inline bool set_join_waker(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::complete) != 0) return false;
    if (task->state.compare_exchange_weak(s, s | sb::join_waker, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return true;
    }
  }
}

/// join_unregister: withdraws JOIN_WAKER unless the completion has taken it
/// (false: the notify has happened or is under way).
[[nodiscard]] inline bool clear_join_waker(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_acquire);
  for (;;) {
    if ((s & sb::complete) != 0 || (s & sb::join_waker) == 0) return false;
    if (task->state.compare_exchange_weak(s, s & ~sb::join_waker, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return true;
    }
  }
}

inline constexpr std::uint64_t join_bits = sb::join_interest | sb::join_waker;

/// A join handle lets go of a task that has not completed: clears the join
/// bits and drops the handle's reference, never the last one (the
/// scheduler's remains until completion). False, with `s` the state seen,
/// when the task has completed (drop_join_of_complete then).
[[nodiscard]] inline bool drop_join_if_running(task_header* task, std::uint64_t& s) noexcept {
  s = task->state.load(std::memory_order_acquire);
  while ((s & sb::complete) == 0) {
    if (task->state.compare_exchange_weak(s, (s & ~join_bits) - sb::ref_one,
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      return true;
    }
  }
  return false;
}

/// A join handle lets go of a completed task (`s`: a state seen with
/// COMPLETE, by an acquire load or RMW): clears the join bits and drops its
/// reference in one RMW. True when that was the last reference (the caller
/// frees the task).
[[nodiscard]] inline bool drop_join_of_complete(task_header* task, std::uint64_t s) noexcept {
  // The handle's reference is the only one left (the scheduler's went at
  // completion, and no waker or queue entry holds one): nobody else can
  // take a reference, read or write the state any more, so `s` is its last
  // value and the task is freed without an RMW. The acquire that saw `s`
  // read the last reference drop of every other holder (RMWs all, one
  // release sequence), so their writes happen before the free. A locked
  // RMW waits for its line: a thread dropping many handles whose tasks
  // completed on other workers paid a transfer per handle, one at a time
  // (`spawn_many_remote_idle`'s handles, dropped by the spawning thread).
  // Design source: libstdc++'s shared_ptr release, which checks for a
  // last owner with a plain load before its atomic decrement.
  if (sb::refs(s) == 1) return true;
  while (!task->state.compare_exchange_weak(s, (s & ~join_bits) - sb::ref_one,
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
  }
  return sb::refs(s) == 1;
}

/// Drops one reference. True when it was the last (the caller frees the task).
[[nodiscard]] inline bool drop_ref(task_header* task) noexcept {
  return sb::refs(task->state.fetch_sub(sb::ref_one, std::memory_order_acq_rel)) == 1;
}

/// Shutdown: the runtime destroyed the frame of a task that never finished.
/// COMPLETE and CANCELLED; JOIN_WAKER cleared, which tells a waiter that
/// polls the state (child_set::close) that no notify will come.
inline void mark_destroyed(task_header* task) noexcept {
  std::uint64_t s = task->state.load(std::memory_order_relaxed);
  while (!task->state.compare_exchange_weak(
      s,
      (s & ~(sb::scheduled | sb::running | sb::notified | sb::join_waker)) | sb::complete |
          sb::cancelled,
      std::memory_order_acq_rel)) {
  }
}

}  // namespace spindle::detail::task_state
