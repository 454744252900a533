// spawn_batch (seed 000): runtime::spawn_batch from outside the workers
// with either placement, spindle::spawn_batch from a worker (past a ring's
// capacity), any input range of tasks, the errors, and on the decisions
// (scheduler_core, fake tasks): one queue operation and at most one wake
// for the whole batch, the ring's overflow in one global batch.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <list>
#include <numeric>
#include <system_error>
#include <thread>
#include <vector>

#include "core.hpp"
#include "core_test_support.hpp"
#include "owned_tasks.hpp"
#include "runtime_test_support.hpp"
#include "spindle/channel.hpp"
#include "spindle/dump.hpp"
#include "spindle/runtime.hpp"

namespace {

using spindle::placement;
using spindle::detail::scheduler_core;
using spindle::detail::task_header;
using spindle::detail::worker;

spindle::task<int> square(int i) {
  co_return i* i;
}

TEST(SpawnBatch, FromOutsideWithEitherPlacementReturnsTheHandlesInOrder) {
  for (placement where : {placement::global, placement::p2c}) {
    spindle::runtime rt{{.workers = 2, .placement = where}};
    std::uint64_t const before = rt.stats().total_spawned;
    std::vector<spindle::task<int>> tasks;
    for (int i = 0; i < 500; ++i)
      tasks.push_back(square(i));
    auto handles = rt.spawn_batch(tasks);
    ASSERT_EQ(handles.size(), 500u);
    for (auto const& t : tasks)
      EXPECT_FALSE(t.valid()) << "the batch did not take its tasks";
    for (int i = 0; i < 500; ++i)
      EXPECT_EQ(rt.block_on(std::move(handles[static_cast<std::size_t>(i)])), i * i);
    EXPECT_EQ(rt.stats().total_spawned - before, 500u + 500u);  // the batch and the block_ons
  }
}

spindle::task<long> spawn_batch_inside(int n) {
  // Past the ring's 256 slots: the rest goes to the global queue in one batch.
  // A range that is not a vector (not a view: clang 14 cannot compile
  // libstdc++ 12's views).
  std::list<spindle::task<int>> tasks;
  for (int i = 0; i < n; ++i)
    tasks.push_back(square(i));
  auto handles = spindle::spawn_batch(tasks);
  long sum = 0;
  for (auto& h : handles)
    sum += co_await h;
  co_return sum;
}

spindle::task<void> wait_on(spindle::channel<int>* ch) {
  (void)co_await ch->recv();
}

// Waits until runtime::dump() lists `expected` tasks waiting on a channel,
// each with the spawn site test_spawn_batch.cpp:`line` and a recent spawn
// time.
void expect_dump_names_the_site(spindle::runtime& rt, std::size_t expected, unsigned line) {
  std::size_t seen = 0;
  for (int attempt = 0; attempt < 2000 && seen < expected; ++attempt) {
    spindle::runtime_dump const d = rt.dump();
    seen = 0;
    for (spindle::task_snapshot const& t : d.tasks) {
      if (t.waits_on != spindle::wait_kind::channel) continue;
      EXPECT_NE(std::strstr(t.spawned_at.file, "test_spawn_batch.cpp"), nullptr)
          << t.spawned_at.file;
      EXPECT_EQ(t.spawned_at.line, line);
      EXPECT_LT(t.age, std::chrono::minutes(1));
      ++seen;
    }
    if (seen < expected) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(seen, expected);
}

unsigned const batch_on_worker_line = __LINE__ + 6;
spindle::task<std::vector<spindle::join_handle<void>>> batch_on_worker(spindle::channel<int>* ch,
                                                                       int n) {
  std::vector<spindle::task<void>> tasks;
  for (int i = 0; i < n; ++i)
    tasks.push_back(wait_on(ch));
  co_return spindle::spawn_batch(tasks);
}

// runtime::dump() reports a batch's tasks with the batch's spawn site and a
// spawn time (stamped for each task of the batch before it is published):
// from outside the workers with either placement (the global queue, a
// worker's inbox) and from a worker (its ring).
TEST(SpawnBatch, DumpNamesTheBatchsSpawnSite) {
  for (placement where : {placement::global, placement::p2c}) {
    spindle::channel<int> ch{1};  // outlives the runtime, which destroys the waiting frames
    spindle::runtime rt{{.workers = 2, .placement = where}};
    std::vector<spindle::task<void>> tasks;
    for (int i = 0; i < 8; ++i)
      tasks.push_back(wait_on(&ch));
    unsigned const line = __LINE__ + 1;
    auto handles = rt.spawn_batch(tasks);
    expect_dump_names_the_site(rt, handles.size(), line);
    for (auto& h : handles)
      h.abort();
  }
  spindle::channel<int> ch{1};
  spindle::runtime rt{{.workers = 2}};
  auto handles = rt.block_on(rt.spawn(batch_on_worker(&ch, 8)));
  ASSERT_EQ(handles.size(), 8u);
  expect_dump_names_the_site(rt, handles.size(), batch_on_worker_line);
  for (auto& h : handles)
    h.abort();
}

TEST(SpawnBatch, FromAWorkerPastTheRingsCapacity) {
  for (int workers : {1, 2}) {
    spindle::runtime rt{{.workers = static_cast<std::size_t>(workers)}};
    long expected = 0;
    for (long i = 0; i < 1000; ++i)
      expected += i * i;
    EXPECT_EQ(rt.block_on(rt.spawn(spawn_batch_inside(1000))), expected);
    EXPECT_EQ(rt.block_on(rt.spawn(spawn_batch_inside(0))), 0);
  }
}

TEST(SpawnBatch, Errors) {
  spindle::runtime rt{{.workers = 1}};
  std::vector<spindle::task<int>> tasks;
  tasks.push_back(square(1));
  tasks.emplace_back();  // empty
  std::uint64_t const before = rt.stats().total_spawned;
  try {
    static_cast<void>(rt.spawn_batch(tasks));
    FAIL() << "an empty task was accepted";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::make_error_code(std::errc::invalid_argument));
  }
  EXPECT_EQ(rt.stats().total_spawned, before) << "part of a refused batch was spawned";
  std::vector<spindle::task<int>> one;
  one.push_back(square(2));
  try {
    static_cast<void>(spindle::spawn_batch(one));
    FAIL() << "spawn_batch outside a runtime was accepted";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::make_error_code(std::errc::operation_not_permitted));
  }
  EXPECT_TRUE(rt.spawn_batch(std::vector<spindle::task<int>>{}).empty());
}

