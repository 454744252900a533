// A worker's local run queue: the 256-slot lock-free ring buffer.
//
// Shape: `slots` holds 256 task pointers; `tail` (u32) is written only by the
// owning worker; `head` (u64) packs two u32 positions {steal_head, real_head}.
// real_head is where the owner pops; steal_head trails it while a stealer is
// copying the range it claimed. The owner pushes at tail and pops at
// real_head; a stealer claims half of the queue by moving real_head (claim),
// copies the claimed slots into its own ring (copy), then moves steal_head up
// to real_head (release). While a steal is in progress (steal_head !=
// real_head) no other stealer can claim, and the owner may not overwrite the
// claimed slots. When the ring is full the owner moves half of it (128 tasks)
// plus the new one to the global queue in one batch.
//
// Positions are u32 (wrapping) in one u64 head word: Tokio moved from 16-bit
// halves to 32-bit ones because 16-bit positions can wrap around (ABA) while
// a stealer is preempted between its claim and its release.
//
// Thread-safety: push_back, pop, push_overflow: owner thread only.
// steal_into: any other worker (the destination is the stealer's own queue).
// len/is_empty: any thread (approximate when racing).
// Design source: Volt's WorkStealQueue, Tokio's queue.rs.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "global_queue.hpp"
#include "spindle/detail/task_header.hpp"

namespace spindle::detail {

class run_queue {
 public:
  static constexpr std::uint32_t capacity = 256;
  static constexpr std::uint32_t mask = capacity - 1;
  static constexpr std::uint32_t overflow_batch = capacity / 2;

  run_queue() noexcept {
    for (auto& slot : slots_)
      slot.store(nullptr, std::memory_order_relaxed);
  }
  run_queue(run_queue const&) = delete;
  run_queue& operator=(run_queue const&) = delete;

  /// Called on each task moved out by an overflow: true when its entry is
  /// stale and has been dealt with (it is then left out of the batch).
  using stale_filter = bool (*)(task_header* task) noexcept;

  /// Owner: appends `task`; on a full ring moves 128 tasks and `task` to
  /// `overflow` in one batch, leaving out those `drop_stale` (if given)
  /// consumes. Returns true when it overflowed. When `was_empty` is given,
  /// it receives whether the ring looked empty before the push (as len()
  /// would have said).
  bool push_back(task_header* task, global_queue& overflow, bool* was_empty = nullptr,
                 stale_filter drop_stale = nullptr) noexcept {
    for (;;) {
      std::uint64_t head = head_.load(std::memory_order_acquire);
      std::uint32_t steal = steal_of(head);
      std::uint32_t real = real_of(head);
      std::uint32_t tail = tail_.load(std::memory_order_relaxed);
      if (was_empty != nullptr) *was_empty = tail == real;
      if (tail - steal < capacity) {
        slots_[tail & mask].store(task, std::memory_order_relaxed);
        tail_.store(tail + 1, std::memory_order_release);
        return false;
      }
      if (steal != real) {
        // A stealer is copying out of the ring: it frees space soon, but we
        // may not move the claimed range; this one task goes global.
        overflow.push(task);
        return true;
      }
      if (push_overflow(task, real, tail, overflow, drop_stale)) return true;
      // A stealer claimed in between: there is room now; retry.
    }
  }

