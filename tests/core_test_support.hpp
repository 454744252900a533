// Shared by the tests that drive scheduler_core directly (test_core,
// test_inbox, test_spawn_batch): a core_platform that records which workers
// the core asked to unpark and does nothing else, and a fixture of a core
// on it with fake task headers to schedule.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "core.hpp"
#include "runtime_test_support.hpp"
#include "spindle/runtime.hpp"

namespace spindle_test {

/// The core's platform in a test: unpark requests are recorded in order
/// (`unparked`), nothing is woken; a remote push nobody noticed is ignored.
class recording_platform final : public spindle::detail::core_platform {
 public:
  void unpark_worker(std::size_t index) noexcept override { unparked.push_back(index); }
  void remote_push_unnoticed() noexcept override {}
  std::vector<std::size_t> unparked;
};

/// A scheduler_core of `workers` workers (budget 128) on a
/// recording_platform, with `task_count` fake task headers.
struct core_fixture {
  explicit core_fixture(std::size_t workers, std::uint64_t seed = 1,
                        spindle::detail::idle_tiers tiers = {},
                        spindle::placement where = spindle::placement::global,
                        std::size_t task_count = 1024)
      : tasks(task_count), core(platform, workers, 128, seed, tiers, where) {}
  recording_platform platform;
  fake_tasks tasks;
  spindle::detail::scheduler_core core;

  /// Puts `task` at the back of worker `w`'s ring (a yield does too, unless
  /// the task would be the worker's only work: then it takes the LIFO slot).
  void push_to_ring(spindle::detail::worker* w, spindle::detail::task_header* task) {
    static_cast<void>(w->queue.push_back(task, core.inject));
  }
  /// After a look at a remote queue that returned tasks[0], kept
  /// tasks[1..32) in w's batch buffer and spilled `spilled` more into its
  /// ring behind the one local task `local`: the buffer serves them in
  /// order, and the ring holds `local`, then the spilled ones in order.
  void expect_buffer_then_spill(spindle::detail::worker* w, spindle::detail::task_header* local,
                                std::size_t spilled) {
    constexpr std::size_t buffer = spindle::detail::worker::batch_capacity;
    for (std::size_t i = 1; i < buffer; ++i)
      EXPECT_EQ(core.next_task(w), tasks[i]) << "batch buffer, task " << i;
    EXPECT_EQ(w->queue.pop(), local) << "the local task before the spill";
    for (std::size_t i = buffer; i < buffer + spilled; ++i)
      EXPECT_EQ(w->queue.pop(), tasks[i]) << "ring, task " << i;
  }
};

}  // namespace spindle_test
