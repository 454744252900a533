// The spawned tasks that only shutdown can reach, and the runtime's spawn
// gate (accepting spawns, or closed).
//
// Shape: one intrusive doubly-linked list per worker plus one for other
// threads, each behind a small spinlock with its own count; one closed flag
// for the whole runtime that a worker's spawn reads without a lock; and the
// gate of the spawns from other threads: a word of entered tasks (twice
// their number, plus the closed bit) and a count of the ones whose push has
// ended, on a line of their own that only those spawns write.
//
// Which tasks are listed: every task from the first time it is suspended
// with nobody queueing it (scheduler::poll_held lists it before it lets go
// of RUNNING; link() never refuses), whoever spawned it. A task that is
// queued or running is reached through the queue that holds it or the
// thread that polls it, so a spawn that completes without suspending (the
// common case) touches no list and no lock: not the spawning thread, and
// not the worker that completes it. At shutdown the gate closes, the workers
// stop; then the scheduler links the queued tasks that are not listed
// (drain_queues) and destroys everything listed (pop_any).
//
// A worker's spawn that reads the gate open just before close() is queued
// and then polled before the workers stop, or destroyed with the queues:
// the same as a spawn that came just before close(). A spawn from another
// thread enters the gate (one RMW: refused once closed), pushes its task
// into a queue and leaves (one RMW); close() sets the closed bit with an
// RMW on the same word and waits until every spawn that entered before it
// has left, so each such task is in a queue before the workers stop.
//
// Thread-safety: all members, any thread. The lists' links in a header are
// written under the shard's lock; `listed` by whoever holds the task (its
// RUNNING bit, or the shutting-down thread once the workers are stopped).
// Design source: Tokio's OwnedTasks (sharded lists), the scanner executor
// (the accepting gate); close() waits for the spawns inside the gate as a
// writer of a reader-writer lock waits for the readers inside.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>

#include "intrusive_list.hpp"
#include "spindle/detail/task_header.hpp"

namespace spindle::detail {

/// The links of the owned-task lists (and of the unobserved-exception list).
using owned_links =
    intrusive_links<task_header, &task_header::owned_prev, &task_header::owned_next>;

class owned_tasks {
 public:
  /// At most max_shards lists: with more workers, shard indexes share lists
  /// (index modulo the count), as the header keeps the index in one byte.
  static constexpr std::size_t max_shards = 256;
  explicit owned_tasks(std::size_t shards)
      : count_(shards < max_shards ? shards : max_shards), shards_(new shard[count_]) {}

  /// Enters the gate for `n` spawns from a thread that is not a worker.
  /// Returns false (nothing entered: the spawns are refused) once closed.
  /// After true, the caller pushes the tasks into a queue and then calls
  /// leave(n): close() waits for that. One RMW on the gate's line.
  [[nodiscard]] bool enter(std::size_t n) noexcept {
    std::uint64_t const old = gate_entered_.fetch_add(2 * n, std::memory_order_acquire);
    if ((old & 1) == 0) [[likely]]
      return true;
    gate_entered_.fetch_sub(2 * n, std::memory_order_relaxed);
    return false;
  }

  /// Ends what enter(n) began: the tasks are in a queue. Release: close()
  /// sees the push.
  void leave(std::size_t n) noexcept { gate_left_.fetch_add(n, std::memory_order_release); }

  /// Links a task that exists already (spawned on a worker, now suspended,
  /// or found in a queue at shutdown). Never refuses.
  void link(task_header* task, std::size_t shard_index) noexcept {
    if (shard_index >= count_) [[unlikely]]
      shard_index %= count_;
    shard& s = shards_[shard_index];
    s.lock();
    link_locked(s, task, shard_index);
    s.unlock();
  }

  /// Unlinks a listed task (completed, or destroyed at shutdown).
  void remove(task_header* task) noexcept {
    shard& s = shards_[task->owned_list];
    s.lock();
    owned_links::unlink(s.head, task);
    --s.tasks;
    s.unlock();
    task->listed = false;
  }

