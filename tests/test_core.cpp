// The scheduler's numbers, as the design card gives them, checked on the
// decisions themselves (scheduler_core, driven from one thread with fake
// task headers, as the simulation drives it):
//  - the LIFO slot is polled at most 3 times in a row, then its task goes to
//    the back of the ring and the ring's oldest runs;
//  - the global-check interval is an EWMA of the time per poll,
//    clamp(1 ms / avg, 8, 255), and the global queue is checked every
//    interval polls even while local work waits;
//  - a global batch takes clamp(len / workers, 4, 64) tasks, at most 32 (the
//    batch buffer), and goes to the ring when a worker sleeps;
//  - a steal takes the larger half of the victim's ring;
//  - the seed decides the victims' order (the same seed, the same steals);
//  - tiered idle: the given number of spinning and yielding ticks, then park.
// The 128-poll tick itself is the worker loop's (Runtime.BudgetIsAccepted).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core.hpp"
#include "core_test_support.hpp"
#include "runtime_test_support.hpp"

namespace {

using spindle::detail::idle_tiers;
using spindle::detail::scheduler_core;
using spindle::detail::task_header;
using spindle::detail::worker;

using spindle_test::core_fixture;

TEST(Core, TheLifoSlotIsPolledThreeTimesInARowThenTheRingsOldestRuns) {
  core_fixture f(1);
  worker* w = f.core.workers[0].get();
  task_header* old = f.tasks[0];
  f.push_to_ring(w, old);  // the ring's oldest
  // A chain: each polled task schedules the next one into the LIFO slot.
  std::vector<task_header*> order;
  f.core.schedule_local(w, f.tasks[1], false);
  for (std::size_t i = 2; i <= 5; ++i) {
    task_header* t = f.core.next_task(w);
    ASSERT_NE(t, nullptr);
    order.push_back(t);
    f.core.schedule_local(w, f.tasks[i], false);
  }
  EXPECT_EQ(order[0], f.tasks[1]);
  EXPECT_EQ(order[1], f.tasks[2]);
  EXPECT_EQ(order[2], f.tasks[3]);
  EXPECT_EQ(order[3], old) << "after 3 LIFO polls the ring's oldest task runs";
  EXPECT_EQ(w->counters.lifo_hits.get(), 3u);
  // The capped task went to the back of the ring and runs next... after the
  // new LIFO task: the run of LIFO polls starts again once the ring was used.
  EXPECT_EQ(f.core.next_task(w), f.tasks[5]);
  EXPECT_EQ(f.core.next_task(w), f.tasks[4]);
  EXPECT_EQ(f.core.next_task(w), nullptr);
}

TEST(Core, TheEndOfATickResetsTheRunOfLifoPolls) {
  core_fixture f(1);
  worker* w = f.core.workers[0].get();
  for (std::size_t i = 0; i < 6; ++i) {
    f.core.schedule_local(w, f.tasks[i], false);
    EXPECT_EQ(f.core.next_task(w), f.tasks[i]);
    f.core.end_tick(w, 1, 1000);  // a tick per poll: never 3 in a row
  }
  EXPECT_EQ(w->counters.lifo_hits.get(), 6u);
}

TEST(Core, TheGlobalCheckIntervalIsAnEwmaOfThePollTime) {
  core_fixture f(1);
  worker* w = f.core.workers[0].get();
  EXPECT_EQ(w->global_interval, worker::initial_global_interval);  // 1 ms / 50 us
  // 10 polls of 1 us: avg = 0.1 x 1,000 + 0.9 x 50,000 = 45,100 ns.
  f.core.end_tick(w, 10, 10 * 1000);
  EXPECT_DOUBLE_EQ(w->avg_task_ns, 45'100.0);
  EXPECT_EQ(w->global_interval, 22u);  // 1,000,000 / 45,100 = 22.17
  EXPECT_EQ(w->counters.global_check_interval.load(), 22u);
  // Fast polls for long: 1 ms / ~1 us is far above the clamp.
  for (int i = 0; i < 200; ++i)
    f.core.end_tick(w, 100, 100 * 1000);
  EXPECT_EQ(w->global_interval, 255u);
  // Slow polls (10 ms each): clamped at 8.
  for (int i = 0; i < 200; ++i)
    f.core.end_tick(w, 1, 10'000'000);
  EXPECT_EQ(w->global_interval, 8u);
  // A tick with no polls changes nothing.
  double const avg = w->avg_task_ns;
  f.core.end_tick(w, 0, 0);
  EXPECT_EQ(w->avg_task_ns, avg);
}

TEST(Core, TheGlobalQueueIsCheckedEveryIntervalPollsDespiteLocalWork) {
  core_fixture f(1);
  worker* w = f.core.workers[0].get();
  for (int i = 0; i < 200; ++i)
    f.core.end_tick(w, 1, 10'000'000);  // interval 8
  ASSERT_EQ(w->global_interval, 8u);
  for (std::size_t i = 0; i < 20; ++i)
    f.push_to_ring(w, f.tasks[i]);
  w->polls_since_global = 0;  // the count starts here
  f.core.inject.push(f.tasks[100]);
  int polls = 0;
  for (;;) {
    task_header* t = f.core.next_task(w);
    ASSERT_NE(t, nullptr);
    ++polls;
    if (t == f.tasks[100]) break;
  }
  EXPECT_EQ(polls, 8) << "the remote task waited more than the interval's polls";
}

TEST(Core, AYieldLetsTheGlobalQueueIn) {
  core_fixture f(1);
  worker* w = f.core.workers[0].get();
  f.core.schedule_local(w, f.tasks[0], /*is_yield=*/true);
  w->polls_since_global = 0;
  f.core.inject.push(f.tasks[1]);
  // The interval (20 polls) has not passed: the ring's task first.
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
  // It yields: the next pick takes the global queue's task before it.
  f.core.schedule_local(w, f.tasks[0], /*is_yield=*/true);
  EXPECT_EQ(f.core.next_task(w), f.tasks[1]);
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
}

TEST(Core, AYieldOfTheWorkersOnlyTaskTakesTheLifoSlotAndWakesNobody) {
  core_fixture f(2);
  worker* w = f.core.workers[0].get();
  ASSERT_TRUE(f.core.begin_park(f.core.workers[1].get()));
  f.platform.unparked.clear();
  // Nothing else on the worker nor in the global queue: the slot, no wake
  // (a woken sibling could only take the task away).
  f.core.schedule_local(w, f.tasks[0], /*is_yield=*/true);
  EXPECT_EQ(w->lifo.peek(), f.tasks[0]);
  EXPECT_TRUE(w->queue.is_empty());
  EXPECT_TRUE(f.platform.unparked.empty()) << "a lone yield woke the sleeper";
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
  // Other work in the slot: the back of the ring, and the sleeper is woken
  // for it (a push into an empty ring).
  f.core.schedule_local(w, f.tasks[1], /*is_yield=*/false);
  f.core.schedule_local(w, f.tasks[0], /*is_yield=*/true);
  EXPECT_EQ(w->lifo.peek(), f.tasks[1]);
  EXPECT_EQ(w->queue.len(), 1u);
  EXPECT_EQ(f.platform.unparked, std::vector<std::size_t>{1});
  // Work in the global queue: the yield goes to the ring as well (the next
  // pick takes the global task, and the yielded one is there to steal).
  core_fixture g(2);
  worker* v = g.core.workers[0].get();
  g.core.inject.push(g.tasks[5]);
  g.core.schedule_local(v, g.tasks[0], /*is_yield=*/true);
  EXPECT_EQ(v->lifo.peek(), nullptr);
  EXPECT_EQ(v->queue.len(), 1u);
  EXPECT_EQ(g.core.next_task(v), g.tasks[5]);
  EXPECT_EQ(g.core.next_task(v), g.tasks[0]);
}

TEST(Core, AGlobalBatchIsAtMost32Tasks) {
  core_fixture f(2);
  worker* w = f.core.workers[0].get();
  for (std::size_t i = 0; i < 100; ++i)
    f.core.inject.push(f.tasks[i]);
  // Nothing local: the global queue. clamp(100 / 2, 4, 160) = 50, capped at
  // the buffer's 32 (nothing local waits: no spill into the ring); every
  // worker is awake, so the batch stays in it.
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
  EXPECT_EQ(f.core.inject.len(), 68u);
  EXPECT_EQ(w->batch_len - w->batch_head, 31u);
  for (std::size_t i = 1; i < 32; ++i)
    EXPECT_EQ(f.core.next_task(w), f.tasks[i]) << "the batch is served in FIFO order";
  EXPECT_EQ(w->counters.global_batch_fetches.get(), 1u);
}

TEST(Core, WithLocalWorkWaitingALookTakesTheWorkersShareIntoTheRing) {
  core_fixture f(2);
  worker* w = f.core.workers[0].get();
  f.push_to_ring(w, f.tasks[900]);  // local work that keeps coming back
  for (std::size_t i = 0; i < 400; ++i)
    f.core.inject.push(f.tasks[i]);
  w->polls_since_global = w->global_interval - 1;  // the next pick looks
  w->global_first = false;                         // at the global queue first
  // clamp(400 / 2, 4, 160) = 160: the buffer's 32, and of the rest half the
  // ring's free slots (127), behind the local task, in the queue's order.
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
  EXPECT_EQ(f.core.inject.len(), 400u - 32u - 127u);
  ASSERT_EQ(w->queue.len(), 1u + 127u);
  f.expect_buffer_then_spill(w, f.tasks[900], 127);
}

TEST(Core, ASmallGlobalQueueGivesAtLeastFourPerBatch) {
  core_fixture f(2);
  worker* w = f.core.workers[0].get();
  for (std::size_t i = 0; i < 6; ++i)
    f.core.inject.push(f.tasks[i]);
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);  // clamp(6 / 2, 4, 160) = 4
  EXPECT_EQ(f.core.inject.len(), 2u);
  EXPECT_EQ(w->batch_len - w->batch_head, 3u);
}

TEST(Core, ABatchGoesToTheRingWhenAWorkerSleeps) {
  core_fixture f(2);
  worker* w = f.core.workers[0].get();
  worker* sleeper = f.core.workers[1].get();
  ASSERT_TRUE(f.core.begin_park(sleeper));
  for (std::size_t i = 0; i < 10; ++i)
    f.core.inject.push(f.tasks[i]);
  f.platform.unparked.clear();
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);  // clamp(10 / 2, 4, 160) = 5 taken
  EXPECT_EQ(w->batch_len - w->batch_head, 0u) << "the batch buffer cannot be stolen from";
  EXPECT_EQ(w->queue.len(), 4u) << "the rest of the batch waits where the sleeper can steal it";
  EXPECT_EQ(f.platform.unparked, std::vector<std::size_t>{1}) << "and the sleeper is woken";
}

