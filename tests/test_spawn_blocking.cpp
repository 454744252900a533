// Tests of spawn_blocking and the blocking pool: results, exceptions, the
// thread bound and the FIFO queue, keep-alive, reuse, calls from foreign
// threads, abort of queued and running jobs, runtime shutdown with jobs
// queued and running, workers staying free, stats, config errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::task;
using spindle_test::counts;
using spindle_test::tracked;
using spindle_test::wait_and_take;
using spindle_test::wait_until;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

struct custom_error : std::runtime_error {
  explicit custom_error(int c) : std::runtime_error("custom error " + std::to_string(c)), code(c) {}
  int code;
};

/// A one-shot gate a job can block on (no timing involved).
class gate {
 public:
  void wait() const noexcept {
    while (!open_.load(std::memory_order_acquire))
      open_.wait(false, std::memory_order_acquire);
  }
  void open() noexcept {
    open_.store(true, std::memory_order_release);
    open_.notify_all();
  }

 private:
  std::atomic<bool> open_{false};
};

template <class Fn>
std::error_code system_error_of(Fn fn) {
  try {
    fn();
  } catch (std::system_error const& e) {
    return e.code();
  }
  return {};
}

template <class T>
task<T> await_handle(join_handle<T> h) {
  co_return co_await h;
}

// ---------------------------------------------------------------------------
// Results and exceptions

task<int> value_job() {
  co_return co_await spindle::spawn_blocking([] { return 42; });
}

task<bool> void_job(std::atomic<bool>* ran) {
  co_await spindle::spawn_blocking([ran] { ran->store(true); });
  co_return ran->load();
}

task<std::unique_ptr<std::string>> move_only_job() {
  auto owned = std::make_unique<std::string>("moved in");
  // The handle is named (not awaited in the expression that builds the
  // lambda): GCC 12 miscompiles a closure with non-trivially destructible
  // captures created inside a co_await full-expression (see runtime.hpp).
  auto h = spindle::spawn_blocking([p = std::move(owned)]() mutable {
    *p += " and out";
    return std::move(p);
  });
  co_return co_await h;
}

TEST(SpawnBlocking, ValueVoidAndMoveOnlyResults) {
  spindle::runtime rt{{.workers = 2}};
  EXPECT_EQ(rt.block_on(value_job()), 42);
  EXPECT_EQ(spindle_test::run_on_worker(rt, value_job()), 42);

  std::atomic<bool> ran{false};
  EXPECT_TRUE(rt.block_on(void_job(&ran)));

  std::unique_ptr<std::string> s = spindle_test::run_on_worker(rt, move_only_job());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(*s, "moved in and out");
}

TEST(SpawnBlocking, JobsRunOnPoolThreadsNotOnWorkers) {
  spindle::runtime rt{{.workers = 2}};
  struct seen {
    std::size_t worker_index;
    spindle::detail::scheduler* sched;
    std::thread::id id;
  };
  auto h = rt.spawn_blocking([] {
    return seen{spindle::detail::current_worker_index(), spindle::detail::current_scheduler(),
                std::this_thread::get_id()};
  });
  seen s = wait_and_take(h);
  EXPECT_EQ(s.worker_index, spindle::detail::not_a_worker) << "the job ran on a worker";
  EXPECT_EQ(s.sched, rt.scheduler_handle()) << "pool threads run in the runtime's context";
  EXPECT_NE(s.id, std::this_thread::get_id());
}

TEST(SpawnBlocking, ExceptionIsRethrownAtJoin) {
  spindle::runtime rt{{.workers = 2}};
  auto h = rt.spawn_blocking([]() -> int { throw custom_error(7); });
  try {
    wait_and_take(h);
    FAIL() << "no exception";
  } catch (custom_error const& e) {
    EXPECT_EQ(e.code, 7);
  }
  // A void job, awaited from a task, throwing a non-standard exception.
  auto outer = []() -> task<int> {
    try {
      co_await spindle::spawn_blocking([] { throw 5; });
    } catch (int v) {
      co_return v;
    }
    co_return 0;
  };
  EXPECT_EQ(rt.block_on(outer()), 5);
  // A throwing job counts as run.
  EXPECT_EQ(rt.stats().blocking_jobs, 2u);
}