  /// Owner: appends tasks[0..n) with one tail publication; what does not fit
  /// goes to `overflow` in one batch, together with half of the ring when no
  /// stealer is copying out of it (as push_back's overflow), leaving out the
  /// ring's entries that `drop_stale` consumes. Returns true when it
  /// overflowed; `was_empty` as push_back's. (spawn_batch, seed 000.)
  bool push_back_batch(task_header* const* tasks, std::size_t n, global_queue& overflow,
                       bool* was_empty = nullptr, stale_filter drop_stale = nullptr) noexcept {
    std::uint64_t head = head_.load(std::memory_order_acquire);
    std::uint32_t steal = steal_of(head);
    std::uint32_t real = real_of(head);
    std::uint32_t tail = tail_.load(std::memory_order_relaxed);
    if (was_empty != nullptr) *was_empty = tail == real;
    std::size_t fit = std::min<std::size_t>(n, capacity - (tail - steal));
    for (std::size_t i = 0; i < fit; ++i)
      slots_[(tail + i) & mask].store(tasks[i], std::memory_order_relaxed);
    tail += static_cast<std::uint32_t>(fit);
    if (fit != 0) tail_.store(tail, std::memory_order_release);
    if (fit == n) return false;
    // The rest, in order, in chunks (task_chain); in front of it half of
    // the ring when the ring is full and no stealer holds a claim (claimed
    // as push_overflow does; a stealer that claims first leaves the ring as
    // it is).
    task_chain chain(task_chain::chunk_room(overflow.len()));
    head = head_.load(std::memory_order_acquire);
    real = real_of(head);
    if (steal_of(head) == real && tail - real == capacity) {
      claim_front_half(real, chain, drop_stale);
    }
    for (std::size_t i = fit; i < n; ++i)
      chain.append(tasks[i]);
    overflow.push_chain(chain);
    return true;
  }

  /// Owner: removes the task at the front, or returns nullptr.
  task_header* pop() noexcept {
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      std::uint32_t steal = steal_of(head);
      std::uint32_t real = real_of(head);
      std::uint32_t tail = tail_.load(std::memory_order_relaxed);
      if (real == tail) return nullptr;
      std::uint32_t next_real = real + 1;
      std::uint64_t next = steal == real ? pack(next_real, next_real) : pack(steal, next_real);
      if (head_.compare_exchange_weak(head, next, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        return slots_[real & mask].load(std::memory_order_relaxed);
      }
    }
  }

  /// Stealer: moves half of this queue into `dst` (the caller's own queue,
  /// which must have room for half a ring) and returns one stolen task to run
  /// now, or nullptr. `*stolen` receives the number of tasks taken.
  task_header* steal_into(run_queue& dst, std::uint32_t* stolen) noexcept {
    *stolen = 0;
    std::uint32_t dst_tail = dst.tail_.load(std::memory_order_relaxed);
    if (!dst.has_room_to_steal(dst_tail)) return nullptr;  // no room: we have work anyway
    claimed_range claimed = claim();
    if (claimed.n == 0) return nullptr;
    copy_claimed(claimed, dst, dst_tail);
    release(claimed);
    *stolen = claimed.n;
    return dst.publish_stolen(dst_tail, claimed.n);
  }

  /// Number of tasks (approximate when racing).
  [[nodiscard]] std::uint32_t len() const noexcept {
    std::uint64_t head = head_.load(std::memory_order_acquire);
    std::uint32_t tail = tail_.load(std::memory_order_acquire);
    return tail - real_of(head);
  }
  [[nodiscard]] bool is_empty() const noexcept { return len() == 0; }
  /// Free slots for the owner's pushes.
  [[nodiscard]] std::uint32_t remaining_slots() const noexcept {
    std::uint64_t head = head_.load(std::memory_order_acquire);
    return capacity - (tail_.load(std::memory_order_relaxed) - steal_of(head));
  }

 private:
  static constexpr std::uint32_t steal_of(std::uint64_t head) noexcept {
    return static_cast<std::uint32_t>(head >> 32);
  }
  static constexpr std::uint32_t real_of(std::uint64_t head) noexcept {
    return static_cast<std::uint32_t>(head);
  }
  static constexpr std::uint64_t pack(std::uint32_t steal, std::uint32_t real) noexcept {
    return (static_cast<std::uint64_t>(steal) << 32) | real;
  }

  bool push_overflow(task_header* task, std::uint32_t head, std::uint32_t tail,
                     global_queue& overflow, stale_filter drop_stale) noexcept {
    if (tail - head != capacity) return false;
    // The claimed slots and `task` go as one chunk (task_chain: the
    // consumer reads the pointers, not 129 links).
    static_assert(overflow_batch + 1 <= task_chunk::capacity);
    task_chain chain(task_chain::chunk_room(overflow.len()));
    if (!claim_front_half(head, chain, drop_stale)) return false;
    chain.append(task);
    overflow.push_chain(chain);
    return true;
  }

