// Tests of spindle::rwlock and its guards: shared and exclusive semantics,
// misuse, reader/writer invariants under contention from every worker and
// plain threads, fairness (a waiting writer blocks new readers; readers
// queued together are admitted together; a writer is not starved by a
// stream of readers), unlocking from outside the runtime, cancellation
// (an aborted writer admits the readers behind it, a lock handed to an
// aborted task is given back, the race of both), runtime shutdown and
// cross-worker wakes.
#include "spindle/rwlock.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/event.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "sync_test_support.hpp"

namespace {

using spindle::join_handle;
using spindle::rwlock;
using spindle::rwlock_read_guard;
using spindle::rwlock_write_guard;
using spindle::task;
using spindle_test::counts;
using spindle_test::scaled;
using spindle_test::tracked;
using spindle_test::wait_and_take;
using sync_test::ended_cancelled;
using sync_test::system_error_of;
using sync_test::wait_for_waiters;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

task<void> read_then_flag(rwlock* rw, [[maybe_unused]] tracked local, std::atomic<int>* done) {
  auto guard = co_await rw->lock_shared();
  done->fetch_add(1);
}

task<void> write_then_flag(rwlock* rw, [[maybe_unused]] tracked local, std::atomic<int>* done) {
  auto guard = co_await rw->lock();
  done->fetch_add(1);
}

TEST(RwLock, ReadersShareAndWritersExclude) {
  spindle::runtime rt{{.workers = 2}};
  rwlock rw;
  auto body = [](rwlock* rw) -> task<int> {
    int checks = 0;
    {
      auto r1 = co_await rw->lock_shared();
      auto r2 = co_await rw->lock_shared();  // readers share
      checks += r1.owns_lock() && r2.owns_lock();
      checks += !rw->try_lock();
      checks += rw->try_lock_shared();
      rw->unlock_shared();
    }
    {
      auto w = co_await rw->lock();
      checks += !rw->try_lock_shared() && !rw->try_lock();
      rwlock_write_guard moved{std::move(w)};
      checks += !w.owns_lock() && moved.owns_lock();
    }
    checks += rw->try_lock();
    rw->unlock();
    co_return checks;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, body(&rw)), 6);
  EXPECT_EQ(rt.block_on(body(&rw)), 6);
  // Guards adopt and release.
  ASSERT_TRUE(rw.try_lock_shared());
  rwlock_read_guard adopted{rw, std::adopt_lock};
  EXPECT_EQ(adopted.release(), &rw);
  rw.unlock_shared();
  EXPECT_TRUE(rw.try_lock());
  rw.unlock();
}

TEST(RwLock, MisuseThrowsOperationNotPermitted) {
  rwlock rw;
  EXPECT_EQ(system_error_of([&] { rw.unlock(); }), std::errc::operation_not_permitted);
  EXPECT_EQ(system_error_of([&] { rw.unlock_shared(); }), std::errc::operation_not_permitted);
  std::error_code code;
  sync_test::await_outside_a_task([&] { return rw.lock(); }, &code);
  EXPECT_EQ(code, std::errc::operation_not_permitted);
  EXPECT_TRUE(rw.try_lock()) << "a refused await took the lock";
  rw.unlock();
  spindle::runtime rt{{.workers = 1}};
  auto blocking_inside = [](rwlock* rw) -> task<bool> {
    co_return system_error_of([&] { (void)rw->blocking_lock(); }) ==
        std::errc::operation_not_permitted&& system_error_of(
            [&] { (void)rw->blocking_lock_shared(); }) == std::errc::operation_not_permitted;
  };
  EXPECT_TRUE(spindle_test::run_on_worker(rt, blocking_inside(&rw)));
}

struct guarded {
  rwlock rw;
  long data = 0;  // not atomic: written only under the exclusive lock
  std::atomic<int> readers{0};
  std::atomic<int> writers{0};
  std::atomic<int> violations{0};
  std::atomic<long> writes{0};

