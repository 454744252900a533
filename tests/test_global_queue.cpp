// Tests of the global (inject) queue (runtime/src/global_queue.hpp): an
// intrusive multi-producer FIFO of task headers whose consumers take turns
// under a lock, with counts read without it.
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
#include "runtime_test_support.hpp"

namespace {

using spindle::detail::global_queue;
using spindle::detail::task_chain;
using spindle::detail::task_header;
using spindle_test::fake_tasks;

/// Links tasks[from..to) through `next` and returns {first, last}.
std::pair<task_header*, task_header*> link(fake_tasks const& tasks, std::size_t from,
                                           std::size_t to) {
  for (std::size_t i = from; i + 1 < to; ++i)
    tasks[i]->next = tasks[i + 1];
  tasks[to - 1]->next = reinterpret_cast<task_header*>(0x1);  // push_batch must terminate it
  return {tasks[from], tasks[to - 1]};
}

TEST(GlobalQueue, StartsEmpty) {
  global_queue q;
  EXPECT_TRUE(q.is_empty());
  EXPECT_EQ(q.len(), 0u);
  EXPECT_EQ(q.pop(), nullptr);
  task_header* out[4] = {};
  EXPECT_EQ(q.pop_batch(out, 4), 0u);
  EXPECT_EQ(out[0], nullptr);
}

TEST(GlobalQueue, PushPopIsFifo) {
  fake_tasks tasks(50);
  global_queue q;
  for (std::size_t i = 0; i < 50; ++i) {
    q.push(tasks[i]);
    EXPECT_EQ(q.len(), i + 1);
  }
  for (std::size_t i = 0; i < 50; ++i) {
    task_header* t = q.pop();
    ASSERT_EQ(t, tasks[i]);
    EXPECT_EQ(t->next, nullptr) << "popped task keeps a stale link";
    EXPECT_EQ(q.len(), 49 - i);
  }
  EXPECT_TRUE(q.is_empty());
  EXPECT_EQ(q.pop(), nullptr);
}

// A task_chain (a run queue's overflow): chunks that hold the tasks'
// pointers; consumers take their tasks in order across takes, between the
// linked tasks pushed before and after them, and for_each sees what is left.
TEST(GlobalQueue, AChainOfChunksIsTakenInOrderAcrossTakes) {
  fake_tasks tasks(140);
  global_queue q;
  q.push(tasks[0]);
  task_chain chain;
  for (std::size_t i = 1; i <= 129; ++i)
    chain.append(tasks[i]);
  ASSERT_EQ(chain.first(), chain.last()) << "129 tasks fill one chunk";
  q.push_chain(chain);
  q.push(tasks[130]);
  EXPECT_EQ(q.len(), 131u);
  std::vector<task_header*> got(140, nullptr);
  ASSERT_EQ(q.pop_batch(got.data(), 50), 50u);
  for (std::size_t i = 0; i < 50; ++i)
    EXPECT_EQ(got[i], tasks[i]) << i;
  EXPECT_EQ(q.len(), 81u);
  std::vector<task_header*> seen;
  q.for_each([&](task_header* t) { seen.push_back(t); });
  ASSERT_EQ(seen.size(), 81u);
  for (std::size_t i = 0; i < 81; ++i)
    EXPECT_EQ(seen[i], tasks[50 + i]) << i;
  ASSERT_EQ(q.pop_batch(got.data(), 60), 60u);
  for (std::size_t i = 0; i < 60; ++i)
    EXPECT_EQ(got[i], tasks[50 + i]) << i;
  ASSERT_EQ(q.pop_batch(got.data(), 100), 21u);
  for (std::size_t i = 0; i < 21; ++i) {
    EXPECT_EQ(got[i], tasks[110 + i]) << i;
    EXPECT_EQ(got[i]->next, nullptr) << "popped task keeps a stale link";
  }
  EXPECT_TRUE(q.is_empty());
  EXPECT_EQ(q.pop(), nullptr);
  // More than a chunk holds: two chunks, linked, same order; a stale link
  // is cleared.
  tasks[3]->next = tasks[7];
  task_chain big;
  for (std::size_t i = 0; i < 135; ++i)
    big.append(tasks[i]);
  ASSERT_NE(big.first(), big.last());
  EXPECT_EQ(big.count(), 135u);
  q.push_chain(big);
  EXPECT_EQ(q.len(), 135u);
  ASSERT_EQ(q.pop_batch(got.data(), 140), 135u);
  for (std::size_t i = 0; i < 135; ++i) {
    EXPECT_EQ(got[i], tasks[i]) << i;
    EXPECT_EQ(got[i]->next, nullptr) << i;
  }
}

// Past its chunk budget a chain links its tasks (a long backlog in chunks
// costs 8 bytes a task): the first `chunked` go into chunks, the rest
// follow linked, and they come out in order across the two kinds.
TEST(GlobalQueue, AChainPastItsChunkBudgetLinksTheRestInOrder) {
  EXPECT_EQ(task_chain::chunk_room(0), task_chain::chunk_backlog);
  EXPECT_EQ(task_chain::chunk_room(100), task_chain::chunk_backlog - 100);
  EXPECT_EQ(task_chain::chunk_room(task_chain::chunk_backlog), 0u);
  EXPECT_EQ(task_chain::chunk_room(task_chain::chunk_backlog + 5), 0u);
  fake_tasks tasks(300);
  global_queue q;
  tasks[200]->next = tasks[3];  // stale
  task_chain chain(135);
  for (std::size_t i = 0; i < 300; ++i)
    chain.append(tasks[i]);
  EXPECT_EQ(chain.count(), 300u);
  EXPECT_EQ(chain.last(), tasks[299]) << "the tasks past the budget are linked";
  q.push_chain(chain);
  EXPECT_EQ(q.len(), 300u);
  std::vector<task_header*> got(300, nullptr);
  ASSERT_EQ(q.pop_batch(got.data(), 100), 100u);
  ASSERT_EQ(q.pop_batch(got.data() + 100, 200), 200u);
  for (std::size_t i = 0; i < 300; ++i) {
    EXPECT_EQ(got[i], tasks[i]) << i;
    EXPECT_EQ(got[i]->next, nullptr) << i;
  }
  EXPECT_TRUE(q.is_empty());
  // No budget at all: every task linked, as before chunks.
  task_chain linked(0);
  for (std::size_t i = 0; i < 10; ++i)
    linked.append(tasks[i]);
  EXPECT_EQ(linked.first(), tasks[0]);
  EXPECT_EQ(linked.last(), tasks[9]);
  q.push_chain(linked);
  for (std::size_t i = 0; i < 10; ++i)
    ASSERT_EQ(q.pop(), tasks[i]) << i;
  EXPECT_EQ(q.pop(), nullptr);
}

TEST(GlobalQueue, PushBatchAppendsInOrder) {
  fake_tasks tasks(20);
  global_queue q;
  q.push(tasks[0]);
  auto [first, last] = link(tasks, 1, 11);
  q.push_batch(first, last, 10);
  EXPECT_EQ(q.len(), 11u);
  q.push(tasks[11]);
  auto [first2, last2] = link(tasks, 12, 20);
  q.push_batch(first2, last2, 8);
  EXPECT_EQ(q.len(), 20u);
  for (std::size_t i = 0; i < 20; ++i)
    ASSERT_EQ(q.pop(), tasks[i]) << i;
  EXPECT_EQ(q.pop(), nullptr);
}

TEST(GlobalQueue, PushBatchOfOne) {
  fake_tasks tasks(1);
  global_queue q;
  tasks[0]->next = reinterpret_cast<task_header*>(0x1);
  q.push_batch(tasks[0], tasks[0], 1);
  EXPECT_EQ(q.len(), 1u);
  EXPECT_EQ(q.pop(), tasks[0]);
  EXPECT_EQ(q.pop(), nullptr);
}

TEST(GlobalQueue, PopBatchBounds) {
  fake_tasks tasks(10);
  global_queue q;
  for (std::size_t i = 0; i < 10; ++i)
    q.push(tasks[i]);

  task_header* sentinel = tasks[9];
  std::vector<task_header*> out(16, sentinel);
  EXPECT_EQ(q.pop_batch(out.data(), 0), 0u);
  EXPECT_EQ(out[0], sentinel) << "max = 0 wrote to the output";
  EXPECT_EQ(q.len(), 10u);

  std::fill(out.begin(), out.end(), nullptr);
  EXPECT_EQ(q.pop_batch(out.data(), 3), 3u);
  EXPECT_EQ(out[0], tasks[0]);
  EXPECT_EQ(out[1], tasks[1]);
  EXPECT_EQ(out[2], tasks[2]);
  EXPECT_EQ(out[3], nullptr) << "pop_batch wrote past n";
  EXPECT_EQ(q.len(), 7u);

  // Asking for more than there is returns what there is.
  std::fill(out.begin(), out.end(), nullptr);
  EXPECT_EQ(q.pop_batch(out.data(), 16), 7u);
  for (std::size_t i = 0; i < 7; ++i)
    EXPECT_EQ(out[i], tasks[3 + i]);
  EXPECT_EQ(out[7], nullptr);
  EXPECT_EQ(q.len(), 0u);
  EXPECT_TRUE(q.is_empty());
  EXPECT_EQ(q.pop_batch(out.data(), 16), 0u);
}

TEST(GlobalQueue, ReusableAfterDrained) {
  // Draining must reset the tail, or the next push links onto a popped task.
  fake_tasks tasks(6);
  global_queue q;
  for (std::size_t i = 0; i < 3; ++i)
    q.push(tasks[i]);
  task_header* out[3];
  ASSERT_EQ(q.pop_batch(out, 3), 3u);
  q.push(tasks[3]);
  q.push(tasks[4]);
  EXPECT_EQ(q.pop(), tasks[3]);
  q.push(tasks[5]);
  EXPECT_EQ(q.pop(), tasks[4]);
  EXPECT_EQ(q.pop(), tasks[5]);
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_EQ(tasks[2]->next, nullptr);
}

TEST(GlobalQueue, ConcurrentProducersAndConsumersSeeEachItemOnce) {
  constexpr int producers = 3;
  constexpr int consumers = 3;
  std::size_t const per_producer = static_cast<std::size_t>(spindle_test::scaled(200'000, 5'000));
  std::size_t const n = per_producer * producers;
  fake_tasks tasks(n);
  std::unique_ptr<std::atomic<std::uint32_t>[]> seen(new std::atomic<std::uint32_t>[n]);
  for (std::size_t i = 0; i < n; ++i)
    seen[i].store(0);
  global_queue q;
  std::atomic<int> producers_left{producers};
  std::atomic<std::size_t> consumed{0};
  std::atomic<std::size_t> foreign{0};

  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937 rng(static_cast<std::uint32_t>(p) + 1);
      std::size_t base = static_cast<std::size_t>(p) * per_producer;
      std::size_t i = 0;
      while (i < per_producer) {
        if (rng() % 2 == 0) {
          q.push(tasks[base + i]);
          ++i;
        } else {
          std::size_t count = std::min<std::size_t>(1 + rng() % 64, per_producer - i);
          auto [first, last] = link(tasks, base + i, base + i + count);
          q.push_batch(first, last, count);
          i += count;
        }
      }
      producers_left.fetch_sub(1);
    });
  }
  for (int c = 0; c < consumers; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937 rng(static_cast<std::uint32_t>(c) + 100);
      std::vector<task_header*> out(64);
      for (;;) {
        bool finished = producers_left.load() == 0;
        std::size_t got = q.pop_batch(out.data(), 1 + rng() % out.size());
        for (std::size_t i = 0; i < got; ++i) {
          if (!tasks.owns(out[i])) {
            foreign.fetch_add(1);
            continue;
          }
          seen[tasks.index(out[i])].fetch_add(1);
        }
        consumed.fetch_add(got);
        if (got == 0 && finished) break;
      }
    });
  }
  for (auto& t : threads)
    t.join();

  EXPECT_EQ(foreign.load(), 0u);
  EXPECT_EQ(consumed.load(), n);
  EXPECT_TRUE(q.is_empty());
  EXPECT_EQ(q.len(), 0u);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    bad += seen[i].load() != 1;
  EXPECT_EQ(bad, 0u) << "items not seen exactly once";
}

