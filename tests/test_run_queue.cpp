// Tests of the worker run queue (runtime/src/run_queue.hpp): the 256-slot
// ring with the packed {steal_head, real_head} word.
//
// Tasks are fake task_header objects from an array; a task's identity is its
// index in that array.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "global_queue.hpp"
#include "run_queue.hpp"
#include "runtime_test_support.hpp"

namespace {

using spindle::detail::global_queue;
using spindle::detail::run_queue;
using spindle::detail::task_header;
using spindle_test::fake_tasks;

std::vector<std::size_t> drain(run_queue& q, fake_tasks const& tasks) {
  std::vector<std::size_t> out;
  while (task_header* t = q.pop())
    out.push_back(tasks.index(t));
  return out;
}

std::vector<std::size_t> drain(global_queue& q, fake_tasks const& tasks) {
  std::vector<std::size_t> out;
  while (task_header* t = q.pop())
    out.push_back(tasks.index(t));
  return out;
}

std::vector<std::size_t> iota(std::size_t from, std::size_t to) {
  std::vector<std::size_t> v;
  for (std::size_t i = from; i < to; ++i)
    v.push_back(i);
  return v;
}

TEST(RunQueue, StartsEmpty) {
  run_queue q;
  EXPECT_TRUE(q.is_empty());
  EXPECT_EQ(q.len(), 0u);
  EXPECT_EQ(q.remaining_slots(), 256u);
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_EQ(run_queue::capacity, 256u);
  EXPECT_EQ(run_queue::overflow_batch, 128u);
}

TEST(RunQueue, PushPopIsFifo) {
  fake_tasks tasks(100);
  run_queue q;
  global_queue g;
  for (std::size_t i = 0; i < 100; ++i) {
    EXPECT_FALSE(q.push_back(tasks[i], g));
    EXPECT_EQ(q.len(), i + 1);
  }
  EXPECT_EQ(q.remaining_slots(), 156u);
  EXPECT_EQ(drain(q, tasks), iota(0, 100));
  EXPECT_TRUE(q.is_empty());
  EXPECT_EQ(q.remaining_slots(), 256u);
  EXPECT_TRUE(g.is_empty());
}

TEST(RunQueue, InterleavedPushPopKeepsFifo) {
  fake_tasks tasks(1000);
  run_queue q;
  global_queue g;
  std::size_t next_push = 0;
  std::size_t next_pop = 0;
  std::mt19937 rng(42);
  while (next_pop < tasks.size()) {
    std::size_t burst = rng() % 40;
    for (std::size_t i = 0; i < burst && next_push < tasks.size(); ++i) {
      ASSERT_FALSE(q.push_back(tasks[next_push++], g));
    }
    std::size_t pops = rng() % 40;
    for (std::size_t i = 0; i < pops; ++i) {
      task_header* t = q.pop();
      if (next_pop == next_push) {
        ASSERT_EQ(t, nullptr);
        break;
      }
      ASSERT_EQ(t, tasks[next_pop]) << "pop " << next_pop;
      ++next_pop;
    }
    ASSERT_EQ(q.len(), next_push - next_pop);
  }
  EXPECT_TRUE(g.is_empty());
}

TEST(RunQueue, Holds256WithoutOverflow) {
  fake_tasks tasks(256);
  run_queue q;
  global_queue g;
  for (std::size_t i = 0; i < 256; ++i)
    ASSERT_FALSE(q.push_back(tasks[i], g)) << i;
  EXPECT_EQ(q.len(), 256u);
  EXPECT_EQ(q.remaining_slots(), 0u);
  EXPECT_TRUE(g.is_empty());
  EXPECT_EQ(drain(q, tasks), iota(0, 256));
}

TEST(RunQueue, OverflowMoves128PlusNewTaskToGlobalInOneBatch) {
  fake_tasks tasks(257);
  run_queue q;
  global_queue g;
  for (std::size_t i = 0; i < 256; ++i)
    ASSERT_FALSE(q.push_back(tasks[i], g));
  ASSERT_TRUE(g.is_empty());

  EXPECT_TRUE(q.push_back(tasks[256], g));
  // One push moved the 128 oldest tasks and the new one: the global queue
  // grew by 129 at once and holds them in order, the new one last.
  EXPECT_EQ(g.len(), 129u);
  EXPECT_EQ(q.len(), 128u);
  EXPECT_EQ(q.remaining_slots(), 128u);
  std::vector<std::size_t> expected_global = iota(0, 128);
  expected_global.push_back(256);
  EXPECT_EQ(drain(g, tasks), expected_global);
  EXPECT_EQ(drain(q, tasks), iota(128, 256));
}

TEST(RunQueue, OverflowLeavesOutTheEntriesTheStaleFilterConsumes) {
  // The scheduler passes release_if_stale: entries whose task a join already
  // ran (stale) are released at the overflow instead of going global.
  fake_tasks tasks(257);
  run_queue q;
  global_queue g;
  for (std::size_t i = 0; i < 256; ++i) {
    if (i < 128 && i % 2 == 0) tasks[i]->state.store(1);  // stale
    ASSERT_FALSE(q.push_back(tasks[i], g));
  }
  auto consume_stale = [](spindle::detail::task_header* t) noexcept {
    std::uint64_t expected = 1;
    return t->state.compare_exchange_strong(expected, 2);  // 2: released
  };
  bool was_empty = true;
  EXPECT_TRUE(q.push_back(tasks[256], g, &was_empty, consume_stale));
  EXPECT_FALSE(was_empty);
  std::vector<std::size_t> expected_global;
  for (std::size_t i = 1; i < 128; i += 2)
    expected_global.push_back(i);
  expected_global.push_back(256);
  EXPECT_EQ(g.len(), expected_global.size());
  EXPECT_EQ(drain(g, tasks), expected_global);
  for (std::size_t i = 0; i < 128; i += 2)
    EXPECT_EQ(tasks[i]->state.load(), 2u) << i;
  EXPECT_EQ(drain(q, tasks), iota(128, 256));

  // All of the 128 stale: only the new task goes global.
  fake_tasks more(257);
  run_queue q2;
  global_queue g2;
  for (std::size_t i = 0; i < 256; ++i) {
    if (i < 128) more[i]->state.store(1);
    ASSERT_FALSE(q2.push_back(more[i], g2));
  }
  EXPECT_TRUE(q2.push_back(more[256], g2, nullptr, consume_stale));
  EXPECT_EQ(drain(g2, more), std::vector<std::size_t>{256});
  EXPECT_EQ(drain(q2, more), iota(128, 256));
}

TEST(RunQueue, OverflowLinksEndWithNull) {
  fake_tasks tasks(257);
  run_queue q;
  global_queue g;
  for (std::size_t i = 0; i < 257; ++i)
    (void)q.push_back(tasks[i], g);
  // pop_batch relies on the batch being a well-formed list: pop more than
  // present and check that nothing else comes out.
  std::vector<task_header*> out(300, nullptr);
  EXPECT_EQ(g.pop_batch(out.data(), out.size()), 129u);
  EXPECT_EQ(out[128], tasks[256]);
  EXPECT_EQ(out[129], nullptr);
  EXPECT_EQ(g.pop(), nullptr);
}

TEST(RunQueue, RepeatedOverflowLosesNothing) {
  constexpr std::size_t n = 10'000;
  fake_tasks tasks(n);
  run_queue q;
  global_queue g;
  std::size_t ring_len = 0;
  std::size_t overflows = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bool overflowed = q.push_back(tasks[i], g);
    if (ring_len == 256) {
      ASSERT_TRUE(overflowed) << "push " << i;
      ring_len = 128;
      ++overflows;
    } else {
      ASSERT_FALSE(overflowed) << "push " << i;
      ++ring_len;
    }
    ASSERT_EQ(q.len(), ring_len);
    ASSERT_EQ(g.len(), overflows * 129);
  }
  // Global holds whole batches in push order, ring holds the newest tasks.
  std::vector<std::size_t> all = drain(g, tasks);
  std::vector<std::size_t> ring = drain(q, tasks);
  all.insert(all.end(), ring.begin(), ring.end());
  ASSERT_EQ(all.size(), n);
  std::vector<std::size_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(0, n));
}

