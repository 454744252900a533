// detail::child_set (see spindle/detail/child_set.hpp).
#include "spindle/detail/child_set.hpp"

#include <chrono>
#include <string>
#include <system_error>
#include <thread>

#include "intrusive_list.hpp"
#include "spindle/runtime.hpp"

namespace spindle::detail {

namespace {
/// The links of the pending-children list.
using pending_links =
    intrusive_links<child_set::node, &child_set::node::prev, &child_set::node::next>;
}  // namespace

void throw_invalid_child(char const* who, char const* problem) {
  throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                          std::string(who) + ": " + problem);
}

child_set::watch_result child_set::watch(node* n, task_header* task, std::size_t index) noexcept {
  n->owner = this;
  n->task = task;
  n->index = index;
  n->notify = &child_set::on_complete;
  n->done = n->failed = n->withdrawn = n->registered = n->aborted = false;
  n->prev = n->next = nullptr;
  bool aborting = false;
  bool registered = false;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return watch_result::closed;
    n->registered = true;
    aborting = aborting_;
    n->aborted = aborting;
    pending_links::push_front(pending_head_, n);
    ++pending_;
    // Under the lock, so that close() never sees a pending node that is not
    // registered yet. join_register only sets bits; it calls nothing back.
    registered = join_register(task, n);
  }
  // Outside the lock: a child that already finished completes the node here.
  if (!registered) on_complete(n);
  return aborting ? watch_result::abort_child : watch_result::watching;
}

void child_set::on_complete(join_waiter* w) noexcept {
  auto* n = static_cast<node*>(w);
  child_set* set = n->owner;
  task_header* t = n->task;
  // The completing thread wrote these before publishing COMPLETE.
  bool failed = t->cancelled_before_finish || t->root_promise()->has_exception();
  task_header* wake_task = nullptr;
  std::stop_source to_stop{std::nostopstate};
  {
    std::lock_guard lock(set->mutex_);
    set->unlink_pending(n);
    n->done = true;
    n->failed = failed;
    set->push_done(n);
    if (set->first_done_ == npos) set->first_done_ = n->index;
    if (failed && set->first_failed_ == npos) set->first_failed_ = n->index;
    if (!set->aborting_ && (failed || set->policy_ == abort_policy::on_first_done)) {
      set->abort_pending_locked();
      to_stop = set->stop_;  // a copy: it keeps the stop state alive past the set
    }
    if (set->waiting_ != nullptr && set->satisfied()) {
      wake_task = std::exchange(set->waiting_, nullptr);
    }
  }
  // Nothing of the set or the node is touched from here on: the owner may
  // free both as soon as it sees `done`. The stop callbacks run here,
  // outside the lock (they may spawn into or abort the group).
  if (to_stop.stop_possible()) to_stop.request_stop();
  if (wake_task != nullptr) wake(wake_task);
}

bool child_set::on_cancel(cancel_hook* hook) noexcept {
  auto* set = static_cast<child_set*>(hook);
  std::lock_guard lock(set->mutex_);
  // Still registered: withdraw (the parent's frame is destroyed at once).
  // Else a completion took the parent and its wake is on the way.
  return std::exchange(set->waiting_, nullptr) != nullptr;
}

void child_set::unlink_pending(node* n) noexcept {
  pending_links::unlink(pending_head_, n);
  --pending_;
}

void child_set::push_done(node* n) noexcept {
  n->next = nullptr;
  if (done_tail_ != nullptr) {
    done_tail_->next = n;
  } else {
    done_head_ = n;
  }
  done_tail_ = n;
}

bool child_set::awaiter::await_ready() noexcept {
  std::lock_guard lock(set->mutex_);
  return set->satisfied();
}

bool child_set::awaiter::await_suspend(std::coroutine_handle<> caller) {
  task_header* self = suspend_current(caller, wait_kind::join);
  if (self == nullptr) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle: when_all/when_any/task_group awaited outside a spindle task");
  }
  std::lock_guard lock(set->mutex_);
  if (set->satisfied()) {
    clear_cancel_hook(self);  // not suspending after all
    return false;
  }
  set->waiting_ = self;
  set_cancel_hook(self, set, &child_set::on_cancel);
  return true;
}