  void read() {
    readers.fetch_add(1);
    if (writers.load() != 0) violations.fetch_add(1);
    long seen = data;
    if (seen < 0) violations.fetch_add(1);
    readers.fetch_sub(1);
  }
  void write() {
    if (writers.fetch_add(1) != 0 || readers.load() != 0) violations.fetch_add(1);
    ++data;
    writes.fetch_add(1);
    writers.fetch_sub(1);
  }
};

task<void> mixed(guarded* g, int rounds, int salt) {
  for (int i = 0; i < rounds; ++i) {
    if ((i + salt) % 4 == 0) {
      auto w = co_await g->rw.lock();
      g->write();
      if (i % 3 == 0) co_await spindle::yield_now{};
      g->write();
    } else {
      auto r = co_await g->rw.lock_shared();
      g->read();
      co_await spindle::yield_now{};  // readers overlap
      g->read();
    }
  }
}

TEST(RwLock, InvariantsUnderContentionFromAllWorkersAndThreads) {
  spindle::runtime rt{{.workers = 4}};
  guarded g;
  long const tasks = scaled(1000, 200);
  int const rounds = 8;
  int const thread_rounds = static_cast<int>(scaled(1000, 200));
  std::vector<join_handle<void>> handles;
  for (long i = 0; i < tasks; ++i) {
    handles.push_back(rt.spawn(mixed(&g, rounds, static_cast<int>(i))));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < thread_rounds; ++i) {
        if ((i + t) % 2 == 0) {
          auto w = g.rw.blocking_lock();
          g.write();
        } else {
          auto r = g.rw.blocking_lock_shared();
          g.read();
        }
      }
    });
  }
  for (auto& h : handles) {
    wait_and_take(h);
    spindle_test::progress();
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(g.violations.load(), 0) << "a writer overlapped another holder";
  EXPECT_EQ(g.data, g.writes.load());
  EXPECT_EQ(g.rw.waiter_count(), 0u);
  EXPECT_TRUE(g.rw.try_lock());
  g.rw.unlock();
}

task<void> hold_shared_until(rwlock* rw, std::atomic<int>* inside, spindle::event* release) {
  auto guard = co_await rw->lock_shared();
  inside->fetch_add(1);
  co_await release->wait();
  inside->fetch_sub(1);
}

task<void> hold_exclusive_until(rwlock* rw, std::atomic<int>* inside, spindle::event* release) {
  auto guard = co_await rw->lock();
  inside->fetch_add(1);
  co_await release->wait();
  inside->fetch_sub(1);
}

TEST(RwLock, AWaitingWriterBlocksNewReaders) {
  spindle::runtime rt{{.workers = 2}};
  rwlock rw;
  std::atomic<int> writer_in{0};
  std::atomic<int> readers_in{0};
  spindle::event release_writer;
  spindle::event release_readers;
  ASSERT_TRUE(rw.try_lock_shared());  // a reader holds it
  auto w = rt.spawn(hold_exclusive_until(&rw, &writer_in, &release_writer));
  ASSERT_TRUE(wait_for_waiters(rw, 1));
  EXPECT_FALSE(rw.try_lock_shared()) << "a new reader passed a waiting writer";
  auto r = rt.spawn(hold_shared_until(&rw, &readers_in, &release_readers));
  ASSERT_TRUE(wait_for_waiters(rw, 2));
  EXPECT_EQ(readers_in.load(), 0);
  std::thread([&] { rw.unlock_shared(); }).join();  // from outside the runtime
  ASSERT_TRUE(spindle_test::wait_until([&] { return writer_in.load() == 1; }));
  EXPECT_EQ(readers_in.load(), 0);
  EXPECT_EQ(rw.waiter_count(), 1u);
  release_writer.set();
  ASSERT_TRUE(spindle_test::wait_until([&] { return readers_in.load() == 1; }));
  release_readers.set();
  wait_and_take(w);
  wait_and_take(r);
  EXPECT_TRUE(rw.try_lock());
  rw.unlock();
}