TEST(Core, AStealTakesTheLargerHalf) {
  for (std::uint32_t k : {1u, 2u, 7u, 10u, 200u}) {
    core_fixture f(2);
    worker* victim = f.core.workers[0].get();
    worker* thief = f.core.workers[1].get();
    for (std::uint32_t i = 0; i < k; ++i)
      f.push_to_ring(victim, f.tasks[i]);
    std::uint32_t const taken = k - k / 2;
    task_header* t = f.core.next_task(thief);
    ASSERT_NE(t, nullptr) << k;
    EXPECT_EQ(t, f.tasks[taken - 1]) << "the thief runs the last of the oldest half";
    EXPECT_EQ(thief->counters.stolen.get(), taken) << k;
    EXPECT_EQ(thief->counters.steal_operations.get(), 1u);
    EXPECT_EQ(victim->queue.len(), k - taken) << k;
    EXPECT_EQ(thief->queue.len(), taken - 1) << k;
  }
}

// Victims in the order one worker tries them, over many steals.
std::vector<std::size_t> victim_order(std::uint64_t seed) {
  constexpr std::size_t n = 8;
  core_fixture f(n, seed);
  worker* thief = f.core.workers[0].get();
  std::vector<std::size_t> order;
  std::size_t next_task_index = 0;
  for (int round = 0; round < 32; ++round) {
    // One task in every other worker's ring: the first victim tried wins.
    for (std::size_t v = 1; v < n; ++v)
      f.push_to_ring(f.core.workers[v].get(), f.tasks[next_task_index++]);
    task_header* t = f.core.next_task(thief);
    if (t == nullptr) break;
    for (std::size_t v = 1; v < n; ++v) {
      if (f.core.workers[v]->queue.is_empty()) {
        order.push_back(v);
        break;
      }
    }
    // Empty the other rings for the next round.
    for (std::size_t v = 1; v < n; ++v)
      while (f.core.workers[v]->queue.pop() != nullptr) {
      }
    f.core.transition_from_searching(thief);
  }
  return order;
}

