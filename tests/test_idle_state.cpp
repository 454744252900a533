// Tests of the idle state (runtime/src/idle_state.{hpp,cpp}): the searching
// and unparked counters and the parked bitmap behind "the last searcher must
// notify".
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "idle_state.hpp"
#include "runtime_test_support.hpp"

namespace {

using spindle::detail::idle_state;
using spindle::detail::not_a_worker;

TEST(IdleState, StartsWithAllWorkersUnparkedAndNoSearcher) {
  idle_state idle(4);
  EXPECT_EQ(idle.num_unparked(), 4u);
  EXPECT_EQ(idle.num_searching(), 0u);
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_FALSE(idle.is_parked(i));
  // Nobody is parked: there is nobody to notify.
  EXPECT_EQ(idle.worker_to_notify(), not_a_worker);
}

TEST(IdleState, AtMostHalfTheWorkersSearch) {
  for (std::size_t workers = 1; workers <= 9; ++workers) {
    idle_state idle(workers);
    std::size_t admitted = 0;
    for (std::size_t i = 0; i < workers; ++i)
      admitted += idle.transition_worker_to_searching();
    // 2 * searching < workers must hold before each admission: ceil(n / 2).
    EXPECT_EQ(admitted, (workers + 1) / 2) << "workers=" << workers;
    EXPECT_EQ(idle.num_searching(), admitted);
    // One leaves: one more may enter, and then no more.
    (void)idle.transition_worker_from_searching();
    EXPECT_TRUE(idle.transition_worker_to_searching()) << "workers=" << workers;
    EXPECT_FALSE(idle.transition_worker_to_searching()) << "workers=" << workers;
  }
}

TEST(IdleState, OnlyTheLastSearcherIsReportedLast) {
  idle_state idle(8);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(idle.transition_worker_to_searching());
  EXPECT_FALSE(idle.transition_worker_from_searching());
  EXPECT_FALSE(idle.transition_worker_from_searching());
  EXPECT_FALSE(idle.transition_worker_from_searching());
  EXPECT_TRUE(idle.transition_worker_from_searching());
  EXPECT_EQ(idle.num_searching(), 0u);
}

TEST(IdleState, ParkingAsLastSearcherIsReported) {
  idle_state idle(4);
  ASSERT_TRUE(idle.transition_worker_to_searching());  // worker 0
  ASSERT_TRUE(idle.transition_worker_to_searching());  // worker 1
  // A non-searching worker parking is never "the last searcher".
  EXPECT_FALSE(idle.transition_worker_to_parked(3, false));
  EXPECT_EQ(idle.num_searching(), 2u);
  EXPECT_EQ(idle.num_unparked(), 3u);
  EXPECT_FALSE(idle.transition_worker_to_parked(0, true));
  EXPECT_EQ(idle.num_searching(), 1u);
  EXPECT_TRUE(idle.transition_worker_to_parked(1, true));
  EXPECT_EQ(idle.num_searching(), 0u);
  EXPECT_EQ(idle.num_unparked(), 1u);
  EXPECT_TRUE(idle.is_parked(0));
  EXPECT_TRUE(idle.is_parked(1));
  EXPECT_FALSE(idle.is_parked(2));
  EXPECT_TRUE(idle.is_parked(3));
}

TEST(IdleState, NotifyClaimsAParkedWorkerOnlyWhenNobodySearches) {
  idle_state idle(4);
  EXPECT_FALSE(idle.transition_worker_to_parked(2, false));
  EXPECT_FALSE(idle.transition_worker_to_parked(3, false));
  ASSERT_TRUE(idle.transition_worker_to_searching());  // worker 0 searches

  // A searcher is awake: it will find the work; nobody is woken.
  EXPECT_EQ(idle.worker_to_notify(), not_a_worker);
  EXPECT_TRUE(idle.is_parked(2));
  EXPECT_TRUE(idle.is_parked(3));

  // The searcher found work and stopped searching: now one parked worker is
  // claimed, counted unparked and searching, and removed from the bitmap.
  EXPECT_TRUE(idle.transition_worker_from_searching());
  std::size_t claimed = idle.worker_to_notify();
  EXPECT_EQ(claimed, 2u) << "lowest parked index first";
  EXPECT_FALSE(idle.is_parked(2));
  EXPECT_TRUE(idle.is_parked(3));
  EXPECT_EQ(idle.num_searching(), 1u);
  EXPECT_EQ(idle.num_unparked(), 3u);

  // The claimed worker counts as a searcher, so a second notify wakes nobody.
  EXPECT_EQ(idle.worker_to_notify(), not_a_worker);
  EXPECT_TRUE(idle.is_parked(3));

  // Once it stops searching, the next notify claims worker 3.
  EXPECT_TRUE(idle.transition_worker_from_searching());
  EXPECT_EQ(idle.worker_to_notify(), 3u);
  EXPECT_EQ(idle.num_unparked(), 4u);
  EXPECT_TRUE(idle.transition_worker_from_searching());
  EXPECT_EQ(idle.worker_to_notify(), not_a_worker) << "nobody parked";
}

TEST(IdleState, UnparkWorkerById) {
  idle_state idle(3);
  EXPECT_FALSE(idle.unpark_worker_by_id(1)) << "not parked";
  EXPECT_EQ(idle.num_unparked(), 3u);

  EXPECT_FALSE(idle.transition_worker_to_parked(1, false));
  EXPECT_EQ(idle.num_unparked(), 2u);
  EXPECT_TRUE(idle.unpark_worker_by_id(1));
  EXPECT_FALSE(idle.is_parked(1));
  EXPECT_EQ(idle.num_unparked(), 3u);
  EXPECT_EQ(idle.num_searching(), 0u) << "a self-woken worker is not counted searching";
  EXPECT_FALSE(idle.unpark_worker_by_id(1)) << "second removal";
  EXPECT_EQ(idle.num_unparked(), 3u);

  // Claimed by a notifier first: unpark_worker_by_id then reports false, so
  // the worker knows it was counted as a searcher.
  EXPECT_FALSE(idle.transition_worker_to_parked(1, false));
  EXPECT_EQ(idle.worker_to_notify(), 1u);
  EXPECT_FALSE(idle.unpark_worker_by_id(1));
  EXPECT_EQ(idle.num_unparked(), 3u);
  EXPECT_EQ(idle.num_searching(), 1u);
}

TEST(IdleState, ReparkAfterSelfWake) {
  // Park, wake by itself (I/O), park again: one bit, claimed once.
  idle_state idle(2);
  EXPECT_FALSE(idle.transition_worker_to_parked(0, false));
  EXPECT_TRUE(idle.unpark_worker_by_id(0));
  EXPECT_FALSE(idle.transition_worker_to_parked(0, false));
  EXPECT_EQ(idle.worker_to_notify(), 0u);
  EXPECT_EQ(idle.worker_to_notify(), not_a_worker);
}

TEST(IdleState, MoreThan64WorkersInTheBitmap) {
  constexpr std::size_t n = 130;
  idle_state idle(n);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_FALSE(idle.transition_worker_to_parked(i, false));
  }
  EXPECT_EQ(idle.num_unparked(), 0u);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_TRUE(idle.is_parked(i)) << i;

