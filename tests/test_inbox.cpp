// The worker inbox (runtime/src/inbox.hpp) and placement::p2c (seed 003):
//  - the inbox alone: FIFO, batch pushes, the owner's take that leaves the
//    newest task, the look at the consumer's end, the consumer flag, and many
//    producers against several consumers taking turns (every task taken
//    once, each producer's tasks in its order);
//  - the decisions (scheduler_core, one thread, fake tasks): a p2c push goes
//    to the less loaded of two workers and claims it when it is parked; a
//    worker looks at its inbox before the global queue, a batch per look and
//    more of a long inbox into its ring while local work waits; a searcher takes
//    half of another worker's inbox; a worker does not park on a non-empty
//    inbox; a task that yields while its worker's inbox holds tasks goes
//    behind them (not under global), yet two tasks that yield in a loop do
//    not starve the ring; the placement RNG follows the seed;
//  - whole runtimes with either placement: spawns and wakes from many
//    outside threads while the workers park and unpark (no lost wake-up),
//    tasks placed on a worker that is stuck in a 50 ms poll still run
//    on the other worker, and a task that yields runs again only after
//    the burst of 1,000 spawns that waited in its worker's inbox.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "core.hpp"
#include "core_test_support.hpp"
#include "inbox.hpp"
#include "runtime_test_support.hpp"
#include "spindle/notify.hpp"
#include "spindle/runtime.hpp"