// ---- the owned lists

// A task suspended off the workers is listed in shard `workers`, which with
// 256 workers or more is past the 256 lists and must wrap (a batch from
// outside went out of bounds once: a runtime of 300 workers).
TEST(SpawnBatch, OwnedListsWrapTheShardIndexOfTheOtherThreads) {
  spindle_test::fake_tasks t(3);
  spindle::detail::owned_tasks lists(301);  // 300 workers and the outside's shard
  std::size_t const outside = 300;
  for (std::size_t i = 0; i < 3; ++i)
    lists.link(t[i], outside);
  EXPECT_EQ(lists.listed(), 3u) << "the tasks went to a list that does not exist";
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(t[i]->listed);
    EXPECT_EQ(t[i]->owned_list, outside % spindle::detail::owned_tasks::max_shards);
  }
  lists.remove(t[1]);
  EXPECT_EQ(lists.listed(), 2u);
  std::size_t popped = 0;
  while (lists.pop_any() != nullptr)
    ++popped;
  EXPECT_EQ(popped, 2u);
}

// The gate of the spawns from outside: a batch enters as one, is counted,
// and is refused whole once closed.
TEST(SpawnBatch, TheGateTakesABatchWholeAndRefusesItOnceClosed) {
  spindle::detail::owned_tasks lists(3);
  ASSERT_TRUE(lists.enter(3));
  lists.leave(3);
  ASSERT_TRUE(lists.enter(1));
  lists.leave(1);
  EXPECT_EQ(lists.spawned_from_outside(), 4u);
  lists.close();
  EXPECT_TRUE(lists.closed());
  EXPECT_FALSE(lists.is_accepting());
  EXPECT_FALSE(lists.enter(5)) << "a closed gate took a batch";
  EXPECT_FALSE(lists.enter(1));
  EXPECT_EQ(lists.spawned_from_outside(), 4u) << "a refused spawn stayed counted";
  lists.close();  // again: returns at once
}

