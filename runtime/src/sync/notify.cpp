// spindle::notify: permit flag, FIFO waiters and the notify_all generation,
// all under the state lock; wakes outside it.
#include "spindle/notify.hpp"

namespace spindle {

void notify::notify_one() {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  notify_one_locked(wakes);
}

void notify::notify_all() {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  while (auto* n = detail::grant_front<node>(waiters_, wakes))
    n->by_one = false;
}

void notify::blocking_wait() {
  wait_awaiter waiter{*this};
  waiter.block();
}

void notify::notify_one_locked(detail::wake_batch& wakes) noexcept {
  if (auto* n = detail::grant_front<node>(waiters_, wakes)) {
    n->by_one = true;
  } else {
    permit_ = true;
  }
}

bool notify::take_locked(node& n, detail::wake_batch& /*wakes*/) noexcept {
  if (permit_) {
    permit_ = false;
    return true;
  }
  // A notify_all() since the awaitable was created counts for it.
  return generation_.load(std::memory_order_relaxed) != n.generation;
}

void notify::withdrawn_locked(node& /*n*/, detail::wake_batch& /*wakes*/) noexcept {}

void notify::give_back_locked(node& n, detail::wake_batch& wakes) noexcept {
  if (n.by_one) notify_one_locked(wakes);  // pass the notify_one() on
}

}  // namespace spindle
