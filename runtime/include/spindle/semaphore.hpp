// spindle::semaphore: an asynchronous counting semaphore, FIFO fair.
//
//   spindle::semaphore sem{4};     // 4 permits
//   co_await sem.acquire();        // or acquire(n) for n permits at once
//   ...
//   sem.release();                 // or release(n), from any thread
//   {
//     auto permit = co_await sem.scoped_acquire();  // released by the guard
//   }
//
// Shape: a std::mutex guarding a permit count and an intrusive FIFO of
// waiters, each wanting `n` permits (no allocation per wait). release()
// serves waiters strictly in arrival order: permits go to the oldest waiter
// first, and a waiter wanting more than is available blocks the ones behind
// it (no starvation of large requests). try_acquire() succeeds only when
// nobody is queued. available() counts permits not handed to anyone.
//
// Cancellation: a task aborted while waiting leaves the queue (serving the
// waiters it was blocking); one aborted after its permits were handed to it
// but before it resumed gives them back (to the next waiters). Runtime
// shutdown destroying a waiting task does the same.
//
// Errors: co_await outside a spindle task and blocking_acquire() inside one
// throw std::system_error(std::errc::operation_not_permitted); release(n)
// that would overflow the count throws std::system_error(
// std::errc::value_too_large) and releases nothing.
//
// Thread-safety: every member may be called from any thread, including
// threads outside the runtime. The semaphore must outlive its waiters and
// permit guards.
// Design source: Tokio's batch_semaphore (FIFO queue of intrusive waiters
// wanting n permits, permits returned when an Acquire is dropped).
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <utility>

#include "spindle/detail/sync_awaiter.hpp"
#include "spindle/detail/wait_list.hpp"

namespace spindle {

class semaphore;

namespace detail {
struct semaphore_node : sync_node {
  std::size_t need = 1;  ///< permits this waiter wants
};
}  // namespace detail

/// Owns permits of a semaphore and releases them when destroyed.
/// Movable, not copyable.
class [[nodiscard]] semaphore_permit {
 public:
  semaphore_permit() noexcept = default;
  /// Adopts `count` permits already acquired from `sem`.
  semaphore_permit(semaphore& sem, std::size_t count) noexcept : sem_(&sem), count_(count) {}
  /// Takes over `other`'s permits; `other` holds none afterwards.
  semaphore_permit(semaphore_permit&& other) noexcept
      : sem_(std::exchange(other.sem_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  /// Releases this guard's permits, then takes over `other`'s.
  semaphore_permit& operator=(semaphore_permit&& other) noexcept {
    if (this != &other) {
      release();
      sem_ = std::exchange(other.sem_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  semaphore_permit(semaphore_permit const&) = delete;
  semaphore_permit& operator=(semaphore_permit const&) = delete;
  ~semaphore_permit() { release(); }

  /// Releases the permits now. No-op when empty.
  void release() noexcept;
  /// Stops managing the permits without releasing them (they are lost).
  void forget() noexcept {
    sem_ = nullptr;
    count_ = 0;
  }
  /// Permits held.
  [[nodiscard]] std::size_t count() const noexcept { return count_; }

 private:
  semaphore* sem_ = nullptr;
  std::size_t count_ = 0;
};

/// An asynchronous FIFO-fair counting semaphore: `co_await sem.acquire(n)`
/// waits for n permits, release(n) gives them back (any thread). Full
/// contract: the comment of spindle/semaphore.hpp.
class semaphore : public detail::sync_waiters {
 public:
  /// The name used in this primitive's error messages.
  static constexpr char const* type_name = "semaphore";
  class acquire_awaiter;
  class scoped_acquire_awaiter;

  /// A semaphore holding `permits` permits.
  explicit semaphore(std::size_t permits) noexcept : permits_(permits) {}
  semaphore(semaphore const&) = delete;
  semaphore& operator=(semaphore const&) = delete;

  /// `co_await sem.acquire(n)` suspends until `n` permits are this task's,
  /// in FIFO order. n == 0 completes at once.
  [[nodiscard]] acquire_awaiter acquire(std::size_t n = 1) noexcept;
  /// Like acquire(n), yielding a semaphore_permit that releases them.
  [[nodiscard]] scoped_acquire_awaiter scoped_acquire(std::size_t n = 1) noexcept;

  /// Takes `n` permits if nobody is queued and enough are available.
  [[nodiscard]] bool try_acquire(std::size_t n = 1);

  /// Adds `n` permits, serving queued waiters in order. Any thread.
  /// Throws std::system_error(value_too_large) if the count would overflow.
  void release(std::size_t n = 1);

  /// For plain threads outside the runtime: blocks until `n` permits are the
  /// thread's (same FIFO queue as the tasks).
  void blocking_acquire(std::size_t n = 1);

  /// Permits not held by anyone (a snapshot).
  [[nodiscard]] std::size_t available() const noexcept {
    return permits_.load(std::memory_order_acquire);
  }

 private:
  friend class semaphore_permit;
  template <class, class>
  friend class detail::sync_awaiter;
  using node = detail::semaphore_node;

  bool take_locked(node& n, detail::wake_batch& wakes) noexcept;
  void withdrawn_locked(node& n, detail::wake_batch& wakes) noexcept;
  void give_back_locked(node& n, detail::wake_batch& wakes) noexcept;
  void serve_locked(detail::wake_batch& wakes) noexcept;
  void release_held(std::size_t n) noexcept;

  std::atomic<std::size_t> permits_;  ///< written under state_lock_; read lock-free
};

/// Awaiter of semaphore::acquire(n).
class semaphore::acquire_awaiter : public detail::sync_awaiter<semaphore, detail::semaphore_node> {
 public:
  /// A request for `n` permits of `sem`.
  acquire_awaiter(semaphore& sem, std::size_t n) noexcept : sync_awaiter(sem) { need = n; }
  /// Awaiter protocol: the permits are now the caller's.
  void await_resume() noexcept { consumed(); }

 private:
  friend class semaphore;
  void block() { wait_blocking("blocking_acquire"); }
};

/// Awaiter of semaphore::scoped_acquire(n).
class semaphore::scoped_acquire_awaiter
    : public detail::sync_awaiter<semaphore, detail::semaphore_node> {
 public:
  /// A request for `n` permits of `sem`, returned in a semaphore_permit.
  scoped_acquire_awaiter(semaphore& sem, std::size_t n) noexcept : sync_awaiter(sem) { need = n; }
  /// Awaiter protocol: the guard releasing the permits.
  semaphore_permit await_resume() noexcept {
    consumed();
    return semaphore_permit{*prim_, need};
  }
};

inline semaphore::acquire_awaiter semaphore::acquire(std::size_t n) noexcept {
  return acquire_awaiter{*this, n};
}

inline semaphore::scoped_acquire_awaiter semaphore::scoped_acquire(std::size_t n) noexcept {
  return scoped_acquire_awaiter{*this, n};
}

inline void semaphore_permit::release() noexcept {
  if (sem_ != nullptr) {
    std::exchange(sem_, nullptr)->release_held(std::exchange(count_, 0));
  }
}

}  // namespace spindle
