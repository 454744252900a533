// Tests of the per-thread frame pools (runtime/src/frame_pool.cpp).
//
// The global operator new/delete are replaced in this binary to count the
// calls a thread makes while it has counting switched on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/detail/frame_pool.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/runtime.hpp"

// ThreadSanitizer's runtime defines operator new itself: no replacement
// there, and the tests that count calls are skipped.
#if defined(__SANITIZE_THREAD__)
#define SPINDLE_TEST_REPLACE_NEW 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SPINDLE_TEST_REPLACE_NEW 0
#endif
#endif
#ifndef SPINDLE_TEST_REPLACE_NEW
#define SPINDLE_TEST_REPLACE_NEW 1
#endif

namespace {
constexpr bool counting_available = SPINDLE_TEST_REPLACE_NEW != 0;
thread_local bool t_counting = false;
std::atomic<long> g_news{0};
std::atomic<long> g_deletes{0};
}  // namespace

#if SPINDLE_TEST_REPLACE_NEW
// noinline: GCC would otherwise see malloc paired with operator delete at
// call sites and warn (-Wmismatched-new-delete).
[[gnu::noinline]] void* operator new(std::size_t bytes) {
  if (t_counting) g_news.fetch_add(1, std::memory_order_relaxed);
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
[[gnu::noinline]] void operator delete(void* p) noexcept {
  if (p != nullptr && t_counting) g_deletes.fetch_add(1, std::memory_order_relaxed);
  std::free(p);
}
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept {
  ::operator delete(p);
}
#endif

namespace {

using spindle::detail::frame_allocate;
using spindle::detail::frame_deallocate;
using spindle::detail::frame_pool_counters;
using spindle::detail::frame_pool_thread_counters;

/// Counts operator new/delete calls of the current thread within its scope.
struct counting_scope {
  long news0 = g_news.load();
  long deletes0 = g_deletes.load();
  counting_scope() { t_counting = true; }
  ~counting_scope() { t_counting = false; }
  [[nodiscard]] long news() const { return g_news.load() - news0; }
  [[nodiscard]] long deletes() const { return g_deletes.load() - deletes0; }
};

/// Runs `fn` on a fresh thread, so that it starts with an empty pool.
template <class Fn>
void on_fresh_thread(Fn fn) {
  std::thread t(fn);
  t.join();
}

// Classes: 8-byte steps up to 512 bytes, then 64-byte steps up to 4096.
void expect_shared_class(std::size_t first, std::size_t last) {
  on_fresh_thread([first, last] {
    frame_pool_counters c0 = frame_pool_thread_counters();
    void* p = frame_allocate(first);
    frame_pool_counters c1 = frame_pool_thread_counters();
    EXPECT_EQ(c1.pool_misses, c0.pool_misses + 1);
    EXPECT_EQ(c1.pool_hits, c0.pool_hits);
    frame_deallocate(p, first);

    // first..last share a class: the freed block comes back.
    void* q = frame_allocate(last);
    EXPECT_EQ(q, p) << first << ".." << last;
    frame_pool_counters c2 = frame_pool_thread_counters();
    EXPECT_EQ(c2.pool_hits, c1.pool_hits + 1);
    EXPECT_EQ(c2.pool_misses, c1.pool_misses);

    // The next class does not get it.
    void* r = frame_allocate(last + 1);
    EXPECT_NE(r, p);
    EXPECT_EQ(frame_pool_thread_counters().pool_misses, c2.pool_misses + 1);
    frame_deallocate(r, last + 1);
    frame_deallocate(q, last);
  });
}

TEST(FramePool, ReusesAFreedBlockOfTheSameClass) {
  expect_shared_class(1, 8);
  expect_shared_class(129, 136);
  expect_shared_class(505, 512);
  expect_shared_class(513, 576);
  expect_shared_class(4033, 4096 - 1);
}

TEST(FramePool, SteadyStateIsServedFromThePool) {
  if (!counting_available) GTEST_SKIP() << "operator new cannot be replaced under this sanitizer";
  on_fresh_thread([] {
    std::vector<std::size_t> sizes = {8, 64, 65, 100, 128, 300, 1000, 2048, 4000, 4096};
    // Warm up: one block per class.
    for (std::size_t s : sizes)
      frame_deallocate(frame_allocate(s), s);
    frame_pool_counters c0 = frame_pool_thread_counters();
    counting_scope scope;
    constexpr int rounds = 10'000;
    for (int i = 0; i < rounds; ++i) {
      std::size_t s = sizes[static_cast<std::size_t>(i) % sizes.size()];
      void* p = frame_allocate(s);
      frame_deallocate(p, s);
    }
    frame_pool_counters c1 = frame_pool_thread_counters();
    EXPECT_EQ(c1.pool_hits - c0.pool_hits, static_cast<std::uint64_t>(rounds));
    EXPECT_EQ(c1.pool_misses, c0.pool_misses);
    EXPECT_EQ(scope.news(), 0) << "steady state called operator new";
    EXPECT_EQ(scope.deletes(), 0);
  });
}

TEST(FramePool, SizesOver4096GoToOperatorNew) {
  if (!counting_available) GTEST_SKIP() << "operator new cannot be replaced under this sanitizer";
  on_fresh_thread([] {
    frame_pool_counters c0 = frame_pool_thread_counters();
    counting_scope scope;
    void* p = frame_allocate(4097);
    EXPECT_EQ(scope.news(), 1);
    frame_deallocate(p, 4097);
    EXPECT_EQ(scope.deletes(), 1) << "a large block was cached instead of deleted";
    void* q = frame_allocate(4097);
    EXPECT_EQ(scope.news(), 2) << "a large block was served from a pool";
    frame_deallocate(q, 4097);
    void* big = frame_allocate(1 << 20);
    EXPECT_EQ(scope.news(), 3);
    frame_deallocate(big, 1 << 20);
    EXPECT_EQ(scope.deletes(), 3);
    frame_pool_counters c1 = frame_pool_thread_counters();
    EXPECT_EQ(c1.pool_hits, c0.pool_hits);
    EXPECT_EQ(c1.pool_misses, c0.pool_misses) << "large requests are not pool traffic";

    // 4096 itself is the largest pooled class.
    void* r = frame_allocate(4096);
    frame_deallocate(r, 4096);
    long news = scope.news();
    void* s = frame_allocate(4096);
    EXPECT_EQ(scope.news(), news);
    EXPECT_EQ(s, r);
    frame_deallocate(s, 4096);
  });
}

TEST(FramePool, BlocksFreedOnAnotherThreadJoinThatThreadsPool) {
  constexpr int n = 8;
  std::vector<void*> blocks(n);
  on_fresh_thread([&] {
    for (auto& b : blocks)
      b = frame_allocate(512);
  });
  on_fresh_thread([&] {
    for (void* b : blocks)
      frame_deallocate(b, 512);
    frame_pool_counters c0 = frame_pool_thread_counters();
    std::vector<void*> again;
    again.reserve(n);  // no operator new while counting
    counting_scope scope;
    for (int i = 0; i < n; ++i)
      again.push_back(frame_allocate(512));
    frame_pool_counters c1 = frame_pool_thread_counters();
    EXPECT_EQ(c1.pool_hits - c0.pool_hits, static_cast<std::uint64_t>(n));
    EXPECT_EQ(c1.pool_misses, c0.pool_misses);
    if (counting_available) {
      EXPECT_EQ(scope.news(), 0);
    }
    t_counting = false;
    EXPECT_EQ(std::set<void*>(again.begin(), again.end()),
              std::set<void*>(blocks.begin(), blocks.end()));
    for (void* b : again)
      frame_deallocate(b, 512);
  });
}

TEST(FramePool, AFullMagazineSpillsItsOldestBlocksToTheDepotAndAnEmptyOneRefillsFromIt) {
  // Blocks allocated on one thread and freed on another (a task spawned on
  // one worker and completed on another): the freeing thread keeps 128 per
  // class and hands the rest to the depot 64 at a time, the oldest first; a
  // thread with an empty magazine takes them from there instead of calling
  // operator new.
  spindle::detail::frame_pool_release_depot();
  constexpr std::size_t size = 2000;  // a class no task frame of these tests uses
  constexpr std::size_t kept = 128;
  constexpr std::size_t chains = 10;  // spills of 64
  constexpr std::size_t n = kept + 64 * chains;
  std::vector<void*> blocks(n);
  on_fresh_thread([&] {
    for (auto& b : blocks)
      b = frame_allocate(size);
  });
  on_fresh_thread([&] {
    frame_pool_counters c0 = frame_pool_thread_counters();
    counting_scope scope;
    for (void* b : blocks)
      frame_deallocate(b, size);
    EXPECT_EQ(frame_pool_thread_counters().depot_spills - c0.depot_spills, chains);
    EXPECT_EQ(scope.deletes(), 0) << "blocks went to the system, not the depot";
    EXPECT_EQ(spindle::detail::frame_pool_depot_bytes(), chains * 64 * 2048);
  });  // this thread's 128 blocks go to the system with it
  on_fresh_thread(
      [&] {
        frame_pool_counters c0 = frame_pool_thread_counters();
        std::vector<void*> again;
        again.reserve(n);  // no operator new while counting
        counting_scope scope;
        for (std::size_t i = 0; i < 64 * chains; ++i)
          again.push_back(frame_allocate(size));
        frame_pool_counters c1 = frame_pool_thread_counters();
        EXPECT_EQ(c1.depot_refills - c0.depot_refills, chains);
        EXPECT_EQ(c1.pool_misses, c0.pool_misses);
        if (counting_available) {
          EXPECT_EQ(scope.news(), 0)
              << "an empty magazine called operator new with blocks in the depot";
        }
        t_counting = false;
        EXPECT_EQ(spindle::detail::frame_pool_depot_bytes(), 0u);
        // The depot got the first 64 * chains freed; the freeing thread kept
        // the last 128.
        std::set<void*> const oldest(blocks.begin(), blocks.begin() + 64 * chains);
        for (void* b : again)
          EXPECT_EQ(oldest.count(b), 1u) << "a block that was not among the oldest freed";
        EXPECT_EQ(std::set<void*>(again.begin(), again.end()).size(), again.size());
        for (void* b : again)
          frame_deallocate(b, size);
      });
  spindle::detail::frame_pool_release_depot();
  EXPECT_EQ(spindle::detail::frame_pool_depot_bytes(), 0u);
}

TEST(FramePool, TheDepotIsBounded) {
  if (!counting_available) GTEST_SKIP() << "operator new cannot be replaced under this sanitizer";
  spindle::detail::frame_pool_release_depot();
  std::size_t const capacity = spindle::detail::frame_pool_depot_capacity();
  constexpr std::size_t size = 4096;
  constexpr std::size_t chain_bytes = 64 * size;
  std::size_t const room_chains = capacity / chain_bytes;
  std::size_t const n = 128 + 64 * (room_chains + 8);  // 8 chains more than fit
  std::vector<void*> blocks(n);
  on_fresh_thread([&] {
    for (auto& b : blocks)
      b = frame_allocate(size);
  });
  on_fresh_thread([&] {
    counting_scope scope;
    for (void* b : blocks)
      frame_deallocate(b, size);
    EXPECT_EQ(spindle::detail::frame_pool_depot_bytes(), room_chains * chain_bytes);
    EXPECT_EQ(scope.deletes(), 8 * 64) << "the chains beyond the capacity go to the system";
  });
  spindle::detail::frame_pool_release_depot();
  EXPECT_EQ(spindle::detail::frame_pool_depot_bytes(), 0u);
}

TEST(FramePool, EightByteBlocksGoToTheDepotAsAnyClassDoes) {
  // The depot holds arrays of pointers, so the smallest class (with no room
  // in a block for a link) spills and refills as the others do.
  spindle::detail::frame_pool_release_depot();
  std::vector<void*> blocks(200);
  on_fresh_thread([&] {
    for (auto& b : blocks)
      b = frame_allocate(8);
  });
  on_fresh_thread([&] {
    frame_pool_counters const c0 = frame_pool_thread_counters();
    counting_scope scope;
    for (void* b : blocks)
      frame_deallocate(b, 8);
    EXPECT_EQ(scope.deletes(), 0) << "blocks went to the system, not the depot";
    // Frees 129 and 193 found the magazine full: two spills of 64.
    EXPECT_EQ(frame_pool_thread_counters().depot_spills - c0.depot_spills, 2u);
    EXPECT_EQ(spindle::detail::frame_pool_depot_bytes(), 2u * 64 * 8);
  });
  on_fresh_thread([&] {
    frame_pool_counters const c0 = frame_pool_thread_counters();
    std::vector<void*> again;
    for (int i = 0; i < 128; ++i)
      again.push_back(frame_allocate(8));
    EXPECT_EQ(frame_pool_thread_counters().depot_refills - c0.depot_refills, 2u);
    EXPECT_EQ(spindle::detail::frame_pool_depot_bytes(), 0u);
    std::set<void*> const oldest(blocks.begin(), blocks.begin() + 128);
    for (void* b : again)
      EXPECT_EQ(oldest.count(b), 1u) << "a block that was not among the oldest freed";
    for (void* b : again)
      frame_deallocate(b, 8);
  });
  spindle::detail::frame_pool_release_depot();
  EXPECT_EQ(spindle::detail::frame_pool_depot_bytes(), 0u);
}

TEST(FramePool, CachedBlocksAreReleasedWhenTheThreadExits) {
  if (!counting_available) GTEST_SKIP() << "operator new cannot be replaced under this sanitizer";
  long deletes_before = g_deletes.load();
  on_fresh_thread([] {
    std::vector<void*> blocks;
    for (int i = 0; i < 20; ++i)
      blocks.push_back(frame_allocate(1024));
    for (void* b : blocks)
      frame_deallocate(b, 1024);
    t_counting = true;  // stays on through the thread's exit
  });
  // At least the 20 cached blocks (thread exit may delete more: its own state).
  EXPECT_GE(g_deletes.load() - deletes_before, 20);
}

TEST(FramePool, MissesOfA16ByteClassAreCarvedFromSlabsWithoutOperatorNew) {
  // 112 bytes: a task with a 64-byte header and a 48-byte frame. malloc
  // would give each a 128-byte chunk; a slab gives 112.
  using spindle::detail::frame_pool_slabs;
  static constexpr std::size_t size = 112;
  static constexpr std::size_t per_slab = (64 * 1024 - 16) / size;  // 585
  static constexpr std::size_t n = 2 * per_slab + 10;               // three slabs
  on_fresh_thread([] {
    std::vector<void*> blocks;
    blocks.reserve(n);
    std::uint64_t const taken0 = frame_pool_slabs().taken;
    frame_pool_counters const c0 = frame_pool_thread_counters();
    {
      counting_scope scope;
      for (std::size_t i = 0; i < n; ++i)
        blocks.push_back(frame_allocate(size));
      if (counting_available) {
        EXPECT_EQ(scope.news(), 0) << "a carved class called operator new";
      }
    }
    EXPECT_EQ(frame_pool_slabs().taken - taken0, 3u);
    EXPECT_EQ(frame_pool_thread_counters().pool_misses - c0.pool_misses, n);
    std::set<void*> const distinct(blocks.begin(), blocks.end());
    EXPECT_EQ(distinct.size(), n);
    for (std::size_t i = 0; i < n; ++i) {
      auto const a = reinterpret_cast<std::uintptr_t>(blocks[i]);
      EXPECT_EQ(a % 16, 0u);
      // Carved one after the other: 112 bytes apart within a slab.
      if (i % per_slab != 0) {
        EXPECT_EQ(a - reinterpret_cast<std::uintptr_t>(blocks[i - 1]), size) << i;
      }
      std::memset(blocks[i], static_cast<int>(i & 0xff), size);
    }
    for (std::size_t i = 0; i < n; ++i) {
      auto const* p = static_cast<unsigned char const*>(blocks[i]);
      EXPECT_EQ(p[0], i & 0xff);
      EXPECT_EQ(p[size - 1], i & 0xff);
    }
    for (void* b : blocks)
      frame_deallocate(b, size);
  });
}

TEST(FramePool, ASlabGoesBackOnceAllItsBlocksDo) {
  // 496 bytes: a class no task of these tests uses. 132 blocks per slab;
  // 400 blocks take four slabs, the last one carved 4 blocks deep.
  using spindle::detail::frame_pool_slabs;
  spindle::detail::frame_pool_release_depot();
  constexpr std::size_t size = 496;
  constexpr std::size_t n = 400;
  std::vector<void*> blocks(n);
  spindle::detail::frame_pool_slab_counters const s0 = frame_pool_slabs();
  on_fresh_thread([&] {
    for (auto& b : blocks)
      b = frame_allocate(size);
  });
  // The carving thread is gone: its slabs' uncarved rest counts as back,
  // but every block is still out.
  EXPECT_EQ(frame_pool_slabs().taken - s0.taken, 4u);
  EXPECT_EQ(frame_pool_slabs().returned, s0.returned);
  on_fresh_thread([&] {
    // Freed on another thread: 128 stay in its magazine, the rest go to the
    // depot 64 at a time (none back yet).
    for (void* b : blocks)
      frame_deallocate(b, size);
    EXPECT_EQ(frame_pool_slabs().returned, s0.returned);
  });  // its list goes back to the slabs
  EXPECT_LT(frame_pool_slabs().returned - s0.returned, 4u) << "the depot still holds blocks";
  spindle::detail::frame_pool_release_depot();
  EXPECT_EQ(frame_pool_slabs().returned - s0.returned, 4u);
  // A recycled slab is carved again (its range reused, its pages zero).
  on_fresh_thread([&] {
    void* b = frame_allocate(size);
    EXPECT_EQ(frame_pool_slabs().taken - s0.taken, 5u);
    std::set<std::uintptr_t> old_slabs;
    for (void* o : blocks)
      old_slabs.insert(reinterpret_cast<std::uintptr_t>(o) & ~std::uintptr_t{0xffff});
    EXPECT_EQ(old_slabs.count(reinterpret_cast<std::uintptr_t>(b) & ~std::uintptr_t{0xffff}), 1u)
        << "a fresh range was taken while recycled ones waited";
    frame_deallocate(b, size);
  });
}

TEST(FramePool, BlocksAreAlignedAndUsable) {
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t s = 0; s <= 5000; s += 37) {
    void* p = frame_allocate(s);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignof(std::max_align_t), 0u) << s;
    std::fill_n(static_cast<unsigned char*>(p), s, static_cast<unsigned char>(s));
    blocks.emplace_back(p, s);
  }
  for (auto const& block : blocks) {
    auto* bytes = static_cast<unsigned char*>(block.first);
    auto fill = static_cast<unsigned char>(block.second);
    EXPECT_TRUE(
        std::all_of(bytes, bytes + block.second, [&](unsigned char c) { return c == fill; }))
        << "blocks overlap (size " << block.second << ")";
  }
  for (auto [p, s] : blocks)
    frame_deallocate(p, s);
}

