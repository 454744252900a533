// spindle::rwlock: readers, writer and one FIFO queue under the state lock;
// admitted waiters are woken outside it.
#include "spindle/rwlock.hpp"

#include <system_error>

namespace spindle {

bool rwlock::try_lock_shared() {
  std::lock_guard<std::mutex> guard(state_lock_);
  if (writer_ || !waiters_.empty()) return false;
  ++readers_;
  return true;
}

bool rwlock::try_lock() {
  std::lock_guard<std::mutex> guard(state_lock_);
  if (writer_ || readers_ != 0 || !waiters_.empty()) return false;
  writer_ = true;
  return true;
}

void rwlock::unlock_shared() {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  if (readers_ == 0) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle: rwlock::unlock_shared without a reader");
  }
  --readers_;
  admit_locked(wakes);
}

void rwlock::unlock() {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  if (!writer_) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle: rwlock::unlock without a writer");
  }
  writer_ = false;
  admit_locked(wakes);
}

void rwlock::unlock_held(bool exclusive) noexcept {
  detail::wake_batch wakes;
  std::lock_guard<std::mutex> guard(state_lock_);
  if (exclusive) {
    writer_ = false;
  } else {
    --readers_;
  }
  admit_locked(wakes);
}

rwlock_read_guard rwlock::blocking_lock_shared() {
  read_awaiter waiter{*this};
  waiter.block();
  return rwlock_read_guard{*this, std::adopt_lock};
}

rwlock_write_guard rwlock::blocking_lock() {
  write_awaiter waiter{*this};
  waiter.block();
  return rwlock_write_guard{*this, std::adopt_lock};
}

void rwlock::admit_locked(detail::wake_batch& wakes) noexcept {
  while (auto* front = static_cast<node*>(waiters_.front())) {
    if (front->exclusive) {
      if (writer_ || readers_ != 0) return;
      writer_ = true;
      detail::grant_front<node>(waiters_, wakes);
      return;
    }
    if (writer_) return;
    ++readers_;
    detail::grant_front<node>(waiters_, wakes);
  }
}

bool rwlock::take_locked(node& n, detail::wake_batch& /*wakes*/) noexcept {
  if (writer_ || !waiters_.empty()) return false;  // queued requests go first
  if (n.exclusive) {
    if (readers_ != 0) return false;
    writer_ = true;
  } else {
    ++readers_;
  }
  return true;
}

void rwlock::withdrawn_locked(node& /*n*/, detail::wake_batch& wakes) noexcept {
  admit_locked(wakes);  // readers queued behind an aborted writer may go now
}

void rwlock::give_back_locked(node& n, detail::wake_batch& wakes) noexcept {
  if (n.exclusive) {
    writer_ = false;
  } else {
    --readers_;
  }
  admit_locked(wakes);
}

}  // namespace spindle
