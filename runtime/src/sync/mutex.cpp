// spindle::mutex: FIFO hand-off under the state lock; wakes outside it.
#include "spindle/mutex.hpp"

#include <system_error>

namespace spindle {

bool mutex::try_lock() {
  std::lock_guard<std::mutex> guard(state_lock_);
  if (locked_) return false;
  locked_ = true;
  return true;
}

void mutex::unlock() {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  if (!locked_) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle: mutex::unlock of a mutex that is not locked");
  }
  unlock_locked(wakes);
}

void mutex::unlock_held() noexcept {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  unlock_locked(wakes);
}

mutex_guard mutex::blocking_lock() {
  lock_awaiter waiter{*this};
  waiter.block();
  return mutex_guard{*this, std::adopt_lock};
}

void mutex::unlock_locked(detail::wake_batch& wakes) noexcept {
  // Hand-off: the lock stays taken and now belongs to the oldest waiter.
  if (detail::grant_front<detail::sync_node>(waiters_, wakes) == nullptr) locked_ = false;
}

bool mutex::take_locked(detail::sync_node& /*n*/, detail::wake_batch& /*wakes*/) noexcept {
  // Waiters exist only while locked_, so a free lock has nobody to be fair to.
  if (locked_) return false;
  locked_ = true;
  return true;
}

void mutex::withdrawn_locked(detail::sync_node& /*n*/, detail::wake_batch& /*wakes*/) noexcept {
  // A waiter blocks nobody behind it: the holder still holds the lock.
}

void mutex::give_back_locked(detail::sync_node& /*n*/, detail::wake_batch& wakes) noexcept {
  unlock_locked(wakes);  // handed the lock, destroyed before it resumed
}

}  // namespace spindle
