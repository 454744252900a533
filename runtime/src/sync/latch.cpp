// spindle::latch: the count under the state lock; the last count_down wakes
// every waiter outside it.
#include "spindle/latch.hpp"

#include <system_error>

namespace spindle {

latch::latch(std::ptrdiff_t count) : count_(count) {
  if (count < 0) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: latch with a negative count");
  }
}

void latch::count_down(std::ptrdiff_t n) {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  std::ptrdiff_t left = count_.load(std::memory_order_relaxed);
  if (n < 0 || n > left) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: latch::count_down by a negative amount or below zero");
  }
  count_.store(left - n, std::memory_order_release);
  if (left - n == 0) detail::grant_all<detail::sync_node>(waiters_, wakes);
}

latch::wait_awaiter latch::arrive_and_wait(std::ptrdiff_t n) {
  count_down(n);
  return wait_awaiter{*this};
}

void latch::blocking_wait() {
  if (try_wait()) return;
  wait_awaiter waiter{*this};
  waiter.block();
}

bool latch::take_locked(detail::sync_node& /*n*/, detail::wake_batch& /*wakes*/) noexcept {
  return count_.load(std::memory_order_relaxed) == 0;
}

}  // namespace spindle
