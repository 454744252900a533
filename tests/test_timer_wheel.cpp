// Tests of the hierarchical timer wheel (runtime/src/timer_wheel.hpp) on its
// own: placement, cascading, far deadlines, removal, and a randomized run
// against a std::multimap model checking that no entry fires early, none
// fires late, none is lost and none fires twice.
#include "timer_wheel.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

namespace {

using spindle::detail::timer_entry;
using spindle::detail::timer_wheel;

struct fired_log {
  std::vector<timer_entry*> entries;
  std::vector<std::uint64_t> at;  // wheel elapsed when each fired
};

void advance(timer_wheel& w, std::uint64_t now, fired_log& log) {
  w.advance(now, [&](timer_entry* e) {
    log.entries.push_back(e);
    log.at.push_back(now);
  });
}

TEST(TimerWheel, EmptyWheelHasNoExpiration) {
  timer_wheel w;
  EXPECT_EQ(w.next_expiration(), timer_wheel::never);
  fired_log log;
  advance(w, 1'000'000, log);
  EXPECT_TRUE(log.entries.empty());
  EXPECT_EQ(w.elapsed(), 1'000'000u);
}

TEST(TimerWheel, DeadlineNotAfterElapsedIsRefused) {
  timer_wheel w;
  fired_log log;
  advance(w, 100, log);
  timer_entry e;
  e.deadline = 100;
  EXPECT_FALSE(w.insert(&e));
  e.deadline = 50;
  EXPECT_FALSE(w.insert(&e));
  EXPECT_FALSE(e.linked);
  EXPECT_EQ(w.size(), 0u);
}

TEST(TimerWheel, FiresAtTheDeadlineTickNotBefore) {
  // One deadline per level and a few around level boundaries.
  std::vector<std::uint64_t> deadlines = {1,       2,          63,         64,         65,
                                          4095,    4096,       4097,       262'143,    262'144,
                                          300'000, 16'777'215, 16'777'216, 900'000'000};
  for (std::uint64_t d : deadlines) {
    timer_wheel w;
    timer_entry e;
    e.deadline = d;
    ASSERT_TRUE(w.insert(&e)) << d;
    EXPECT_LE(w.next_expiration(), d) << "the wheel must wake no later than the deadline";
    fired_log log;
    advance(w, d - 1, log);
    EXPECT_TRUE(log.entries.empty()) << "fired early: deadline " << d;
    EXPECT_TRUE(e.linked);
    advance(w, d, log);
    ASSERT_EQ(log.entries.size(), 1u) << "did not fire at deadline " << d;
    EXPECT_FALSE(e.linked);
    EXPECT_EQ(w.size(), 0u);
  }
}

TEST(TimerWheel, StepwiseAdvanceFiresEachTickOnTime) {
  timer_wheel w;
  std::vector<std::unique_ptr<timer_entry>> entries;
  for (std::uint64_t d = 1; d <= 5000; d += 7) {
    entries.push_back(std::make_unique<timer_entry>());
    entries.back()->deadline = d;
    ASSERT_TRUE(w.insert(entries.back().get()));
  }
  fired_log log;
  for (std::uint64_t now = 1; now <= 5000; ++now) {
    std::size_t before = log.entries.size();
    advance(w, now, log);
    for (std::size_t i = before; i < log.entries.size(); ++i) {
      EXPECT_EQ(log.entries[i]->deadline, now);
    }
  }
  EXPECT_EQ(log.entries.size(), entries.size());
}

TEST(TimerWheel, DeadlinesBeyondTheSpanAreCascadedUntilDue) {
  timer_wheel w;
  timer_entry far;
  far.deadline = timer_wheel::max_span * 3 + 12'345;  // ~37 days
  ASSERT_TRUE(w.insert(&far));
  fired_log log;
  std::uint64_t now = 0;
  // Advance in big jumps, as a runtime parked between wake-ups would.
  while (log.entries.empty()) {
    std::uint64_t next = w.next_expiration();
    ASSERT_NE(next, timer_wheel::never);
    ASSERT_GT(next, now) << "no progress";
    ASSERT_LE(next, far.deadline);
    now = next;
    advance(w, now, log);
  }
  EXPECT_EQ(now, far.deadline);
}

TEST(TimerWheel, RemoveUnlinksAndClearsTheSlot) {
  timer_wheel w;
  timer_entry a, b;
  a.deadline = 10;
  b.deadline = 10;
  ASSERT_TRUE(w.insert(&a));
  ASSERT_TRUE(w.insert(&b));
  w.remove(&a);
  EXPECT_FALSE(a.linked);
  EXPECT_EQ(w.size(), 1u);
  EXPECT_EQ(w.next_expiration(), 10u);
  w.remove(&b);
  EXPECT_EQ(w.next_expiration(), timer_wheel::never);
  fired_log log;
  advance(w, 100, log);
  EXPECT_TRUE(log.entries.empty());
}

TEST(TimerWheel, RandomOperationsMatchAModel) {
  std::mt19937_64 rng(20261122);
  for (int round = 0; round < 40; ++round) {
    timer_wheel w;
    std::vector<std::unique_ptr<timer_entry>> pool;
    std::multimap<std::uint64_t, timer_entry*> model;
    std::set<timer_entry*> fired_ever;
    std::uint64_t now = rng() % 1'000'000;
    fired_log log;
    advance(w, now, log);
    for (int step = 0; step < 4000; ++step) {
      unsigned op = rng() % 10;
      if (op < 5) {
        // Insert: mostly near deadlines, sometimes far, sometimes past the span.
        std::uint64_t delta;
        switch (rng() % 4) {
          case 0:
            delta = rng() % 64;
            break;
          case 1:
            delta = rng() % 100'000;
            break;
          case 2:
            delta = rng() % (timer_wheel::max_span / 4);
            break;
          default:
            delta = rng() % (timer_wheel::max_span * 3);
            break;
        }
        pool.push_back(std::make_unique<timer_entry>());
        timer_entry* e = pool.back().get();
        e->deadline = w.elapsed() + delta;
        bool inserted = w.insert(e);
        ASSERT_EQ(inserted, delta > 0);
        if (inserted) model.emplace(e->deadline, e);
      } else if (op < 7 && !model.empty()) {
        // Remove a random pending entry.
        auto it = model.begin();
        std::advance(it, static_cast<long>(rng() % model.size()));
        ASSERT_TRUE(it->second->linked);
        w.remove(it->second);
        model.erase(it);
      } else {
        // Advance by a small step, a medium one, or jump to the next expiration.
        std::uint64_t target;
        switch (rng() % 3) {
          case 0:
            target = w.elapsed() + rng() % 80;
            break;
          case 1:
            target = w.elapsed() + rng() % 5'000'000;
            break;
          default: {
            std::uint64_t next = w.next_expiration();
            target = next == timer_wheel::never ? w.elapsed() + 1 : next;
          }
        }
        log.entries.clear();
        log.at.clear();
        advance(w, target, log);
        std::multiset<timer_entry*> got(log.entries.begin(), log.entries.end());
        std::multiset<timer_entry*> want;
        for (auto it = model.begin(); it != model.end() && it->first <= target;)
          want.insert(it->second), it = model.erase(it);
        ASSERT_EQ(got, want) << "round " << round << " step " << step << " target " << target;
        for (timer_entry* e : log.entries) {
          ASSERT_FALSE(e->linked);
          ASSERT_TRUE(fired_ever.insert(e).second) << "fired twice";
        }
      }
      ASSERT_EQ(w.size(), model.size());
      // Never late: the wheel's next expiration is no later than the model's
      // earliest deadline.
      if (!model.empty()) {
        ASSERT_LE(w.next_expiration(), model.begin()->first);
        ASSERT_GT(w.next_expiration(), w.elapsed() - 1);
      } else {
        ASSERT_EQ(w.next_expiration(), timer_wheel::never);
      }
    }
  }
}

}  // namespace