TEST(SpawnBlocking, TheCallableIsReleasedWhenTheJobReturns) {
  // Like Tokio's FnOnce: captures go when the job returns, not with the handle.
  counts captured;
  spindle::runtime rt{{.workers = 1}};
  auto h = rt.spawn_blocking([t = tracked(captured)] { return 5; });
  ASSERT_TRUE(wait_until([&] { return h.is_finished(); }));
  EXPECT_EQ(captured.alive(), 0) << "the callable outlived its run";
  EXPECT_EQ(h.take(), 5);
}

TEST(SpawnBlocking, FreeFunctionOutsideTheRuntimeThrowsOperationNotPermitted) {
  EXPECT_EQ(system_error_of([] { (void)spindle::spawn_blocking([] { return 1; }); }),
            std::errc::operation_not_permitted);
  // Also from a plain thread while a runtime exists.
  spindle::runtime rt{{.workers = 1}};
  std::error_code code;
  std::thread t([&] { code = system_error_of([] { (void)spindle::spawn_blocking([] {}); }); });
  t.join();
  EXPECT_EQ(code, std::errc::operation_not_permitted);
}

task<int> nested_job(int depth) {
  // spindle::spawn and spindle::spawn_blocking inside a job (pool threads
  // run in the runtime's context).
  co_return co_await spindle::spawn_blocking([depth] {
    if (depth == 0) return 1;
    auto h = spindle::spawn_blocking([depth] { return depth; });
    auto t = spindle::spawn(nested_job(depth - 1));
    return wait_and_take(h) + wait_and_take(t);
  });
}

TEST(SpawnBlocking, SpawnAndSpawnBlockingWorkInsideAJob) {
  spindle::runtime rt{{.workers = 2, .max_blocking_threads = 16}};
  // depth 3: 3 + 2 + 1 + 1
  EXPECT_EQ(spindle_test::run_on_worker(rt, nested_job(3)), 7);
}

TEST(SpawnBlocking, BlockOnInsideAJob) {
  spindle::runtime rt{{.workers = 1}};
  auto h = rt.spawn_blocking([&rt] { return rt.block_on(value_job()) + 1; });
  EXPECT_EQ(wait_and_take(h), 43);
}

// ---------------------------------------------------------------------------
// The thread bound, the queue, reuse and keep-alive

struct concurrency_probe {
  std::atomic<int> active{0};
  std::atomic<int> high_water{0};
  std::atomic<int> finished{0};
  gate release;

  int enter() noexcept {
    int now = active.fetch_add(1) + 1;
    int hw = high_water.load();
    while (now > hw && !high_water.compare_exchange_weak(hw, now)) {
    }
    return now;
  }
  void leave() noexcept {
    active.fetch_sub(1);
    finished.fetch_add(1);
  }
};

task<long> fan_out_blocking(concurrency_probe* p, int n) {
  std::vector<join_handle<int>> hs;
  hs.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    hs.push_back(spindle::spawn_blocking([p, i] {
      p->enter();
      p->release.wait();
      p->leave();
      return i;
    }));
  }
  long sum = 0;
  for (auto& h : hs)
    sum += co_await h;
  co_return sum;
}

TEST(SpawnBlocking, ManyJobsNeverExceedMaxThreadsAndAllFinish) {
  constexpr std::size_t max_threads = 3;
  int const n = static_cast<int>(spindle_test::scaled(200, 20));
  concurrency_probe probe;
  spindle::runtime rt{{.workers = 2, .max_blocking_threads = max_threads}};
  auto h = rt.spawn(fan_out_blocking(&probe, n));
  // Every thread of the pool is busy and the rest waits in the queue.
  ASSERT_TRUE(wait_until([&] {
    spindle::runtime_stats s = rt.stats();
    return s.blocking_threads == max_threads &&
           s.blocking_queue_depth == static_cast<std::uint64_t>(n) - max_threads &&
           probe.active.load() == static_cast<int>(max_threads);
  })) << "the pool did not grow to its maximum with the rest queued";
  EXPECT_EQ(rt.stats().blocking_idle_threads, 0u);
  probe.release.open();
  std::uint64_t max_seen = 0;
  ASSERT_TRUE(wait_until([&] {
    max_seen = std::max(max_seen, rt.stats().blocking_threads);
    return h.is_finished();
  })) << "not every job finished";
  EXPECT_EQ(h.take(), static_cast<long>(n) * (n - 1) / 2);
  EXPECT_EQ(probe.high_water.load(), static_cast<int>(max_threads));
  EXPECT_EQ(probe.finished.load(), n);
  EXPECT_LE(max_seen, max_threads);
  spindle::runtime_stats s = rt.stats();
  EXPECT_EQ(s.blocking_jobs, static_cast<std::uint64_t>(n));
  EXPECT_EQ(s.blocking_queue_depth, 0u);
  EXPECT_LE(s.blocking_threads, max_threads);
}

