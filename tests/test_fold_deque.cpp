// The split deque of a tree fold (runtime/include/spindle/detail/fold_deque.hpp):
//  - one thread: the owner's LIFO pops, nothing stealable until shared, a
//    thief's request shared by the owner's next pop (the older half, at
//    least two private items), the reclaim of the newer half of the public
//    part when the private part runs dry and of the last public item by
//    top (not counted as stolen), growth past the first ring with public
//    items in place;
//  - threads: one share on request that a thief must take (waited for),
//    then an owner that pushes and pops in random runs against three
//    thieves: every item taken exactly once, by the owner or one thief.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/detail/fold_deque.hpp"

namespace {

using deque = spindle::detail::fold_deque<int>;

TEST(FoldDeque, TheOwnerPopsNewestFirstAndThievesGetNothingUntilShared) {
  std::vector<int> items(5);
  deque d;
  for (int i = 0; i < 5; ++i) {
    items[i] = i;
    d.push(&items[i]);
  }
  EXPECT_EQ(d.size(), 5u);
  EXPECT_EQ(d.steal(), nullptr) << "a private item was stolen";
  // The failed steal asked for work: the next pop shares the older half
  // (2 of 5) and returns the newest.
  EXPECT_EQ(d.pop(), &items[4]);
  EXPECT_EQ(d.steal(), &items[0]);
  EXPECT_EQ(d.steal(), &items[1]);
  EXPECT_EQ(d.steal(), nullptr);
  EXPECT_EQ(d.stolen(), 2);
  EXPECT_EQ(d.size(), 2u);
  EXPECT_EQ(d.pop(), &items[3]);
  EXPECT_EQ(d.pop(), &items[2]);
  EXPECT_EQ(d.pop(), nullptr);
  EXPECT_EQ(d.size(), 0u);
  EXPECT_EQ(d.stolen(), 2);
}

TEST(FoldDeque, ARequestWaitsForTwoPrivateItems) {
  std::vector<int> items(3);
  deque d;
  d.push(&items[0]);
  EXPECT_EQ(d.steal(), nullptr);  // asks
  EXPECT_EQ(d.pop(), &items[0]);  // one private item: the owner keeps it
  EXPECT_EQ(d.steal(), nullptr);
  d.push(&items[1]);
  d.push(&items[2]);
  EXPECT_EQ(d.pop(), &items[2]);  // the request stood: items[1] is shared
  EXPECT_EQ(d.steal(), &items[1]);
  EXPECT_EQ(d.pop(), nullptr);
}

TEST(FoldDeque, APopWithNothingPrivateTakesBackTheNewerHalfThenTheLastByTop) {
  std::vector<int> items(4);
  deque d;
  for (int& x : items)
    d.push(&x);
  d.share(4);
  EXPECT_EQ(d.pop(), &items[3]);  // reclaims [2, 4)
  EXPECT_EQ(d.pop(), &items[2]);
  EXPECT_EQ(d.pop(), &items[1]);  // reclaims [1, 2)
  EXPECT_EQ(d.pop(), &items[0]);  // the last one, by top
  EXPECT_EQ(d.pop(), nullptr);
  EXPECT_EQ(d.steal(), nullptr);
  EXPECT_EQ(d.stolen(), 0) << "the owner's take of the last item counted as stolen";
  // Positions moved on: the deque still works from there.
  d.push(&items[0]);
  d.push(&items[1]);
  d.share(1);
  EXPECT_EQ(d.steal(), &items[0]);
  EXPECT_EQ(d.stolen(), 1);
  EXPECT_EQ(d.pop(), &items[1]);
  EXPECT_EQ(d.pop(), nullptr);
}

TEST(FoldDeque, ShareIsBoundedByThePrivateItems) {
  std::vector<int> items(2);
  deque d;
  d.share(3);  // nothing to share
  d.push(&items[0]);
  d.push(&items[1]);
  d.share(100);
  EXPECT_EQ(d.steal(), &items[0]);
  EXPECT_EQ(d.steal(), &items[1]);
  EXPECT_EQ(d.steal(), nullptr);
  EXPECT_EQ(d.pop(), nullptr);
}

TEST(FoldDeque, GrowsPastTheFirstRingWithPublicItemsInPlace) {
  constexpr int n = 5000;  // the first ring holds 256
  std::vector<int> items(n);
  deque d;
  int stolen = 0;
  for (int i = 0; i < n; ++i) {
    items[i] = i;
    d.push(&items[i]);
    if (i == 100) d.share(50);  // public items when the ring grows
    if (i == 200) {
      int* x = d.steal();
      ASSERT_NE(x, nullptr);
      EXPECT_EQ(*x, stolen++);
    }
  }
  EXPECT_EQ(d.size(), static_cast<std::size_t>(n - 1));
  for (int i = n - 1; i >= 50; --i) {
    int* x = d.pop();
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(*x, i);
  }
  // The rest is public: thieves take it oldest first, the owner newest.
  for (int i = 1; i < 25; ++i) {
    int* x = d.steal();
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(*x, i);
  }
  for (int i = 49; i >= 25; --i) {
    int* x = d.pop();
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(*x, i);
  }
  EXPECT_EQ(d.pop(), nullptr);
  EXPECT_EQ(d.stolen(), 25);
}

// An owner pushes runs of random length and pops runs of random length
// (a fold's walk does both), three thieves steal all the while. Every item
// must be taken exactly once, by the owner or one thief.
TEST(FoldDeque, ThievesAndTheOwnerTakeEveryItemExactlyOnce) {
  int const total = spindle_test::under_tsan ? 60'000 : 1'000'000;
  std::vector<int> ids(static_cast<std::size_t>(total));
  auto taken = std::make_unique<std::atomic<std::uint8_t>[]>(static_cast<std::size_t>(total));
  for (int i = 0; i < total; ++i)
    ids[static_cast<std::size_t>(i)] = i;
  deque d;
  std::atomic<bool> done{false};
  std::atomic<long> by_thieves{0};
  auto take = [&](int* x) {
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(taken[static_cast<std::size_t>(*x)].fetch_add(1, std::memory_order_relaxed), 0)
        << "item " << *x << " taken twice";
  };
  std::atomic<int> ready{0};
  std::vector<std::thread> thieves;
  for (int k = 0; k < 3; ++k) {
    thieves.emplace_back([&] {
      long mine = 0;
      EXPECT_EQ(d.steal(), nullptr);  // nothing yet: asks the owner to share
      ready.fetch_add(1);
      while (!done.load(std::memory_order_acquire)) {
        if (int* x = d.steal()) {
          take(x);
          ++mine;
        } else {
          std::this_thread::yield();
        }
      }
      by_thieves.fetch_add(mine);
    });
  }
  // First, a share that must happen: once every thief has asked, the
  // owner's pop with two private items shares the older one, and the owner
  // waits until a thief took it (then the sharing works, whatever the
  // random part below gets to see on a loaded machine).
  while (ready.load() < 3)
    std::this_thread::yield();
  long by_owner = 0;
  d.push(&ids[0]);
  d.push(&ids[1]);
  take(d.pop());  // ids[1]; ids[0] is public now
  ++by_owner;
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (d.stolen() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(d.stolen(), 1) << "the item shared on request was never stolen";
  std::mt19937 rng(7);
  int next = 2;
  long emptied = 0;
  while (next < total) {
    int push = static_cast<int>(rng() % 300);
    for (int i = 0; i < push && next < total; ++i)
      d.push(&ids[static_cast<std::size_t>(next++)]);
    int pop = static_cast<int>(rng() % 300);
    for (int i = 0; i < pop; ++i) {
      int* x = d.pop();
      if (x == nullptr) {
        ++emptied;
        break;
      }
      take(x);
      ++by_owner;
    }
  }
  while (int* x = d.pop()) {
    take(x);
    ++by_owner;
  }
  EXPECT_EQ(d.size(), 0u);
  // Thieves may still be inside a steal: they can only fail now.
  done.store(true, std::memory_order_release);
  for (auto& t : thieves)
    t.join();
  EXPECT_EQ(by_owner + by_thieves.load(), total);
  EXPECT_EQ(d.stolen(), by_thieves.load());
  EXPECT_GT(by_thieves.load(), 0);
  EXPECT_GT(emptied, 0) << "the owner never found its deque empty";
  for (int i = 0; i < total; ++i)
    ASSERT_EQ(taken[static_cast<std::size_t>(i)].load(), 1) << "item " << i;
}

}  // namespace
