// The LIFO slot (runtime/src/lifo_slot.hpp), with membarrier and with the
// owner's fence (its fallback):
//  - one thread: put, peek, take, take_if and replace; a rescue takes the
//    task and the owner's next take finds nothing; a rescue of an empty
//    slot leaves a record that the owner settles (it keeps its task); a
//    second rescue waits until the owner settled the first;
//  - an owner thread filling and emptying the slot in every way while two
//    rescuers keep rescuing, with a handful of task objects reused as soon
//    as they are released (a rescued task's block coming back as a new
//    task): every task put in is taken exactly once, by the owner or by a
//    rescuer.
#include "lifo_slot.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"

namespace {

using spindle_test::scaled;

struct item {
  std::atomic<bool> busy{false};  // in the slot, or held by whoever took it
  std::atomic<int> takers{0};     // takes of this incarnation
};

using slot_t = spindle::detail::basic_lifo_slot<item>;

// Widens the owner's window between reading the slot and emptying it, now
// and then by a few microseconds (a rescuer's membarrier takes about as
// long): rescues land inside it, where only the owner's look at the rescue
// record keeps both from running the task.
struct wide_window {
  static inline thread_local std::uint64_t rng = 0x9e3779b97f4a7c15ULL;
  static void owner_window() noexcept {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    if (rng % 8 != 0) return;
    auto const until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng % 16);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
};
using wide_slot_t = spindle::detail::basic_lifo_slot<item, wide_window>;

class LifoSlot : public ::testing::TestWithParam<bool> {};  // owner fences?

TEST_P(LifoSlot, TheOwnersOperationsOnOneThread) {
  slot_t slot(GetParam());
  item a, b;
  EXPECT_EQ(slot.peek(), nullptr);
  EXPECT_EQ(slot.take(), nullptr);
  slot.put(&a);
  EXPECT_EQ(slot.peek(), &a);
  EXPECT_FALSE(slot.take_if(&b));
  EXPECT_EQ(slot.peek(), &a);
  EXPECT_EQ(slot.replace(&b), &a);
  EXPECT_EQ(slot.peek(), &b);
  EXPECT_TRUE(slot.take_if(&b));
  EXPECT_EQ(slot.peek(), nullptr);
  EXPECT_EQ(slot.replace(&a), nullptr);
  EXPECT_EQ(slot.take(), &a);
  EXPECT_EQ(slot.take(), nullptr);
}

TEST_P(LifoSlot, ARescueTakesTheTaskOnceAndTheOwnerSettlesItsRecord) {
  slot_t slot(GetParam());
  item a, b;
  slot.put(&a);
  EXPECT_EQ(slot.rescue(), &a);
  EXPECT_EQ(slot.peek(), nullptr);
  EXPECT_EQ(slot.take(), nullptr) << "the owner took a rescued task";
  // Not settled yet: a second rescue gets nothing, even from a full slot.
  slot.put(&b);  // settles the first record
  EXPECT_EQ(slot.rescue(), &b);
  EXPECT_FALSE(slot.take_if(&b));
  // A rescue of an empty slot leaves a record saying it took nothing: the
  // owner's next take settles it and keeps its task.
  slot.put(&a);
  EXPECT_TRUE(slot.take_if(&a));
  EXPECT_EQ(slot.rescue(), nullptr);
  slot.put(&a);  // settles
  EXPECT_EQ(slot.take(), &a);
  // The record is settled by a take, too: a rescue is possible again.
  slot.put(&b);
  EXPECT_EQ(slot.rescue(), &b);
  EXPECT_EQ(slot.replace(&a), nullptr);  // the take finds nothing, the put settles
  EXPECT_EQ(slot.rescue(), &a);
  slot.put(&b);
  EXPECT_EQ(slot.take(), &b);
}

TEST_P(LifoSlot, AgainstRescuersEveryTaskIsTakenExactlyOnce) {
  if (!GetParam() && !spindle::detail::lifo_membarrier_available()) {
    GTEST_SKIP() << "membarrier is not available here (or SPINDLE_LIFO_MEMBARRIER=0)";
  }
  wide_slot_t slot(GetParam());
  std::array<item, 4> items;
  int const puts = static_cast<int>(scaled(60000, 4000));
  std::atomic<bool> stop{false};
  std::atomic<long> doubles{0};
  std::atomic<long> rescued{0};
  auto take_it = [&](item* x) {
    if (x->takers.fetch_add(1, std::memory_order_relaxed) != 0) doubles.fetch_add(1);
    x->busy.store(false, std::memory_order_release);  // the block may come back
  };
  std::vector<std::thread> rescuers;
  for (int r = 0; r < 2; ++r) {
    rescuers.emplace_back([&] {
      while (!stop.load(std::memory_order_acquire)) {
        if (item* x = slot.rescue()) {
          rescued.fetch_add(1, std::memory_order_relaxed);
          take_it(x);
        }
      }
    });
  }
  long owner_took = 0;
  std::uint64_t rng = 0x2545f4914f6cdd1dULL;
  for (int i = 0; i < puts; ++i) {
    item* x = &items[static_cast<std::size_t>(i) % items.size()];
    while (x->busy.load(std::memory_order_acquire)) {
    }
    x->takers.store(0, std::memory_order_relaxed);
    x->busy.store(true, std::memory_order_relaxed);
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    // Fill: put into the empty slot, or displace what is there.
    item* displaced = nullptr;
    if (slot.peek() == nullptr) {
      slot.put(x);
    } else {
      displaced = slot.replace(x);
    }
    if (displaced != nullptr) {
      ++owner_took;
      take_it(displaced);
    }
    for (std::uint64_t k = rng % 64; k > 0; --k) {
      std::atomic_signal_fence(std::memory_order_seq_cst);
    }
    // Empty it now, or leave it for the next round's displacement.
    switch (rng % 4) {
      case 0:
        if (item* t = slot.take()) {
          ++owner_took;
          take_it(t);
        }
        break;
      case 1:
        if (slot.take_if(x)) {
          ++owner_took;
          take_it(x);
        }
        break;
      case 2:
        // As the runtime's join_detach: out, a look, and back in.
        if (slot.take_if(x)) slot.put(x);
        break;
      default:
        if (rng % 16 == 3) {
          // A stall with the task in the slot, as rescues are meant for:
          // long enough for a rescuer's membarrier.
          auto const until = std::chrono::steady_clock::now() + std::chrono::microseconds(30);
          while (std::chrono::steady_clock::now() < until) {
          }
        }
        break;
    }
  }
  if (item* t = slot.take()) {
    ++owner_took;
    take_it(t);
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : rescuers)
    t.join();
  // One more rescue may have been in flight when the owner's last take ran.
  if (item* t = slot.take()) {
    ++owner_took;
    take_it(t);
  }
  std::printf("%d tasks: %ld taken by the owner, %ld rescued\n", puts, owner_took, rescued.load());
  EXPECT_EQ(doubles.load(), 0) << "a task was taken twice";
  EXPECT_EQ(owner_took + rescued.load(), puts) << "a task was lost";
  EXPECT_GT(rescued.load(), 0) << "no rescue happened: the test proves nothing";
  EXPECT_GT(owner_took, 0);
  for (item& x : items)
    EXPECT_FALSE(x.busy.load()) << "a task was never taken";
}

INSTANTIATE_TEST_SUITE_P(Modes, LifoSlot, ::testing::Values(false, true),
                         [](::testing::TestParamInfo<bool> const& info) {
                           return info.param ? std::string("OwnerFences")
                                             : std::string("Membarrier");
                         });

}  // namespace
