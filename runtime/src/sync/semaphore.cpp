// spindle::semaphore: permits served to waiters in FIFO order under the state
// lock; wakes outside it.
#include "spindle/semaphore.hpp"

#include <limits>
#include <system_error>

namespace spindle {

bool semaphore::try_acquire(std::size_t n) {
  std::lock_guard<std::mutex> guard(state_lock_);
  std::size_t have = permits_.load(std::memory_order_relaxed);
  if (!waiters_.empty() || have < n) return false;
  permits_.store(have - n, std::memory_order_release);
  return true;
}

void semaphore::release(std::size_t n) {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  std::size_t have = permits_.load(std::memory_order_relaxed);
  if (n > std::numeric_limits<std::size_t>::max() - have) {
    throw std::system_error(std::make_error_code(std::errc::value_too_large),
                            "spindle: semaphore::release would overflow the permit count");
  }
  permits_.store(have + n, std::memory_order_release);
  serve_locked(wakes);
}

void semaphore::release_held(std::size_t n) noexcept {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  permits_.store(permits_.load(std::memory_order_relaxed) + n, std::memory_order_release);
  serve_locked(wakes);
}

void semaphore::blocking_acquire(std::size_t n) {
  acquire_awaiter waiter{*this, n};
  waiter.block();
}

void semaphore::serve_locked(detail::wake_batch& wakes) noexcept {
  std::size_t have = permits_.load(std::memory_order_relaxed);
  while (auto* front = static_cast<node*>(waiters_.front())) {
    if (front->need > have) break;  // the oldest waiter blocks the ones behind it
    have -= front->need;
    detail::grant_front<node>(waiters_, wakes);
  }
  permits_.store(have, std::memory_order_release);
}

bool semaphore::take_locked(node& n, detail::wake_batch& /*wakes*/) noexcept {
  std::size_t have = permits_.load(std::memory_order_relaxed);
  if (!waiters_.empty() || have < n.need) return false;
  permits_.store(have - n.need, std::memory_order_release);
  return true;
}

void semaphore::withdrawn_locked(node& /*n*/, detail::wake_batch& wakes) noexcept {
  serve_locked(wakes);  // it may have been the waiter that blocked the others
}

void semaphore::give_back_locked(node& n, detail::wake_batch& wakes) noexcept {
  permits_.store(permits_.load(std::memory_order_relaxed) + n.need, std::memory_order_release);
  serve_locked(wakes);
}

}  // namespace spindle
