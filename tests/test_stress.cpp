// Stress tests of the scheduler: millions of spawns, fork-join, wake-ups
// across workers, yield storms, random trees mixing spawn, yield, join,
// cross-worker wakes, timers and file I/O (also shut down in the middle),
// shutdown with work pending, spawns racing shutdown, and exceptions
// delivered exactly once.
//
// Counts are scaled by SPINDLE_STRESS_SCALE (default 1; 0.05 under
// ThreadSanitizer, 0.25 under AddressSanitizer). A watchdog aborts the
// binary with a message when no test makes progress for 10 s (30 s under
// sanitizers): a lost wake-up fails instead of hanging.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/io/file.hpp"
#include "spindle/oneshot.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "spindle/time.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::task;
using spindle_test::counts;
using spindle_test::progress;
using spindle_test::scaled;
using spindle_test::suspend_forever;
using spindle_test::test_event;
using spindle_test::tracked;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(10)));

struct custom_error : std::runtime_error {
  explicit custom_error(long c) : std::runtime_error("stress error"), code(c) {}
  long code;
};

task<int> value_of(int v) {
  co_return v;
}

// ---------------------------------------------------------------------------
// Random trees of everything

/// Shared by the tasks of one random tree run.
struct mix_context {
  spindle::io::file* file = nullptr;  // a small file every I/O step reads
  std::atomic<long> budget{0};        // spawns left
  std::atomic<long> finished{0};      // tasks that ran to their end
  std::atomic<long> io_started{0};
  std::atomic<long> io_reads{0};  // completed
  std::atomic<long> handoffs{0};  // values passed child -> parent through a oneshot
  counts live;                    // frames alive (tracked in every task)
};

std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