TEST(SpawnBlocking, QueuedJobsStartInFifoOrder) {
  spindle::runtime rt{{.workers = 1, .max_blocking_threads = 1}};
  gate hold;
  std::atomic<bool> first_started{false};
  auto first = rt.spawn_blocking([&] {
    first_started.store(true);
    hold.wait();
  });
  ASSERT_TRUE(wait_until([&] { return first_started.load(); }));
  std::mutex m;
  std::vector<int> order;
  std::vector<join_handle<void>> hs;
  int const n = 16;
  for (int i = 0; i < n; ++i) {
    hs.push_back(rt.spawn_blocking([&, i] {
      std::lock_guard lock(m);
      order.push_back(i);
    }));
    // Queued one at a time, so that the order of submission is known.
    ASSERT_TRUE(wait_until(
        [&] { return rt.stats().blocking_queue_depth == static_cast<std::uint64_t>(i) + 1; }));
  }
  hold.open();
  wait_and_take(first);
  for (auto& h : hs)
    wait_and_take(h);
  std::vector<int> expected(n);
  for (int i = 0; i < n; ++i)
    expected[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(order, expected);
}

task<std::size_t> sequential_jobs(int n) {
  std::set<std::thread::id> ids;
  for (int i = 0; i < n; ++i)
    ids.insert(co_await spindle::spawn_blocking([] { return std::this_thread::get_id(); }));
  co_return ids.size();
}

TEST(SpawnBlocking, SequentialJobsReuseOneThread) {
  // A thread that finishes a job counts itself idle before it wakes the
  // task, so the next job, submitted after that wake, finds it.
  spindle::runtime rt{{.workers = 2, .blocking_keep_alive = std::chrono::hours(1)}};
  EXPECT_EQ(spindle_test::run_on_worker(rt, sequential_jobs(50)), 1u);
  EXPECT_EQ(rt.stats().blocking_threads, 1u);
  EXPECT_EQ(rt.stats().blocking_jobs, 50u);
}

TEST(SpawnBlocking, IdleThreadsExitAfterTheKeepAlive) {
  constexpr std::size_t n = 4;
  spindle::runtime rt{{.workers = 2,
                       .max_blocking_threads = 8,
                       .blocking_keep_alive = std::chrono::milliseconds(50)}};
  EXPECT_EQ(rt.stats().blocking_threads, 0u) << "the pool starts without threads";
  for (int round = 0; round < 2; ++round) {
    // n jobs that wait for each other need n threads at once.
    std::latch all_in(static_cast<std::ptrdiff_t>(n));
    // The first job to look (before any job finished, so before any thread
    // could idle) sees all n threads.
    std::atomic<std::uint64_t> seen{0};
    std::vector<join_handle<void>> hs;
    for (std::size_t i = 0; i < n; ++i) {
      hs.push_back(rt.spawn_blocking([&] {
        all_in.arrive_and_wait();
        std::uint64_t now = rt.stats().blocking_threads;
        std::uint64_t prev = seen.load();
        while (now > prev && !seen.compare_exchange_weak(prev, now)) {
        }
      }));
    }
    for (auto& h : hs)
      wait_and_take(h);
    EXPECT_EQ(seen.load(), n);
    ASSERT_TRUE(wait_until([&] { return rt.stats().blocking_threads == 0; }))
        << "idle pool threads did not exit after the keep-alive";
    EXPECT_EQ(rt.stats().blocking_idle_threads, 0u);
  }
  EXPECT_EQ(rt.stats().blocking_jobs, 2 * n);
}

TEST(SpawnBlocking, ZeroKeepAliveStillRunsEveryJob) {
  spindle::runtime rt{{.workers = 2, .max_blocking_threads = 2, .blocking_keep_alive = 0ms}};
  int const n = static_cast<int>(spindle_test::scaled(200, 20));
  std::vector<join_handle<int>> hs;
  for (int i = 0; i < n; ++i)
    hs.push_back(rt.spawn_blocking([i] { return i; }));
  long sum = 0;
  for (auto& h : hs)
    sum += wait_and_take(h);
  EXPECT_EQ(sum, static_cast<long>(n) * (n - 1) / 2);
  ASSERT_TRUE(wait_until([&] { return rt.stats().blocking_threads == 0; }));
}

// ---------------------------------------------------------------------------
// Calls from outside the runtime

TEST(SpawnBlocking, JobsFromOutsideThreadsThroughTheRuntime) {
  spindle::runtime rt{{.workers = 2, .max_blocking_threads = 4}};
  int const per_thread = static_cast<int>(spindle_test::scaled(200, 20));
  constexpr int threads = 4;
  std::atomic<long> total{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<join_handle<int>> hs;
      for (int i = 0; i < per_thread; ++i)
        hs.push_back(rt.spawn_blocking([t, i] { return t * 100000 + i; }));
      long sum = 0;
      for (auto& h : hs)
        sum += wait_and_take(h);
      total.fetch_add(sum);
    });
  }
  for (auto& t : ts)
    t.join();
  long expected = 0;
  for (int t = 0; t < threads; ++t)
    expected += static_cast<long>(t) * 100000 * per_thread +
                static_cast<long>(per_thread) * (per_thread - 1) / 2;
  EXPECT_EQ(total.load(), expected);
  EXPECT_EQ(rt.stats().blocking_jobs, static_cast<std::uint64_t>(threads * per_thread));
  EXPECT_LE(rt.stats().blocking_threads, 4u);
}

