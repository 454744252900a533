// spindle::task_group: a scope whose spawned children cannot outlive it.
//
//   spindle::task_group g;
//   for (auto& item : items) g.spawn(process(item));
//   g.spawn(std::move(handle));  // adopts a task spawned earlier (join_handle)
//   co_await g.join();  // waits for every child; rethrows the first exception
//
// Shape: spawn(t) spawns `t` on the runtime of the calling task (it runs in
// parallel on the workers; its value, if any, is dropped) and keeps its join
// handle. join() waits until no child is left (children may spawn more
// children into the group while it waits), then rethrows the first exception
// a child ended with, in completion order. The first child that fails aborts
// all its siblings at once (including children spawned later, until join()
// returns); children aborted by the group (after a failure or abort_all())
// are not errors. After join() returns or throws the group is empty and can
// be reused. Finished children are released at the next spawn() or join().
// spawn(h) takes a join_handle instead: it adopts the task `h` refers to
// (spawned earlier, on any runtime, running or already finished) as a child,
// which from then on is treated exactly like a spawned one (its exception
// goes to join(), a sibling's failure or abort_all() aborts it, the
// destructor reaps it). A child the group did not abort itself (an adopted
// task aborted before through its handle, a child destroyed by runtime
// shutdown) fails with spindle::task_cancelled, like any failure.
//
// Destruction without join (an exception unwound the scope, or the task that
// owns the group was aborted): the destructor aborts every child and does
// not return while a child's frame still exists, so children may refer to
// locals of the enclosing scope. A queued or suspended child is destroyed
// on the calling thread (its destructors run there); a child running on
// another worker is waited for until its next suspension point (that worker
// destroys it). The one exception: a child whose file I/O is being cancelled
// (the kernel still owns its buffer) is waited for only when the destructor
// runs outside every runtime; inside a runtime (a worker, or the runtime's
// shutdown) it is left to that I/O's completion, which destroys it. Results
// and exceptions of unjoined children are dropped silently.
//
// Stop token: get_stop_token() is stopped when the group aborts its children
// (a child's failure, abort_all(), destruction unjoined), for code that
// polls cancellation or registers std::stop_callbacks rather than being
// aborted (blocking jobs, other runtimes, threads).
//
// Errors: spawn() throws std::system_error(std::errc::invalid_argument) for
// an empty task, an empty join handle (default-constructed or moved-from) or
// one whose result was already taken, and, for a task,
// std::system_error(std::errc::operation_not_permitted) outside a spindle
// runtime (adopting a handle spawns nothing and works on any thread);
// nothing is spawned or adopted then. join() rethrows a child's exception
// (spindle::task_cancelled when a child was destroyed by runtime shutdown)
// and throws std::system_error(std::errc::operation_not_permitted) when
// awaited outside a spindle task.
//
// Thread-safety: spawn(), abort_all() and size() may be called from any task
// (the owner or the group's children) while the group is alive, spawn(h) of
// a join handle also from a thread outside the runtime; a handed-over handle
// belongs to the group, nobody else may use it. join() by one task at a
// time; the destructor must not race with a spawn() from outside the
// group's children.
// Design source: Trio's nursery and Kotlin's coroutineScope (structured
// concurrency: the scope outlives its children), Tokio's JoinSet (abort on
// drop), the scanner executor (first exception rethrown at join).
#pragma once

#include <cstddef>
#include <exception>
#include <mutex>
#include <stop_token>
#include <utility>

#include "spindle/detail/child_set.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/task.hpp"

namespace spindle {

/// A scope whose spawned children cannot outlive it: spawn() children on the
/// calling task's runtime, `co_await join()` waits for all of them and
/// rethrows the first failure, which also aborts the siblings and requests
/// stop on get_stop_token(). Full contract (errors, cancellation,
/// thread-safety): the comment of spindle/task_group.hpp.
class task_group {
 public:
  /// Throws std::bad_alloc (the stop state).
  task_group() : set_(detail::child_set::abort_policy::on_failure) { set_.enable_stop_source(); }
  /// Aborts the children and waits for their frames (see the file comment).
  ~task_group();
  task_group(task_group const&) = delete;
  task_group& operator=(task_group const&) = delete;

  /// Spawns `t` as a child of the group (see the file comment for errors).
  template <class T>
  void spawn(task<T> t, spawn_location where = spawn_location::current()) {
    detail::check_child(t, "spindle::task_group::spawn");
    reap();
    auto c = detail::spawn_child(set_, std::move(t), 0, where);
    if (c->registered) (void)c.release();  // the set's lists own it now
  }

  /// Adopts the task of `h` as a child of the group (see the file comment
  /// for errors).
  template <class T>
  void spawn(join_handle<T> h) {
    detail::check_child(h, "spindle::task_group::spawn");
    reap();
    auto c = detail::adopt_child(set_, std::move(h), 0);
    if (c->registered) (void)c.release();  // the set's lists own it now
  }

  /// Waits for every child; rethrows the first exception (see the file
  /// comment). The group must outlive the returned task.
  [[nodiscard]] task<void> join();

  /// Aborts every child that has not finished (they are not errors for
  /// join()). Children spawned before join() returns are aborted too.
  void abort_all() noexcept { set_.abort_pending(); }

  /// A token that is stopped when the group aborts its children: the first
  /// failure, abort_all(), or destruction without join. Children (and
  /// anyone else) may poll it, register std::stop_callbacks on it, or pass
  /// it to spawn(t, token). After join() returns or throws, a group whose
  /// token was stopped gets a fresh stop source (earlier tokens stay
  /// stopped). Any thread.
  [[nodiscard]] std::stop_token get_stop_token() noexcept { return set_.stop_token(); }

  /// Children that have not finished yet.
  [[nodiscard]] std::size_t size() noexcept { return set_.pending_count(); }

 private:
  /// Releases finished children, recording the first exception.
  void reap() noexcept;

  std::mutex reap_mutex_;
  std::exception_ptr first_exception_;  // guarded by reap_mutex_
  detail::child_set set_;
};

}  // namespace spindle
