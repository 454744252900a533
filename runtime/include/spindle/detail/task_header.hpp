// The header of a spawned task and the calls awaiters make into the scheduler.
//
// Shape: one 64-byte header per spawned task, in front of its root coroutine
// frame in the same pool block (see task_header), so that a task costs one
// allocation (header + frame) and a spawn none. Its `state` word packs the
// scheduling bits, a reference count and two fields fixed at the spawn:
//
//   bit 0 SCHEDULED   in a queue (or handed to a worker), will be polled
//   bit 1 RUNNING     a worker is resuming it now
//   bit 2 NOTIFIED    woken while RUNNING: re-queued when the poll returns
//   bit 3 COMPLETE    finished (normally, with an exception, or cancelled)
//   bit 4 CANCELLED   abort() was called or the runtime shut down
//   bit 5 JOIN_INTEREST  a join handle still refers to the task
//   bit 6 JOIN_WAKER  a join waiter is registered in `waiter`
//   bit 7 CLAIMED     a queue entry of the task is stale: a task awaiting it
//                     took it out of the queue's hands and polled it inline
//                     (run_inline); the entry holds one reference, and the
//                     worker that pops it only drops that reference. A wake
//                     meanwhile turns it live again (state_bits::mark_scheduled)
//                     instead of queueing a second entry.
//   bits 8..15        reference count (scheduler's reference + join handle's
//                     + a stale entry's: at most 3)
//   bits 16..31       the id of the task's runtime (scheduler_of; 0 once the
//                     runtime is gone), written at the spawn
//   bits 32..63       the spawn's time (spawn_time_of), for runtime::dump()
//
// Every transition keeps bits 16..63 (it sets and clears bits of the word it
// read, and adds or subtracts ref_one), so the two fixed fields cost no
// header bytes of their own: with the spawn site interned to 32 bits
// (spawn_site), the header is 8 words instead of 10, and the benchmark's
// parked task (48-byte frame) fits a 112-byte block.
//
// A wake that arrives while the task runs only sets NOTIFIED; the worker that
// polls it re-queues it after the poll, so no wake-up is lost and the task is
// never in two queues at once.
//
// Thread-safety: `state` is the only field written by several threads; every
// other field is written by whoever holds the RUNNING bit (or SCHEDULED before
// the first poll), or, for `waiter`, published by the JOIN_WAKER bit. The
// block belongs to the frame until the spawn (state 0) and to the header from
// then on (state != 0): destroying the frame early (abort, shutdown) leaves
// the block, which goes with the last reference (scheduler::free_task).
// Design source: Tokio's task header / state.rs (header, core and trailer in
// one allocation), Volt's 64-bit packed state,
// the notified-while-running rule of the Go process scheduler.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <system_error>

#include "spindle/task.hpp"
#include "spindle/task_info.hpp"