  // Claims overflow_batch tasks from the front at `real`, as a stealer
  // would (false when a stealer or a pop moved the head first), and appends
  // them to `chain` in order, stale entries released instead.
  bool claim_front_half(std::uint32_t real, task_chain& chain, stale_filter drop_stale) noexcept {
    std::uint64_t expected = pack(real, real);
    if (!head_.compare_exchange_strong(expected, pack(real + overflow_batch, real + overflow_batch),
                                       std::memory_order_release, std::memory_order_relaxed)) {
      return false;
    }
    for (std::uint32_t i = 0; i < overflow_batch; ++i) {
      task_header* t = slots_[(real + i) & mask].load(std::memory_order_relaxed);
      if (drop_stale == nullptr || !drop_stale(t)) chain.append(t);
    }
    return true;
  }

  // steal_into in its steps, kept apart so that a single-threaded test
  // (tests/fuzz/fuzz_run_queue.cpp, through run_queue_test_access) can stop a
  // stealer between its claim and its release, as preemption would.
  struct claimed_range {
    std::uint32_t first = 0;  // position of the first claimed slot
    std::uint32_t n = 0;      // 0: nothing claimed
  };

  // Stealer, on its own queue (the destination): a steal may only start when
  // at most half a ring is in use, so that the copy fits behind `dst_tail`.
  bool has_room_to_steal(std::uint32_t dst_tail) const noexcept {
    std::uint32_t dst_steal = steal_of(head_.load(std::memory_order_acquire));
    return dst_tail - dst_steal <= capacity / 2;
  }

  // Stealer: moves real_head past the larger half of the tasks, leaving
  // steal_head at the first of them. Claims nothing (n == 0) when the queue is
  // empty or another steal is in progress.
  claimed_range claim() noexcept {
    std::uint64_t prev = head_.load(std::memory_order_acquire);
    for (;;) {
      std::uint32_t src_steal = steal_of(prev);
      std::uint32_t src_real = real_of(prev);
      if (src_steal != src_real) return {};  // another stealer is copying
      std::uint32_t src_tail = tail_.load(std::memory_order_acquire);
      std::uint32_t n = src_tail - src_real;
      n -= n / 2;  // take the larger half
      if (n == 0) return {};
      if (head_.compare_exchange_weak(prev, pack(src_steal, src_real + n),
                                      std::memory_order_acq_rel, std::memory_order_acquire)) {
        return {src_steal, n};
      }
    }
  }

  // Stealer: copies the claimed slots behind dst's tail (not yet published).
  void copy_claimed(claimed_range claimed, run_queue& dst, std::uint32_t dst_tail) const noexcept {
    for (std::uint32_t i = 0; i < claimed.n; ++i) {
      task_header* task = slots_[(claimed.first + i) & mask].load(std::memory_order_relaxed);
      dst.slots_[(dst_tail + i) & mask].store(task, std::memory_order_relaxed);
    }
  }

  // Stealer: steal_head catches up with real_head (which the owner may have
  // advanced by popping meanwhile); the owner may reuse the slots from now on.
  void release(claimed_range claimed) noexcept {
    std::uint64_t prev = pack(claimed.first, claimed.first + claimed.n);
    for (;;) {
      std::uint32_t real = real_of(prev);
      if (head_.compare_exchange_weak(prev, pack(real, real), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        return;
      }
    }
  }

  // Stealer, on its own queue: publishes the first n - 1 copied tasks and
  // returns the last one, to run now.
  task_header* publish_stolen(std::uint32_t dst_tail, std::uint32_t n) noexcept {
    --n;
    task_header* ret = slots_[(dst_tail + n) & mask].load(std::memory_order_relaxed);
    if (n > 0) tail_.store(dst_tail + n, std::memory_order_release);
    return ret;
  }

  friend struct run_queue_test_access;  // defined by tests only

  alignas(128) std::atomic<std::uint64_t> head_{0};
  alignas(128) std::atomic<std::uint32_t> tail_{0};
  alignas(128) std::atomic<task_header*> slots_[capacity];
};

}  // namespace spindle::detail