TEST(RunQueue, StealIntoTakesLargerHalfAndReturnsOne) {
  fake_tasks tasks(256);
  for (std::size_t k = 1; k <= 256; ++k) {
    run_queue src;
    run_queue dst;
    global_queue g;
    for (std::size_t i = 0; i < k; ++i)
      ASSERT_FALSE(src.push_back(tasks[i], g));
    std::uint32_t stolen = 999;
    task_header* t = src.steal_into(dst, &stolen);
    std::size_t want = k - k / 2;
    ASSERT_EQ(stolen, want) << "k=" << k;
    // The oldest `want` tasks are taken; the last of them is returned and the
    // others are published in dst in order.
    ASSERT_EQ(t, tasks[want - 1]) << "k=" << k;
    ASSERT_EQ(dst.len(), want - 1) << "k=" << k;
    ASSERT_EQ(src.len(), k / 2) << "k=" << k;
    ASSERT_EQ(drain(dst, tasks), iota(0, want - 1)) << "k=" << k;
    ASSERT_EQ(drain(src, tasks), iota(want, k)) << "k=" << k;
    ASSERT_TRUE(g.is_empty());
  }
}

TEST(RunQueue, StealFromEmptyReturnsNull) {
  fake_tasks tasks(10);
  run_queue src;
  run_queue dst;
  global_queue g;
  std::uint32_t stolen = 7;
  EXPECT_EQ(src.steal_into(dst, &stolen), nullptr);
  EXPECT_EQ(stolen, 0u);
  EXPECT_TRUE(dst.is_empty());

  // Emptied by pops: still nothing to steal.
  for (std::size_t i = 0; i < 10; ++i)
    (void)src.push_back(tasks[i], g);
  (void)drain(src, tasks);
  stolen = 7;
  EXPECT_EQ(src.steal_into(dst, &stolen), nullptr);
  EXPECT_EQ(stolen, 0u);
  EXPECT_TRUE(dst.is_empty());
}