// ---------------------------------------------------------------------------
// Workers stay free

TEST(SpawnBlocking, AWorkerIsNotBlockedWhileAJobRuns) {
  spindle::runtime rt{{.workers = 1}};
  gate hold;
  std::atomic<bool> started{false};
  auto job = rt.spawn_blocking([&] {
    started.store(true);
    hold.wait();
    return 1;
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }));
  // The only worker keeps running other tasks while the job blocks.
  for (int round = 0; round < 20; ++round)
    EXPECT_EQ(spindle_test::run_on_worker(rt, value_job()), 42);
  auto sum = []() -> task<int> {
    int s = 0;
    for (int i = 0; i < 100; ++i) {
      co_await spindle::yield_now{};
      s += i;
    }
    co_return s;
  };
  EXPECT_EQ(spindle_test::run_on_worker(rt, sum()), 4950);
  EXPECT_FALSE(job.is_finished());
  hold.open();
  EXPECT_EQ(wait_and_take(job), 1);
}

// ---------------------------------------------------------------------------
// Abort

TEST(SpawnBlocking, AbortOfAQueuedJobWithdrawsIt) {
  counts captured;
  std::atomic<bool> queued_ran{false};
  {
    spindle::runtime rt{{.workers = 2, .max_blocking_threads = 1}};
    gate hold;
    std::atomic<bool> started{false};
    auto running = rt.spawn_blocking([&] {
      started.store(true);
      hold.wait();
      return 1;
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    auto queued = rt.spawn_blocking([&queued_ran, t = tracked(captured)] {
      queued_ran.store(true);
      return 2;
    });
    ASSERT_TRUE(wait_until([&] { return rt.stats().blocking_queue_depth == 1; }));
    queued.abort();
    // Withdrawn at once: the frame goes while the only thread is still busy.
    ASSERT_TRUE(wait_until([&] { return queued.is_finished(); }))
        << "abort of a queued job did not cancel its task";
    EXPECT_THROW(queued.take(), spindle::task_cancelled);
    EXPECT_EQ(captured.alive(), 0) << "the withdrawn job's callable was not destroyed";
    EXPECT_EQ(rt.stats().blocking_queue_depth, 0u);
    hold.open();
    EXPECT_EQ(wait_and_take(running), 1);
    // The thread is free again and the withdrawn job stays unrun.
    auto after = rt.spawn_blocking([] { return 3; });
    EXPECT_EQ(wait_and_take(after), 3);
    EXPECT_EQ(rt.stats().blocking_jobs, 2u);
  }
  EXPECT_FALSE(queued_ran.load()) << "an aborted queued job ran";
  EXPECT_EQ(captured.alive(), 0);
}

TEST(SpawnBlocking, AbortOfARunningJobLetsItFinish) {
  counts captured;
  counts results;
  spindle::runtime rt{{.workers = 2}};
  gate hold;
  std::atomic<bool> started{false};
  std::atomic<bool> side_effect{false};
  auto h = rt.spawn_blocking([&, t = tracked(captured)] {
    started.store(true);
    hold.wait();
    side_effect.store(true);
    return tracked(results);
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }));
  h.abort();
  // The job cannot be interrupted: its task stays until the job returns.
  EXPECT_FALSE(h.is_finished());
  EXPECT_EQ(captured.alive(), 1);
  hold.open();
  EXPECT_THROW(wait_and_take(h), spindle::task_cancelled);
  EXPECT_TRUE(side_effect.load()) << "the running job did not complete";
  EXPECT_EQ(captured.alive(), 0);
  EXPECT_GE(results.constructed.load(), 1);
  EXPECT_EQ(results.alive(), 0) << "the result of an aborted job was not destroyed";
  EXPECT_EQ(rt.stats().blocking_jobs, 1u);
}

TEST(SpawnBlocking, AbortRacingTheJobIsConsistent) {
  spindle::runtime rt{{.workers = 2, .max_blocking_threads = 2}};
  counts captured;
  int const n = static_cast<int>(spindle_test::scaled(20000, 1000));
  std::vector<std::atomic<bool>> ran(static_cast<std::size_t>(n));
  std::vector<join_handle<int>> hs;
  hs.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    hs.push_back(rt.spawn_blocking([&ran, i, t = tracked(captured)] {
      ran[static_cast<std::size_t>(i)].store(true);
      return i;
    }));
    if (i % 2 == 1) hs[static_cast<std::size_t>(i - 1)].abort();
  }
  int values = 0;
  int cancelled = 0;
  for (int i = 0; i < n; ++i) {
    try {
      EXPECT_EQ(wait_and_take(hs[static_cast<std::size_t>(i)]), i);
      EXPECT_TRUE(ran[static_cast<std::size_t>(i)].load());
      ++values;
    } catch (spindle::task_cancelled const&) {
      EXPECT_EQ(i % 2, 0) << "a job that was not aborted was cancelled";
      ++cancelled;
    }
  }
  EXPECT_EQ(values + cancelled, n);
  EXPECT_GE(values, n / 2);
  // Every callable is gone (run ones right after they returned, withdrawn
  // ones with their frames) while the handles still exist.
  EXPECT_EQ(captured.alive(), 0);
  long ran_count = 0;
  for (auto& r : ran)
    ran_count += r.load();
  EXPECT_EQ(rt.stats().blocking_jobs, static_cast<std::uint64_t>(ran_count))
      << "a withdrawn job was counted, or a run job was not";
  EXPECT_EQ(rt.stats().blocking_queue_depth, 0u);
}