  /// Stops accepting: enter() refuses from now on, and closed() is true.
  /// Returns once every spawn that entered before has left (its task is
  /// queued). Closing again returns at once.
  void close() noexcept {
    // The gate's bit first: once closed() reads true, enter() refuses too.
    std::uint64_t const entered = gate_entered_.fetch_or(1, std::memory_order_acq_rel);
    closed_.store(true, std::memory_order_release);
    if ((entered & 1) != 0) return;
    // Every enter() before the flag was accepted and ends with its
    // leave(); every one after it sees the flag (one modification order).
    while (gate_left_.load(std::memory_order_acquire) != entered >> 1)
      std::this_thread::yield();
  }

  /// The gate as a worker's spawn reads it: one load, no lock.
  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

  [[nodiscard]] bool is_accepting() const noexcept { return !closed(); }

  /// Listed tasks (a sum over the shards, each read under its lock).
  [[nodiscard]] std::uint64_t listed() const noexcept { return sum(&shard::tasks); }

  /// Spawns from threads that are not workers accepted since construction
  /// (a worker's spawn is counted by its worker), for stats. It may count
  /// a refused spawn for a moment (enter() undoes its add), never misses
  /// one that was queued.
  [[nodiscard]] std::uint64_t spawned_from_outside() const noexcept {
    return gate_entered_.load(std::memory_order_acquire) >> 1;
  }

  /// Calls `fn(task)` on every listed task, one shard at a time under that
  /// shard's lock (runtime::dump(): a listed task is unlinked under the lock
  /// before it is freed, so it stays alive meanwhile). Each lock is held for
  /// the walk of its own list only. `fn` must not touch the lists.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (std::size_t i = 0; i < count_; ++i) {
      shard& s = shards_[i];
      s.lock();
      try {
        for (task_header* t = s.head; t != nullptr; t = t->owned_next)
          fn(t);
      } catch (...) {
        s.unlock();
        throw;
      }
      s.unlock();
    }
  }

  /// Removes and returns one listed task, or nullptr when all lists are
  /// empty (shutdown).
  task_header* pop_any() noexcept {
    for (std::size_t i = 0; i < count_; ++i) {
      shard& s = shards_[i];
      s.lock();
      task_header* task = owned_links::pop_front(s.head);
      if (task != nullptr) {
        task->listed = false;
        --s.tasks;
      }
      s.unlock();
      if (task != nullptr) return task;
    }
    return nullptr;
  }

 private:
  struct alignas(64) shard {
    std::atomic<bool> locked{false};
    task_header* head = nullptr;  // guarded by the lock, as the rest
    std::uint64_t tasks = 0;
    void lock() noexcept {
      while (locked.exchange(true, std::memory_order_acquire)) {
        while (locked.load(std::memory_order_relaxed))
          std::this_thread::yield();
      }
    }
    void unlock() noexcept { locked.store(false, std::memory_order_release); }
  };
  // A counter summed over the shards, each read under its lock.
  std::uint64_t sum(std::uint64_t shard::*counter) const noexcept {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < count_; ++i) {
      shard& s = shards_[i];
      s.lock();
      n += s.*counter;
      s.unlock();
    }
    return n;
  }
  static void link_locked(shard& s, task_header* task, std::size_t shard_index) noexcept {
    task->owned_list = static_cast<std::uint8_t>(shard_index);
    owned_links::push_front(s.head, task);
    task->listed = true;
    ++s.tasks;
  }
  std::size_t count_;
  std::unique_ptr<shard[]> shards_;
  // Read by every spawn on a worker, written once: a line of its own, so
  // that no hot neighbour makes those reads miss.
  alignas(64) std::atomic<bool> closed_{false};
  // The gate of the spawns from other threads: 2 x tasks entered, plus the
  // closed bit; tasks whose spawn has left. Written by those spawns only
  // (and close()), so a lone spawning thread keeps the line.
  alignas(64) std::atomic<std::uint64_t> gate_entered_{0};
  std::atomic<std::uint64_t> gate_left_{0};
};

}  // namespace spindle::detail