namespace {

using spindle::placement;
using spindle::detail::inbox;
using spindle::detail::scheduler_core;
using spindle::detail::task_header;
using spindle::detail::worker;

TEST(Inbox, IsFifoAcrossSinglePushesAndBatches) {
  spindle_test::fake_tasks t(8);
  inbox box;
  EXPECT_TRUE(box.is_empty());
  box.push(t[0]);
  t[1]->next = t[2];
  t[2]->next = t[3];
  box.push(t[1], t[3], 3);
  box.push(t[4]);
  EXPECT_EQ(box.len(), 5u);
  task_header* out[8] = {};
  EXPECT_EQ(box.try_take(out, 2), 2u);
  EXPECT_EQ(out[0], t[0]);
  EXPECT_EQ(out[1], t[1]);
  EXPECT_EQ(box.len(), 3u);
  EXPECT_EQ(box.try_take(out, 8), 3u);
  EXPECT_EQ(out[0], t[2]);
  EXPECT_EQ(out[1], t[3]);
  EXPECT_EQ(out[2], t[4]);
  EXPECT_TRUE(box.is_empty());
  EXPECT_EQ(box.try_take(out, 8), 0u);
  // Reusable after it emptied (the stub went back in behind the last task).
  box.push(t[5]);
  EXPECT_EQ(box.try_take(out, 8), 1u);
  EXPECT_EQ(out[0], t[5]);
}

// The owner's take (leave_last): the newest task stays when others were
// taken, so that the stub goes back (an exchange on the producers' tail)
// only when the last task is taken alone.
TEST(Inbox, AnOwnersTakeLeavesTheNewestTaskWhenItTookOthers) {
  spindle_test::fake_tasks t(6);
  inbox box;
  for (std::size_t i = 0; i < 3; ++i)
    box.push(t[i]);
  task_header* out[8] = {};
  EXPECT_EQ(box.try_take(out, 8, true), 2u);
  EXPECT_EQ(out[0], t[0]);
  EXPECT_EQ(out[1], t[1]);
  EXPECT_EQ(box.len(), 1u);
  EXPECT_FALSE(box.is_empty());
  // Alone, it is taken.
  EXPECT_EQ(box.try_take(out, 8, true), 1u);
  EXPECT_EQ(out[0], t[2]);
  EXPECT_TRUE(box.is_empty());
  // A task left behind is taken first, before what came after it.
  box.push(t[3]);
  box.push(t[4]);
  EXPECT_EQ(box.try_take(out, 8, true), 1u);
  EXPECT_EQ(out[0], t[3]);
  box.push(t[5]);
  EXPECT_EQ(box.try_take(out, 8, true), 1u);
  EXPECT_EQ(out[0], t[4]);
  // Without leave_last (a stealer, the global queue) the take empties it.
  EXPECT_EQ(box.try_take(out, 8), 1u);
  EXPECT_EQ(out[0], t[5]);
  EXPECT_TRUE(box.is_empty());
  EXPECT_EQ(box.try_take(out, 8, true), 0u);
}

// may_hold_tasks: the owner's look at the consumer's end, false exactly
// when a take would find nothing (no producer between its exchange and its
// link).
TEST(Inbox, MayHoldTasksIsFalseExactlyWhenNothingIsLeftToTake) {
  spindle_test::fake_tasks t(3);
  inbox box;
  EXPECT_FALSE(box.may_hold_tasks());
  box.push(t[0]);
  EXPECT_TRUE(box.may_hold_tasks()) << "a push onto the empty inbox";
  box.push(t[1]);
  task_header* out[4] = {};
  ASSERT_EQ(box.try_take(out, 4, true), 1u);
  EXPECT_TRUE(box.may_hold_tasks()) << "the task left behind";
  ASSERT_EQ(box.try_take(out, 4, true), 1u);
  EXPECT_FALSE(box.may_hold_tasks());
  box.push(t[2]);
  EXPECT_TRUE(box.may_hold_tasks()) << "a push after the stub went back";
  ASSERT_EQ(box.try_take(out, 4), 1u);
  EXPECT_FALSE(box.may_hold_tasks());
}

TEST(Inbox, OneConsumerAtATime) {
  spindle_test::fake_tasks t(1);
  inbox box;
  box.push(t[0]);
  ASSERT_TRUE(box.try_lock_consumer());
  task_header* out = nullptr;
  EXPECT_EQ(box.try_take(&out, 1), 0u) << "a second consumer got in";
  EXPECT_FALSE(box.try_lock_consumer());
  EXPECT_EQ(box.take(&out, 1), 1u);
  box.unlock_consumer();
  EXPECT_EQ(out, t[0]);
}

TEST(Inbox, ManyProducersSeveralConsumersEveryTaskOnceInEachProducersOrder) {
  int const producers = 4;
  int const per_producer = static_cast<int>(spindle_test::scaled(20'000, 5'000));
  spindle_test::fake_tasks t(static_cast<std::size_t>(producers * per_producer));
  auto id_of = [&](task_header* h) { return t.index(h); };
  inbox box;
  std::atomic<int> taken{0};
  int const total = producers * per_producer;
  // Consumers take turns under the consumer flag; what they take is
  // appended to `order` while they hold it, so `order` is the take order.
  std::vector<std::size_t> order;
  order.reserve(static_cast<std::size_t>(total));
  auto consume = [&] {
    task_header* out[16];
    while (taken.load(std::memory_order_relaxed) < total) {
      if (!box.try_lock_consumer()) {
        std::this_thread::yield();
        continue;
      }
      std::size_t n = box.take(out, 1 + order.size() % 16);
      for (std::size_t i = 0; i < n; ++i)
        order.push_back(id_of(out[i]));
      box.unlock_consumer();
      taken.fetch_add(static_cast<int>(n), std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      int i = 0;
      while (i < per_producer) {
        // Singles and batches of up to 7, linked in order.
        int n = std::min(1 + i % 7, per_producer - i);
        std::size_t base = static_cast<std::size_t>(p * per_producer + i);
        for (int k = 0; k + 1 < n; ++k)
          t[base + static_cast<std::size_t>(k)]->next = t[base + static_cast<std::size_t>(k) + 1];
        box.push(t[base], t[base + static_cast<std::size_t>(n) - 1], static_cast<std::size_t>(n));
        i += n;
      }
    });
  }
  for (int c = 0; c < 3; ++c)
    threads.emplace_back(consume);
  for (auto& th : threads)
    th.join();
  ASSERT_EQ(order.size(), static_cast<std::size_t>(total));
  std::vector<int> next(static_cast<std::size_t>(producers), 0);
  std::vector<bool> seen(static_cast<std::size_t>(total), false);
  for (std::size_t id : order) {
    ASSERT_FALSE(seen[id]) << "task " << id << " taken twice";
    seen[id] = true;
    auto p = static_cast<std::size_t>(static_cast<int>(id) / per_producer);
    EXPECT_EQ(static_cast<int>(id) % per_producer, next[p]) << "producer " << p << " out of order";
    next[p] = static_cast<int>(id) % per_producer + 1;
  }
  EXPECT_TRUE(box.is_empty());
}

// ---- the decisions

/// A core with placement::p2c.
struct p2c_fixture : spindle_test::core_fixture {
  explicit p2c_fixture(std::size_t workers, std::uint64_t seed = 1)
      : core_fixture(workers, seed, {}, placement::p2c, 512) {}
};

TEST(P2c, APushGoesToTheLessLoadedOfTwoWorkers) {
  p2c_fixture f(2);
  worker* w0 = f.core.workers[0].get();
  // Worker 0's ring holds 10 tasks: with two workers both are drawn every
  // time, so every remote push goes to worker 1.
  for (std::size_t i = 0; i < 10; ++i)
    f.push_to_ring(w0, f.tasks[i]);
  for (std::size_t i = 10; i < 15; ++i)
    f.core.push_remote(f.tasks[i]);
  EXPECT_EQ(f.core.workers[0]->remote.len(), 0u);
  EXPECT_EQ(f.core.workers[1]->remote.len(), 5u);
  EXPECT_TRUE(f.core.inject.is_empty()) << "p2c put a remote push in the global queue";
  // The load counts the inbox too: further pushes even the two out.
  for (std::size_t i = 15; i < 30; ++i)
    f.core.push_remote(f.tasks[i]);
  // 30 tasks in all end split 15 / 15.
  EXPECT_EQ(f.core.workers[0]->remote.len(), 5u);
  EXPECT_EQ(f.core.workers[1]->remote.len(), 15u);
}

// One read of a worker's load serves scheduler_core::p2c_refresh_draws
// draws (16); between reads the pushes count the tasks they placed there.
TEST(P2c, ALoadReadServesSixteenDrawsAndThenIsReadAgain) {
  static_assert(scheduler_core::p2c_refresh_draws == 16);
  p2c_fixture f(2);
  worker* w0 = f.core.workers[0].get();
  worker* w1 = f.core.workers[1].get();
  // Draw 1 reads both loads (0 and 0).
  f.core.push_remote(f.tasks[0]);
  // Worker 0's ring fills after that read: draws 2-16 do not see it, and
  // split the 16 pushes 8 / 8 on their own counts alone.
  for (std::size_t i = 0; i < 10; ++i)
    f.push_to_ring(w0, f.tasks[100 + i]);
  for (std::size_t i = 1; i < 16; ++i)
    f.core.push_remote(f.tasks[i]);
  EXPECT_EQ(w0->remote.len(), 8u);
  EXPECT_EQ(w1->remote.len(), 8u);
  // Draw 17 reads again: 18 against 8, and the next 10 pushes all go to
  // worker 1, which the view still counts right while nobody takes.
  for (std::size_t i = 16; i < 26; ++i)
    f.core.push_remote(f.tasks[i]);
  EXPECT_EQ(w0->remote.len(), 8u);
  EXPECT_EQ(w1->remote.len(), 18u);
  // A batch counts all its tasks: 7 more at once go to one of the two
  // (18 / 18 is a tie), and the next push to the other.
  for (std::size_t i = 26; i < 32; ++i)
    f.tasks[i]->next = f.tasks[i + 1];
  f.core.push_remote_batch(f.tasks[26], f.tasks[32], 7);
  std::size_t const with_batch = w0->remote.len() == 15u ? 0 : 1;
  EXPECT_EQ(f.core.workers[with_batch]->remote.len(), 15u + 10u * with_batch);
  f.core.push_remote(f.tasks[33]);
  EXPECT_EQ(f.core.workers[1 - with_batch]->remote.len(), 9u + 10u * (1 - with_batch));
}

// The view's loads are up to 16 draws old while the workers take from their
// inboxes. The placement must still keep the inboxes close to even, where
// drawing one worker at random does not: in a steady state of 256 queued
// tasks over 8 workers (each step one push, and one take from the inbox of
// a worker drawn at random), the fullest inbox is compared with the mean.
TEST(P2c, TheLoadViewKeepsTheInboxesEvenWhileTheWorkersTake) {
  constexpr std::size_t n = 8;
  constexpr std::size_t queued = 256;
  constexpr std::size_t steps = 20'000;
  p2c_fixture f(n);
  std::vector<task_header*> spare;
  for (std::size_t i = 0; i < f.tasks.size(); ++i)
    spare.push_back(f.tasks[i]);
  auto push_one = [&] {
    task_header* t = spare.back();
    spare.pop_back();
    f.core.push_remote(t);
  };
  for (std::size_t i = 0; i < queued; ++i)
    push_one();
  std::mt19937_64 takes(42);
  std::size_t worst_p2c = 0;
  for (std::size_t step = 0; step < steps; ++step) {
    worker* w = f.core.workers[takes() % n].get();
    task_header* t = nullptr;
    if (w->remote.try_take(&t, 1) == 1) {
      spare.push_back(t);
      push_one();
    }
    for (auto& each : f.core.workers)
      worst_p2c = std::max(worst_p2c, each->remote.len());
  }
  // The same steps with one worker drawn at random per push.
  std::mt19937_64 places(7);
  std::mt19937_64 takes_again(42);
  std::vector<std::size_t> len(n, 0);
  for (std::size_t i = 0; i < queued; ++i)
    ++len[places() % n];
  std::size_t worst_random = 0;
  for (std::size_t step = 0; step < steps; ++step) {
    std::size_t const w = takes_again() % n;
    if (len[w] != 0) {
      --len[w];
      ++len[places() % n];
    }
    worst_random = std::max(worst_random, *std::max_element(len.begin(), len.end()));
  }
  std::size_t const mean = queued / n;
  EXPECT_LE(worst_p2c, mean + 16) << "p2c's fullest inbox (mean " << mean << ")";
  EXPECT_GT(worst_random, mean + 16) << "random placement's fullest inbox (mean " << mean << ")";
}

TEST(P2c, APushClaimsItsWorkerWhenItIsParked) {
  p2c_fixture f(4);
  for (auto& w : f.core.workers) {
    EXPECT_EQ(f.core.next_task(w.get()), nullptr);
    ASSERT_TRUE(f.core.begin_park(w.get()));
  }
  f.core.push_remote(f.tasks[0]);
  std::size_t target = 4;
  for (std::size_t i = 0; i < 4; ++i) {
    if (f.core.workers[i]->remote.len() == 1) target = i;
  }
  ASSERT_LT(target, 4u);
  ASSERT_EQ(f.platform.unparked.size(), 1u);
  EXPECT_EQ(f.platform.unparked[0], target) << "the inbox's owner was not the one woken";
  EXPECT_FALSE(f.core.idle.is_parked(target));
  // It wakes, searching, and finds the task in its inbox.
  worker* w = f.core.workers[target].get();
  EXPECT_TRUE(f.core.finish_wakeup(w));
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
}

TEST(P2c, AWorkerLooksAtItsInboxBeforeTheGlobalQueue) {
  p2c_fixture f(1);
  worker* w = f.core.workers[0].get();
  f.core.inject.push(f.tasks[0]);
  f.core.push_remote(f.tasks[1]);
  EXPECT_EQ(f.core.next_task(w), f.tasks[1]);
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
  EXPECT_EQ(f.core.next_task(w), nullptr);
}

TEST(P2c, AnInboxIsTakenInBatchesAndNotStarvedByLocalWork) {
  p2c_fixture f(1);
  worker* w = f.core.workers[0].get();
  for (std::size_t i = 0; i < 100; ++i)
    f.core.push_remote(f.tasks[i]);
  // A batch buffer's worth per look (32), FIFO.
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
  EXPECT_EQ(w->remote.len(), 68u);
  for (std::size_t i = 1; i < 32; ++i)
    EXPECT_EQ(f.core.next_task(w), f.tasks[i]);
  // Local work that never ends: the inbox is still looked at every
  // global-check interval (20 polls before the first tick is measured).
  std::size_t from_inbox = 0;
  for (std::size_t poll = 0; poll < 200; ++poll) {
    task_header* t = f.core.next_task(w);
    ASSERT_NE(t, nullptr);
    if (f.tasks.index(t) >= 32 && f.tasks.index(t) < 100) ++from_inbox;
    f.core.schedule_yield(w, f.tasks[200 + poll % 2]);  // a yield loop
  }
  EXPECT_GT(from_inbox, 0u) << "local work starved the inbox";
}

TEST(P2c, ALookWhileLocalWorkWaitsMovesMoreOfALongInboxIntoTheRing) {
  p2c_fixture f(1);
  worker* w = f.core.workers[0].get();
  // Local work that will keep coming back (a task that yields), and a long
  // inbox: one batch per look would leave 168 tasks behind it.
  f.push_to_ring(w, f.tasks[400]);
  for (std::size_t i = 0; i < 200; ++i)
    f.core.push_remote(f.tasks[i]);
  w->polls_since_global = w->global_interval - 1;  // the next pick looks
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
  // A batch buffer's worth (32), and half the ring's free slots (127) of
  // the rest into the ring, behind the local task, in the inbox's order.
  EXPECT_EQ(w->remote.len(), 200u - 32u - 127u);
  ASSERT_EQ(w->queue.len(), 1u + 127u);
  f.expect_buffer_then_spill(w, f.tasks[400], 127);
}

TEST(P2c, ALookIntoAnEmptyOrHalfFullRingTakesOneBatch) {
  // Nothing local: the batch buffer runs dry first and the next pick looks
  // again. A ring half full: it may be the one that overflowed, and a
  // spill would fill it for the next overflow.
  for (std::size_t local : {std::size_t{0}, std::size_t{128}}) {
    SCOPED_TRACE(local);
    p2c_fixture f(1);
    worker* w = f.core.workers[0].get();
    for (std::size_t i = 0; i < local; ++i)
      f.push_to_ring(w, f.tasks[300 + i]);
    for (std::size_t i = 0; i < 200; ++i)
      f.core.push_remote(f.tasks[i]);
    w->polls_since_global = w->global_interval - 1;
    EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
    EXPECT_EQ(w->remote.len(), 200u - 32u);
    EXPECT_EQ(w->queue.len(), local);
  }
}

TEST(P2c, AYieldWhileTheInboxHoldsTasksGoesBehindThem) {
  p2c_fixture f(1);
  worker* w = f.core.workers[0].get();
  for (std::size_t i = 0; i < 100; ++i)
    f.core.push_remote(f.tasks[i]);
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);  // 31 in the buffer, 68 left
  // A task that yields (or was woken while it ran) while 68 wait in the
  // inbox: behind them, not at the ring's back, where the next look would
  // have put it in front of all but 32 + spill_room of them.
  f.core.schedule_yield(w, f.tasks[400]);
  EXPECT_EQ(w->remote.len(), 69u);
  EXPECT_TRUE(w->queue.is_empty());
  EXPECT_EQ(w->lifo.peek(), nullptr);
  for (std::size_t i = 1; i < 100; ++i)
    ASSERT_EQ(f.core.next_task(w), f.tasks[i]) << i;
  EXPECT_EQ(f.core.next_task(w), f.tasks[400]);
  // The inbox empty: a yield stays local (the LIFO slot, this worker's only
  // work) and never touches the inbox.
  f.core.schedule_yield(w, f.tasks[401]);
  EXPECT_EQ(w->remote.len(), 0u);
  EXPECT_EQ(f.core.next_task(w), f.tasks[401]);
  // Under the global placement, a yield goes to the ring's back whatever
  // waits in the global queue (which is every worker's).
  spindle_test::core_fixture g(1, 1, {}, placement::global, 512);
  worker* gw = g.core.workers[0].get();
  g.push_to_ring(gw, g.tasks[300]);
  for (std::size_t i = 0; i < 100; ++i)
    g.core.push_remote(g.tasks[i]);
  g.core.schedule_yield(gw, g.tasks[400]);
  EXPECT_EQ(gw->queue.len(), 2u);
}