// ---------------------------------------------------------------------------
// Shutdown

task<int> one() {
  co_return 1;
}

/// Returns once `spindle::spawn` from this pool thread is refused, i.e. once
/// the runtime's destructor has begun (deterministic: no sleep decides it).
void wait_for_runtime_shutdown() {
  for (;;) {
    auto h = spindle::spawn(one());
    if (h.is_finished()) {
      try {
        (void)h.take();
      } catch (spindle::task_cancelled const&) {
        return;  // refused: the runtime no longer accepts tasks
      }
    }
    std::this_thread::sleep_for(1ms);
  }
}

TEST(SpawnBlocking, RuntimeDestroyedWithJobsQueuedAndRunning) {
  counts captured;
  counts results;
  std::atomic<bool> running_started{false};
  std::atomic<bool> running_done{false};
  std::atomic<int> queued_ran{0};
  join_handle<tracked> running;
  std::vector<join_handle<tracked>> queued;
  {
    spindle::runtime rt{
        {.workers = 2, .max_blocking_threads = 1, .blocking_keep_alive = std::chrono::hours(1)}};
    running = rt.spawn_blocking([&, t = tracked(captured)] {
      running_started.store(true);
      wait_for_runtime_shutdown();
      running_done.store(true);
      return tracked(results);
    });
    ASSERT_TRUE(wait_until([&] { return running_started.load(); }));
    for (int i = 0; i < 3; ++i) {
      queued.push_back(rt.spawn_blocking([&, t = tracked(captured)] {
        queued_ran.fetch_add(1);
        return tracked(results);
      }));
    }
    // Some queued jobs are submitted, the rest not even polled yet: both kinds
    // must be dropped.
    ASSERT_TRUE(wait_until([&] { return rt.stats().blocking_queue_depth >= 1; }));
  }  // the destructor waits for the running job and drops the queued ones
  EXPECT_TRUE(running_done.load()) << "shutdown did not wait for the running job";
  EXPECT_EQ(queued_ran.load(), 0) << "a queued job ran during shutdown";
  EXPECT_EQ(captured.alive(), 0) << "a callable leaked at shutdown";
  EXPECT_EQ(results.alive(), 0) << "the running job's result leaked at shutdown";
  EXPECT_GT(results.constructed.load(), 0);
  // Handles outlive the runtime.
  ASSERT_TRUE(running.is_finished());
  EXPECT_THROW(running.take(), spindle::task_cancelled);
  for (auto& h : queued) {
    ASSERT_TRUE(h.is_finished());
    EXPECT_THROW(h.take(), spindle::task_cancelled);
  }
}

