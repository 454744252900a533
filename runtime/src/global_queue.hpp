// The global (inject) queue: where tasks spawned from outside the workers,
// woken from other threads, or overflowing a worker's ring go.
//
// Shape: a mutex-protected intrusive FIFO of task headers (linked through
// task_header::next) with an atomic length, so that emptiness is checked
// without the lock. Workers take batches of up to 64 tasks per lock.
// Thread-safety: every member may be called from any thread.
// Design source: Volt's global queue, Tokio's Inject.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>

#include "spindle/detail/task_header.hpp"

namespace spindle::detail {

class global_queue {
 public:
  /// Appends one task.
  void push(task_header* task) noexcept { push_batch(task, task, 1); }

  /// Appends the list first..last (linked through next) of `count` tasks.
  void push_batch(task_header* first, task_header* last, std::size_t count) noexcept {
    last->next = nullptr;
    std::lock_guard lock(mutex_);
    if (tail_ != nullptr) {
      tail_->next = first;
    } else {
      head_ = first;
    }
    tail_ = last;
    len_.store(len_.load(std::memory_order_relaxed) + count, std::memory_order_release);
  }

  /// Removes up to `max` tasks from the front, writing them to out[0..n).
  /// Returns n.
  std::size_t pop_batch(task_header** out, std::size_t max) noexcept {
    if (max == 0 || is_empty()) return 0;
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    while (n < max && head_ != nullptr) {
      task_header* task = head_;
      head_ = task->next;
      task->next = nullptr;
      out[n++] = task;
    }
    if (head_ == nullptr) tail_ = nullptr;
    len_.store(len_.load(std::memory_order_relaxed) - n, std::memory_order_release);
    return n;
  }

  /// Removes one task, or returns nullptr.
  task_header* pop() noexcept {
    task_header* task = nullptr;
    return pop_batch(&task, 1) == 1 ? task : nullptr;
  }

  /// Calls `fn(task)` on every queued task, under the lock (runtime::dump():
  /// a queued task stays alive while its entry is here). `fn` must not
  /// touch the queue.
  template <class Fn>
  void for_each(Fn&& fn) {
    std::lock_guard lock(mutex_);
    for (task_header* t = head_; t != nullptr; t = t->next)
      fn(t);
  }

  [[nodiscard]] std::size_t len() const noexcept { return len_.load(std::memory_order_acquire); }
  [[nodiscard]] bool is_empty() const noexcept { return len() == 0; }

 private:
  mutable std::mutex mutex_;
  task_header* head_ = nullptr;
  task_header* tail_ = nullptr;
  std::atomic<std::size_t> len_{0};
};

}  // namespace spindle::detail
