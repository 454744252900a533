// The spawned tasks that only shutdown can reach, and the runtime's spawn
// gate (accepting spawns, or closed).
//
// Shape: one intrusive doubly-linked list per worker plus one for other
// threads, each behind a small spinlock with its own count and closed flag,
// and one closed flag for the whole runtime that a worker's spawn reads
// without a lock.
//
// Which tasks are listed: every task spawned from outside the workers (at
// its spawn, under the lock, refused once closed; in the other threads'
// list, or under placement::p2c in the list of the worker whose inbox
// takes it), and every task spawned
// on a worker from the first time it is suspended with nobody queueing it
// (scheduler::poll_held lists it before it lets go of RUNNING; link() never
// refuses). A task spawned on a worker that is queued or running is reached
// through the queue that holds it or the worker that polls it, so a spawn
// that completes without suspending (the common case: spawn, then await it
// while it runs inline) touches no list and no lock. At shutdown the workers
// stop first; then the scheduler links the queued tasks that are not listed
// (drain_queues) and destroys everything listed (pop_any).
//
// A worker's spawn that reads the gate open just before close() is queued
// and then polled before the workers stop, or destroyed with the queues:
// the same as a spawn that came just before close().
//
// Thread-safety: all members, any thread. The lists' links in a header are
// written under the shard's lock; `listed` by whoever holds the task (its
// RUNNING bit, or the shutting-down thread once the workers are stopped).
// Design source: Tokio's OwnedTasks (sharded lists, closed under the shard
// lock), the scanner executor (the accepting gate).
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

  /// Links a new task into shard `shard_index`. Returns false (and links
  /// nothing) once the runtime is closed: a spawn racing close() is refused
  /// or listed, never lost.
  [[nodiscard]] bool insert(task_header* task, std::size_t shard_index) noexcept {
    return insert_batch(&task, 1, shard_index);
  }

  /// insert() of tasks[0..n) under one lock: all linked, or none (false)
  /// once the runtime is closed (spawn_batch).
  [[nodiscard]] bool insert_batch(task_header* const* tasks, std::size_t n,
                                  std::size_t shard_index) noexcept {
    if (shard_index >= count_) [[unlikely]]
      shard_index %= count_;
    shard& s = shards_[shard_index];
    s.lock();
    if (s.closed) {
      s.unlock();
      return false;
    }
    for (std::size_t i = 0; i < n; ++i)
      link_locked(s, tasks[i], shard_index);
    s.inserted += n;
    s.unlock();
    return true;
  }

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

  /// Stops accepting: insert() refuses from now on, and closed() is true.
  void close() noexcept {
    for (std::size_t i = 0; i < count_; ++i)
      shards_[i].lock();
    for (std::size_t i = 0; i < count_; ++i)
      shards_[i].closed = true;
    closed_.store(true, std::memory_order_release);
    for (std::size_t i = count_; i-- > 0;)
      shards_[i].unlock();
  }

  /// The gate as a worker's spawn reads it: one load, no lock.
  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

  [[nodiscard]] bool is_accepting() const noexcept {
    shard& s = shards_[0];
    s.lock();
    bool open = !s.closed;
    s.unlock();
    return open;
  }

  /// Listed tasks (a sum over the shards, each read under its lock).
  [[nodiscard]] std::uint64_t listed() const noexcept { return sum(&shard::tasks); }

  /// Tasks insert() and insert_batch() have linked since construction (the
  /// spawns from threads that are not workers: a worker's spawn is not
  /// listed), a sum over the shards, each read under its lock. Counted
  /// under the lock the spawn takes anyway: an atomic counter of its own
  /// cost every remote spawn one more locked instruction.
  [[nodiscard]] std::uint64_t inserted() const noexcept { return sum(&shard::inserted); }

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
    std::uint64_t inserted = 0;  // tasks insert_batch linked, ever
    bool closed = false;
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
};

}  // namespace spindle::detail