/// One node: a random sequence of steps (yield, 4 KiB read, short sleep),
/// a random number of children, some joined, some detached, some answering
/// through a oneshot (a wake from whichever worker the child ran on).
task<long> mix_node(mix_context* ctx, std::uint64_t seed, int depth) {
  tracked alive{ctx->live};
  std::uint64_t r = mix(seed);
  long sum = 1;
  int steps = static_cast<int>(r % 4);
  for (int i = 0; i < steps; ++i) {
    r = mix(r + static_cast<std::uint64_t>(i));
    switch (r % 6) {
      case 0:
      case 1:
        co_await spindle::yield_now{};
        break;
      case 2:
      case 3: {
        std::array<std::byte, 4096> buf;
        // Every 64th read first drops the file from the page cache, so
        // that reads also complete asynchronously (io_uring's worker
        // threads, a thread-pool read that blocks), not only at submission.
        if ((ctx->io_started.fetch_add(1, std::memory_order_relaxed) & 63) == 0) {
          ::posix_fadvise(ctx->file->native_handle(), 0, 0, POSIX_FADV_DONTNEED);
        }
        std::size_t n = co_await ctx->file->read_at(buf, (r >> 8) % 4 * 4096);
        if (n != buf.size()) throw std::runtime_error("short read");
        ctx->io_reads.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      case 4:
        co_await spindle::sleep_for(std::chrono::microseconds((r >> 8) % 1500));
        break;
      default:
        break;
    }
  }
  int children = depth >= 24 ? 0 : static_cast<int>((r >> 16) % 5);
  std::vector<join_handle<long>> joined;
  std::vector<spindle::oneshot_receiver<long>> answers;
  for (int c = 0; c < children; ++c) {
    if (ctx->budget.fetch_sub(1, std::memory_order_relaxed) <= 0) break;
    std::uint64_t child_seed = mix(seed * 31 + static_cast<std::uint64_t>(c) + 1);
    switch ((r >> (20 + 2 * c)) % 3) {
      case 0:
        joined.push_back(spindle::spawn(mix_node(ctx, child_seed, depth + 1)));
        break;
      case 1: {
        auto [tx, rx] = spindle::make_oneshot<long>();
        answers.push_back(std::move(rx));
        (void)spindle::spawn([](mix_context* cx, std::uint64_t sd, int d,
                                spindle::oneshot_sender<long> out) -> task<void> {
          long v = co_await mix_node(cx, sd, d);
          out.send(v);
          cx->handoffs.fetch_add(1, std::memory_order_relaxed);
        }(ctx, child_seed, depth + 1, std::move(tx)));
        break;
      }
      default:
        // Detached: counted through ctx->finished only.
        (void)spindle::spawn(mix_node(ctx, child_seed, depth + 1));
        break;
    }
  }
  for (auto& h : joined)
    sum += co_await h;
  for (auto& rx : answers)
    sum += co_await rx;
  if ((ctx->finished.fetch_add(1, std::memory_order_relaxed) & 255) == 0) progress();
  co_return sum;
}

std::filesystem::path make_mix_file() {
  auto path =
      std::filesystem::temp_directory_path() / ("spindle-stress-mix-" + std::to_string(::getpid()));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::vector<char> data(16384, 'x');
  std::fwrite(data.data(), 1, data.size(), f);
  std::fflush(f);
  ::fsync(::fileno(f));  // written back, so that POSIX_FADV_DONTNEED can drop it
  std::fclose(f);
  return path;
}

/// The stress runs' runtimes: cached reads off, so that every read goes
/// through the I/O driver (submission, completion, the wake of the task)
/// instead of a preadv2 in the task's poll.
spindle::runtime_config stress_io_config(std::size_t workers) {
  spindle::runtime_config cfg;
  cfg.workers = workers;
  cfg.try_cached_reads = false;
  return cfg;
}

/// I/O completions the workers reaped (the io_uring backend counts them;
/// the thread pool's completions are not reaped by workers).
std::uint64_t reaped_by_workers(spindle::runtime_stats const& s) {
  std::uint64_t n = 0;
  for (auto const& w : s.workers)
    n += w.io_completions;
  return n;
}

task<long> mix_root(mix_context* ctx, std::filesystem::path path, int roots) {
  spindle::io::file f = co_await spindle::io::file::open(path);
  ctx->file = &f;
  std::vector<join_handle<long>> hs;
  for (int i = 0; i < roots; ++i)
    hs.push_back(spindle::spawn(mix_node(ctx, static_cast<std::uint64_t>(i) * 7919 + 1, 0)));
  long sum = 0;
  for (auto& h : hs)
    sum += co_await h;
  // Detached descendants may still run and read the file: wait for them.
  while (ctx->live.alive() != 0)
    co_await spindle::sleep_for(1ms);
  ctx->file = nullptr;
  co_return sum;
}

TEST(Stress, RandomTreesOfSpawnYieldJoinWakeTimersAndIo) {
  auto path = make_mix_file();
  long const budget = scaled(1'000'000, 4'000);
  for (std::size_t workers : {1u, 2u, 4u}) {
    spindle::runtime rt{stress_io_config(workers)};
    mix_context ctx;
    ctx.budget.store(budget);
    long joined_sum = rt.block_on(mix_root(&ctx, path, 64));
    spindle::runtime_stats s = rt.stats();
    long spawned = budget - std::max(0L, ctx.budget.load()) + 64;
    EXPECT_EQ(ctx.finished.load(), ctx.live.constructed.load());
    EXPECT_EQ(ctx.live.alive(), 0);
    EXPECT_GE(s.total_spawned, static_cast<std::uint64_t>(spawned));
    EXPECT_GT(joined_sum, 0);
    EXPECT_EQ(ctx.io_reads.load(), ctx.io_started.load());
    EXPECT_GT(ctx.io_reads.load(), 0);
    // Each read, and the open, completed in the driver (the file's
    // destructor closes it without the driver): through the workers' rings
    // with io_uring, on the pool's threads with the thread pool.
    EXPECT_GE(s.io_completions, static_cast<std::uint64_t>(ctx.io_reads.load()) + 1);
    if (rt.io_backend_in_use() == spindle::io_backend::uring) {
      EXPECT_EQ(reaped_by_workers(s), s.io_completions);
    }
    std::printf(
        "workers=%zu: %ld tasks finished, %llu polls (%llu wake-ups), %ld reads, %llu timers, "
        "%ld oneshot hand-offs, %llu stolen\n",
        workers, ctx.finished.load(), static_cast<unsigned long long>(s.total_polled),
        static_cast<unsigned long long>(s.total_polled - s.total_spawned), ctx.io_reads.load(),
        static_cast<unsigned long long>(s.timers_fired), ctx.handoffs.load(),
        static_cast<unsigned long long>(s.total_stolen));
  }
  std::filesystem::remove(path);
}

TEST(Stress, ShutdownInTheMiddleOfRandomTrees) {
  // The runtime is destroyed while the trees run: tasks queued, suspended
  // on timers, oneshots, joins and reads. Every frame is destroyed, every
  // read is reaped, nothing hangs (LeakSanitizer and ASan check the rest).
  auto path = make_mix_file();
  int const rounds = static_cast<int>(scaled(30, 6));
  long interrupted = 0;
  long reads_cut = 0;        // started, never completed: cancelled by the shutdown
  std::uint64_t reaped = 0;  // completions the workers reaped (io_uring)
  for (int round = 0; round < rounds; ++round) {
    mix_context ctx;
    ctx.budget.store(scaled(100'000, 2'000));
    join_handle<long> root;
    {
      spindle::runtime rt{stress_io_config(1 + static_cast<std::size_t>(round % 3))};
      root = rt.spawn(mix_root(&ctx, path, 32));
      std::this_thread::sleep_for(std::chrono::milliseconds(1 + round % 7));
      if (!root.is_finished()) ++interrupted;
      reaped += reaped_by_workers(rt.stats());
    }
    EXPECT_TRUE(root.is_finished());
    EXPECT_EQ(ctx.live.alive(), 0) << "round " << round;
    EXPECT_LE(ctx.io_reads.load(), ctx.io_started.load());
    reads_cut += ctx.io_started.load() - ctx.io_reads.load();
    progress();
  }
  std::printf(
      "%d rounds, %ld shut down with the trees still running, %ld reads in flight at the "
      "shutdown (cancelled and reaped), %llu completions reaped by the workers\n",
      rounds, interrupted, reads_cut, static_cast<unsigned long long>(reaped));
  // The reads really went through the driver: the shutdown had some to cancel.
  EXPECT_GT(interrupted, 0);
  std::filesystem::remove(path);
}

// ---------------------------------------------------------------------------
// Millions of tiny tasks

/// Spawns a tree with `leaves` leaves, `fanout` children per node; returns
/// the number of leaves reached (`reached` counts them too).
task<long> spawn_tree(long leaves, int fanout, std::atomic<long>* reached) {
  if (leaves <= 1) {
    if ((reached->fetch_add(1, std::memory_order_relaxed) & 1023) == 0) progress();
    co_return 1;
  }
  std::vector<join_handle<long>> hs;
  hs.reserve(static_cast<std::size_t>(fanout));
  long per = leaves / fanout;
  long extra = leaves % fanout;
  for (int i = 0; i < fanout; ++i) {
    long part = per + (i < extra ? 1 : 0);
    if (part == 0) continue;
    hs.push_back(spindle::spawn(spawn_tree(part, fanout, reached)));
  }
  long sum = 0;
  for (auto& h : hs)
    sum += co_await h;
  co_return sum;
}

TEST(Stress, MillionsOfTinySpawnsInATree) {
  long const leaves = scaled(2'000'000, 20'000);
  for (std::size_t workers : {2u, 4u}) {
    std::atomic<long> reached{0};
    spindle::runtime rt{{.workers = workers}};
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(rt.block_on(spawn_tree(leaves, 8, &reached)), leaves);
    EXPECT_EQ(reached.load(), leaves);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    auto s = rt.stats();
    std::printf("workers=%zu: %ld leaves, %llu spawned in %.0f ms (stolen %llu, lifo %llu)\n",
                workers, leaves, static_cast<unsigned long long>(s.total_spawned), ms,
                static_cast<unsigned long long>(s.total_stolen),
                static_cast<unsigned long long>(s.lifo_hits));
    EXPECT_GE(s.total_spawned, static_cast<std::uint64_t>(leaves));
    EXPECT_TRUE(spindle_test::wait_until([&] { return rt.stats().tasks_alive == 0; }));
  }
}

task<long> fib(int n) {
  if (n < 2) co_return n;
  auto a = spindle::spawn(fib(n - 1));
  long b = co_await fib(n - 2);
  co_return co_await a + b;
}

task<long> fib_progress(int n) {
  long v = co_await fib(n);
  progress();
  co_return v;
}

TEST(Stress, FibForkJoin) {
  // fib(25) = 75025 with 121,392 spawns; fib(20) under sanitizers.
  int const n = spindle_test::stress_scale() < 0.5 ? 20 : 25;
  long const expected = n == 25 ? 75025 : 6765;
  for (std::size_t workers : {1u, 2u, 3u, 8u}) {
    spindle::runtime rt{{.workers = workers}};
    EXPECT_EQ(rt.block_on(fib_progress(n)), expected) << "workers=" << workers;
    EXPECT_EQ(spindle_test::run_on_worker(rt, fib_progress(n)), expected) << "workers=" << workers;
  }
}

// ---------------------------------------------------------------------------
// Wake-ups across workers

struct ring_slot {
  test_event ev;
  std::atomic<std::size_t> last_worker{spindle::detail::not_a_worker};
};

long spin_work(long iterations) {
  long volatile x = 0;
  for (long i = 0; i < iterations; ++i)
    x = x + i;
  return x;
}

/// One link of a ring: waits for its event, does a little work, passes the
/// token on. Counts the wakes where the waker runs on another worker than
/// the one the woken task last ran on.
task<void> ring_member(ring_slot* mine, ring_slot* next, long rounds, std::atomic<long>* hops,
                       std::atomic<long>* cross) {
  for (long r = 0; r < rounds; ++r) {
    // Where it waits: a wake from another worker's task is a cross wake.
    mine->last_worker.store(spindle::detail::current_worker_index(), std::memory_order_relaxed);
    co_await mine->ev;
    mine->ev.reset();
    std::size_t here = spindle::detail::current_worker_index();
    spin_work(200);
    if ((hops->fetch_add(1, std::memory_order_relaxed) & 255) == 0) progress();
    if (next->last_worker.load(std::memory_order_relaxed) != here) {
      cross->fetch_add(1, std::memory_order_relaxed);
    }
    next->ev.set();
    // Yielding puts this task in the ring, where idle workers steal it: the
    // members spread over the workers instead of following the token.
    co_await spindle::yield_now();
  }
}

TEST(Stress, TokenRingsWakeAcrossWorkers) {
  // Fewer rings than workers: the idle workers steal the members that
  // yield after passing the token, so that a member often waits on another
  // worker than the one its waker runs on.
  constexpr int rings = 2;
  constexpr int members = 8;
  long const rounds = scaled(10'000, 400);  // 2 x 8 x 10,000 = 160,000 wakes
  std::vector<std::unique_ptr<ring_slot[]>> slots;
  std::atomic<long> hops{0};
  std::atomic<long> cross{0};
  spindle::runtime rt{{.workers = 4}};
  std::vector<join_handle<void>> hs;
  for (int r = 0; r < rings; ++r) {
    slots.emplace_back(new ring_slot[members]);
    for (int m = 0; m < members; ++m) {
      hs.push_back(
          rt.spawn(ring_member(&slots[r][m], &slots[r][(m + 1) % members], rounds, &hops, &cross)));
    }
  }
  for (int r = 0; r < rings; ++r)
    slots[r][0].ev.set();  // one token per ring, from this thread
  for (auto& h : hs)
    spindle_test::wait_and_take(h, 300s);
  EXPECT_EQ(hops.load(), rings * members * rounds);
  // The claim in the name: some tokens were passed to a member waiting on
  // another worker (0 when every wake stays on the waker's worker).
  EXPECT_GT(cross.load(), 0) << "no wake crossed workers";
  std::printf("%ld hops, %ld woke a task last run on another worker, %llu tasks stolen\n",
              hops.load(), cross.load(), static_cast<unsigned long long>(rt.stats().total_stolen));
}

// Barrier rounds: a coordinator wakes N participants at once (they land on
// its worker, idle workers steal them), each works a little, and the last to
// finish wakes the coordinator. Wakers and wakees keep changing workers.
struct barrier_state {
  explicit barrier_state(int n)
      : go(new test_event[n]), last_worker(new std::atomic<std::size_t>[n]) {
    for (int i = 0; i < n; ++i)
      last_worker[i].store(spindle::detail::not_a_worker);
  }
  std::unique_ptr<test_event[]> go;
  std::unique_ptr<std::atomic<std::size_t>[]> last_worker;
  test_event done;
  std::atomic<std::size_t> coordinator_worker{spindle::detail::not_a_worker};
  std::atomic<int> remaining{0};
  std::atomic<long> wakes{0};
  std::atomic<long> cross{0};
};

void count_wake(barrier_state* st, std::atomic<std::size_t> const& wakee_last) {
  st->wakes.fetch_add(1, std::memory_order_relaxed);
  if (wakee_last.load(std::memory_order_relaxed) != spindle::detail::current_worker_index()) {
    st->cross.fetch_add(1, std::memory_order_relaxed);
  }
}

task<void> participant(barrier_state* st, int i, long rounds) {
  for (long r = 0; r < rounds; ++r) {
    co_await st->go[i];
    st->go[i].reset();
    st->last_worker[i].store(spindle::detail::current_worker_index(), std::memory_order_relaxed);
    spin_work(3000);
    if (st->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      count_wake(st, st->coordinator_worker);
      st->done.set();
    }
  }
}

task<void> coordinator(barrier_state* st, int n, long rounds) {
  for (long r = 0; r < rounds; ++r) {
    st->remaining.store(n, std::memory_order_release);
    for (int i = 0; i < n; ++i) {
      count_wake(st, st->last_worker[i]);
      st->go[i].set();
    }
    co_await st->done;
    st->done.reset();
    st->coordinator_worker.store(spindle::detail::current_worker_index(),
                                 std::memory_order_relaxed);
    if ((r & 63) == 0) progress();
  }
}

TEST(Stress, BarrierRoundsWakeAcrossWorkers) {
  constexpr int n = 16;
  long const rounds = scaled(7'000, 200);  // 7,000 x 17 = 119,000 wakes
  barrier_state st(n);
  spindle::runtime rt{{.workers = 4}};
  std::vector<join_handle<void>> hs;
  for (int i = 0; i < n; ++i)
    hs.push_back(rt.spawn(participant(&st, i, rounds)));
  hs.push_back(rt.spawn(coordinator(&st, n, rounds)));
  for (auto& h : hs)
    spindle_test::wait_and_take(h, 300s);
  EXPECT_EQ(st.wakes.load(), rounds * (n + 1));
  EXPECT_GT(st.cross.load(), 0) << "no wake crossed workers";
  std::printf("%ld wakes, %ld from another worker than the wakee last ran on, %llu stolen\n",
              st.wakes.load(), st.cross.load(),
              static_cast<unsigned long long>(rt.stats().total_stolen));
}

task<long> join_chain(int depth) {
  if (depth == 0) co_return 0;
  auto h = spindle::spawn(join_chain(depth - 1));
  if (depth % 4 == 0) co_await spindle::yield_now();  // lets the child be stolen
  long below = co_await h;
  if ((depth & 255) == 0) progress();
  co_return below + 1;
}

task<long> many_chains(int chains, int depth) {
  std::vector<join_handle<long>> hs;
  for (int i = 0; i < chains; ++i)
    hs.push_back(spindle::spawn(join_chain(depth)));
  long sum = 0;
  for (auto& h : hs)
    sum += co_await h;
  co_return sum;
}

TEST(Stress, JoinChainsWakeAcrossWorkers) {
  int const chains = 64;
  int const depth = static_cast<int>(scaled(2'000, 100));  // 128,000 join wake-ups
  spindle::runtime rt{{.workers = 3}};
  EXPECT_EQ(rt.block_on(many_chains(chains, depth)), static_cast<long>(chains) * depth);
}

task<void> ping(test_event* to_pong, test_event* from_pong, long rounds) {
  for (long i = 0; i < rounds; ++i) {
    to_pong->set();
    co_await *from_pong;
    from_pong->reset();
    if ((i & 1023) == 0) progress();
  }
}
task<void> pong(test_event* from_ping, test_event* to_ping, long rounds) {
  for (long i = 0; i < rounds; ++i) {
    co_await *from_ping;
    from_ping->reset();
    to_ping->set();
  }
}

TEST(Stress, PingPongPairs) {
  constexpr int pairs = 8;
  long const rounds = scaled(20'000, 500);  // 8 x 2 x 20,000 = 320,000 wakes
  std::vector<std::unique_ptr<test_event[]>> events;
  spindle::runtime rt{{.workers = 4}};
  std::vector<join_handle<void>> hs;
  for (int p = 0; p < pairs; ++p) {
    events.emplace_back(new test_event[2]);
    hs.push_back(rt.spawn(pong(&events[p][0], &events[p][1], rounds)));
    hs.push_back(rt.spawn(ping(&events[p][0], &events[p][1], rounds)));
  }
  for (auto& h : hs)
    spindle_test::wait_and_take(h, 300s);
}

TEST(Stress, WakeUpsFromAForeignThread) {
  // A plain thread wakes a task, the task answers through an atomic: every
  // wake goes through the global queue and a parked worker.
  long const rounds = scaled(20'000, 500);
  test_event ev;
  std::atomic<long> answered{0};
  spindle::runtime rt{{.workers = 2}};
  auto responder = [](test_event* ev, std::atomic<long>* answered, long rounds) -> task<void> {
    for (long i = 0; i < rounds; ++i) {
      co_await *ev;
      ev->reset();
      answered->store(i + 1, std::memory_order_release);
    }
  };
  auto h = rt.spawn(responder(&ev, &answered, rounds));
  for (long i = 0; i < rounds; ++i) {
    ev.set();
    ASSERT_TRUE(spindle_test::wait_until([&] { return answered.load() == i + 1; }, 60s))
        << "lost wake-up at round " << i;
    if ((i & 1023) == 0) progress();
  }
  spindle_test::wait_and_take(h);
}

// ---------------------------------------------------------------------------
// Yield storms

task<void> yielder(int yields, std::atomic<long>* total) {
  for (int i = 0; i < yields; ++i) {
    co_await spindle::yield_now();
    if ((total->fetch_add(1, std::memory_order_relaxed) & 4095) == 0) progress();
  }
}

task<void> yield_storm(int tasks, int yields, std::atomic<long>* total) {
  std::vector<join_handle<void>> hs;
  for (int i = 0; i < tasks; ++i)
    hs.push_back(spindle::spawn(yielder(yields, total)));
  for (auto& h : hs)
    co_await h;
}

TEST(Stress, YieldStorm) {
  int const tasks = 1'000;
  int const yields = static_cast<int>(scaled(200, 10));
  for (std::size_t workers : {1u, 2u, 4u}) {
    std::atomic<long> total{0};
    spindle::runtime rt{{.workers = workers}};
    rt.block_on(yield_storm(tasks, yields, &total));
    EXPECT_EQ(total.load(), static_cast<long>(tasks) * yields) << "workers=" << workers;
  }
}

TEST(Stress, YieldingWhileSpawningFromOutside) {
  std::atomic<long> total{0};
  spindle::runtime rt{{.workers = 2}};
  int const per = static_cast<int>(scaled(2'000, 100));
  std::vector<join_handle<void>> hs;
  std::thread outside([&] {
    for (int i = 0; i < per; ++i)
      (void)rt.spawn(yielder(10, &total));
  });
  for (int i = 0; i < per; ++i)
    hs.push_back(rt.spawn(yielder(10, &total)));
  outside.join();
  for (auto& h : hs)
    spindle_test::wait_and_take(h);
  EXPECT_TRUE(spindle_test::wait_until([&] { return total.load() == 2L * per * 10; }, 60s));
}

// ---------------------------------------------------------------------------
// Shutdown with work pending

task<void> pending_mix(int kind, [[maybe_unused]] tracked t, std::atomic<int>* ran) {
  ran->fetch_add(1, std::memory_order_relaxed);
  switch (kind % 5) {
    case 0:
      co_await suspend_forever{};
      break;
    case 1:
      for (;;)
        co_await spindle::yield_now();
    case 2: {
      auto h = spindle::spawn(value_of(kind));
      co_await h;
      break;
    }
    case 3: {
      std::vector<join_handle<int>> hs;
      for (int i = 0; i < 20; ++i)
        hs.push_back(spindle::spawn(value_of(i)));
      for (auto& h : hs)
        co_await h;
      break;
    }
    default:
      break;
  }
}

TEST(Stress, ShutdownWithWorkPendingRepeated) {
  int const rounds = static_cast<int>(scaled(200, 20));
  counts c;
  std::atomic<int> ran{0};
  for (int round = 0; round < rounds; ++round) {
    {
      spindle::runtime rt{{.workers = static_cast<std::size_t>(2 + round % 3)}};
      std::vector<join_handle<void>> keep;
      for (int i = 0; i < 200; ++i) {
        auto h = rt.spawn(pending_mix(i + round, tracked(c), &ran));
        if (i % 2 == 0) keep.push_back(std::move(h));  // half detached
      }
      if (round % 4 == 0) {
        // Also from inside: a worker spawns a burst and the runtime dies.
        auto burst = []() -> task<void> {
          for (int i = 0; i < 500; ++i)
            (void)spindle::spawn(value_of(i));
          co_await suspend_forever{};
        };
        keep.push_back(rt.spawn(burst()));
      }
      // `keep` goes first (those tasks become detached), then the runtime.
    }
    ASSERT_EQ(c.alive(), 0) << "round " << round << ": frames leaked at shutdown";
    progress();
  }
}

TEST(Stress, ShutdownWithHandlesOutlivingTheRuntime) {
  int const rounds = static_cast<int>(scaled(100, 10));
  counts c;
  std::atomic<int> ran{0};
  for (int round = 0; round < rounds; ++round) {
    std::vector<join_handle<void>> keep;
    {
      spindle::runtime rt{{.workers = 2}};
      for (int i = 0; i < 100; ++i)
        keep.push_back(rt.spawn(pending_mix(i, tracked(c), &ran)));
    }
    for (auto& h : keep) {
      ASSERT_TRUE(h.is_finished());
      try {
        h.take();
      } catch (spindle::task_cancelled const&) {
      }
    }
    keep.clear();
    ASSERT_EQ(c.alive(), 0) << "round " << round;
    progress();
  }
}

// ---------------------------------------------------------------------------
// Spawns racing shutdown from foreign threads
//
// runtime.hpp forbids calling the runtime while its destructor runs, because
// the scheduler's memory goes away. To race spawns with the start of
// shutdown (closing of the owned lists) without touching freed memory, a
// "gate" task's destructor -- which shutdown runs after it stopped accepting
// -- waits until every spawning thread has seen a refusal and stopped.

task<int> counted_body(std::atomic<long>* bodies) {
  bodies->fetch_add(1, std::memory_order_relaxed);
  co_return 1;
}

struct wait_for_spawners {
  std::atomic<int>* stopped;
  int expected;
  std::atomic<bool>* timed_out;
  ~wait_for_spawners() {
    if (!spindle_test::wait_until([&] { return stopped->load() == expected; }, 20s)) {
      timed_out->store(true);
    }
  }
};

task<void> gate(std::atomic<int>* stopped, int expected, std::atomic<bool>* timed_out,
                std::atomic<bool>* started) {
  wait_for_spawners guard{stopped, expected, timed_out};
  started->store(true);
  co_await suspend_forever{};
}

TEST(Stress, SpawnsFromForeignThreadsRacingShutdown) {
  int const rounds = static_cast<int>(scaled(30, 5));
  constexpr int spawners = 4;
  long total_values = 0;
  long total_cancelled = 0;
  for (int round = 0; round < rounds; ++round) {
    std::atomic<long> bodies{0};
    std::atomic<int> stopped{0};
    std::atomic<bool> timed_out{false};
    std::atomic<bool> gate_started{false};
    std::atomic<int> spawned_some{0};
    std::vector<std::vector<join_handle<int>>> handles(spawners);
    auto rt = std::make_unique<spindle::runtime>(spindle::runtime_config{.workers = 2});
    spindle::detail::scheduler* sched = rt->scheduler_handle();
    auto gate_handle = rt->spawn(gate(&stopped, spawners, &timed_out, &gate_started));
    ASSERT_TRUE(spindle_test::wait_until([&] { return gate_started.load(); }));

    std::vector<std::thread> threads;
    for (int t = 0; t < spawners; ++t) {
      threads.emplace_back([&, t] {
        auto& mine = handles[static_cast<std::size_t>(t)];
        for (int i = 0;; ++i) {
          auto frame = counted_body(&bodies).release();
          join_handle<int> h{spindle::detail::spawn_root(sched, frame, &frame.promise())};
          bool refused = h.is_finished() && h.header()->cancelled_before_finish;
          mine.push_back(std::move(h));
          if (i == 10) spawned_some.fetch_add(1);
          if (refused) break;
        }
        stopped.fetch_add(1);
      });
    }
    ASSERT_TRUE(spindle_test::wait_until([&] { return spawned_some.load() == spawners; }));
    rt.reset();  // races the spawners
    for (auto& t : threads)
      t.join();
    ASSERT_FALSE(timed_out.load()) << "spawners did not observe the refusal";

    long values = 0;
    long cancelled = 0;
    for (auto& v : handles) {
      for (auto& h : v) {
        ASSERT_TRUE(h.is_finished()) << "a spawned task was lost (never completed or cancelled)";
        try {
          values += h.take();
        } catch (spindle::task_cancelled const&) {
          ++cancelled;
        }
      }
    }
    EXPECT_EQ(values, bodies.load()) << "a task ran but its handle does not say so, or vice versa";
    EXPECT_GE(cancelled, spawners) << "each spawner stops at a refusal";
    EXPECT_THROW(gate_handle.take(), spindle::task_cancelled);
    total_values += values;
    total_cancelled += cancelled;
    progress();
  }
  std::printf("%ld tasks ran, %ld refused or cancelled\n", total_values, total_cancelled);
}

// ---------------------------------------------------------------------------
// Abort racing completion

task<int> yields_then_returns(int yields, tracked, std::atomic<long>* finished) {
  for (int i = 0; i < yields; ++i)
    co_await spindle::yield_now();
  finished->fetch_add(1, std::memory_order_relaxed);
  co_return 1;
}

task<int> awaits_child(int yields, tracked t, std::atomic<long>* finished) {
  // Suspended on a join while it may be aborted: cancelled when the child's
  // completion wakes it, or completes first.
  int v = co_await spindle::spawn(yields_then_returns(yields, t, finished));
  co_return v;
}

task<long> abort_race(int n, counts* c, std::atomic<long>* finished, long* cancelled) {
  std::vector<join_handle<int>> hs;
  for (int i = 0; i < n; ++i) {
    if (i % 2 == 0) {
      hs.push_back(spindle::spawn(yields_then_returns(i % 7, tracked(*c), finished)));
    } else {
      hs.push_back(spindle::spawn(awaits_child(i % 5, tracked(*c), finished)));
    }
    // Abort an earlier task, which may be queued, running elsewhere,
    // suspended, or finished by now.
    if (i >= 3 && i % 3 == 0) hs[static_cast<std::size_t>(i - 3)].abort();
    if (i % 16 == 0) co_await spindle::yield_now();
  }
  long values = 0;
  for (auto& h : hs) {
    try {
      values += co_await h;
    } catch (spindle::task_cancelled const&) {
      ++*cancelled;
    }
  }
  progress();
  co_return values;
}

TEST(Stress, AbortRacingCompletion) {
  int const n = static_cast<int>(scaled(20'000, 1'000));
  counts c;
  std::atomic<long> finished{0};
  long cancelled = 0;
  long values = 0;
  {
    spindle::runtime rt{{.workers = 3}};
    // Snapshots from another thread while the runtime is busy.
    std::atomic<bool> stop{false};
    std::thread watcher([&] {
      while (!stop.load())
        (void)rt.stats();
    });
    values = rt.block_on(abort_race(n, &c, &finished, &cancelled));
    stop.store(true);
    watcher.join();
  }
  EXPECT_EQ(values + cancelled, n) << "every handle reports a value or task_cancelled";
  EXPECT_GE(finished.load(), values);
  EXPECT_EQ(c.alive(), 0);
  std::printf("%ld values, %ld cancelled\n", values, cancelled);
}

// ---------------------------------------------------------------------------
// Exceptions

task<int> throws_index(long i) {
  if (i % 3 == 0) co_await spindle::yield_now();
  throw custom_error(i);
  co_return 0;
}

task<long> collect_exceptions(long n, std::vector<std::atomic<int>>* seen) {
  constexpr long batch = 1'000;
  long caught = 0;
  for (long base = 0; base < n; base += batch) {
    std::vector<join_handle<int>> hs;
    for (long i = base; i < base + batch && i < n; ++i)
      hs.push_back(spindle::spawn(throws_index(i)));
    for (auto& h : hs) {
      try {
        co_await h;
      } catch (custom_error const& e) {
        (*seen)[static_cast<std::size_t>(e.code)].fetch_add(1);
        ++caught;
      }
    }
    progress();
  }
  co_return caught;
}

TEST(Stress, ExceptionsFromManyTasksAreDeliveredExactlyOnce) {
  long const n = scaled(100'000, 2'000);
  std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
  spindle::runtime rt{{.workers = 3}};
  EXPECT_EQ(rt.block_on(collect_exceptions(n, &seen)), n);
  long wrong = 0;
  for (auto& s : seen)
    wrong += s.load() != 1;
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(rt.stats().detached_exceptions, 0u);
}

TEST(Stress, DetachedExceptionsAreCountedExactlyOnce) {
  long const n = scaled(10'000, 500);
  spindle::runtime rt{{.workers = 3}};
  testing::internal::CaptureStderr();
  auto spawner = [](long n) -> task<void> {
    for (long i = 0; i < n; ++i)
      (void)spindle::spawn(throws_index(i));
    co_return;
  };
  rt.block_on(spawner(n));
  // Each report is printed before its task stops counting as alive.
  bool all = spindle_test::wait_until(
      [&] {
        auto s = rt.stats();
        return s.detached_exceptions >= static_cast<std::uint64_t>(n) && s.tasks_alive == 0;
      },
      60s);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(all);
  EXPECT_EQ(rt.stats().detached_exceptions, static_cast<std::uint64_t>(n));
  long reports = 0;
  for (std::size_t pos = 0; (pos = err.find("stress error", pos)) != std::string::npos; ++pos) {
    ++reports;
  }
  EXPECT_EQ(reports, n) << "each detached exception is reported exactly once";
}

}  // namespace