// close() returns only once every spawn inside the gate has left: its
// task is queued before the workers stop, so shutdown finds it.
TEST(SpawnBatch, CloseWaitsForTheSpawnsInsideTheGate) {
  spindle::detail::owned_tasks lists(3);
  ASSERT_TRUE(lists.enter(2));
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    lists.close();
    closed.store(true);
  });
  // The flag is up at once (closed() reads true only after the gate's bit
  // is set): later spawns are refused while close() waits.
  while (!lists.closed())
    std::this_thread::yield();
  EXPECT_FALSE(lists.enter(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(closed.load()) << "close() returned while a spawn was inside the gate";
  lists.leave(2);
  closer.join();
  EXPECT_TRUE(closed.load());
}

// ---- the decisions

void park_all(scheduler_core& core) {
  for (auto& w : core.workers) {
    EXPECT_EQ(core.next_task(w.get()), nullptr);
    ASSERT_TRUE(core.begin_park(w.get()));
  }
}

void link(spindle_test::fake_tasks& t, std::size_t from, std::size_t n) {
  for (std::size_t i = from; i + 1 < from + n; ++i)
    t[i]->next = t[i + 1];
}

TEST(SpawnBatch, FromOutsideOneQueueOperationAndOneWake) {
  for (placement where : {placement::global, placement::p2c}) {
    spindle_test::recording_platform platform;
    spindle_test::fake_tasks t(100);
    scheduler_core core(platform, 4, 128, 1, {}, where);
    park_all(core);
    link(t, 0, 100);
    core.push_remote_batch(t[0], t[99], 100);
    EXPECT_EQ(platform.unparked.size(), 1u) << "one wake for the batch";
    std::size_t in_inboxes = 0, holding = 0;
    for (auto& w : core.workers) {
      in_inboxes += w->remote.len();
      holding += w->remote.len() != 0 ? 1 : 0;
    }
    if (where == placement::p2c) {
      EXPECT_EQ(in_inboxes, 100u);
      EXPECT_EQ(holding, 1u) << "the batch was split between inboxes";
      EXPECT_EQ(core.workers[platform.unparked[0]]->remote.len(), 100u)
          << "the inbox's owner was not the one woken";
    } else {
      EXPECT_EQ(core.inject.len(), 100u);
    }
  }
}

TEST(SpawnBatch, FromAWorkerTheRingThenOneOverflowBatchAndOneWake) {
  spindle_test::recording_platform platform;
  spindle_test::fake_tasks t(400);
  scheduler_core core(platform, 2, 128, 1);
  worker* w0 = core.workers[0].get();
  EXPECT_EQ(core.next_task(core.workers[1].get()), nullptr);
  ASSERT_TRUE(core.begin_park(core.workers[1].get()));
  std::vector<task_header*> batch;
  for (std::size_t i = 0; i < 100; ++i)
    batch.push_back(t[i]);
  core.schedule_local_batch(w0, batch.data(), batch.size());
  EXPECT_EQ(w0->queue.len(), 100u);
  EXPECT_EQ(platform.unparked.size(), 1u);
  // 300 more: 156 fit, the ring's oldest 128 and the 144 left go global in
  // one batch; no second wake (the ring was not empty).
  batch.clear();
  for (std::size_t i = 100; i < 400; ++i)
    batch.push_back(t[i]);
  core.schedule_local_batch(w0, batch.data(), batch.size());
  EXPECT_EQ(w0->queue.len(), 256u - 128u);
  EXPECT_EQ(core.inject.len(), 128u + 144u);
  EXPECT_EQ(w0->counters.overflows.get(), 1u);
  // Order: the global queue holds the ring's oldest, then the batch's rest.
  task_header* out[4] = {};
  ASSERT_EQ(core.inject.pop_batch(out, 1), 1u);
  EXPECT_EQ(out[0], t[0]);
  std::vector<task_header*> ring;
  while (task_header* x = w0->queue.pop())
    ring.push_back(x);
  ASSERT_EQ(ring.size(), 128u);
  EXPECT_EQ(ring.front(), t[128]);
  EXPECT_EQ(ring.back(), t[255]);
}

}  // namespace
