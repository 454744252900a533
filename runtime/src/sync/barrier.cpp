// spindle::barrier: arrivals counted under the state lock; the completing
// arrival wakes the phase's waiters outside it.
#include "spindle/barrier.hpp"

#include <system_error>

namespace spindle {

barrier::barrier(std::ptrdiff_t expected) : expected_(expected) {
  if (expected < 1) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: barrier needs an expected count of at least 1");
  }
}

bool barrier::blocking_arrive_and_wait() {
  arrive_awaiter waiter{*this};
  waiter.block();
  return waiter.leader;
}

std::ptrdiff_t barrier::expected() const {
  std::lock_guard<std::mutex> guard(state_lock_);
  return expected_;
}

void barrier::arrive_and_drop() {
  detail::wake_batch wakes;  // declared first: wakes after the lock is released
  std::lock_guard<std::mutex> guard(state_lock_);
  if (expected_ == 0) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: barrier::arrive_and_drop with no participant left");
  }
  --expected_;
  // This arrival counts in the current phase, which now needs one fewer: the
  // waiters alone complete it when they are `expected_` of them.
  if (arrived_ == 0 || arrived_ < expected_) return;
  arrived_ = 0;
  ++phase_;
  if (auto* first = detail::grant_front<node>(waiters_, wakes)) first->leader = true;
  detail::grant_all<node>(waiters_, wakes);
}

std::uint64_t barrier::phase() const {
  std::lock_guard<std::mutex> guard(state_lock_);
  return phase_;
}

bool barrier::take_locked(node& n, detail::wake_batch& wakes) noexcept {
  // Called once per arrival, the arrival itself.
  if (++arrived_ < expected_) return false;
  arrived_ = 0;
  ++phase_;
  detail::grant_all<node>(waiters_, wakes);
  n.leader = true;
  return true;
}

void barrier::withdrawn_locked(node& /*n*/, detail::wake_batch& /*wakes*/) noexcept {
  --arrived_;  // an aborted waiter did not arrive after all
}

void barrier::give_back_locked(node& /*n*/, detail::wake_batch& /*wakes*/) noexcept {
  // Its phase completed: nothing to undo.
}

}  // namespace spindle
