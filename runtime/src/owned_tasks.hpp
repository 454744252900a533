// The lists of live spawned tasks, so that shutdown can destroy the frames of
// tasks that are suspended and referenced by nobody else.
//
// Shape: one intrusive doubly-linked list per worker plus one for spawns
// from other threads, each behind a small spinlock (uncontended in the
// common case: a task is inserted by the worker that spawns it and usually
// removed by the same worker when it completes).
// Thread-safety: all members, any thread.
// Design source: Tokio's OwnedTasks (sharded lists).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>

#include "spindle/detail/task_header.hpp"

namespace spindle::detail {

class owned_tasks {
 public:
  explicit owned_tasks(std::size_t shards) : count_(shards), shards_(new shard[shards]) {}

  void insert(task_header* task, std::size_t shard_index) noexcept {
    shard& s = shards_[shard_index];
    task->owned_list = static_cast<std::uint32_t>(shard_index);
    task->owned_prev = nullptr;
    s.lock();
    task->owned_next = s.head;
    if (s.head != nullptr) s.head->owned_prev = task;
    s.head = task;
    s.unlock();
  }

  void remove(task_header* task) noexcept {
    shard& s = shards_[task->owned_list];
    s.lock();
    if (task->owned_prev != nullptr) {
      task->owned_prev->owned_next = task->owned_next;
    } else {
      s.head = task->owned_next;
    }
    if (task->owned_next != nullptr) task->owned_next->owned_prev = task->owned_prev;
    s.unlock();
    task->owned_prev = task->owned_next = nullptr;
  }

  /// Removes and returns one task of any list, or nullptr when all are empty.
  task_header* pop_any() noexcept {
    for (std::size_t i = 0; i < count_; ++i) {
      shard& s = shards_[i];
      s.lock();
      task_header* task = s.head;
      if (task != nullptr) {
        s.head = task->owned_next;
        if (s.head != nullptr) s.head->owned_prev = nullptr;
        task->owned_prev = task->owned_next = nullptr;
      }
      s.unlock();
      if (task != nullptr) return task;
    }
    return nullptr;
  }

 private:
  struct alignas(64) shard {
    std::atomic<bool> locked{false};
    task_header* head = nullptr;
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
};

}  // namespace spindle::detail