// docs/design.md: "steady-state spawn/await does not call malloc". One worker, so
// every frame and header is allocated and freed on the same thread.
spindle::task<int> child(int i) {
  co_return i + 1;
}

spindle::task<long> spawn_await_loop(int warmup, int measured, long* news) {
  long sum = 0;
  for (int i = 0; i < warmup; ++i)
    sum += co_await spindle::spawn(child(i));
  {
    counting_scope scope;
    for (int i = 0; i < measured; ++i)
      sum += co_await spindle::spawn(child(i));
    *news = scope.news();
  }
  co_return sum;
}

TEST(FramePool, SteadyStateSpawnAwaitDoesNotCallOperatorNew) {
  if (!counting_available) GTEST_SKIP() << "operator new cannot be replaced under this sanitizer";
  spindle::runtime rt{{.workers = 1}};
  long news = -1;
  constexpr int warmup = 1000;
  constexpr int measured = 10'000;
  long sum = spindle_test::run_on_worker(rt, spawn_await_loop(warmup, measured, &news));
  long expected = 0;
  for (int i = 0; i < warmup; ++i)
    expected += i + 1;
  for (int i = 0; i < measured; ++i)
    expected += i + 1;
  EXPECT_EQ(sum, expected);
  EXPECT_EQ(news, 0) << "operator new calls in " << measured << " spawn+await iterations";
}

