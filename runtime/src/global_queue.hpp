// The global (inject) queue: where tasks spawned from outside the workers,
// woken from other threads, or overflowing a worker's ring go.
//
// Shape: an intrusive FIFO of task headers (linked through
// task_header::next) behind glibc's adaptive mutex, with an atomic length,
// so that emptiness is checked without the lock. A worker takes its share
// (at most scheduler_core's max_remote_take tasks) per lock.
// Thread-safety: every member may be called from any thread.
// Design source: Volt's global queue, Tokio's Inject.
#pragma once

#include <pthread.h>
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
  // glibc's adaptive mutex (PTHREAD_MUTEX_ADAPTIVE_NP): a locker that finds
  // it held spins a bounded while (glibc.pthread.mutex_spin_count) before it
  // sleeps in the kernel. The holds are short (a push links a list; a pop
  // unlinks a batch), and with std::mutex (which sleeps at once) a remote
  // spawner and the workers taking batches put each other to sleep: perf
  // showed futex waits and context switches, and spawn_many_remote_idle
  // with 2 workers took 1,047-1,074 us against 791-817 with this lock
  // (global placement, alternating builds, medians of 3).
  class adaptive_mutex {
   public:
    adaptive_mutex() noexcept {
      pthread_mutexattr_t attr;
      pthread_mutexattr_init(&attr);
      pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
      pthread_mutex_init(&mutex_, &attr);
      pthread_mutexattr_destroy(&attr);
    }
    adaptive_mutex(adaptive_mutex const&) = delete;
    adaptive_mutex& operator=(adaptive_mutex const&) = delete;
    ~adaptive_mutex() { pthread_mutex_destroy(&mutex_); }
    void lock() noexcept { pthread_mutex_lock(&mutex_); }
    void unlock() noexcept { pthread_mutex_unlock(&mutex_); }

   private:
    pthread_mutex_t mutex_;
  };
  mutable adaptive_mutex mutex_;
  task_header* head_ = nullptr;
  task_header* tail_ = nullptr;
  std::atomic<std::size_t> len_{0};
};

}  // namespace spindle::detail
