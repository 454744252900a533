// spindle::event: set() serves every waiter under the state lock and wakes
// them outside it.
#include "spindle/event.hpp"

namespace spindle {

void event::set() {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  set_.store(true, std::memory_order_release);
  detail::grant_all<detail::sync_node>(waiters_, wakes);
}

void event::reset() {
  std::lock_guard<std::mutex> guard(state_lock_);
  set_.store(false, std::memory_order_release);
}

void event::blocking_wait() {
  if (is_set()) return;
  wait_awaiter waiter{*this};
  waiter.block();
}

bool event::take_locked(detail::sync_node& /*n*/, detail::wake_batch& /*wakes*/) noexcept {
  return set_.load(std::memory_order_relaxed);
}

}  // namespace spindle