namespace spindle::detail {

class scheduler;

namespace state_bits {
inline constexpr std::uint64_t scheduled = 1u << 0;
inline constexpr std::uint64_t running = 1u << 1;
inline constexpr std::uint64_t notified = 1u << 2;
inline constexpr std::uint64_t complete = 1u << 3;
inline constexpr std::uint64_t cancelled = 1u << 4;
inline constexpr std::uint64_t join_interest = 1u << 5;
inline constexpr std::uint64_t join_waker = 1u << 6;
inline constexpr std::uint64_t claimed = 1u << 7;
inline constexpr std::uint64_t ref_one = 1u << 8;
/// The reference count's bits (8..15).
inline constexpr std::uint64_t ref_mask = std::uint64_t{0xff} << 8;
/// Where the runtime's id starts (bits 16..31) and its mask.
inline constexpr unsigned runtime_shift = 16;
inline constexpr std::uint64_t runtime_mask = std::uint64_t{0xffff} << runtime_shift;
/// Where the spawn's time starts (bits 32..63).
inline constexpr unsigned time_shift = 32;

/// The references `s` counts.
[[nodiscard]] constexpr std::uint64_t refs(std::uint64_t s) noexcept {
  return (s & ref_mask) / ref_one;
}

/// The fields of a new task's state that stay fixed: its runtime's id and
/// its spawn's time (in spawn_time_of's units).
[[nodiscard]] constexpr std::uint64_t fixed_fields(std::uint16_t runtime_id,
                                                   std::uint32_t spawn_time) noexcept {
  return std::uint64_t{runtime_id} << runtime_shift | std::uint64_t{spawn_time} << time_shift;
}

/// `s` marked SCHEDULED, for a task that is neither scheduled nor complete.
/// Sets `push` when the caller must queue an entry. When the task has a stale
/// entry (CLAIMED), that entry becomes the live one instead, and gives back
/// its reference (live entries hold none): a task is never in two queues, so
/// the global queue's intrusive link is never used twice.
[[nodiscard]] constexpr std::uint64_t mark_scheduled(std::uint64_t s, bool& push) noexcept {
  if ((s & claimed) != 0) {
    push = false;
    return ((s & ~claimed) | scheduled) - ref_one;
  }
  push = true;
  return s | scheduled;
}
}  // namespace state_bits

/// Something waiting for a task to complete: a task awaiting a join handle,
/// or a thread inside block_on. `notify` is called once, from the thread that
/// completes the task.
struct join_waiter {
  void (*notify)(join_waiter* self) noexcept = nullptr;
};

/// Embedded in an awaiter (as a base class): how to withdraw its suspension
/// from its waker when the task is aborted. `withdraw(hook)` gets the hook
/// back (static_cast it to the awaiter) and returns true when nothing will
/// wake the task for this suspension any more, false when the wake will
/// still come (see set_cancel_hook). Only the task's header points to it, so
/// it costs the awaiter 8 bytes and the header one pointer, not two.
struct cancel_hook {
  bool (*withdraw)(cancel_hook* self) noexcept = nullptr;
};

/// The header of a spawned task. It lives at the start of the block that
/// holds the task's root coroutine frame: every task<T> frame is allocated
/// with task_frame_prefix bytes in front of it (task_frame_allocate), so a
/// spawn allocates nothing and the task costs one block, not two. The frame
/// is at `this + task_frame_prefix`; the block outlives the frame when the
/// frame is destroyed early (abort, shutdown) and goes when the last
/// reference does.
struct alignas(16) task_header {
  std::atomic<std::uint64_t> state{0};     ///< 0: the block's frame was never spawned
  task_header* next = nullptr;             ///< run-queue / global-queue link
  std::coroutine_handle<> resume_point{};  ///< what the next poll resumes
  join_waiter* waiter = nullptr;           ///< published by JOIN_WAKER
  task_header* owned_prev = nullptr;       ///< owned-task list links (shutdown; see `listed`)
  task_header* owned_next = nullptr;
  /// How to withdraw the current suspension from its waker when the task is
  /// aborted (set_cancel_hook): a hook inside the awaiter, which lives in the
  /// suspended frame for as long as the suspension does. nullptr: suspended
  /// in an awaitable that does not know spindle (nothing can wake it through
  /// the scheduler).
  cancel_hook* cancel = nullptr;
  /// Where the task was spawned, for runtime::dump(): an interned id
  /// (spawn_sites.hpp; 0: unknown). Written at the spawn, before the task
  /// is published; left uninitialized until then.
  std::uint32_t spawn_site;
  std::uint8_t owned_list = 0;      ///< which owned-task list holds it (owned_tasks.hpp: < 256)
  std::uint8_t promise_offset = 0;  ///< the root's promise_base, bytes after the frame
  /// The awaiter of the current suspension (suspend_current), for
  /// runtime::dump(); written by the task's poller, read relaxed by dump().
  std::atomic<wait_kind> waits_on{wait_kind::none};
  bool cancelled_before_finish : 1 = false;  ///< the frame was destroyed, not finished
  /// In an owned-task list (owned_tasks.hpp): spawned from outside the
  /// workers, or suspended at least once. Written by whoever holds the task.
  bool listed : 1 = false;
  /// Polled at least once (set by every poll, scheduler::poll_held): before
  /// its first poll nothing of the task has run, so no waker, stop callback
  /// or suspension of it exists. Written by whoever holds the task.
  bool polled : 1 = false;
  /// Finished with an exception while a join handle held it: linked (through
  /// owned_prev/owned_next) in its scheduler's list of exceptions a handle
  /// may still take, so that dropping the handle counts an untaken one in
  /// runtime_stats::detached_exceptions (scheduler::hold_unobserved). Written
  /// before COMPLETE is published, then read by the handle's owner.
  bool unobserved : 1 = false;
  /// The byte's other bits, named so that the header's constructor writes
  /// its last word whole: with them left out it kept them, a load of the
  /// block's line (often in another worker's cache, which freed the block)
  /// that the spawning thread waited for at every spawn.
  std::uint8_t unused_bits : 4 = 0;

