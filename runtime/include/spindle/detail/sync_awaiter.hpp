// The awaiter skeleton shared by spindle's synchronization primitives
// (mutex, semaphore, event, notify, latch, barrier, rwlock).
//
// Shape: sync_awaiter<Primitive, Node> is the awaiter and its own wait node
// (Node derives from sync_node, which derives from wait_node), so a wait
// allocates nothing. It implements the await / wake / cancel-hook protocol of
// wait_list.hpp once. The primitive derives from sync_waiters, which holds
//
//   std::mutex state_lock_;   guards the primitive's state and waiters_
//   wait_list waiters_;       FIFO of waiting nodes (Node objects)
//
// and supplies, as private members that sync_awaiter may use (friend):
//
//   bool take_locked(Node&, wake_batch&) noexcept;
//       Under the lock: complete at once (take the resource) if that is fair
//       now; may hand resources to other waiters through the batch.
//   void withdrawn_locked(Node&, wake_batch&) noexcept;
//       Under the lock, after the node was removed unserved (its task was
//       aborted or its frame destroyed): undo what waiting did (for example
//       a barrier arrival) and serve waiters the node was blocking.
//   void give_back_locked(Node&, wake_batch&) noexcept;
//       Under the lock: the node was handed a resource (status granted) but
//       its task was destroyed instead of resumed: return the resource (a
//       lock, permits, a notify_one) to the next waiter or to the primitive.
//   (sync_waiters has both as no-ops, for waits that consume nothing: event,
//   latch.)
//
// A waker unlinks a node with waiters_.pop_front() (or remove), sets its
// status to granted under the lock and pushes it into a wake_batch that
// notifies it after the lock is released.
//
// States of a node (guarded by the primitive's lock): idle -> waiting (linked,
// by the awaiter) -> granted (unlinked and served, by a waker) or back to idle
// (unlinked unserved, by the cancel hook or the destructor).
//
// Errors: co_await outside a spindle task throws
// std::system_error(std::errc::operation_not_permitted) (see wait_blocking for
// plain threads); wait_blocking inside a spindle task throws the same code.
//
// Thread-safety: one awaiter is awaited once, by one task or thread.
// Design source: the await/wake/cancel protocol of detail/wait_list.hpp;
// Tokio's batch_semaphore Acquire future (a served-but-dropped waiter gives
// its permits back) and cppcoro's awaiter-as-node.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <system_error>

#include "spindle/detail/task_header.hpp"
#include "spindle/detail/wait_list.hpp"

namespace spindle::detail {

enum class wait_status : std::uint8_t {
  idle,     ///< not in the list: not awaited yet, served at once, or withdrawn
  waiting,  ///< linked in the primitive's wait list
  granted,  ///< unlinked by a waker and handed the resource; a wake is coming
};

struct sync_node : wait_node {
  wait_status status = wait_status::idle;  ///< guarded by the primitive's lock
};

/// Pops the front waiter of `list`, marks it served and queues its wake.
template <class Node>
Node* grant_front(wait_list& list, wake_batch& wakes) noexcept {
  auto* n = static_cast<Node*>(list.pop_front());
  if (n != nullptr) {
    n->status = wait_status::granted;
    wakes.push(n);
  }
  return n;
}

/// Serves every waiter of `list`, in order.
template <class Node>
void grant_all(wait_list& list, wake_batch& wakes) noexcept {
  while (grant_front<Node>(list, wakes) != nullptr) {
  }
}

/// The lock and the wait list of a primitive that sync_awaiter serves, and
/// the snapshot of its length. Derived from publicly by the primitive.
class sync_waiters {
 public:
  sync_waiters(sync_waiters const&) = delete;
  sync_waiters& operator=(sync_waiters const&) = delete;

  /// Tasks and threads queued now (a snapshot, for diagnostics and tests).
  [[nodiscard]] std::size_t waiter_count() const {
    std::lock_guard<std::mutex> guard(state_lock_);
    return waiters_.size();
  }

 protected:
  sync_waiters() noexcept = default;
  ~sync_waiters() = default;

