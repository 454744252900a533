// A batch of wait nodes to notify once the owner's lock is released.
//
// Shape: the waker unlinks nodes from a wait_list under the primitive's lock
// (which clears their `linked` flag, so a concurrent cancel hook sees that a
// wake is on its way) and adds them here; the chain reuses the nodes' `next`
// links. notify_all() (or the destructor) wakes them in FIFO order. Declare
// the chain before the lock guard so that it notifies after the unlock:
//
//   detail::wake_chain wakes;
//   std::lock_guard lock{mutex_};
//   wakes.add(waiters_.pop_front());
//   // ~lock_guard unlocks, then ~wake_chain notifies
//
// Thread-safety: one chain belongs to one thread. notify_all reads each
// node's `next` before notifying it: a node may be destroyed by its woken
// owner as soon as it is notified.
// Design source: Tokio's WakeList (wakers collected under the lock, woken
// after it is released).
#pragma once

#include "spindle/detail/wait_list.hpp"

namespace spindle::detail {

class wake_chain {
 public:
  wake_chain() noexcept = default;
  wake_chain(wake_chain const&) = delete;
  wake_chain& operator=(wake_chain const&) = delete;
  ~wake_chain() { notify_all(); }

  /// Adds an unlinked node (nullptr is ignored).
  void add(wait_node* n) noexcept {
    if (n == nullptr) return;
    n->next = nullptr;
    n->prev = nullptr;
    if (tail_ != nullptr) {
      tail_->next = n;
    } else {
      head_ = n;
    }
    tail_ = n;
  }

  /// Unlinks every node of `list` (under its owner's lock) and adds it.
  void take_all(wait_list& list) noexcept {
    while (wait_node* n = list.pop_front())
      add(n);
  }

  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }

  /// Notifies every node, in the order added. Call without the lock held.
  void notify_all() noexcept {
    wait_node* n = head_;
    head_ = tail_ = nullptr;
    while (n != nullptr) {
      wait_node* next = n->next;
      n->notify();
      n = next;
    }
  }

 private:
  wait_node* head_ = nullptr;
  wait_node* tail_ = nullptr;
};

}  // namespace spindle::detail