TEST(RwLock, ReadersQueuedTogetherAreAdmittedTogether) {
  spindle::runtime rt{{.workers = 4}};
  rwlock rw;
  std::atomic<int> readers_in{0};
  std::atomic<int> writer_in{0};
  spindle::event release_readers;
  spindle::event release_writer;
  ASSERT_TRUE(rw.try_lock());  // a writer holds it
  auto r1 = rt.spawn(hold_shared_until(&rw, &readers_in, &release_readers));
  ASSERT_TRUE(wait_for_waiters(rw, 1));
  auto r2 = rt.spawn(hold_shared_until(&rw, &readers_in, &release_readers));
  ASSERT_TRUE(wait_for_waiters(rw, 2));
  auto w2 = rt.spawn(hold_exclusive_until(&rw, &writer_in, &release_writer));
  ASSERT_TRUE(wait_for_waiters(rw, 3));
  auto r3 = rt.spawn(hold_shared_until(&rw, &readers_in, &release_readers));
  ASSERT_TRUE(wait_for_waiters(rw, 4));
  rw.unlock();
  // R1 and R2 hold it together; W2 and R3 (behind W2) wait.
  ASSERT_TRUE(spindle_test::wait_until([&] { return readers_in.load() == 2; }));
  EXPECT_EQ(rw.waiter_count(), 2u);
  EXPECT_EQ(writer_in.load(), 0);
  release_readers.set();  // R3 will not wait on it once admitted
  ASSERT_TRUE(spindle_test::wait_until([&] { return writer_in.load() == 1; }));
  EXPECT_EQ(readers_in.load(), 0);
  release_writer.set();
  for (auto* h : {&r1, &r2, &w2, &r3})
    wait_and_take(*h);
  EXPECT_TRUE(rw.try_lock());
  rw.unlock();
}

struct stream_state {
  rwlock rw;
  std::atomic<bool> writer_done{false};
  std::atomic<long> reads{0};
};

task<void> read_until_writer_done(stream_state* s) {
  while (!s->writer_done.load()) {
    auto guard = co_await s->rw.lock_shared();
    s->reads.fetch_add(1);
    co_await spindle::yield_now{};  // readers overlap: the lock is never free
  }
}

task<void> write_once(stream_state* s) {
  auto guard = co_await s->rw.lock();
  s->writer_done.store(true);
}

TEST(RwLock, AStreamOfReadersDoesNotStarveAWriter) {
  spindle::runtime rt{{.workers = 4}};
  stream_state s;
  std::vector<join_handle<void>> readers;
  for (int i = 0; i < 8; ++i)
    readers.push_back(rt.spawn(read_until_writer_done(&s)));
  ASSERT_TRUE(spindle_test::wait_until([&] { return s.reads.load() > 100; }));
  auto w = rt.spawn(write_once(&s));
  wait_and_take(w);  // a hang here (watchdog) would be starvation
  for (auto& h : readers)
    wait_and_take(h);
  EXPECT_TRUE(s.writer_done.load());
}

TEST(RwLock, AbortedWriterAdmitsTheReadersQueuedBehindIt) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  rwlock rw;
  std::atomic<int> writes{0};
  std::atomic<int> reads{0};
  ASSERT_TRUE(rw.try_lock_shared());
  auto w = rt.spawn(write_then_flag(&rw, tracked(c), &writes));
  ASSERT_TRUE(wait_for_waiters(rw, 1));
  auto r = rt.spawn(read_then_flag(&rw, tracked(c), &reads));
  ASSERT_TRUE(wait_for_waiters(rw, 2));
  w.abort();
  EXPECT_TRUE(ended_cancelled(w));
  // The reader no longer waits behind a writer: admitted while the first
  // reader still holds the lock.
  EXPECT_FALSE(ended_cancelled(r));
  EXPECT_EQ(reads.load(), 1);
  EXPECT_EQ(writes.load(), 0);
  rw.unlock_shared();
  EXPECT_TRUE(rw.try_lock());
  rw.unlock();
}

