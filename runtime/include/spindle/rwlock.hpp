// spindle::rwlock: an asynchronous, fair reader-writer lock.
//
//   spindle::rwlock rw;
//   {
//     auto r = co_await rw.lock_shared();  // many readers at once
//   }
//   {
//     auto w = co_await rw.lock();         // one writer, no readers
//   }                                      // guards unlock
//
// Shape: a std::mutex guarding the reader count, the writer flag and one
// intrusive FIFO of waiting readers and writers (no allocation per wait).
// Fairness (phase-fair FIFO, like Tokio's RwLock): requests are served in
// arrival order; a reader is admitted at once only when no writer holds the
// lock and nobody is queued, so a waiting writer blocks new readers and
// neither side starves. Unlocking admits the queue's front: one writer, or
// every reader up to the next queued writer.
//
// Cancellation: a task aborted while waiting leaves the queue (admitting the
// waiters it was blocking, e.g. readers behind an aborted writer); one
// aborted after being admitted but before it resumed unlocks again. Runtime
// shutdown destroying a waiting task does the same.
//
// Errors: co_await outside a spindle task and the blocking_ calls inside one
// throw std::system_error(std::errc::operation_not_permitted); unlock()
// without a writer and unlock_shared() without readers throw
// std::system_error(std::errc::operation_not_permitted).
//
// Thread-safety: every member may be called from any thread, including
// threads outside the runtime. The rwlock must outlive its guards and
// waiters.
// Design source: Tokio's sync::RwLock (fair, on a FIFO semaphore), the
// wait_list protocol.
#pragma once

#include <cstddef>
#include <mutex>
#include <utility>

#include "spindle/detail/sync_awaiter.hpp"
#include "spindle/detail/wait_list.hpp"

namespace spindle {

class rwlock;

namespace detail {
struct rwlock_node : sync_node {
  bool exclusive = false;  ///< a writer
};
}  // namespace detail

/// Owns a lock of an rwlock (the exclusive one when Exclusive, else a
/// shared one); unlocks it when destroyed. Used as rwlock_read_guard and
/// rwlock_write_guard.
template <bool Exclusive>
class [[nodiscard]] rwlock_guard {
 public:
  rwlock_guard() noexcept = default;
  /// Adopts a lock already held (for example after try_lock_shared() or
  /// try_lock()).
  rwlock_guard(rwlock& rw, std::adopt_lock_t) noexcept : rw_(&rw) {}
  /// Takes over `other`'s lock; `other` holds nothing afterwards.
  rwlock_guard(rwlock_guard&& other) noexcept : rw_(std::exchange(other.rw_, nullptr)) {}
  /// Unlocks what this guard holds, then takes over `other`'s lock.
  rwlock_guard& operator=(rwlock_guard&& other) noexcept {
    if (this != &other) {
      unlock();
      rw_ = std::exchange(other.rw_, nullptr);
    }
    return *this;
  }
  rwlock_guard(rwlock_guard const&) = delete;
  rwlock_guard& operator=(rwlock_guard const&) = delete;
  ~rwlock_guard() { unlock(); }

  /// Unlocks now (waking the next waiters); nothing when it holds nothing.
  void unlock() noexcept;
  /// True while the guard holds the lock.
  [[nodiscard]] bool owns_lock() const noexcept { return rw_ != nullptr; }
  /// owns_lock().
  explicit operator bool() const noexcept { return owns_lock(); }
  /// Stops managing the lock without unlocking; returns the rwlock.
  rwlock* release() noexcept { return std::exchange(rw_, nullptr); }