  /// The root frame (null once destroyed: cancelled_before_finish).
  [[nodiscard]] std::coroutine_handle<> frame() const noexcept {
    if (cancelled_before_finish) return {};
    return std::coroutine_handle<>::from_address(const_cast<char*>(frame_address()));
  }
  /// The root's promise (valid while the frame exists).
  [[nodiscard]] promise_base* root_promise() const noexcept {
    return reinterpret_cast<promise_base*>(const_cast<char*>(frame_address()) + promise_offset);
  }
  [[nodiscard]] char const* frame_address() const noexcept {
    return reinterpret_cast<char const*>(this) + task_frame_prefix;
  }
  /// The header in front of a task<T> frame (`frame` from the frame's handle).
  [[nodiscard]] static task_header* of_frame(void* frame) noexcept {
    return reinterpret_cast<task_header*>(static_cast<char*>(frame) - task_frame_prefix);
  }
};
static_assert(sizeof(task_header) == task_frame_prefix,
              "task_frame_prefix (frame_pool.hpp) must be the header's size");

/// The spawn's time (state bits 32..63) for runtime::dump()'s age:
/// steady_clock ns >> spawn_time_shift (units of about 1.05 ms), modulo
/// 2^32 (about 52 days). A worker's spawn takes its tick's start instead of
/// reading the clock.
inline constexpr unsigned spawn_time_shift = 20;

/// `ns` (steady_clock ns) in task_header::spawn_time's units, modulo 2^32.
[[nodiscard]] constexpr std::uint32_t spawn_time_of(std::uint64_t ns) noexcept {
  return static_cast<std::uint32_t>(ns >> spawn_time_shift);
}

/// The spawn time a task's state word `s` holds (spawn_time_of's units).
[[nodiscard]] constexpr std::uint32_t spawn_time_in(std::uint64_t s) noexcept {
  return static_cast<std::uint32_t>(s >> state_bits::time_shift);
}

/// Most runtimes alive at once: ids 1 .. max_runtimes - 1 (0: none).
inline constexpr std::size_t max_runtimes = std::size_t{1} << 16;

/// The live runtimes by id (scheduler.cpp's runtime_slot fills and clears
/// them): a task's state keeps its runtime's 16-bit id instead of an 8-byte
/// pointer. Relaxed loads suffice: a task reaches a thread only through a
/// queue, a waker or a handle, which all publish it after its runtime's
/// slot was written, and a slot is cleared only once no task of its runtime
/// can be reached through the runtime any more.
extern std::atomic<scheduler*> runtime_slots[max_runtimes];

/// The runtime a spawned task belongs to: nullptr once the runtime is gone
/// (a finished task whose exception a join handle may still take: see
/// task_header::unobserved).
[[nodiscard]] inline scheduler* scheduler_of(task_header const* task) noexcept {
  std::uint64_t const s = task->state.load(std::memory_order_relaxed);
  return runtime_slots[(s & state_bits::runtime_mask) >> state_bits::runtime_shift].load(
      std::memory_order_relaxed);
}

/// A task's id in runtime::dump() and in traces: its header's address / 16,
/// unique among the live tasks (a task spawned after another ended may
/// reuse its id).
[[nodiscard]] inline std::uint64_t task_id(task_header const* task) noexcept {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(task)) >> 4;
}

/// Inside a running spindle task: records `resume_at` as the point the next
/// poll resumes (and `other` as what it waits on: runtime::dump()), and
/// returns the task. Outside a task returns nullptr.
/// Called by awaiters from await_suspend. The suspension is not cancellable
/// (abort waits for its wake) until the awaiter calls set_cancel_hook.
task_header* suspend_current(std::coroutine_handle<> resume_at) noexcept;
/// suspend_current, saying which kind of awaiter suspends (an inline store
/// after the call, so that the call itself keeps no extra register).
inline task_header* suspend_current(std::coroutine_handle<> resume_at, wait_kind kind) noexcept {
  task_header* task = suspend_current(resume_at);
  if (task != nullptr) task->waits_on.store(kind, std::memory_order_relaxed);
  return task;
}

/// Called by an awaiter after suspend_current, while its task still runs:
/// when the task is aborted while suspended here, `withdraw(hook)` is called
/// (on the aborting thread, with the task held so that nobody resumes or
/// destroys it) and must detach the suspension from its waker. It returns
/// true when nothing will wake the task for this suspension any more (the
/// frame is then destroyed at once), false when the wake will still come
/// (for example an I/O cancellation whose completion is pending): the frame
/// is destroyed at that wake instead of being resumed. `hook` (usually the
/// awaiter itself, which derives from cancel_hook) must live until the
/// suspension ends.
inline void set_cancel_hook(task_header* task, cancel_hook* hook,
                            bool (*withdraw)(cancel_hook*) noexcept) noexcept {
  hook->withdraw = withdraw;
  task->cancel = hook;
}

/// set_cancel_hook for a hook whose `withdraw` is set already (a static
/// hook shared by many suspensions: it is only read).
inline void set_cancel_hook(task_header* task, cancel_hook* hook) noexcept {
  task->cancel = hook;
}

