// A worker's LIFO slot (Tokio's lifo_slot): the one task its owner spawned
// or woke last, run next. The owner fills it, takes it and puts it back
// without a locked instruction; only a rescue of a stalled worker's task
// (scheduler_core::rescue_lifo), which is rare, pays for their agreement.
//
// Shape: the slot (one pointer), and on the same cache line the rescue
// record: `claim` (a rescue started and the owner has not yet settled it),
// `taken` (what the rescue took out: a task or nullptr) and `done` (the
// record is complete).
//
// Protocol, an asymmetric Dekker (the heavy side is the rare one, as in
// userspace RCU's and Folly's asymmetric fences): the owner takes a task
// with a plain load and a plain store of nullptr, then reads `claim`. A
// rescuer sets `claim`, makes every thread of the process pass a full
// barrier (membarrier(2), MEMBARRIER_CMD_PRIVATE_EXPEDITED), and only then
// exchanges the slot. Either the owner's read of `claim` saw the rescue
// (then it waits for `done` and gives the task up if `taken` is it), or
// the owner's store of nullptr was visible to the rescuer's exchange
// (which then cannot return the owner's task). Only the owner resets the
// record, and before it fills the slot again, so a `taken` it compares
// with is always from a rescue of the slot's present content (no ABA when
// a rescued task's block comes back as a new task). Where membarrier is
// not available (kernels before 4.14, or seccomp), the owner's take has a
// full fence between its store and its read instead (sequentially
// consistent fences on both sides): correct, and as costly as the
// exchange it replaces.
//
// Measured (bench_runtime, 2-core AMD EPYC VM, the exchange on every take
// and a CAS on every detached spawn replaced by plain accesses):
// chained_spawn/2 about 15% faster, spawn_await about 12% faster.
//
// Thread-safety: put, take, take_if, replace and drain by the owner (the
// worker's thread, or whoever holds the worker exclusively); rescue from
// any other thread; peek from any thread (a hint).
// Design source: Tokio's LIFO slot (owner-only there: Tokio cannot steal
// it, its issue #4941); the stalled-worker rescue is issue 19's; the
// asymmetric barrier is Linux membarrier(2)'s documented use.
#pragma once

#include <atomic>
#include <cstdint>

#include "spindle/detail/cpu_relax.hpp"

namespace spindle::detail {

/// Registers the process for expedited private membarriers, once; true when
/// asymmetric_barrier() is a membarrier from then on. False when the kernel
/// refuses (or SPINDLE_LIFO_MEMBARRIER=0): the owners of LIFO slots then
/// fence every take. Thread-safe.
[[nodiscard]] bool lifo_membarrier_available() noexcept;

/// The rescuer's side of the barrier: a membarrier when available, a
/// sequentially consistent fence otherwise (lifo_slot.cpp).
void lifo_rescuer_barrier() noexcept;

/// No pause: the production slot. Tests pass a type whose static
/// owner_window() widens the owner's window between reading the slot and
/// emptying it, where a rescue must be noticed.
struct lifo_no_pause {
  static void owner_window() noexcept {}
};

template <class T, class Pause = lifo_no_pause>
class basic_lifo_slot {
 public:
  /// `owner_fences`: true when lifo_membarrier_available() is false.
  explicit basic_lifo_slot(bool owner_fences = !lifo_membarrier_available()) noexcept
      : owner_fences_(owner_fences) {}
  basic_lifo_slot(basic_lifo_slot const&) = delete;
  basic_lifo_slot& operator=(basic_lifo_slot const&) = delete;

  /// Any thread: the task in the slot now (a hint unless called by the owner
  /// with no rescue possible).
  [[nodiscard]] T* peek() const noexcept { return slot_.load(std::memory_order_relaxed); }

  /// Owner: fills the empty slot.
  void put(T* task) noexcept {
    if (claim_.load(std::memory_order_relaxed) != 0) [[unlikely]]
      settle();
    slot_.store(task, std::memory_order_release);
  }

  /// Owner: the task, taken out; nullptr when the slot is empty or a rescue
  /// took its task.
  [[nodiscard]] T* take() noexcept {
    T* task = slot_.load(std::memory_order_relaxed);
    if (task == nullptr) return nullptr;
    Pause::owner_window();
    slot_.store(nullptr, std::memory_order_relaxed);
    return confirm(task);
  }

  /// Owner: takes `task` out if the slot holds it; false otherwise (another
  /// task, empty, or a rescue took it).
  [[nodiscard]] bool take_if(T* task) noexcept {
    if (slot_.load(std::memory_order_relaxed) != task) return false;
    Pause::owner_window();
    slot_.store(nullptr, std::memory_order_relaxed);
    return confirm(task) != nullptr;
  }

  /// Owner: puts `task` in; returns the task it displaced (nullptr when the
  /// slot was empty or a rescue took it).
  [[nodiscard]] T* replace(T* task) noexcept {
    T* old = take();
    put(task);
    return old;
  }

  /// A thread that is not the owner (a searcher or the watcher that found
  /// the owner stalled): the task, taken out, or nullptr (empty, or another
  /// rescue not yet settled by the owner).
  [[nodiscard]] T* rescue() noexcept {
    std::uint32_t expected = 0;
    if (claim_.load(std::memory_order_relaxed) != 0 ||
        !claim_.compare_exchange_strong(expected, 1, std::memory_order_seq_cst,
                                        std::memory_order_relaxed)) {
      return nullptr;
    }
    lifo_rescuer_barrier();
    T* task = slot_.exchange(nullptr, std::memory_order_seq_cst);
    taken_.store(task, std::memory_order_relaxed);
    done_.store(true, std::memory_order_release);
    return task;
  }

  /// Whoever holds the worker alone (shutdown, after its thread ended): the
  /// task, taken out.
  [[nodiscard]] T* drain() noexcept { return slot_.exchange(nullptr, std::memory_order_acquire); }

 private:
  // The owner stored nullptr over `task`: keeps it unless a rescue took it.
  [[gnu::always_inline]] T* confirm(T* task) noexcept {
    if (owner_fences_) {
      std::atomic_thread_fence(std::memory_order_seq_cst);
    } else {
      // The CPU's order is the membarrier's business; the compiler's, ours.
      std::atomic_signal_fence(std::memory_order_seq_cst);
    }
    if (claim_.load(std::memory_order_relaxed) == 0) [[likely]]
      return task;
    return confirm_claimed(task);
  }

  [[gnu::noinline]] T* confirm_claimed(T* task) noexcept {
    T* rescued = settle();
    return rescued == task ? nullptr : task;
  }

  // Waits for the rescue to finish its exchange and resets the record;
  // returns what the rescue took.
  [[gnu::noinline]] T* settle() noexcept {
    while (!done_.load(std::memory_order_acquire))
      cpu_relax();
    T* rescued = taken_.load(std::memory_order_relaxed);
    taken_.store(nullptr, std::memory_order_relaxed);
    done_.store(false, std::memory_order_relaxed);
    claim_.store(0, std::memory_order_release);
    return rescued;
  }

  std::atomic<T*> slot_{nullptr};
  std::atomic<std::uint32_t> claim_{0};
  std::atomic<bool> done_{false};
  bool const owner_fences_;
  std::atomic<T*> taken_{nullptr};
};

struct task_header;
using lifo_slot = basic_lifo_slot<task_header>;

}  // namespace spindle::detail