// Two tasks that yield in a loop while one task waits in the ring: the
// owner's take leaves the newest task in the inbox, so with "a yield goes
// behind the inbox's tasks while any wait there" the two took turns
// through the inbox, each pick looked at the inbox first, and the ring
// never ran (spawn_many_remote_busy_batch took 9-30 ms in half of its runs).
TEST(P2c, TwoTasksThatYieldInALoopLetTheRingRun) {
  p2c_fixture f(1);
  worker* w = f.core.workers[0].get();
  f.core.push_remote(f.tasks[0]);
  f.core.push_remote(f.tasks[1]);
  ASSERT_EQ(f.core.next_task(w), f.tasks[0]);  // tasks[1] left in the inbox
  f.push_to_ring(w, f.tasks[300]);
  task_header* t = f.tasks[0];
  std::size_t picks = 0;
  for (; picks < 50; ++picks) {
    f.core.schedule_yield(w, t);
    t = f.core.next_task(w);
    ASSERT_NE(t, nullptr);
    if (t == f.tasks[300]) break;
    ASSERT_TRUE(t == f.tasks[0] || t == f.tasks[1]);
  }
  EXPECT_LE(picks, 3u) << "the ring's task waited behind tasks that yield";
}

TEST(P2c, ASearcherTakesHalfOfAnotherWorkersInbox) {
  p2c_fixture f(2);
  worker* w0 = f.core.workers[0].get();
  worker* w1 = f.core.workers[1].get();
  // Tasks land in worker 0's inbox while worker 0 is busy (in a long poll:
  // it does not look), worker 1's ring being loaded.
  for (std::size_t i = 0; i < 200; ++i)
    f.push_to_ring(w1, f.tasks[300 + i % 100]);
  for (std::size_t i = 0; i < 40; ++i)
    f.core.push_remote(f.tasks[i]);
  ASSERT_EQ(w0->remote.len(), 40u);
  // Worker 1 empties its ring (the tasks finish; taken off the ring
  // directly, so that no global-check interval comes up: on it, worker 1
  // would help with the inbox while busy, which the next test checks), then
  // searches.
  while (w1->queue.len() != 0)
    ASSERT_NE(w1->queue.pop(), nullptr);
  task_header* t = f.core.next_task(w1);
  ASSERT_NE(t, nullptr) << "the searcher did not look at the other inbox";
  EXPECT_EQ(t, f.tasks[0]);
  EXPECT_EQ(w0->remote.len(), 20u) << "a searcher takes the larger half";
  EXPECT_EQ(w1->counters.stolen.get(), 20u);
}

