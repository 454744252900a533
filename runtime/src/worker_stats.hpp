// Per-worker counters: written only by the owning worker (load + store, no
// read-modify-write), read by runtime::stats() from any thread.
// Design source: Volt's per-worker stats, Tokio's WorkerMetrics.
#pragma once

#include <atomic>
#include <cstdint>

#include "spindle/stats.hpp"

namespace spindle::detail {

struct counter {
  std::atomic<std::uint64_t> value{0};
  // Release and acquire (plain moves on x86): a reader that sees a
  // completion counted sees the spawn that preceded it (tasks_alive).
  void add(std::uint64_t n = 1) noexcept {
    value.store(value.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }
  [[nodiscard]] std::uint64_t get() const noexcept { return value.load(std::memory_order_acquire); }
};

struct worker_counters {
  counter spawned, completed, polled, stolen, steal_operations, parked, lifo_hits,
      global_batch_fetches, overflows, io_completions, timers_fired, inline_polls;
  std::atomic<std::uint32_t> global_check_interval{0};

  [[nodiscard]] worker_stats snapshot() const noexcept {
    worker_stats s;
    s.spawned = spawned.get();
    s.polled = polled.get();
    s.stolen = stolen.get();
    s.steal_operations = steal_operations.get();
    s.parked = parked.get();
    s.lifo_hits = lifo_hits.get();
    s.global_batch_fetches = global_batch_fetches.get();
    s.overflows = overflows.get();
    s.io_completions = io_completions.get();
    s.timers_fired = timers_fired.get();
    s.inline_polls = inline_polls.get();
    s.global_check_interval = global_check_interval.load(std::memory_order_relaxed);
    return s;
  }
};

}  // namespace spindle::detail