// The lock is handed to writer A while the only worker is busy, so A cannot
// resume before it is aborted: its destroyed awaiter unlocks again, which
// admits the reader behind it.
TEST(RwLock, LockHandedToAnAbortedTaskIsGivenBack) {
  for (bool shared : {false, true}) {
    counts c;
    spindle::runtime rt{{.workers = 1}};
    rwlock rw;
    std::atomic<int> a_done{0};
    std::atomic<int> b_done{0};
    std::atomic<bool> running{false};
    std::atomic<bool> stop{false};
    ASSERT_TRUE(rw.try_lock());
    auto a = shared ? rt.spawn(read_then_flag(&rw, tracked(c), &a_done))
                    : rt.spawn(write_then_flag(&rw, tracked(c), &a_done));
    ASSERT_TRUE(wait_for_waiters(rw, 1));
    auto b = rt.spawn(write_then_flag(&rw, tracked(c), &b_done));
    ASSERT_TRUE(wait_for_waiters(rw, 2));
    auto spinner = rt.spawn(sync_test::occupy_worker(&running, &stop));
    ASSERT_TRUE(spindle_test::wait_until([&] { return running.load(); }));
    rw.unlock();  // admits A, queued behind the spinner; B waits for A
    EXPECT_EQ(rw.waiter_count(), 1u);
    a.abort();
    stop.store(true);
    wait_and_take(spinner);
    EXPECT_TRUE(ended_cancelled(a));
    EXPECT_EQ(a_done.load(), 0);
    EXPECT_FALSE(ended_cancelled(b)) << "the lock handed to the aborted task was not given back";
    EXPECT_EQ(b_done.load(), 1);
    EXPECT_TRUE(rw.try_lock());
    rw.unlock();
  }
}

TEST(RwLock, AbortRacingTheUnlockNeverLosesTheLock) {
  counts c;
  spindle::runtime rt{{.workers = 2}};
  rwlock rw;
  long const rounds = scaled(400, 150);
  for (long r = 0; r < rounds; ++r) {
    std::atomic<int> a_done{0};
    std::atomic<int> b_done{0};
    ASSERT_TRUE(rw.try_lock_shared());
    auto a = rt.spawn(write_then_flag(&rw, tracked(c), &a_done));
    ASSERT_TRUE(wait_for_waiters(rw, 1));
    auto b = rt.spawn(read_then_flag(&rw, tracked(c), &b_done));
    ASSERT_TRUE(wait_for_waiters(rw, 2));
    int skew = sync_test::skew_for(r);
    sync_test::race([&] { rw.unlock_shared(); }, [&] { a.abort(); }, skew);
    bool cancelled = ended_cancelled(a);
    EXPECT_EQ(a_done.load(), cancelled ? 0 : 1);
    ASSERT_FALSE(ended_cancelled(b)) << "round " << r << ": the lock was lost";
    ASSERT_TRUE(rw.try_lock()) << "round " << r << ": the lock was not released";
    rw.unlock();
    spindle_test::progress();
  }
  EXPECT_EQ(c.alive(), 0);
}

TEST(RwLock, RuntimeShutdownWithdrawsWaitingTasks) {
  rwlock rw;
  counts c;
  ASSERT_TRUE(rw.try_lock());
  {
    spindle::runtime rt{{.workers = 2}};
    std::atomic<int> done{0};
    auto a = rt.spawn(read_then_flag(&rw, tracked(c), &done));
    auto b = rt.spawn(write_then_flag(&rw, tracked(c), &done));
    ASSERT_TRUE(wait_for_waiters(rw, 2));
  }
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(rw.waiter_count(), 0u);
  rw.unlock();
  EXPECT_TRUE(rw.try_lock_shared());
  rw.unlock_shared();
}

task<void> write_traced(rwlock* rw, sync_test::waiter_trace* trace) {
  trace->before();
  auto guard = co_await rw->lock();
  trace->after();
}

TEST(RwLock, WaiterWokenFromAnotherWorkerResumesThere) {
  spindle::runtime rt{{.workers = 2}};
  rwlock rw;
  for (int round = 0; round < 5; ++round) {
    sync_test::waiter_trace trace;
    ASSERT_TRUE(rw.try_lock_shared());
    auto h = rt.spawn(write_traced(&rw, &trace));
    ASSERT_TRUE(wait_for_waiters(rw, 1));
    sync_test::wake_from_the_other_worker(rt, trace, [&] { rw.unlock_shared(); });
    wait_and_take(h);
  }
  EXPECT_TRUE(rw.try_lock());
  rw.unlock();
}

}  // namespace
