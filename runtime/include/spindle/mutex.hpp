// spindle::mutex: an asynchronous, fair (FIFO hand-off) mutual-exclusion lock.
//
//   spindle::mutex m;
//   {
//     auto guard = co_await m.lock();  // suspends the task, not the thread
//     ...                              // critical section
//   }                                  // guard unlocks (hands off to the next waiter)
//
// Shape: a std::mutex guarding a `locked` flag and an intrusive FIFO of
// waiting awaiters (no allocation per wait). unlock() with waiters hands the
// lock directly to the oldest one (it stays locked throughout), so waiters
// acquire it in arrival order and try_lock() never barges past them.
//
// Cancellation: a task aborted (join_handle::abort) while waiting leaves the
// queue; one aborted after the lock was handed to it but before it resumed
// passes the lock on (to the next waiter, or unlocks). Runtime shutdown
// destroying a waiting task does the same.
//
// Errors: co_await m.lock() outside a spindle task and blocking_lock() inside
// one throw std::system_error(std::errc::operation_not_permitted); unlock() of
// an unlocked mutex throws std::system_error(std::errc::operation_not_permitted).
//
// Thread-safety: every member may be called from any thread, including
// threads outside the runtime (unlock(), try_lock(), blocking_lock()). The
// lock is not owned by a task or a thread: any holder of the guard (or
// whoever knows it is locked) may unlock. The mutex must outlive its guards
// and waiters.
// Design source: Tokio's sync::Mutex (fair, queue of waiters, guard), cppcoro's
// async_mutex (awaiter as node, scoped lock), the wait_list protocol.
#pragma once

#include <cstddef>
#include <mutex>
#include <utility>

#include "spindle/detail/sync_awaiter.hpp"
#include "spindle/detail/wait_list.hpp"

namespace spindle {

class mutex;

/// Owns a locked spindle::mutex and unlocks it when destroyed. Movable (also
/// to another thread or task), not copyable.
class [[nodiscard]] mutex_guard {
 public:
  mutex_guard() noexcept = default;
  /// Adopts a lock already held (for example after try_lock()).
  mutex_guard(spindle::mutex& m, std::adopt_lock_t) noexcept : m_(&m) {}
  /// Takes over `other`'s lock; `other` holds nothing afterwards.
  mutex_guard(mutex_guard&& other) noexcept : m_(std::exchange(other.m_, nullptr)) {}
  /// Unlocks what this guard holds, then takes over `other`'s lock.
  mutex_guard& operator=(mutex_guard&& other) noexcept {
    if (this != &other) {
      unlock();
      m_ = std::exchange(other.m_, nullptr);
    }
    return *this;
  }
  mutex_guard(mutex_guard const&) = delete;
  mutex_guard& operator=(mutex_guard const&) = delete;
  ~mutex_guard() { unlock(); }

  /// Unlocks now (hands off to the next waiter). No-op when empty.
  void unlock() noexcept;
  /// True while the guard holds the lock.
  [[nodiscard]] bool owns_lock() const noexcept { return m_ != nullptr; }
  /// owns_lock().
  explicit operator bool() const noexcept { return owns_lock(); }
  /// The mutex held, or nullptr.
  [[nodiscard]] spindle::mutex* mutex() const noexcept { return m_; }
  /// Stops managing the lock without unlocking; returns the mutex.
  spindle::mutex* release() noexcept { return std::exchange(m_, nullptr); }

 private:
  spindle::mutex* m_ = nullptr;
};

/// An asynchronous FIFO-fair mutex: `co_await m.lock()` suspends the task
/// (not the thread) and yields a mutex_guard. Any thread; plain threads use
/// blocking_lock(). Full contract: the comment of spindle/mutex.hpp.
class mutex : public detail::sync_waiters {
 public:
  /// The name used in this primitive's error messages.
  static constexpr char const* type_name = "mutex";
  class lock_awaiter;

  mutex() noexcept = default;
  mutex(mutex const&) = delete;
  mutex& operator=(mutex const&) = delete;

  /// `co_await m.lock()` suspends until the lock is this task's, in FIFO
  /// order, and yields a mutex_guard.
  [[nodiscard]] lock_awaiter lock() noexcept;

  /// Takes the lock if it is free (never when tasks are queued for it).
  [[nodiscard]] bool try_lock();

  /// Unlocks: hands the lock to the oldest waiter, or frees it. Any thread.
  /// Throws std::system_error(operation_not_permitted) when not locked.
  void unlock();

  /// For plain threads outside the runtime: blocks the thread until the lock
  /// is its own (same FIFO queue as the tasks).
  [[nodiscard]] mutex_guard blocking_lock();

 private:
  friend class mutex_guard;
  template <class, class>
  friend class detail::sync_awaiter;

  bool take_locked(detail::sync_node& n, detail::wake_batch& wakes) noexcept;
  void withdrawn_locked(detail::sync_node& n, detail::wake_batch& wakes) noexcept;
  void give_back_locked(detail::sync_node& n, detail::wake_batch& wakes) noexcept;
  void unlock_locked(detail::wake_batch& wakes) noexcept;
  void unlock_held() noexcept;

  bool locked_ = false;  ///< stays true while the lock is handed from holder to waiter
};

/// Awaiter of mutex::lock(); yields the guard.
class mutex::lock_awaiter : public detail::sync_awaiter<mutex> {
 public:
  using sync_awaiter::sync_awaiter;
  /// Awaiter protocol: the guard of the lock now held.
  mutex_guard await_resume() noexcept {
    consumed();
    return mutex_guard{*prim_, std::adopt_lock};
  }

 private:
  friend class mutex;
  void block() { wait_blocking("blocking_lock"); }
};

inline mutex::lock_awaiter mutex::lock() noexcept {
  return lock_awaiter{*this};
}

inline void mutex_guard::unlock() noexcept {
  if (m_ != nullptr) std::exchange(m_, nullptr)->unlock_held();
}

}  // namespace spindle