 private:
  rwlock* rw_ = nullptr;
};

/// Owns a shared (read) lock of an rwlock.
using rwlock_read_guard = rwlock_guard<false>;
/// Owns the exclusive (write) lock of an rwlock.
using rwlock_write_guard = rwlock_guard<true>;

/// An asynchronous phase-fair reader-writer lock: `co_await rw.lock_shared()`
/// (many readers) and `co_await rw.lock()` (one writer) yield guards;
/// requests are served in arrival order. Any thread. Full contract: the
/// comment of spindle/rwlock.hpp.
class rwlock : public detail::sync_waiters {
 public:
  /// The name used in this primitive's error messages.
  static constexpr char const* type_name = "rwlock";
  class read_awaiter;
  class write_awaiter;

  rwlock() noexcept = default;
  rwlock(rwlock const&) = delete;
  rwlock& operator=(rwlock const&) = delete;

  /// `co_await rw.lock_shared()` suspends until this task may read; yields
  /// an rwlock_read_guard.
  [[nodiscard]] read_awaiter lock_shared() noexcept;
  /// `co_await rw.lock()` suspends until this task may write; yields an
  /// rwlock_write_guard.
  [[nodiscard]] write_awaiter lock() noexcept;

  /// Takes a shared lock if no writer holds it and nobody is queued.
  [[nodiscard]] bool try_lock_shared();
  /// Takes the exclusive lock if it is free and nobody is queued.
  [[nodiscard]] bool try_lock();
  /// Releases one shared lock. Throws std::system_error(operation_not_permitted)
  /// when no reader holds it.
  void unlock_shared();
  /// Releases the exclusive lock. Throws std::system_error(operation_not_permitted)
  /// when no writer holds it.
  void unlock();

  /// For plain threads outside the runtime: block the thread (same queue).
  [[nodiscard]] rwlock_read_guard blocking_lock_shared();
  /// For plain threads outside the runtime: lock() that blocks the thread.
  [[nodiscard]] rwlock_write_guard blocking_lock();

 private:
  template <bool>
  friend class rwlock_guard;
  template <class, class>
  friend class detail::sync_awaiter;
  using node = detail::rwlock_node;

  bool take_locked(node& n, detail::wake_batch& wakes) noexcept;
  void withdrawn_locked(node& n, detail::wake_batch& wakes) noexcept;
  void give_back_locked(node& n, detail::wake_batch& wakes) noexcept;
  void admit_locked(detail::wake_batch& wakes) noexcept;
  void unlock_held(bool exclusive) noexcept;

  std::size_t readers_ = 0;  ///< shared holders
  bool writer_ = false;      ///< the exclusive holder exists
};

/// Awaiter of rwlock::lock_shared().
class rwlock::read_awaiter : public detail::sync_awaiter<rwlock, detail::rwlock_node> {
 public:
  using sync_awaiter::sync_awaiter;
  /// Awaiter protocol: the guard of the shared lock now held.
  rwlock_read_guard await_resume() noexcept {
    consumed();
    return rwlock_read_guard{*prim_, std::adopt_lock};
  }

 private:
  friend class rwlock;
  void block() { wait_blocking("blocking_lock_shared"); }
};

/// Awaiter of rwlock::lock().
class rwlock::write_awaiter : public detail::sync_awaiter<rwlock, detail::rwlock_node> {
 public:
  /// A request for the exclusive lock of `rw`.
  explicit write_awaiter(rwlock& rw) noexcept : sync_awaiter(rw) { exclusive = true; }
  /// Awaiter protocol: the guard of the exclusive lock now held.
  rwlock_write_guard await_resume() noexcept {
    consumed();
    return rwlock_write_guard{*prim_, std::adopt_lock};
  }

 private:
  friend class rwlock;
  void block() { wait_blocking("blocking_lock"); }
};

inline rwlock::read_awaiter rwlock::lock_shared() noexcept {
  return read_awaiter{*this};
}

inline rwlock::write_awaiter rwlock::lock() noexcept {
  return write_awaiter{*this};
}

template <bool Exclusive>
void rwlock_guard<Exclusive>::unlock() noexcept {
  if (rw_ != nullptr) std::exchange(rw_, nullptr)->unlock_held(Exclusive);
}

}  // namespace spindle
