// spindle::task_group (see spindle/task_group.hpp).
#include "spindle/task_group.hpp"

namespace spindle {

task_group::~task_group() {
  set_.close();
  // Every child is finished (or withdrawn, see close()): drop them silently.
  while (detail::child_set::node* n = set_.pop_done())
    n->destroy(n);
}

void task_group::reap() noexcept {
  std::lock_guard lock(reap_mutex_);
  while (detail::child_set::node* n = set_.pop_done()) {
    if (n->failed) {
      // Not set_.aborting(): the failure of this very child may have set it.
      bool aborted_by_group = n->task->cancelled_before_finish && n->aborted;
      std::exception_ptr e = n->collect(n);
      if (!aborted_by_group && first_exception_ == nullptr) first_exception_ = std::move(e);
    }
    n->destroy(n);
  }
}

task<void> task_group::join() {
  co_await set_.wait_all();
  reap();
  std::exception_ptr e;
  {
    std::lock_guard lock(reap_mutex_);
    e = std::exchange(first_exception_, nullptr);
  }
  set_.reset();
  if (e != nullptr) std::rethrow_exception(e);
}

}  // namespace spindle