TEST(P2c, ABusyWorkerHelpsWithAnotherInboxOnItsInterval) {
  p2c_fixture f(2);
  worker* w0 = f.core.workers[0].get();
  worker* w1 = f.core.workers[1].get();
  // Worker 0's inbox is filled (a spawn_batch from outside lands in one
  // inbox) while worker 0 is in a long poll; worker 1 never runs out of
  // local work (each task it runs is woken again), so it never searches.
  // (Spawns, not yields: a yield makes the next pick look at the inbox and
  // the global queue at once.)
  for (std::size_t i = 0; i < 100; ++i)
    f.core.schedule_local(w1, f.tasks[300 + i], false);
  for (std::size_t i = 0; i < 40; ++i)
    f.core.push_remote(f.tasks[i]);
  ASSERT_EQ(w0->remote.len(), 40u);
  std::size_t from_inbox = 0;
  std::size_t first_help = 0;
  for (std::size_t poll = 0; poll < 100; ++poll) {
    task_header* t = f.core.next_task(w1);
    ASSERT_NE(t, nullptr);
    if (f.tasks.index(t) < 40) {
      if (from_inbox++ == 0) first_help = poll;
    } else {
      f.core.schedule_local(w1, t, false);
    }
  }
  EXPECT_FALSE(w1->is_searching);
  // Not before the first global-check interval (20 polls), and then half
  // of the inbox per look: 20, then 10 on the next interval, ...
  EXPECT_EQ(first_help, worker::initial_global_interval - 1);
  EXPECT_GE(from_inbox, 30u);
  EXPECT_EQ(w0->remote.len(), 40u - from_inbox);
  EXPECT_EQ(w1->counters.stolen.get(), from_inbox);
}

