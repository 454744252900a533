// The threads inside runtime::block_on: how they wait for their task and
// when they help the workers.
//
// Shape: a block_on thread registers a block_on_waiter as its task's join
// waiter and sleeps on the waiter's futex word. While every worker is busy
// (none searching, none parked) and the global queue holds work, it runs
// queued tasks itself (block-on-complete), so that the task it waits for
// makes progress when no worker is free. A push into the global queue that
// wakes no worker (scheduler::remote_push_unnoticed) kicks one sleeping
// block_on thread to look again.
//
// Thread-safety: block_on_sleepers from any thread (the list under its
// mutex, the count read lock-free by pushes).
// Design source: Tokio's block_on (the calling thread drives its future) and
// Volt's inject-queue help.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "spindle/detail/task_header.hpp"

namespace spindle::detail {

/// A thread inside block_on. `word`: 0 waiting, 1 its task completed,
/// 2 kicked (new work in the global queue while every worker is busy).
struct block_on_waiter : join_waiter {
  std::atomic<std::uint32_t> word{0};
  block_on_waiter* next_sleeper = nullptr;
};

/// The block_on threads asleep while their task may still need help.
class block_on_sleepers {
 public:
  /// Registers `w` as asleep (then the caller looks at the queue once more).
  void add(block_on_waiter* w) noexcept;
  /// Unregisters `w`.
  void remove(block_on_waiter* w) noexcept;
  /// True when some thread is registered. A seq_cst load: a push reads it
  /// after a seq_cst fence or a seq_cst RMW of its own (the inbox's count),
  /// and a block_on thread registers (a seq_cst RMW) before its fence and
  /// its look at the queues, so one of the two sees the other.
  [[nodiscard]] bool any() const noexcept { return count_.load(std::memory_order_seq_cst) != 0; }
  /// Kicks one sleeping thread that was not kicked yet.
  void kick_one() noexcept;

 private:
  std::atomic<std::uint32_t> count_{0};
  std::mutex mutex_;
  block_on_waiter* head_ = nullptr;  // guarded by mutex_
};

}  // namespace spindle::detail