TEST(Core, TheSeedDecidesTheVictims) {
  auto const a = victim_order(1);
  auto const b = victim_order(1);
  auto const c = victim_order(987654321);
  ASSERT_EQ(a.size(), 32u);
  EXPECT_EQ(a, b) << "the same seed, the same victims";
  EXPECT_NE(a, c) << "another seed, other victims";
}

TEST(Core, TieredIdleSpinsThenYieldsThenParks) {
  core_fixture f(1, 1, idle_tiers{3, 2});
  worker* w = f.core.workers[0].get();
  using step = scheduler_core::idle_step;
  std::vector<step> steps;
  for (int i = 0; i < 6; ++i)
    steps.push_back(f.core.after_tick(w, false));
  EXPECT_EQ(steps, (std::vector<step>{step::spin, step::spin, step::spin, step::yield, step::yield,
                                      step::park}));
  // Progress, or local work, starts the count again.
  EXPECT_EQ(f.core.after_tick(w, false), step::spin);
  EXPECT_EQ(f.core.after_tick(w, true), step::run);
  EXPECT_EQ(f.core.after_tick(w, false), step::spin);
  f.core.schedule_local(w, f.tasks[0], false);
  EXPECT_EQ(f.core.after_tick(w, false), step::run);
  // No tiers: park after the first empty tick.
  core_fixture g(1);
  EXPECT_EQ(g.core.after_tick(g.core.workers[0].get(), false), step::park);
}

}  // namespace
