// Intrusive wait lists: the waiter side shared by spindle's synchronization
// primitives, channels and timers.
//
// Shape: a wait_node lives inside the awaiter (so in the waiting coroutine's
// frame) or on the stack of a thread blocked outside the runtime; no wait
// allocates. A primitive keeps its waiters in a wait_list (doubly linked,
// FIFO) guarded by the primitive's own lock, and wakes one by unlinking it
// and calling notify().
//
// The protocol every awaiter follows (see detail::set_cancel_hook):
//   await_suspend: self = suspend_current(h); lock; if the resource is free,
//     take it and return false (no suspension; clear the hook with
//     clear_cancel_hook(self)); else node.task = self, link
//     the node, set_cancel_hook(self, hook, this), unlock, return true.
//   waker (any thread): lock; node = list.pop_front(); hand it the resource
//     (a flag or value stored in the awaiter); unlock; node->notify()
//     (reads node->task first: the frame may be destroyed once woken).
//   hook (the task was aborted while suspended): lock; if the node is still
//     linked, unlink it and return true (the frame is destroyed at once);
//     else return false: a wake is on its way and the frame is destroyed at
//     that wake instead of resumed, so the awaiter's destructor must give
//     back whatever was handed to it (a lock, a permit, a value).
//
// Thread waiters (blocking_send and friends): node.task is null and the
// blocked thread waits on node.thread_word. notify() stores 1 and wakes the
// futex. The notifier must not touch the node after notify(); the blocked
// thread must not let the node die before it has seen thread_word == 1.
//
// Waking outside the lock: a waker that wakes several nodes unlinks them
// under the lock, marks each as handed its resource, collects them in a
// wake_batch and notifies them after unlocking (the batch's destructor does
// it, so declare the batch before the lock guard). An unlinked node is
// written by nobody but the batch until it is notified.
//
// Thread-safety: a wait_list is not synchronized; its owner's lock guards it
// and every node's links and `linked` flag.
// Design source: the intrusive waiter lists of Tokio's sync module
// (batch_semaphore, Notify) and cppcoro's awaiter-as-node primitives.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "spindle/detail/task_header.hpp"

namespace spindle::detail {

struct wait_node {
  wait_node* prev = nullptr;
  wait_node* next = nullptr;
  /// The waiting task, or nullptr for a thread blocked outside the runtime.
  task_header* task = nullptr;
  /// Thread waiters: 0 while waiting, 1 once notified (futex word).
  std::atomic<std::uint32_t> thread_word{0};
  /// In a list. Guarded by the owning primitive's lock.
  bool linked = false;

  /// Wakes the waiter. Call after unlinking, outside or inside the lock;
  /// the node may be destroyed as soon as this returns (or before, for a
  /// thread waiter), so nothing of it is read afterwards.
  void notify() noexcept {
    if (task_header* t = task) {
      wake(t);
      return;
    }
    thread_word.store(1, std::memory_order_release);
    thread_word.notify_one();
  }

  /// Thread waiters: blocks until notify() has been called.
  void wait_as_thread() noexcept {
    while (thread_word.load(std::memory_order_acquire) == 0)
      thread_word.wait(0);
  }
};

/// FIFO list of wait nodes. Not thread-safe: guarded by its owner's lock.
class wait_list {
 public:
  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }
  [[nodiscard]] wait_node* front() const noexcept { return head_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  void push_back(wait_node* n) noexcept {
    n->next = nullptr;
    n->prev = tail_;
    if (tail_ != nullptr) {
      tail_->next = n;
    } else {
      head_ = n;
    }
    tail_ = n;
    n->linked = true;
    ++size_;
  }

  /// Unlinks and returns the first node, or nullptr.
  wait_node* pop_front() noexcept {
    wait_node* n = head_;
    if (n != nullptr) remove(n);
    return n;
  }

  /// Unlinks `n` if it is linked here. Returns whether it was.
  bool remove(wait_node* n) noexcept {
    if (!n->linked) return false;
    if (n->prev != nullptr) {
      n->prev->next = n->next;
    } else {
      head_ = n->next;
    }
    if (n->next != nullptr) {
      n->next->prev = n->prev;
    } else {
      tail_ = n->prev;
    }
    n->prev = n->next = nullptr;
    n->linked = false;
    --size_;
    return true;
  }

 private:
  wait_node* head_ = nullptr;
  wait_node* tail_ = nullptr;
  std::size_t size_ = 0;
};

/// Unlinked nodes waiting to be notified once the owner's lock is released,
/// in the order they were pushed. Chains them through `next` (the nodes are
/// in no list). Its destructor notifies whatever is left, so declare it
/// before the lock guard and it notifies after the unlock:
///
///   detail::wake_batch wakes;
///   std::lock_guard lock{mutex_};
///   if (wait_node* n = waiters_.pop_front()) wakes.push(n);
///   // ~lock_guard unlocks, then ~wake_batch notifies
///
/// Thread-safety: one batch belongs to one thread.
/// Design source: Tokio's WakeList (wakers collected under the lock, woken
/// after it is released).
class wake_batch {
 public:
  wake_batch() noexcept = default;
  wake_batch(wake_batch const&) = delete;
  wake_batch& operator=(wake_batch const&) = delete;
  ~wake_batch() { notify_all(); }

  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }

  /// Adds an unlinked node (popped or removed from its list).
  void push(wait_node* n) noexcept {
    n->next = nullptr;
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
      push(n);
  }

  /// Notifies every node, front first. Call without the owner's lock.
  void notify_all() noexcept {
    wait_node* n = head_;
    head_ = tail_ = nullptr;
    while (n != nullptr) {
      wait_node* after = n->next;  // read before notify: the node may die then
      n->next = nullptr;
      n->notify();
      n = after;
    }
  }

 private:
  wait_node* head_ = nullptr;
  wait_node* tail_ = nullptr;
};

}  // namespace spindle::detail