TEST(P2c, AWorkerDoesNotParkOnANonEmptyInbox) {
  p2c_fixture f(1);
  worker* w = f.core.workers[0].get();
  EXPECT_EQ(f.core.next_task(w), nullptr);
  f.core.push_remote(f.tasks[0]);
  EXPECT_FALSE(f.core.begin_park(w));
  EXPECT_EQ(f.core.next_task(w), f.tasks[0]);
}

TEST(P2c, ThePlacementFollowsTheSeed) {
  auto picks = [](std::uint64_t seed) {
    spindle_test::recording_platform platform;
    scheduler_core core(platform, 8, 128, seed, {}, placement::p2c);
    std::vector<std::size_t> out;
    for (int i = 0; i < 64; ++i)
      out.push_back(core.choose_p2c());
    return out;
  };
  EXPECT_EQ(picks(7), picks(7));
  EXPECT_NE(picks(7), picks(8));
}

// ---- whole runtimes

std::vector<placement> const both = {placement::global, placement::p2c};

// These tests run each placement themselves: SPINDLE_PLACEMENT, which
// overrides runtime_config::placement, is dropped before main() (before any
// thread starts), so that `SPINDLE_PLACEMENT=p2c meson test` runs them as
// written.
[[maybe_unused]] bool const placement_env_dropped = [] {
  ::unsetenv("SPINDLE_PLACEMENT");
  return true;
}();