  // Claims come out in index order across the three bitmap words.
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t claimed = idle.worker_to_notify();
    ASSERT_EQ(claimed, i);
    ASSERT_FALSE(idle.is_parked(i));
    // Stop searching so that the next notify may claim again.
    ASSERT_TRUE(idle.transition_worker_from_searching());
  }
  EXPECT_EQ(idle.worker_to_notify(), not_a_worker);
  EXPECT_EQ(idle.num_unparked(), n);

  // Only high indices parked: each is found.
  for (std::size_t i : {64u, 127u, 128u, 129u}) {
    EXPECT_FALSE(idle.transition_worker_to_parked(i, false));
  }
  EXPECT_TRUE(idle.unpark_worker_by_id(128));
  EXPECT_FALSE(idle.is_parked(128));
  EXPECT_TRUE(idle.is_parked(129));
  EXPECT_EQ(idle.worker_to_notify(), 64u);
  (void)idle.transition_worker_from_searching();
  EXPECT_EQ(idle.worker_to_notify(), 127u);
  (void)idle.transition_worker_from_searching();
  EXPECT_EQ(idle.worker_to_notify(), 129u);
  (void)idle.transition_worker_from_searching();
  EXPECT_EQ(idle.worker_to_notify(), not_a_worker);
  EXPECT_EQ(idle.num_unparked(), n);
}

TEST(IdleState, NotifiersClaimEveryParkedWorkerAcrossBitmapWords) {
  // Parked workers on both sides of each 64-bit word of the bitmap; each
  // claim leaves a searcher, which gives up searching before the next one.
  constexpr std::size_t n = 130;
  idle_state idle(n);
  std::vector<std::size_t> parked = {0, 1, 63, 64, 65, 100, 127, 128, 129};
  for (std::size_t i : parked)
    EXPECT_FALSE(idle.transition_worker_to_parked(i, false));
  std::vector<std::size_t> taken;
  for (std::size_t index; (index = idle.worker_to_notify()) != not_a_worker;) {
    taken.push_back(index);
    EXPECT_TRUE(idle.transition_worker_from_searching());
  }
  std::sort(taken.begin(), taken.end());
  EXPECT_EQ(taken, parked);
  EXPECT_EQ(idle.num_unparked(), n);
  for (std::size_t i : parked)
    EXPECT_FALSE(idle.is_parked(i));
}

