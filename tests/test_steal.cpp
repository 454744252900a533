// Stealing on a real runtime: the stalled-worker rescue of a LIFO task
// (runtime_config::stalled_lifo_threshold, Tokio issue #4941), its
// configuration, and a steal-heavy workload under the topology order.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <system_error>

#include "runtime_test_support.hpp"
#include "spindle/runtime.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::task;

task<void> set_flag(std::atomic<bool>* flag) {
  flag->store(true, std::memory_order_release);
  co_return;
}

// Spawns set_flag (it goes to this worker's LIFO slot, where only a rescue
// can reach it while this poll goes on) and spins without yielding for up to
// `spin`, or until the flag is set. Returns whether the flag was set during
// the spin.
task<bool> spin_over_lifo_task(std::chrono::milliseconds spin) {
  // On a worker (run_on_worker), so that the spawn goes to its LIFO slot.
  EXPECT_NE(spindle::detail::current_worker_index(), spindle::detail::not_a_worker);
  std::atomic<bool> flag{false};
  auto handle = spindle::spawn(set_flag(&flag));
  auto const until = std::chrono::steady_clock::now() + spin;
  while (!flag.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
  }
  bool const ran_during_spin = flag.load(std::memory_order_acquire);
  co_await handle;
  co_return ran_during_spin;
}

TEST(StalledLifo, AnotherWorkerRunsTheTaskWhileItsOwnerSpins) {
  // 2 workers: the other one is parked when the spin starts (a LIFO push
  // wakes nobody by itself); the watcher or a searcher must take the task.
  // The spin ends as soon as it ran (about the threshold, 100 us, plus a
  // wake); the bound only ends a run where nothing ever takes it, and is
  // far beyond what a loaded machine or a sanitizer delays the other
  // worker by.
  spindle::runtime rt{{.workers = 2}};
  long const rounds = spindle_test::scaled(5, 2);
  for (long i = 0; i < rounds; ++i) {
    EXPECT_TRUE(spindle_test::run_on_worker(rt, spin_over_lifo_task(10s))) << "round " << i;
    // Let both workers park again, so that each round starts from idle.
    std::this_thread::sleep_for(5ms);
  }
}

TEST(StalledLifo, WithTheRescueOffTheTaskWaitsForItsOwner) {
  // The same with the rescue off: the task cannot run before the spin ends
  // (nothing else can reach a LIFO slot), which shows what the rescue does.
  spindle::runtime rt{{.workers = 2, .stalled_lifo_threshold = 0us}};
  EXPECT_FALSE(spindle_test::run_on_worker(rt, spin_over_lifo_task(20ms)));
}

TEST(StalledLifo, NegativeThresholdIsRejected) {
  try {
    spindle::runtime rt{{.workers = 2, .stalled_lifo_threshold = -1us}};
    FAIL() << "a negative threshold was accepted";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::make_error_code(std::errc::invalid_argument));
  }
}

task<long> tree(int depth) {
  if (depth == 0) co_return 1;
  auto left = spindle::spawn(tree(depth - 1));
  long right = co_await tree(depth - 1);
  co_return right + co_await left;
}

TEST(Stealing, ForkJoinWithTopologyOrderAndRescueCompletes) {
  // More workers than CPUs (several workers per CPU: the SMT level), steals
  // and rescues racing with inline joins of LIFO tasks; pinned and unpinned.
  for (bool pin : {false, true}) {
    spindle::runtime rt{{.workers = 6, .pin_threads = pin, .stalled_lifo_threshold = 1us}};
    auto const depth = static_cast<int>(spindle_test::scaled(14, 10));
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(rt.block_on(tree(depth)), 1L << depth);
    auto const s = rt.stats();
    EXPECT_EQ(s.tasks_alive, 0u);
  }
}

}  // namespace
