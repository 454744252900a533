// scan::window: at most N items in flight between one producer task and many
// consumers, with hysteresis, and a size that shrinks when the items run out
// of a resource (file descriptors).
//
// Shape: an atomic count of free places and an atomic size. The producer
// (a spindle task) takes a place per item and, when none is left, suspends
// on a spindle::notify until half of the window is free again; consumers give
// places back and wake the producer only when the place they return reaches
// the level it waits for. Compared with a counting semaphore this turns one
// producer wake-up per finished item into one per half window, when the
// producer is ahead. The producer suspends instead of blocking: it runs on a
// worker, which meanwhile runs the items it spawned.
// A consumer may instead give its place up for good (shrink): the window is
// then one place smaller, and the producer is always woken so that it
// recomputes the level it waits for (and looks at its `stop` condition).
// The producer publishes the level it waits for, then looks at the count
// again before it suspends; a consumer bumps the count, then reads the level.
// Both are sequentially consistent, so one of them sees the other, and a
// notify_one() that finds no waiter stores a permit: no wake-up is lost. A
// stale permit only costs the producer one more look at the count.
//
// Thread-safety: try_acquire(), acquire(), wait_all() and wait_release()
// from one producer task at a time; release() and shrink() from any thread
// (tasks or plain threads).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <spindle/notify.hpp>
#include <spindle/task.hpp>

namespace scan {

class window {
 public:
  explicit window(std::uint32_t size) : size_(std::max<std::uint32_t>(size, 1)) {
    free_.store(size_.load());
  }

  /// Takes a place if one is free now; never suspends.
  [[nodiscard]] bool try_acquire() noexcept {
    if (free_.load(std::memory_order_acquire) == 0) return false;
    free_.fetch_sub(1, std::memory_order_acq_rel);  // only the producer takes places
    return true;
  }

  /// Takes a place and yields true; suspends while the window is full (then
  /// until half of it is free). Yields false without a place when `stop()`
  /// is true while the window is full (checked before suspending and after
  /// every wake-up, e.g. after a shrink()).
  spindle::task<bool> acquire(std::function<bool()> stop = {}) {
    bool const room =
        co_await wait_for(need::one, std::move(stop));  // GCC PR 106188: see walker.cpp
    if (!room) co_return false;
    free_.fetch_sub(1, std::memory_order_acq_rel);
    co_return true;
  }

  /// Gives a place back.
  void release() {
    std::uint32_t const now = free_.fetch_add(1, std::memory_order_seq_cst) + 1;
    std::uint32_t want = want_.load(std::memory_order_seq_cst);
    if (want != 0 && now >= want && want_.compare_exchange_strong(want, 0)) wake_.notify_one();
  }

  /// Gives a place up for good instead of releasing it: the window is one
  /// place smaller. The caller must know that another place is still held
  /// (the window never shrinks to nothing).
  void shrink() {
    size_.fetch_sub(1, std::memory_order_seq_cst);
    if (want_.exchange(0, std::memory_order_seq_cst) != 0) wake_.notify_one();
  }

  /// Suspends until every place is free (all items finished) and yields
  /// true, or yields false when `stop()` is true (checked as in acquire).
  spindle::task<bool> wait_all(std::function<bool()> stop = {}) {
    return wait_for(need::all, std::move(stop));
  }

  /// Suspends until some item gives its place back or up (release or
  /// shrink) and yields true; yields false at once when no place is held.
  /// May also yield true after an earlier, already consumed wake-up: the
  /// caller looks at what it waits for again either way.
  spindle::task<bool> wait_release() {
    want_.store(1, std::memory_order_seq_cst);  // any release wakes from here on
    if (free_.load(std::memory_order_seq_cst) >= size_.load(std::memory_order_seq_cst)) {
      want_.store(0, std::memory_order_seq_cst);
      co_return false;
    }
    co_await wake_.wait();
    co_return true;
  }

  /// The current number of places (initial size minus the shrinks).
  [[nodiscard]] std::uint32_t size() const noexcept { return size_.load(); }
  [[nodiscard]] std::uint32_t free_places() const noexcept { return free_.load(); }

 private:
  enum class need : std::uint8_t { one, all };

  // Yields true once enough places are free (one, or all of them); while
  // fewer are, suspends until a release brings them to the level (half the
  // window, or all of it), or yields false when stop() says so. The size may
  // shrink meanwhile: recomputed every round.
  spindle::task<bool> wait_for(need what, std::function<bool()> stop) {
    for (;;) {
      std::uint32_t const size = size_.load(std::memory_order_seq_cst);
      std::uint32_t const enough = what == need::one ? 1 : size;
      if (free_.load(std::memory_order_seq_cst) >= enough) co_return true;
      if (stop && stop()) co_return false;
      want_.store(what == need::one ? std::max<std::uint32_t>(size / 2, 1) : size,
                  std::memory_order_seq_cst);
      // A release or shrink may have missed `want_`: look again before waiting.
      if (free_.load(std::memory_order_seq_cst) >= enough ||
          size_.load(std::memory_order_seq_cst) != size) {
        continue;
      }
      co_await wake_.wait();
    }
  }

  std::atomic<std::uint32_t> size_{0};  // places, shrinks
  std::atomic<std::uint32_t> free_{0};
  std::atomic<std::uint32_t> want_{0};  // level the producer waits for, 0: none
  spindle::notify wake_;
};

}  // namespace scan