void child_set::abort_pending() noexcept {
  std::stop_source to_stop{std::nostopstate};
  {
    // join_handle::abort never completes the child on this thread (a
    // worker's poll destroys it), so the lock can be held.
    std::lock_guard lock(mutex_);
    abort_pending_locked();
    to_stop = stop_;
  }
  if (to_stop.stop_possible()) to_stop.request_stop();
}

std::stop_token child_set::stop_token() noexcept {
  std::lock_guard lock(mutex_);
  return stop_.get_token();
}

void child_set::abort_pending_locked() noexcept {
  aborting_ = true;
  for (node* n = pending_head_; n != nullptr; n = n->next) {
    n->aborted = true;
    task_abort(n->task);
  }
}

child_set::node* child_set::pop_done() noexcept {
  std::lock_guard lock(mutex_);
  node* n = done_head_;
  if (n != nullptr) {
    done_head_ = n->next;
    if (done_head_ == nullptr) done_tail_ = nullptr;
    n->next = nullptr;
  }
  return n;
}

std::size_t child_set::pending_count() noexcept {
  std::lock_guard lock(mutex_);
  return pending_;
}

std::size_t child_set::first_done_index() noexcept {
  std::lock_guard lock(mutex_);
  return first_done_;
}

std::size_t child_set::first_failed_index() noexcept {
  std::lock_guard lock(mutex_);
  return first_failed_;
}

bool child_set::aborting() noexcept {
  std::lock_guard lock(mutex_);
  return aborting_;
}

void child_set::reset() noexcept {
  std::stop_source old{std::nostopstate};
  {
    std::lock_guard lock(mutex_);
    first_done_ = first_failed_ = npos;
    aborting_ = false;
    if (stop_.stop_possible() && stop_.stop_requested()) {
      old = std::exchange(stop_, std::stop_source{});  // reused after a stop: a fresh one
    }
  }
}

namespace {

void pause(int& spins) noexcept {
  if (++spins < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

void abort_and_reap(task_header* task) noexcept {
  int spins = 0;
  for (;;) {
    switch (task_abort_here(task)) {
      case abort_here_result::gone:
        return;
      case abort_here_result::running:
        // Another thread polls it; that poll's end destroys it or leaves it
        // queued or pending: look again.
        pause(spins);
        break;
      case abort_here_result::pending:
        // Only a thread outside every runtime can wait for the wake: a worker
        // (or the runtime's shutdown) may be the one that must deliver it.
        if (current_scheduler() != nullptr) return;
        while (!task_is_complete(task))
          pause(spins);
        return;
    }
  }
}

void child_set::close() noexcept {
  std::stop_source to_stop{std::nostopstate};
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    aborting_ = true;
    to_stop = stop_;
  }
  if (to_stop.stop_possible()) to_stop.request_stop();
  int spins = 0;
  for (;;) {
    node* n = nullptr;
    {
      std::lock_guard lock(mutex_);
      // A node we already withdrew is not pending any more, so the head is
      // always one still to handle.
      n = pending_head_;
    }
    if (n == nullptr) return;
    abort_and_reap(n->task);  // without the lock: a completion here takes it
    if (join_unregister(n->task)) {
      // Not complete (a pending wake inside a runtime): it will not notify.
      std::lock_guard lock(mutex_);
      unlink_pending(n);
      n->withdrawn = true;
      push_done(n);
      continue;
    }
    // Completed: wait until its notify has moved it to the done list. A task
    // destroyed by runtime shutdown notifies nobody; the scheduler then
    // clears JOIN_WAKER.
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (n->done) break;
        if ((n->task->state.load(std::memory_order_acquire) & state_bits::join_waker) == 0) {
          unlink_pending(n);
          n->done = n->failed = true;
          push_done(n);
          break;
        }
      }
      pause(spins);
    }
  }
}

}  // namespace spindle::detail