task<int> submit_after(spindle_test::test_event* ev, std::atomic<bool>* about_to_submit,
                       std::atomic<bool>* ran, counts* c) {
  co_await *ev;
  // The job's task is awaited inline (not spawned, which the closed runtime
  // would refuse), so that the submission itself meets the stopped pool.
  auto inline_job = spindle::detail::make_blocking_task([ran, t = tracked(*c)] {
    ran->store(true);
    return 1;
  });
  about_to_submit->store(true);
  co_return co_await inline_job;
}

TEST(SpawnBlocking, AJobSubmittedDuringShutdownNeverRuns) {
  counts captured;
  std::atomic<bool> ran{false};
  std::atomic<bool> about_to_submit{false};
  std::atomic<bool> waiter_started{false};
  spindle_test::test_event ev;
  join_handle<int> submitter;
  join_handle<void> waiter;
  {
    spindle::runtime rt{{.workers = 1, .max_blocking_threads = 2}};
    submitter = rt.spawn(submit_after(&ev, &about_to_submit, &ran, &captured));
    ASSERT_TRUE(wait_until([&] { return ev.has_waiter(); }));
    // Runs until the destructor has stopped the pool and closed the gate,
    // then lets the submitter submit while the workers still run.
    waiter = rt.spawn_blocking([&] {
      waiter_started.store(true);
      wait_for_runtime_shutdown();
      ev.set();
      while (!about_to_submit.load())
        std::this_thread::yield();
    });
    ASSERT_TRUE(wait_until([&] { return waiter_started.load(); }));
  }
  EXPECT_TRUE(about_to_submit.load());
  EXPECT_FALSE(ran.load()) << "a job submitted during shutdown ran";
  EXPECT_EQ(captured.alive(), 0) << "its callable leaked";
  ASSERT_TRUE(submitter.is_finished());
  EXPECT_THROW(submitter.take(), spindle::task_cancelled);
  ASSERT_TRUE(waiter.is_finished());
  EXPECT_THROW(waiter.take(), spindle::task_cancelled);
}

TEST(SpawnBlocking, ShutdownDoesNotWaitForIdleThreadsKeepAlive) {
  auto start = std::chrono::steady_clock::now();
  {
    spindle::runtime rt{
        {.workers = 1, .max_blocking_threads = 4, .blocking_keep_alive = std::chrono::hours(1)}};
    std::latch all_in(4);
    std::vector<join_handle<void>> hs;
    for (int i = 0; i < 4; ++i)
      hs.push_back(rt.spawn_blocking([&all_in] { all_in.arrive_and_wait(); }));
    for (auto& h : hs)
      wait_and_take(h);
    ASSERT_TRUE(wait_until([&] { return rt.stats().blocking_idle_threads == 4; }));
  }
  // A hang until the keep-alive (an hour) would trip this generous limit.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s);
}

// ---------------------------------------------------------------------------
// Configuration

TEST(SpawnBlocking, InvalidConfigThrowsInvalidArgument) {
  EXPECT_EQ(system_error_of([] { spindle::runtime rt{{.workers = 1, .max_blocking_threads = 0}}; }),
            std::errc::invalid_argument);
  EXPECT_EQ(
      system_error_of([] { spindle::runtime rt{{.workers = 1, .blocking_keep_alive = -1ms}}; }),
      std::errc::invalid_argument);
}

TEST(SpawnBlocking, IoBackendThreadsAreNotBlockingPoolThreads) {
  // io_pool_threads sizes the thread-pool I/O backend; the spawn_blocking
  // pool is separate and starts empty.
  spindle::runtime rt{{.workers = 1, .io = spindle::io_backend::threadpool, .io_pool_threads = 6}};
  EXPECT_EQ(rt.stats().blocking_threads, 0u);
  auto h = rt.spawn_blocking([] { return 1; });
  EXPECT_EQ(wait_and_take(h), 1);
  EXPECT_EQ(rt.stats().blocking_threads, 1u);
}

}  // namespace