TEST(RunQueue, StealRefusedWhenDestinationIsMoreThanHalfFull) {
  fake_tasks tasks(256 + 129);
  global_queue g;
  run_queue src;
  for (std::size_t i = 0; i < 256; ++i)
    (void)src.push_back(tasks[i], g);

  run_queue full_dst;
  for (std::size_t i = 0; i < 129; ++i)
    (void)full_dst.push_back(tasks[256 + i], g);
  std::uint32_t stolen = 7;
  EXPECT_EQ(src.steal_into(full_dst, &stolen), nullptr);
  EXPECT_EQ(stolen, 0u);
  EXPECT_EQ(src.len(), 256u);
  EXPECT_EQ(full_dst.len(), 129u);

  // With exactly half a ring free, a steal of half a full ring fits.
  run_queue half_dst;
  for (std::size_t i = 0; i < 128; ++i)
    (void)half_dst.push_back(tasks[256 + i], g);
  task_header* t = src.steal_into(half_dst, &stolen);
  EXPECT_EQ(stolen, 128u);
  EXPECT_EQ(t, tasks[127]);
  EXPECT_EQ(half_dst.len(), 255u);
  EXPECT_EQ(src.len(), 128u);
  std::vector<std::size_t> expected = iota(256, 256 + 128);
  std::vector<std::size_t> stolen_part = iota(0, 127);
  expected.insert(expected.end(), stolen_part.begin(), stolen_part.end());
  EXPECT_EQ(drain(half_dst, tasks), expected);
  EXPECT_TRUE(g.is_empty());
}

TEST(RunQueue, StealAfterWrapKeepsOrder) {
  // Move the positions near the end of the ring, then steal across the wrap.
  fake_tasks tasks(1000);
  run_queue src;
  run_queue dst;
  global_queue g;
  for (std::size_t i = 0; i < 250; ++i)
    (void)src.push_back(tasks[i], g);
  EXPECT_EQ(drain(src, tasks), iota(0, 250));
  for (std::size_t i = 250; i < 450; ++i)
    (void)src.push_back(tasks[i], g);
  std::uint32_t stolen = 0;
  task_header* t = src.steal_into(dst, &stolen);
  EXPECT_EQ(stolen, 100u);
  EXPECT_EQ(t, tasks[349]);
  EXPECT_EQ(drain(dst, tasks), iota(250, 349));
  EXPECT_EQ(drain(src, tasks), iota(350, 450));
}

