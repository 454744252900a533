// scan::window: at most N items in flight between one producer and many
// consumers, with hysteresis.
//
// Shape: one atomic count of free places. The producer takes a place per
// item and, when none is left, sleeps (atomic wait, a futex) until half of
// the window is free again; consumers give places back and wake the
// producer only when the place they return reaches the level it waits for.
// The producer sleeps on a futex directly: std::atomic::wait would first spin
// with sched_yield, taking CPU from the workers while they drain the window.
// Compared with a counting semaphore this turns one producer wake-up per
// finished item into one per half window, when the producer is ahead.
//
// Thread-safety: acquire() and wait_all() from one producer thread;
// release() from any thread.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace scan {

class window {
 public:
  explicit window(std::uint32_t size)
      : size_(std::max<std::uint32_t>(size, 1)), resume_at_(std::max<std::uint32_t>(size_ / 2, 1)) {
    free_.store(size_);
  }

  /// Takes a place; blocks while the window is full (then until half of it
  /// is free).
  void acquire() noexcept {
    wait_for(resume_at_, 1);
    free_.fetch_sub(1, std::memory_order_acq_rel);
  }

  /// Gives a place back.
  void release() noexcept {
    const std::uint32_t now = free_.fetch_add(1, std::memory_order_seq_cst) + 1;
    std::uint32_t want = want_.load(std::memory_order_seq_cst);
    if (want != 0 && now >= want && want_.compare_exchange_strong(want, 0)) {
      ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&free_), FUTEX_WAKE_PRIVATE, 1, nullptr,
                nullptr, 0);
    }
  }

  /// Blocks until every place is free (all items finished).
  void wait_all() noexcept { wait_for(size_, size_); }

  [[nodiscard]] std::uint32_t size() const noexcept { return size_; }
  [[nodiscard]] std::uint32_t free_places() const noexcept { return free_.load(); }

 private:
  // Returns once at least `enough` places are free; when fewer than that
  // are, sleeps until a release brings them to `level`.
  void wait_for(std::uint32_t level, std::uint32_t enough) noexcept {
    std::uint32_t now = free_.load(std::memory_order_acquire);
    while (now < enough) {
      want_.store(level, std::memory_order_seq_cst);
      now = free_.load(std::memory_order_seq_cst);  // a release may have missed `want_`
      if (now >= enough) break;
      // Returns at once if free_ is no longer `now` (EAGAIN), or on a wake.
      ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&free_), FUTEX_WAIT_PRIVATE, now,
                nullptr, nullptr, 0);
      now = free_.load(std::memory_order_acquire);
    }
  }

  const std::uint32_t size_;
  const std::uint32_t resume_at_;
  std::atomic<std::uint32_t> free_{0};  // also the futex word
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  std::atomic<std::uint32_t> want_{0};  // level the producer sleeps for, 0: none
};

}  // namespace scan
