// The live spawned tasks: the lists that let shutdown destroy the frames of
// tasks that are suspended and referenced by nobody else, and the runtime's
// lifecycle (accepting spawns or closed, how many tasks are in flight, and
// the single observation of termination).
//
// Shape: one intrusive doubly-linked list per worker plus one for spawns
// from other threads, each behind a small spinlock, with its own count of
// tasks and its own closed flag. A task is inserted by the worker that
// spawns it and usually removed by the same worker when it completes, so the
// lock is uncontended and its cache line stays on that worker: a spawn and a
// completion each cost one uncontended RMW here, and no cache line is shared
// by all workers on the spawn path.
//
// Lifecycle protocol (seed 000's combined accepting bit + count, sharded):
//  - insert refuses a task once its shard is closed: a spawn racing
//    shutdown is either refused or counted, never lost.
//  - close() takes every shard's lock (in index order), marks each closed and
//    counts the shards that still hold tasks into `pending_` before any lock
//    is released; each shard that later drops to zero tasks decrements it.
//    Whoever brings `pending_` to zero, or close() finding it zero, observes
//    termination: exactly once.
//
// Thread-safety: all members, any thread.
// Design source: Tokio's OwnedTasks (sharded lists, closed under the shard
// lock), seed 000 (ACCEPTING_BIT / COUNT_UNIT lifecycle word).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>

#include "spindle/detail/task_header.hpp"

namespace spindle::detail {

class owned_tasks {
 public:
  explicit owned_tasks(std::size_t shards) : count_(shards), shards_(new shard[shards]) {}

  /// Links a new task into shard `shard_index` and counts it. Returns false
  /// (and links nothing) once the runtime is closed.
  [[nodiscard]] bool insert(task_header* task, std::size_t shard_index) noexcept {
    shard& s = shards_[shard_index];
    task->owned_list = static_cast<std::uint16_t>(shard_index);
    task->owned_prev = nullptr;
    s.lock();
    if (s.closed) {
      s.unlock();
      return false;
    }
    task->owned_next = s.head;
    if (s.head != nullptr) s.head->owned_prev = task;
    s.head = task;
    ++s.tasks;
    s.unlock();
    return true;
  }

  /// Unlinks a completed task. Returns true when this observed termination.
  [[nodiscard]] bool remove(task_header* task) noexcept {
    shard& s = shards_[task->owned_list];
    s.lock();
    if (task->owned_prev != nullptr) {
      task->owned_prev->owned_next = task->owned_next;
    } else {
      s.head = task->owned_next;
    }
    if (task->owned_next != nullptr) task->owned_next->owned_prev = task->owned_prev;
    bool emptied_after_close = --s.tasks == 0 && s.closed;
    s.unlock();
    task->owned_prev = task->owned_next = nullptr;
    return emptied_after_close && pending_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }

  /// Stops accepting. Returns true when this observed termination (no task
  /// was in flight).
  [[nodiscard]] bool close() noexcept {
    for (std::size_t i = 0; i < count_; ++i)
      shards_[i].lock();
    bool already = shards_[0].closed;
    std::uint64_t nonempty = 0;
    for (std::size_t i = 0; i < count_; ++i) {
      shards_[i].closed = true;
      if (shards_[i].tasks != 0) ++nonempty;
    }
    if (!already) pending_.store(nonempty, std::memory_order_release);
    for (std::size_t i = count_; i-- > 0;)
      shards_[i].unlock();
    return !already && nonempty == 0;
  }

  [[nodiscard]] bool is_accepting() const noexcept {
    shard& s = shards_[0];
    s.lock();
    bool open = !s.closed;
    s.unlock();
    return open;
  }

  /// Tasks spawned and not yet completed (a sum over the shards, each read
  /// under its lock).
  [[nodiscard]] std::uint64_t in_flight() const noexcept {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < count_; ++i) {
      shard& s = shards_[i];
      s.lock();
      n += s.tasks;
      s.unlock();
    }
    return n;
  }

  /// Removes and returns one task of any list, or nullptr when all are empty
  /// (shutdown). Sets `terminated` when this removal observed termination.
  task_header* pop_any(bool& terminated) noexcept {
    terminated = false;
    for (std::size_t i = 0; i < count_; ++i) {
      shard& s = shards_[i];
      s.lock();
      task_header* task = s.head;
      bool emptied_after_close = false;
      if (task != nullptr) {
        s.head = task->owned_next;
        if (s.head != nullptr) s.head->owned_prev = nullptr;
        task->owned_prev = task->owned_next = nullptr;
        emptied_after_close = --s.tasks == 0 && s.closed;
      }
      s.unlock();
      if (task != nullptr) {
        terminated = emptied_after_close && pending_.fetch_sub(1, std::memory_order_acq_rel) == 1;
        return task;
      }
    }
    return nullptr;
  }

 private:
  struct alignas(64) shard {
    std::atomic<bool> locked{false};
    task_header* head = nullptr;  // guarded by the lock, as the rest
    std::uint64_t tasks = 0;
    bool closed = false;
    void lock() noexcept {
      while (locked.exchange(true, std::memory_order_acquire)) {
        while (locked.load(std::memory_order_relaxed))
          std::this_thread::yield();
      }
    }
    void unlock() noexcept { locked.store(false, std::memory_order_release); }
  };
  std::size_t count_;
  std::unique_ptr<shard[]> shards_;
  std::atomic<std::uint64_t> pending_{0};  // closed shards still holding tasks
};

}  // namespace spindle::detail