char const* name_of(placement p) {
  return p == placement::p2c ? "p2c" : "global";
}

// The default placement is p2c, and the yield tier's default follows the
// placement (runtime_config::idle_yields): 32 looks under p2c, 4 under
// global; a count given in the config stays.
TEST(P2c, IsTheDefaultAndTheYieldTierFollowsThePlacement) {
  if (std::getenv("SPINDLE_IDLE") != nullptr) GTEST_SKIP() << "SPINDLE_IDLE sets the tiers";
  {
    spindle::runtime rt{{.workers = 1}};
    EXPECT_EQ(rt.config().placement, placement::p2c);
    EXPECT_EQ(rt.config().idle_yields, 32u);
  }
  {
    spindle::runtime rt{{.workers = 1, .placement = placement::global}};
    EXPECT_EQ(rt.config().idle_yields, 4u);
  }
  for (placement where : both) {
    spindle::runtime rt{{.workers = 1, .idle_yields = 7, .placement = where}};
    EXPECT_EQ(rt.config().idle_yields, 7u) << name_of(where);
  }
  spindle::runtime_config const unresolved{};
  EXPECT_FALSE(unresolved.idle_yields.has_value());
}

spindle::task<void> bump(std::atomic<int>* n) {
  n->fetch_add(1, std::memory_order_relaxed);
  co_return;
}

