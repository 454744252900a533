// The global (inject) queue: where tasks spawned from outside the workers,
// woken from other threads, or overflowing a worker's ring go.
//
// Shape: an intrusive multi-producer FIFO of task headers linked through
// task_header::next (the inbox of inbox.hpp: Vyukov's node-based queue, a
// batch pushed with one exchange, counts of pushed and taken tasks, so
// that emptiness is checked without a lock), whose consumers take turns
// under glibc's adaptive mutex. A worker takes its share (at most
// scheduler_core's max_remote_take tasks) per turn.
//
// Producers never wait for a consumer. Under one mutex for both sides, a
// worker that overflowed its ring waited while another worker took its
// share: the taker walks the links of up to max_remote_take tasks, and
// when the pusher wrote them on another core, each is a transfer of a line
// that the next one's address depends on (spawn_many_local, 2 workers, on
// a host whose cores are 175-480 ns apart for a line's round trip: 24% of
// the samples in the taker's walk, 5% in the lock; the spawner's 10,000
// spawns took 1,500-1,590 us, and 851-891 without the wait).
//
// Thread-safety: every member may be called from any thread.
// Design source: Volt's global queue, Tokio's Inject; Dmitry Vyukov's
// intrusive MPSC queue, with a lock serializing its consumers.
#pragma once

#include <pthread.h>
#include <atomic>
#include <cstddef>

#include <mutex>

#include "inbox.hpp"
#include "spindle/detail/task_header.hpp"

namespace spindle::detail {

class global_queue {
 public:
  /// Appends one task.
  void push(task_header* task) noexcept { push_batch(task, task, 1); }

  /// Appends the list first..last (linked through next) of `count` tasks:
  /// one exchange, never a wait for a consumer.
  void push_batch(task_header* first, task_header* last, std::size_t count) noexcept {
    queue_.push(first, last, count);
  }

  /// Appends a task_chain's run (tasks in chunks: inbox.hpp) with one
  /// exchange.
  void push_chain(task_chain const& chain) noexcept { queue_.push(chain); }

  /// Removes up to `max` tasks from the front, writing them to out[0..n).
  /// Returns n (fewer than len() says while a producer is between its
  /// exchange and its link: inbox.hpp).
  std::size_t pop_batch(task_header** out, std::size_t max) noexcept {
    if (max == 0 || is_empty()) return 0;
    std::lock_guard lock(consumers_);
    return queue_.take(out, max);
  }

  /// Removes one task, or returns nullptr.
  task_header* pop() noexcept {
    task_header* task = nullptr;
    return pop_batch(&task, 1) == 1 ? task : nullptr;
  }

  /// Calls `fn(task)` on every queued task the consumers could reach now,
  /// holding the consumers' lock (runtime::dump(): a queued task stays
  /// alive while its entry is here). `fn` must not touch the queue.
  template <class Fn>
  void for_each(Fn&& fn) {
    std::lock_guard lock(consumers_);
    queue_.for_each(fn);
  }

  [[nodiscard]] std::size_t len() const noexcept { return queue_.len(); }
  [[nodiscard]] bool is_empty() const noexcept { return queue_.is_empty(); }

 private:
  // glibc's adaptive mutex (PTHREAD_MUTEX_ADAPTIVE_NP): a locker that finds
  // it held spins a bounded while (glibc.pthread.mutex_spin_count) before it
  // sleeps in the kernel. With std::mutex (which sleeps at once) a remote
  // spawner and the workers taking batches put each other to sleep: perf
  // showed futex waits and context switches, and spawn_many_remote_idle
  // with 2 workers took 1,047-1,074 us against 791-817 with this lock
  // (global placement, alternating builds, medians of 3). Only consumers
  // take it now.
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
  adaptive_mutex consumers_;
  inbox queue_;
};

}  // namespace spindle::detail