// A spawned task's header lives in front of its frame, in the same block:
// a spawn+await pair takes exactly one block from the pool (the child's frame
// with its header), not two.
spindle::task<std::uint64_t> count_blocks_per_pair(int pairs) {
  for (int i = 0; i < 100; ++i)
    co_await spindle::spawn(child(i));  // warm up
  frame_pool_counters c0 = frame_pool_thread_counters();
  long sum = 0;
  for (int i = 0; i < pairs; ++i)
    sum += co_await spindle::spawn(child(i));
  frame_pool_counters c1 = frame_pool_thread_counters();
  EXPECT_GT(sum, 0);
  co_return (c1.pool_hits + c1.pool_misses) - (c0.pool_hits + c0.pool_misses);
}

TEST(TaskFrame, ASpawnTakesOneBlockForHeaderAndFrame) {
  spindle::runtime rt{{.workers = 1}};
  constexpr int pairs = 1000;
  EXPECT_EQ(spindle_test::run_on_worker(rt, count_blocks_per_pair(pairs)),
            static_cast<std::uint64_t>(pairs));
}

// A spawned task's block goes back to the pool under its own size class:
// the header keeps no size, so the frame's deallocation leaves it where the
// frame was and scheduler::free_task reads it there. Freed on the worker, the
// block is the one the next spawn of the same coroutine gets, both after a
// task that finished and after one whose frame was destroyed early (abort).
// (The next spawn, not an unspawned frame: clang may size the frames of one
// coroutine differently at two call sites.)
spindle::task<int> reuse_after_free() {
  int reused = 0;
  void* previous = nullptr;
  for (int round = 0; round < 3; ++round) {
    auto handle = spindle::spawn(child(round));
    void* header = handle.header();
    if (previous != nullptr && header == previous) ++reused;
    previous = header;
    if (round != 1) {
      (void)co_await handle;
    } else {
      handle.abort();
      try {
        (void)co_await handle;
      } catch (spindle::task_cancelled const&) {
      }
    }
    handle = {};
    // A queue entry left behind by an inline poll (a stale LIFO entry) may
    // still hold a reference: yielding lets the worker pop it, so that the
    // block is back in this worker's pool before the next spawn.
    co_await spindle::yield_now{};
    co_await spindle::yield_now{};
  }
  co_return reused;
}