TEST(GlobalQueue, APushNeverWaitsForAConsumer) {
  // A consumer holds the consumers' lock (for_each's callback, as a take's
  // walk would) until a push from another thread has returned: a push that
  // took the lock would wait for it, and the consumer gives up after 10 s.
  fake_tasks tasks(3);
  global_queue q;
  q.push(tasks[0]);
  std::atomic<bool> pushed{false};
  std::atomic<bool> inside{false};
  bool saw_push = false;
  std::thread consumer([&] {
    q.for_each([&](task_header*) {
      inside.store(true);
      auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!pushed.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      saw_push = pushed.load();
    });
  });
  while (!inside.load())
    std::this_thread::yield();
  q.push(tasks[1]);
  auto [first, last] = link(tasks, 2, 3);
  q.push_batch(first, last, 1);
  pushed.store(true);
  consumer.join();
  EXPECT_TRUE(saw_push) << "a push waited for the consumer's lock";
  EXPECT_EQ(q.len(), 3u);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(q.pop(), tasks[i]);
}

TEST(GlobalQueue, LenNeverExceedsPushedDuringConcurrentUse) {
  // len() is read without the lock; it must stay within [0, pushed].
  constexpr std::size_t n = 20'000;
  fake_tasks tasks(n);
  global_queue q;
  std::atomic<bool> done{false};
  std::atomic<std::size_t> max_seen{0};
  std::thread reader([&] {
    while (!done.load()) {
      std::size_t l = q.len();
      if (l > max_seen.load()) max_seen.store(l);
    }
  });
  for (std::size_t i = 0; i < n; ++i) {
    q.push(tasks[i]);
    if (i % 3 == 0) (void)q.pop();
  }
  done.store(true);
  reader.join();
  EXPECT_LE(max_seen.load(), n);
  std::size_t left = 0;
  while (q.pop() != nullptr)
    ++left;
  EXPECT_EQ(left, n - (n + 2) / 3);
}

}  // namespace