/// Called by an awaiter after suspend_current when it does not suspend after
/// all, or suspends somewhere nothing can withdraw it from: an abort then
/// destroys the frame at once.
inline void clear_cancel_hook(task_header* task) noexcept {
  task->cancel = nullptr;
}

/// Called by yield_now after suspend_current returned a task: the end of
/// the current poll re-queues it at the back of the run queue, as a wake
/// during the poll would, with one state transition fewer.
void yield_current() noexcept;

/// What take_sync_io_budget grants.
enum class sync_io_grant : std::uint8_t {
  granted,  ///< one unit of the poll's budget taken: complete the I/O now
  spent,    ///< allowed, but this poll used its budget: yield, then ask again
  off,      ///< not in a spindle task, or try_cached_reads is off: use the driver
};

/// For I/O that can complete synchronously (io::file::read_at's cached
/// reads): `granted`, taking one unit of the current poll's budget
/// (sync_io_per_poll, 64), when the caller runs in a spindle task whose
/// runtime allows it (runtime_config::try_cached_reads) and the poll has
/// budget left; `spent` when it allows it and the poll has none left (the
/// caller yields, as Tokio's coop budget makes a resource return Pending
/// and wake the task at once, and its next poll has a fresh budget);
/// `off` otherwise (then use the I/O driver, which suspends the task).
[[nodiscard]] sync_io_grant take_sync_io_budget() noexcept;

/// The task the calling thread is polling now, or nullptr.
[[nodiscard]] task_header* current_task() noexcept;

/// Throws std::system_error(operation_not_permitted) unless `self` is set.
inline void require_task(task_header* self, char const* what) {
  if (self == nullptr) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted), what);
  }
}

/// Throws std::system_error(operation_not_permitted) inside a spindle task.
inline void require_no_task(char const* what) {
  if (current_task() != nullptr) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted), what);
  }
}

/// current_worker_index() on a thread that is not a worker.
inline constexpr std::size_t not_a_worker = static_cast<std::size_t>(-1);
/// Index of the calling thread's worker in its runtime, or not_a_worker.
[[nodiscard]] std::size_t current_worker_index() noexcept;

/// Wakes a task: schedules it if it is idle, marks it NOTIFIED if it is
/// running, does nothing if it is already scheduled or complete. Any thread.
void wake(task_header* task) noexcept;

/// The join fast path: called by a task that is about to wait for `task`
/// (its own await_suspend, after suspend_current). When `task` is queued and
/// has not started, and the caller runs on a worker of the same runtime with
/// budget and nesting depth to spare, polls it here, nested in the caller's
/// poll, instead of suspending the caller and queueing both. Returns true
/// when `task` is complete afterwards (the caller resumes at once), false
/// when it was not polled or suspended (the caller registers a join waiter).
/// Design source: libfork's and TBB's "help the child you wait for", Tokio's
/// coop budget bounding it.
bool run_inline(task_header* task) noexcept;

/// Registers `waiter` to be notified when `task` completes. Returns false
/// (and registers nothing) when the task is already complete.
[[nodiscard]] bool join_register(task_header* task, join_waiter* waiter) noexcept;

/// Removes a registration made by join_register if it was not notified yet.
/// Returns true when it was removed, false when the notify has happened or is
/// under way (then the caller must wait for it).
bool join_unregister(task_header* task) noexcept;

/// The join handle's side: drops join interest and the handle's reference.
void join_detach(task_header* task) noexcept;

/// Requests cancellation (join_handle::abort).
void task_abort(task_header* task) noexcept;

/// What task_abort_here achieved.
enum class abort_here_result : std::uint8_t {
  gone,     ///< the frame is destroyed (here, or before the call) or the task had finished
  running,  ///< being polled on another thread (or held there for a moment): its
            ///< poll's end destroys it; call again to see where it stands
  pending,  ///< suspended in an awaiter that cannot withdraw (I/O being cancelled):
            ///< the frame is destroyed at that operation's wake, on a worker
};

/// Cancels `task` like task_abort, but destroys its frame on the calling
/// thread, before returning, when the task is queued (the queue entry is left
/// behind and completes it when popped) or suspended in an awaiter that
/// withdraws. Used by scopes that must not return while a child's frame
/// still exists (task_group's destructor, when_all/when_any aborted).
/// Must not be called on the calling thread's own current task.
abort_here_result task_abort_here(task_header* task) noexcept;

/// True once the task was asked to stop (abort() or runtime shutdown).
[[nodiscard]] inline bool task_is_cancelled(task_header const* task) noexcept {
  return (task->state.load(std::memory_order_acquire) & state_bits::cancelled) != 0;
}

[[nodiscard]] inline bool task_is_complete(task_header const* task) noexcept {
  return (task->state.load(std::memory_order_acquire) & state_bits::complete) != 0;
}

}  // namespace spindle::detail