// Many wraps of the 256-slot ring (and a few million position increments of
// the u32 positions), mixing pushes, pops, steals and overflows, checking
// global FIFO order of everything that leaves the ring.
TEST(RunQueue, ManyWrapsPreserveOrderAndCounts) {
  constexpr std::size_t pool = 1024;  // > 2 x capacity: identities unique in any window
  fake_tasks tasks(pool);
  run_queue q;
  run_queue thief;
  global_queue g;
  std::mt19937 rng(7);
  long const total = spindle_test::scaled(3'000'000, 100'000);
  std::uint64_t pushed = 0;
  std::uint64_t taken = 0;  // next sequence number expected out of the ring front
  std::uint64_t in_global = 0;
  while (pushed < static_cast<std::uint64_t>(total)) {
    std::uint32_t op = rng() % 16;
    if (op < 8) {
      std::size_t burst = 1 + rng() % 64;
      for (std::size_t i = 0; i < burst; ++i) {
        bool overflow = q.push_back(tasks[pushed % pool], g);
        ++pushed;
        if (overflow) {
          // The 128 oldest ring tasks and the new one went global, in order.
          ASSERT_EQ(g.len(), in_global + 129);
          std::vector<task_header*> out(129);
          ASSERT_EQ(g.pop_batch(out.data(), out.size()), 129u);
          for (std::size_t j = 0; j < 128; ++j) {
            ASSERT_EQ(out[j], tasks[(taken + j) % pool]) << "overflow at push " << pushed;
          }
          ASSERT_EQ(out[128], tasks[(pushed - 1) % pool]);
          taken += 128;
          // The new task skipped the ring: the remaining ring tasks are
          // taken..pushed-2, so renumber by moving it out of the sequence.
          // Simplest: stop this burst and drain the ring in order.
          while (task_header* t = q.pop()) {
            ASSERT_EQ(t, tasks[taken % pool]);
            ++taken;
          }
          ASSERT_EQ(taken, pushed - 1);
          taken = pushed;
          break;
        }
      }
    } else if (op < 14) {
      std::size_t pops = 1 + rng() % 64;
      for (std::size_t i = 0; i < pops; ++i) {
        task_header* t = q.pop();
        if (taken == pushed) {
          ASSERT_EQ(t, nullptr);
          break;
        }
        ASSERT_EQ(t, tasks[taken % pool]) << "pushed " << pushed;
        ++taken;
      }
    } else {
      std::uint32_t stolen = 0;
      std::uint64_t len = pushed - taken;
      task_header* t = q.steal_into(thief, &stolen);
      ASSERT_EQ(stolen, len - len / 2);
      if (len == 0) {
        ASSERT_EQ(t, nullptr);
        continue;
      }
      ASSERT_EQ(t, tasks[(taken + stolen - 1) % pool]);
      for (std::uint32_t j = 0; j + 1 < stolen; ++j) {
        ASSERT_EQ(thief.pop(), tasks[(taken + j) % pool]);
      }
      ASSERT_EQ(thief.pop(), nullptr);
      taken += stolen;
    }
    ASSERT_EQ(q.len(), pushed - taken);
    ASSERT_EQ(q.remaining_slots(), 256 - (pushed - taken));
  }
  EXPECT_TRUE(g.is_empty());
}

// One owner pushing and popping while stealers take halves into their own
// rings (and steal from each other); overflows go to a shared global queue
// that stealers also drain. Every task must come out exactly once.
std::uint64_t concurrent_round(int stealers, std::size_t n, std::uint32_t seed) {
  fake_tasks tasks(n);
  std::unique_ptr<std::atomic<std::uint32_t>[]> seen(new std::atomic<std::uint32_t>[n]);
  for (std::size_t i = 0; i < n; ++i)
    seen[i].store(0, std::memory_order_relaxed);
  std::atomic<std::size_t> bad{0};
  auto mark = [&](task_header* t) {
    if (!tasks.owns(t)) {
      bad.fetch_add(1);
      return;
    }
    seen[tasks.index(t)].fetch_add(1, std::memory_order_relaxed);
  };

  run_queue owner_q;
  global_queue global;
  std::vector<std::unique_ptr<run_queue>> thief_q;
  for (int i = 0; i < stealers; ++i)
    thief_q.push_back(std::make_unique<run_queue>());
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> stolen_total{0};

  std::vector<std::thread> threads;
  for (int j = 0; j < stealers; ++j) {
    threads.emplace_back([&, j] {
      std::mt19937 rng(seed * 31 + static_cast<std::uint32_t>(j));
      run_queue& own = *thief_q[static_cast<std::size_t>(j)];
      std::vector<task_header*> batch(16);
      auto one_pass = [&] {
        run_queue* victim = &owner_q;
        if (stealers > 1 && rng() % 4 == 0) {
          std::size_t v = rng() % static_cast<std::size_t>(stealers);
          if (v != static_cast<std::size_t>(j)) victim = thief_q[v].get();
        }
        std::uint32_t n_stolen = 0;
        if (task_header* t = victim->steal_into(own, &n_stolen)) {
          mark(t);
          stolen_total.fetch_add(n_stolen, std::memory_order_relaxed);
        }
        // Pop part of our own ring now and then, so others can steal from it.
        std::size_t pops = rng() % 8;
        for (std::size_t i = 0; i < pops; ++i) {
          if (task_header* t = own.pop()) mark(t);
        }
        if (rng() % 8 == 0) {
          std::size_t got = global.pop_batch(batch.data(), 1 + rng() % batch.size());
          for (std::size_t i = 0; i < got; ++i)
            mark(batch[i]);
        }
      };
      while (!done.load(std::memory_order_acquire))
        one_pass();
      while (task_header* t = own.pop())
        mark(t);
    });
  }

  std::mt19937 rng(seed);
  std::size_t next = 0;
  while (next < n) {
    std::size_t burst = 1 + rng() % 300;
    for (std::size_t i = 0; i < burst && next < n; ++i)
      (void)owner_q.push_back(tasks[next++], global);
    std::size_t pops = rng() % 200;
    for (std::size_t i = 0; i < pops; ++i) {
      if (task_header* t = owner_q.pop()) mark(t);
    }
    // On a loaded machine the threads may barely overlap: yield now and then
    // so that stealers observe the ring in many different states.
    if (rng() % 4 == 0) std::this_thread::yield();
  }
  done.store(true, std::memory_order_release);
  while (task_header* t = owner_q.pop())
    mark(t);
  for (auto& t : threads)
    t.join();
  for (auto& q : thief_q) {
    while (task_header* t = q->pop())
      mark(t);
  }
  while (task_header* t = global.pop())
    mark(t);

  EXPECT_EQ(bad.load(), 0u) << "a stolen or popped pointer was not a task";
  std::size_t missing = 0;
  std::size_t duplicated = 0;
  std::size_t first_bad = n;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t c = seen[i].load();
    if (c == 0) ++missing;
    if (c > 1) ++duplicated;
    if (c != 1 && first_bad == n) first_bad = i;
  }
  EXPECT_EQ(missing, 0u) << "stealers=" << stealers << " first bad task " << first_bad;
  EXPECT_EQ(duplicated, 0u) << "stealers=" << stealers << " first bad task " << first_bad;
  return stolen_total.load();
}

TEST(RunQueueConcurrent, OwnerAndStealersSeeEveryTaskExactlyOnce) {
  auto const budget =
      spindle_test::under_tsan ? std::chrono::milliseconds(1500) : std::chrono::milliseconds(1000);
  std::size_t const n = static_cast<std::size_t>(spindle_test::scaled(200'000, 5'000));
  std::uint32_t seed = 1;
  for (int stealers = 1; stealers <= 3; ++stealers) {
    auto start = std::chrono::steady_clock::now();
    int rounds = 0;
    std::uint64_t stolen = 0;
    // Time only bounds the number of repetitions, never the outcome.
    do {
      stolen += concurrent_round(stealers, n, seed++);
      ++rounds;
      if (HasFatalFailure() || HasNonfatalFailure()) return;
    } while (std::chrono::steady_clock::now() - start < budget);
    std::printf("stealers=%d: %d rounds of %zu tasks, %llu stolen\n", stealers, rounds, n,
                static_cast<unsigned long long>(stolen));
  }
}

}  // namespace