spindle::task<void> wait_then_bump(spindle::notify* gate, std::atomic<int>* n) {
  co_await gate->wait();
  n->fetch_add(1, std::memory_order_relaxed);
}

TEST(P2c, OutsideThreadsSpawnAndWakeWhileWorkersParkNoLostWakeUp) {
  // Four outside threads spawn tasks and wake tasks suspended on a notify,
  // in bursts with pauses that let the workers park in between; every
  // spawned task must run and every woken one resume (a lost wake-up hangs
  // and the test times out).
  int const rounds = static_cast<int>(spindle_test::scaled(2000, 400));
  for (placement where : both) {
    SCOPED_TRACE(name_of(where));
    spindle::runtime rt{{.workers = 2, .idle_yields = 0, .placement = where}};
    ASSERT_EQ(rt.config().placement, where);
    std::atomic<int> ran{0};
    std::vector<std::thread> outside;
    for (int th = 0; th < 4; ++th) {
      outside.emplace_back([&, th] {
        for (int r = 0; r < rounds; ++r) {
          std::vector<spindle::join_handle<void>> handles;
          spindle::notify gate;
          handles.push_back(rt.spawn(wait_then_bump(&gate, &ran)));
          for (int k = 0; k < 1 + (r + th) % 5; ++k)
            handles.push_back(rt.spawn(bump(&ran)));
          gate.notify_one();  // a wake from outside (or a stored permit)
          for (auto& h : handles) {
            while (!h.is_finished())
              std::this_thread::yield();
          }
          if ((r + th) % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      });
    }
    for (auto& t : outside)
      t.join();
    int expected = 0;
    for (int th = 0; th < 4; ++th) {
      for (int r = 0; r < rounds; ++r)
        expected += 2 + (r + th) % 5;
    }
    EXPECT_EQ(ran.load(), expected);
    EXPECT_GT(rt.stats().total_parked, 0u) << "the workers never parked";
  }
}

spindle::task<void> hog(std::atomic<bool>* started, std::atomic<int>* ran, int until) {
  started->store(true, std::memory_order_release);
  // One long poll: the other worker must run what was placed here. It
  // ends when everything ran, or after 20 s (then the check below fails).
  auto const give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ran->load(std::memory_order_acquire) < until &&
         std::chrono::steady_clock::now() < give_up) {
  }
  co_return;
}

spindle::task<void> yield_after_burst(std::atomic<bool>* started, std::atomic<bool>* placed,
                                      std::atomic<int>* ran, int* ran_before_resume) {
  started->store(true, std::memory_order_release);
  // The only worker is held here until the burst waits in its inbox.
  while (!placed->load(std::memory_order_acquire)) {
  }
  co_await spindle::yield_now{};
  *ran_before_resume = ran->load(std::memory_order_relaxed);
}

TEST(P2c, ATaskThatYieldsRunsAgainAfterTheBurstThatWaitedInItsInbox) {
  // One worker under p2c: a burst of 1,000 spawns from outside lands in its
  // inbox while a task holds it; that task yields and must run again only
  // after the whole burst (at the ring's back it ran after 32 + 127).
  spindle::runtime rt{{.workers = 1, .placement = placement::p2c}};
  int const n = 1000;
  std::atomic<bool> started{false};
  std::atomic<bool> placed{false};
  std::atomic<int> ran{0};
  int ran_before_resume = -1;
  auto h = rt.spawn(yield_after_burst(&started, &placed, &ran, &ran_before_resume));
  while (!started.load(std::memory_order_acquire))
    std::this_thread::yield();
  std::vector<spindle::join_handle<void>> handles;
  for (int i = 0; i < n; ++i)
    handles.push_back(rt.spawn(bump(&ran)));
  placed.store(true, std::memory_order_release);
  // Not block_on: it would help run the burst on this thread while the
  // worker is busy, and a task it ran could end after the yield's return.
  while (!h.is_finished())
    std::this_thread::yield();
  EXPECT_EQ(ran_before_resume, n);
  for (auto& b : handles) {
    while (!b.is_finished())
      std::this_thread::yield();
  }
}

TEST(P2c, TasksPlacedOnABusyWorkerRunOnTheOther) {
  for (placement where : both) {
    SCOPED_TRACE(name_of(where));
    spindle::runtime rt{{.workers = 2, .placement = where}};
    int const n = 2000;
    std::atomic<bool> started{false};
    std::atomic<int> ran{0};
    auto h = rt.spawn(hog(&started, &ran, n));
    while (!started.load(std::memory_order_acquire))
      std::this_thread::yield();
    // Half of these land on the hog's worker's inbox under p2c (its load is
    // the lower one whenever the other worker's inbox is longer).
    std::vector<spindle::join_handle<void>> handles;
    for (int i = 0; i < n; ++i)
      handles.push_back(rt.spawn(bump(&ran)));
    rt.block_on(std::move(h));
    EXPECT_EQ(ran.load(), n) << "tasks were stranded behind the busy worker";
  }
}

}  // namespace