TEST(TaskFrame, AFreedTaskGivesItsBlockBackUnderItsSize) {
  spindle::runtime rt{{.workers = 1}};
  EXPECT_EQ(spindle_test::run_on_worker(rt, reuse_after_free()), 2);
}

// Out of line: a frame created and destroyed in one function may be put on
// the stack by clang (coroutine allocation elision), without operator new.
[[gnu::noinline]] std::coroutine_handle<> unspawned_frame() {
  return child(1).release();
}

TEST(TaskFrame, HeaderRoomIsInFrontOfEveryFrame) {
  using spindle::detail::task_frame_prefix;
  using spindle::detail::task_header;
  on_fresh_thread([] {
    std::coroutine_handle<> frame = unspawned_frame();
    void* address = frame.address();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(address) % alignof(std::max_align_t), 0u);
    task_header* header = task_header::of_frame(address);
    // The pool's block starts at the header and covers the frame.
    EXPECT_EQ(header->state.load(), 0u) << "an unspawned frame has an empty header";
    EXPECT_EQ(header->frame_address(), static_cast<char*>(address));
    frame_pool_counters c0 = frame_pool_thread_counters();
    frame.destroy();  // an unspawned frame gives its whole block back
    // The next frame of the same size takes the same block, header and all.
    std::coroutine_handle<> again = unspawned_frame();
    EXPECT_EQ(again.address(), address);
    EXPECT_EQ(frame_pool_thread_counters().pool_hits, c0.pool_hits + 1);
    again.destroy();
  });
}

}  // namespace