TEST(IdleState, InboxClaimsKeepTheSearcherBound) {
  // placement::p2c's claim of the worker whose inbox got a task: always
  // claimed, counted searching only below the bound (half the workers).
  idle_state idle(4);
  ASSERT_TRUE(idle.transition_worker_to_searching());
  ASSERT_TRUE(idle.transition_worker_to_searching());
  EXPECT_FALSE(idle.transition_worker_to_parked(2, false));
  EXPECT_FALSE(idle.transition_worker_to_parked(3, false));
  EXPECT_EQ(idle.worker_to_notify(), not_a_worker) << "searchers are out";
  EXPECT_EQ(idle.worker_to_notify_preferring(3), 3u);
  EXPECT_FALSE(idle.is_parked(3));
  EXPECT_EQ(idle.num_unparked(), 3u);
  EXPECT_EQ(idle.num_searching(), 2u) << "at the bound: counted unparked only";
  EXPECT_FALSE(idle.claimed_as_searcher(3));
  EXPECT_TRUE(idle.claimed_as_searcher(3)) << "the record is cleared";
  (void)idle.transition_worker_from_searching();
  EXPECT_EQ(idle.worker_to_notify_preferring(2), 2u);
  EXPECT_EQ(idle.num_searching(), 2u) << "below the bound: counted searching";
  EXPECT_EQ(idle.num_unparked(), 4u);
  EXPECT_TRUE(idle.claimed_as_searcher(2));
  // Nobody parked: nobody claimed, the preferred or another.
  EXPECT_EQ(idle.worker_to_notify_preferring(1), not_a_worker);
}

// Workers park and wake concurrently (by themselves or claimed by
// notifiers, global and inbox ones). Whatever the interleaving, the counters return to "all
// unparked, none searching" once everybody is awake and done searching.
TEST(IdleState, ConcurrentParkAndNotifyKeepCountersConsistent) {
  constexpr std::size_t workers = 8;
  idle_state idle(workers);
  long const rounds = spindle_test::scaled(3000, 300);
  std::atomic<bool> stop{false};
  std::atomic<long> claims{0};
  std::atomic<long> self_wakes{0};
  std::atomic<long> claimed_wakes{0};
  std::atomic<long> errors{0};

  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(static_cast<std::uint32_t>(w));
      for (long r = 0; r < rounds; ++r) {
        bool searching = rng() % 2 == 0 && idle.transition_worker_to_searching();
        (void)idle.transition_worker_to_parked(w, searching);
        if (rng() % 2 == 0) std::this_thread::yield();
        if (idle.unpark_worker_by_id(w)) {
          self_wakes.fetch_add(1);
        } else if (idle.claimed_as_searcher(w)) {
          // A notifier claimed us and counted us searching.
          claimed_wakes.fetch_add(1);
          if (idle.num_searching() == 0) errors.fetch_add(1);
          (void)idle.transition_worker_from_searching();
        } else {
          claimed_wakes.fetch_add(1);  // an inbox claim beyond the bound
        }
        // Never more searchers than half the workers (rounded up), claims
        // included.
        if (idle.num_searching() > (workers + 1) / 2) errors.fetch_add(1);
      }
    });
  }
  std::thread notifier([&] {
    while (!stop.load()) {
      if (idle.worker_to_notify() != not_a_worker) claims.fetch_add(1);
      std::this_thread::yield();
    }
  });
  // placement::p2c's claims of a preferred worker.
  std::thread inbox_notifier([&] {
    std::mt19937 rng(99);
    while (!stop.load()) {
      if (idle.worker_to_notify_preferring(rng() % workers) != not_a_worker) claims.fetch_add(1);
      std::this_thread::yield();
    }
  });
  for (auto& t : threads)
    t.join();
  stop.store(true);
  notifier.join();
  inbox_notifier.join();

  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(claims.load(), claimed_wakes.load());
  EXPECT_EQ(self_wakes.load() + claimed_wakes.load(), rounds * static_cast<long>(workers));
  EXPECT_EQ(idle.num_unparked(), workers);
  EXPECT_EQ(idle.num_searching(), 0u);
  for (std::size_t w = 0; w < workers; ++w)
    EXPECT_FALSE(idle.is_parked(w));
}

}  // namespace
