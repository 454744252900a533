// detail::intrusive_links: the doubly linked intrusive lists of the runtime
// and the drivers, in one place.
//
// Shape: a list is a head pointer (and, for FIFO lists, a tail pointer) owned
// by its user; a node keeps its links in two member pointers named by the
// template arguments, so one node may sit in several lists through different
// link pairs (io_op: the in-flight list and the cancel list). Nothing
// allocates; nothing checks membership (the caller knows it).
//
// Users: the owned-task lists and the unobserved-exception list
// (task_header::owned_prev/owned_next), child_set's pending children, the
// io_uring driver's in-flight and cancel lists and the thread pool's job
// queue (io_op::prev/next, cancel_prev/cancel_next).
//
// Thread-safety: none; each list's owner guards it.
// Design source: the intrusive lists of Tokio's util/linked_list.rs and the
// Linux kernel's list.h, by member pointer instead of an embedded node type.
#pragma once

namespace spindle::detail {

template <class T, T* T::*Prev, T* T::*Next>
struct intrusive_links {
  /// Puts `n` first in the list at `head` (a list without a tail).
  static void push_front(T*& head, T* n) noexcept {
    n->*Prev = nullptr;
    n->*Next = head;
    if (head != nullptr) head->*Prev = n;
    head = n;
  }

  /// Puts `n` last in the FIFO list `head`/`tail`.
  static void push_back(T*& head, T*& tail, T* n) noexcept {
    n->*Next = nullptr;
    n->*Prev = tail;
    (tail != nullptr ? tail->*Next : head) = n;
    tail = n;
  }

  /// Unlinks `n` from the list at `head` (a list without a tail) and clears
  /// its links.
  static void unlink(T*& head, T* n) noexcept {
    (n->*Prev != nullptr ? n->*Prev->*Next : head) = n->*Next;
    if (n->*Next != nullptr) n->*Next->*Prev = n->*Prev;
    n->*Prev = n->*Next = nullptr;
  }

  /// Unlinks `n` from the FIFO list `head`/`tail` and clears its links.
  static void unlink(T*& head, T*& tail, T* n) noexcept {
    (n->*Prev != nullptr ? n->*Prev->*Next : head) = n->*Next;
    (n->*Next != nullptr ? n->*Next->*Prev : tail) = n->*Prev;
    n->*Prev = n->*Next = nullptr;
  }

  /// Unlinks and returns the first node of the list at `head`, or nullptr.
  static T* pop_front(T*& head) noexcept {
    T* n = head;
    if (n != nullptr) unlink(head, n);
    return n;
  }

  /// Unlinks and returns the first node of the FIFO list `head`/`tail`, or
  /// nullptr.
  static T* pop_front(T*& head, T*& tail) noexcept {
    T* n = head;
    if (n != nullptr) unlink(head, tail, n);
    return n;
  }
};

}  // namespace spindle::detail
