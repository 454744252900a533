// scan::window: at most N items in flight between one producer and many
// consumers, with hysteresis, and a size that shrinks when the items run out
// of a resource (file descriptors).
//
// Shape: an atomic count of free places and an atomic size. The producer
// takes a place per item and, when none is left, sleeps on a futex until
// half of the window is free again; consumers give places back and wake the
// producer only when the place they return reaches the level it waits for.
// The producer sleeps on a futex directly: std::atomic::wait would first spin
// with sched_yield, taking CPU from the workers while they drain the window.
// Compared with a counting semaphore this turns one producer wake-up per
// finished item into one per half window, when the producer is ahead.
// A consumer may instead give its place up for good (shrink): the window is
// then one place smaller, and the producer is always woken so that it
// recomputes the level it waits for (and looks at its `stop` condition).
// The futex word is a generation counter bumped by every wake-up, so a wake
// between the producer's last check and its sleep is never lost.
//
// Thread-safety: acquire(), wait_all() and wait_release() from one producer
// thread; release() and shrink() from any thread.
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
  explicit window(std::uint32_t size) : size_(std::max<std::uint32_t>(size, 1)) {
    free_.store(size_.load());
  }

  /// Takes a place; blocks while the window is full (then until half of it
  /// is free).
  void acquire() noexcept {
    (void)acquire([] { return false; });
  }
  /// Takes a place and returns true, or returns false without one when
  /// `stop()` is true while the window is full (checked before sleeping and
  /// after every wake-up, e.g. after a shrink()).
  template <class Stop>
  bool acquire(Stop&& stop) noexcept {
    if (!wait_until([](std::uint32_t size) { return std::max<std::uint32_t>(size / 2, 1); },
                    [](std::uint32_t) { return 1u; }, stop)) {
      return false;
    }
    free_.fetch_sub(1, std::memory_order_acq_rel);  // only the producer takes places
    return true;
  }

  /// Gives a place back.
  void release() noexcept {
    const std::uint32_t now = free_.fetch_add(1, std::memory_order_seq_cst) + 1;
    std::uint32_t want = want_.load(std::memory_order_seq_cst);
    if (want != 0 && now >= want && want_.compare_exchange_strong(want, 0)) wake();
  }

  /// Gives a place up for good instead of releasing it: the window is one
  /// place smaller. The caller must know that another place is still held
  /// (the window never shrinks to nothing).
  void shrink() noexcept {
    size_.fetch_sub(1, std::memory_order_seq_cst);
    if (want_.exchange(0, std::memory_order_seq_cst) != 0) wake();
  }

  /// Blocks until every place is free (all items finished) and returns
  /// true, or returns false when `stop()` is true (checked as in acquire).
  template <class Stop>
  bool wait_all(Stop&& stop) noexcept {
    auto all = [](std::uint32_t size) { return size; };
    return wait_until(all, all, stop);
  }
  void wait_all() noexcept {
    (void)wait_all([] { return false; });
  }

  /// Blocks until some item gives its place back or up (release or shrink)
  /// and returns true; returns false at once when no place is held.
  bool wait_release() noexcept {
    const std::uint32_t gen = gen_.load(std::memory_order_seq_cst);
    want_.store(1, std::memory_order_seq_cst);  // any release wakes from here on
    if (free_.load(std::memory_order_seq_cst) >= size_.load(std::memory_order_seq_cst)) {
      want_.store(0, std::memory_order_seq_cst);
      return false;
    }
    sleep(gen);
    return true;
  }

  /// The current number of places (initial size minus the shrinks).
  [[nodiscard]] std::uint32_t size() const noexcept { return size_.load(); }
  [[nodiscard]] std::uint32_t free_places() const noexcept { return free_.load(); }

 private:
  // Returns true once enough(size) places are free; while fewer are, sleeps
  // until a release brings them to level(size), or returns false when
  // stop() says so. The size may shrink meanwhile: recomputed every round.
  template <class Level, class Enough, class Stop>
  bool wait_until(Level level, Enough enough, Stop& stop) noexcept {
    for (;;) {
      const std::uint32_t gen = gen_.load(std::memory_order_seq_cst);
      const std::uint32_t size = size_.load(std::memory_order_seq_cst);
      if (free_.load(std::memory_order_seq_cst) >= enough(size)) return true;
      if (stop()) return false;
      want_.store(level(size), std::memory_order_seq_cst);
      // A release or shrink may have missed `want_`: look again before sleeping.
      if (free_.load(std::memory_order_seq_cst) >= enough(size) ||
          size_.load(std::memory_order_seq_cst) != size) {
        continue;
      }
      sleep(gen);
    }
  }

  void sleep(std::uint32_t gen) noexcept {
    // Returns at once if gen_ is no longer `gen` (EAGAIN), or on a wake.
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&gen_), FUTEX_WAIT_PRIVATE, gen, nullptr,
              nullptr, 0);
  }
  void wake() noexcept {
    gen_.fetch_add(1, std::memory_order_seq_cst);
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&gen_), FUTEX_WAKE_PRIVATE, 1, nullptr,
              nullptr, 0);
  }

  std::atomic<std::uint32_t> size_{0};  // places, shrinks
  std::atomic<std::uint32_t> free_{0};
  std::atomic<std::uint32_t> want_{0};  // level the producer sleeps for, 0: none
  std::atomic<std::uint32_t> gen_{0};   // the futex word: bumped by every wake
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
};

}  // namespace scan