  /// For a wait that consumes nothing (event, latch): withdrawing a node
  /// or destroying a served one has nothing to undo or give back.
  void withdrawn_locked(sync_node& /*n*/, wake_batch& /*wakes*/) noexcept {}
  void give_back_locked(sync_node& /*n*/, wake_batch& /*wakes*/) noexcept {}

  mutable std::mutex state_lock_;
  wait_list waiters_;
};

template <class Primitive, class Node = sync_node>
class sync_awaiter : protected Node, cancel_hook {
 public:
  explicit sync_awaiter(Primitive& p) noexcept : prim_(&p) {}
  sync_awaiter(sync_awaiter const&) = delete;
  sync_awaiter& operator=(sync_awaiter const&) = delete;
  /// A frame destroyed while waiting (abort, runtime shutdown) withdraws the
  /// node; one destroyed after being served gives the resource back.
  ~sync_awaiter() {
    if (suspended_) abandon();
  }

  /// this_fiber::await may run await_suspend on the fiber's own stack:
  /// the task is woken only through detail::wake, never resumed here.
  using wakes_through_scheduler = void;
  bool await_ready() const noexcept { return false; }

  bool await_suspend(std::coroutine_handle<> caller) {
    task_header* self = suspend_current(caller, wait_kind::sync);
    if (self == nullptr) {
      throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                              std::string("spindle: ") + Primitive::type_name +
                                  " awaited outside a spindle task (use its blocking_ call)");
    }
    wake_batch wakes;  // destroyed after the lock guard: wakes outside the lock
    std::lock_guard<std::mutex> guard(prim_->state_lock_);
    if (prim_->take_locked(*this, wakes)) {
      clear_cancel_hook(self);  // not suspending after all
      return false;
    }
    this->task = self;
    this->status = wait_status::waiting;
    suspended_ = true;
    prim_->waiters_.push_back(this);
    set_cancel_hook(self, this, &sync_awaiter::on_cancel);
    return true;
  }

 protected:
  /// For plain threads outside the runtime: waits for the same thing by
  /// blocking the thread (futex), without cancellation.
  void wait_blocking(char const* call) {
    if (current_task() != nullptr) {
      throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                              std::string("spindle: ") + Primitive::type_name + "::" + call +
                                  " would block a runtime thread (co_await instead)");
    }
    {
      wake_batch wakes;
      std::lock_guard<std::mutex> guard(prim_->state_lock_);
      if (prim_->take_locked(*this, wakes)) return;
      this->task = nullptr;
      this->status = wait_status::waiting;
      prim_->waiters_.push_back(this);
    }
    this->wait_as_thread();
  }

  /// Called by await_resume: the resource now belongs to the caller.
  void consumed() noexcept { suspended_ = false; }

  Primitive* prim_;

 private:
  // The task is aborted while suspended here (the aborting thread holds it).
  static bool on_cancel(cancel_hook* hook) noexcept {
    auto* self = static_cast<sync_awaiter*>(hook);
    wake_batch wakes;
    std::lock_guard<std::mutex> guard(self->prim_->state_lock_);
    if (self->status != wait_status::waiting) return false;  // served: the wake is coming
    self->prim_->waiters_.remove(self);
    self->status = wait_status::idle;
    self->suspended_ = false;
    self->prim_->withdrawn_locked(*self, wakes);
    return true;
  }

  void abandon() noexcept {
    wake_batch wakes;
    std::lock_guard<std::mutex> guard(prim_->state_lock_);
    if (this->status == wait_status::waiting) {
      prim_->waiters_.remove(this);
      this->status = wait_status::idle;
      prim_->withdrawn_locked(*this, wakes);
    } else if (this->status == wait_status::granted) {
      this->status = wait_status::idle;
      prim_->give_back_locked(*this, wakes);
    }
  }

  /// Set when the node was linked by await_suspend, cleared once the result
  /// is consumed or the node withdrawn. Written only by the awaiting task
  /// (or by the cancel hook, which holds the task).
  bool suspended_ = false;
};

}  // namespace spindle::detail
