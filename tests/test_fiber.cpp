// Fibers (spindle/fiber.hpp): spawn and join, every awaitable inside a
// fiber, migration, exceptions, cancellation, shutdown, stacks (guard page,
// pools), the exception state across awaits, and a million fibers with
// random awaits.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/spindle.hpp"

namespace {

using namespace std::chrono_literals;
using spindle_test::await_handle;
using spindle_test::counts;
using spindle_test::scaled;
using spindle_test::suspend_forever;
using spindle_test::tracked;
namespace tf = spindle::this_fiber;

spindle::runtime_config two_workers() {
  return {.workers = 2};
}

template <class T>
T join(spindle::runtime& rt, spindle::join_handle<T> h) {
  return rt.block_on(await_handle(std::move(h)));
}

spindle::task<int> add_one(int v) {
  co_await spindle::yield_now{};
  co_return v + 1;
}

// Not inlined: the worker must be looked up afresh after an await.
[[gnu::noinline]] std::size_t worker_now() {
  return spindle::detail::current_worker_index();
}
[[gnu::noinline]] long thread_now() {
  return static_cast<long>(::syscall(SYS_gettid));
}

// ------------------------------------------------------------ spawn, join

TEST(Fiber, SpawnFromATaskAndJoin) {
  spindle::runtime rt{two_workers()};
  int v = rt.block_on([]() -> spindle::task<int> {
    auto h = spindle::spawn_fiber([] { return 41; });
    co_return co_await h + 1;
  }());
  EXPECT_EQ(v, 42);
}

TEST(Fiber, RuntimeSpawnFiberFromAnyThread) {
  spindle::runtime rt{two_workers()};
  std::atomic<bool> ran{false};
  auto h = rt.spawn_fiber([&] {
    ran = true;
    EXPECT_TRUE(tf::in_fiber());
  });
  join(rt, std::move(h));
  EXPECT_TRUE(ran.load());
  // From a plain thread too, with options.
  std::thread t([&] {
    auto h2 = rt.spawn_fiber([] { return std::string("moved"); }, {.stack_size = 32 * 1024});
    EXPECT_EQ(join(rt, std::move(h2)), "moved");
  });
  t.join();
}

TEST(Fiber, SpawnFromAFiberAndAwaitItsHandle) {
  spindle::runtime rt{two_workers()};
  auto h = rt.spawn_fiber([] {
    auto inner = spindle::spawn_fiber([] { return 20; });
    auto inner2 = spindle::spawn_fiber([] {
      tf::yield();
      return 22;
    });
    return tf::await(inner) + tf::await(std::move(inner2));
  });
  EXPECT_EQ(join(rt, std::move(h)), 42);
}

TEST(Fiber, MoveOnlyResultsAndCallables) {
  spindle::runtime rt{two_workers()};
  auto p = std::make_unique<int>(7);
  auto h = rt.spawn_fiber([p = std::move(p)]() mutable { return std::move(p); });
  std::unique_ptr<int> r = join(rt, std::move(h));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(*r, 7);
}

TEST(Fiber, ExceptionsReachTheJoinHandle) {
  spindle::runtime rt{two_workers()};
  auto h = rt.spawn_fiber([]() -> int {
    tf::yield();
    throw std::runtime_error("from the fiber");
  });
  try {
    join(rt, std::move(h));
    FAIL() << "no exception";
  } catch (std::runtime_error const& e) {
    EXPECT_STREQ(e.what(), "from the fiber");
  }
}

TEST(Fiber, AwaitRethrowsTheAwaitablesException) {
  spindle::runtime rt{two_workers()};
  auto h = rt.spawn_fiber([] {
    auto failing = []() -> spindle::task<int> {
      co_await spindle::yield_now{};
      throw std::logic_error("child");
    };
    try {
      tf::await(failing());
      return false;
    } catch (std::logic_error const&) {
      return true;
    }
  });
  EXPECT_TRUE(join(rt, std::move(h)));
}

// ------------------------------------------------------------ errors

TEST(Fiber, OutsideAFiberTheCallsThrowOperationNotPermitted) {
  EXPECT_FALSE(tf::in_fiber());
  auto expect_eperm = [](auto&& fn) {
    try {
      fn();
      ADD_FAILURE() << "no exception";
    } catch (std::system_error const& e) {
      EXPECT_EQ(e.code(), std::errc::operation_not_permitted);
    }
  };
  expect_eperm([] { tf::await(spindle::yield_now{}); });
  expect_eperm([] { tf::yield(); });
  expect_eperm([] { tf::sleep_for(1ms); });
  expect_eperm([] { (void)spindle::spawn_fiber([] {}); });
  // Inside a task (not a fiber) too.
  spindle::runtime rt{two_workers()};
  rt.block_on([&]() -> spindle::task<void> {
    EXPECT_FALSE(tf::in_fiber());
    expect_eperm([] { tf::yield(); });
    co_return;
  }());
}

TEST(Fiber, StacksBelow16KiBAreRefused) {
  spindle::runtime rt{two_workers()};
  for (std::size_t bytes : {std::size_t{0}, std::size_t{4096}, std::size_t{16 * 1024 - 1}}) {
    try {
      (void)rt.spawn_fiber([] {}, {.stack_size = bytes});
      ADD_FAILURE() << bytes;
    } catch (std::system_error const& e) {
      EXPECT_EQ(e.code(), std::errc::invalid_argument);
    }
  }
  // 16 KiB and an odd size (rounded up to pages) work.
  join(rt, rt.spawn_fiber([] {}, {.stack_size = 16 * 1024}));
  join(rt, rt.spawn_fiber([] {}, {.stack_size = 20'001}));
}

// ------------------------------------------------------------ every awaitable

TEST(Fiber, EverySpindleAwaitableWorksInsideAFiber) {
  spindle::runtime rt{two_workers()};
  auto h = rt.spawn_fiber([] {
    std::vector<std::string> done;
    // task<T> and join_handle<T>
    EXPECT_EQ(tf::await(add_one(1)), 2);
    auto jh = spindle::spawn(add_one(2));
    EXPECT_EQ(tf::await(jh), 3);
    done.push_back("task, join_handle");
    // sleep_for, sleep_until, this_fiber::sleep_for, timeout
    auto t0 = std::chrono::steady_clock::now();
    tf::await(spindle::sleep_for(2ms));
    tf::await(spindle::sleep_until(std::chrono::steady_clock::now() + 1ms));
    tf::sleep_for(1ms);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 4ms);
    EXPECT_EQ(tf::await(spindle::timeout(10s, add_one(3))), 4);
    EXPECT_THROW(tf::await(spindle::timeout(1ms,
                                            []() -> spindle::task<int> {
                                              co_await spindle::sleep_for(10s);
                                              co_return 0;
                                            }())),
                 spindle::timed_out);
    done.push_back("time");
    // channel send/recv (rendezvous: the partner must run elsewhere)
    spindle::channel<int> ch{0};
    auto partner = spindle::spawn_fiber([&ch] {
      auto v = tf::await(ch.recv());
      tf::await(ch.send(*v * 2));
    });
    tf::await(ch.send(21));
    EXPECT_EQ(tf::await(ch.recv()), std::optional<int>(42));
    tf::await(partner);
    // oneshot
    auto [tx, rx] = spindle::make_oneshot<int>();
    auto sender = spindle::spawn_fiber([tx = std::move(tx)]() mutable {
      tf::yield();
      (void)std::move(tx).send(5);
    });
    EXPECT_EQ(tf::await(std::move(rx)), 5);
    tf::await(sender);
    // broadcast, watch
    spindle::broadcast<int> b{4};
    auto sub = b.subscribe();
    b.send(9);
    EXPECT_EQ(tf::await(sub.recv()), std::optional<int>(9));
    spindle::watch<int> w{1};
    auto wrx = w.subscribe();
    auto setter = spindle::spawn_fiber([&w] {
      tf::yield();
      w.send(2);
    });
    EXPECT_TRUE(tf::await(wrx.changed()));
    EXPECT_EQ(wrx.get(), 2);
    tf::await(setter);
    done.push_back("channels");
    // mutex, rwlock, semaphore
    spindle::mutex m;
    { auto g = tf::await(m.lock()); }
    spindle::rwlock rw;
    { auto r = tf::await(rw.lock_shared()); }
    { auto wg = tf::await(rw.lock()); }
    spindle::semaphore sem{1};
    tf::await(sem.acquire());
    sem.release();
    // event, notify, latch, barrier
    spindle::event ev;
    spindle::notify n;
    spindle::latch l{2};
    spindle::barrier bar{2};
    auto helper = spindle::spawn_fiber([&] {
      ev.set();
      n.notify_one();
      l.count_down();
      tf::await(bar.arrive_and_wait());
    });
    tf::await(ev.wait());
    tf::await(n.wait());
    l.count_down();
    tf::await(l.wait());
    tf::await(bar.arrive_and_wait());
    tf::await(helper);
    done.push_back("sync");
    // when_all, when_any
    auto [a, c] = tf::await(spindle::when_all(add_one(10), add_one(20)));
    EXPECT_EQ(a + c, 32);
    auto any = tf::await(spindle::when_any(add_one(1), []() -> spindle::task<int> {
      co_await spindle::sleep_for(10s);
      co_return 0;
    }()));
    EXPECT_EQ(any.index, 0u);
    done.push_back("combinators");
    return done.size();
  });
  EXPECT_EQ(join(rt, std::move(h)), 5u);
}

// A fiber awaiting a task that awaits a fiber.
TEST(Fiber, AFiberAwaitsATaskThatAwaitsAFiber) {
  spindle::runtime rt{two_workers()};
  auto h = rt.spawn_fiber([] {
    auto middle = []() -> spindle::task<int> {
      auto inner = spindle::spawn_fiber([] {
        tf::sleep_for(1ms);
        return 40;
      });
      int v = co_await inner;
      co_return v + 1;
    };
    return tf::await(middle()) + 1;
  });
  EXPECT_EQ(join(rt, std::move(h)), 42);
}

TEST(Fiber, AnAwaitThatIsReadyDoesNotSwitch) {
  spindle::runtime rt{two_workers()};
  auto h = rt.spawn_fiber([] {
    spindle::event ev;
    ev.set();
    long before = thread_now();
    for (int i = 0; i < 1000; ++i)
      tf::await(ev.wait());  // ready: no suspension, no chance to migrate
    return before == thread_now();
  });
  EXPECT_TRUE(join(rt, std::move(h)));
}

// ------------------------------------------------------------ scheduling

TEST(Fiber, FibersMigrateBetweenWorkers) {
  spindle::runtime rt{two_workers()};
  // Many fibers yielding: the workers steal from each other, and a fiber
  // that resumes after a yield on the other worker has migrated.
  std::atomic<long> migrations{0};
  for (int round = 0; round < 50 && migrations.load() == 0; ++round) {
    std::vector<spindle::join_handle<void>> hs;
    for (int i = 0; i < 64; ++i) {
      hs.push_back(rt.spawn_fiber([&] {
        std::size_t last = worker_now();
        for (int k = 0; k < 200; ++k) {
          tf::yield();
          std::size_t now = worker_now();
          if (now != last) migrations.fetch_add(1);
          last = now;
          volatile int spin = 0;
          for (int s = 0; s < 200; ++s)
            spin = spin + s;
        }
      }));
    }
    for (auto& h : hs)
      join(rt, std::move(h));
  }
  EXPECT_GT(migrations.load(), 0);
}

// The C++ exception state belongs to the fiber: an await inside a catch
// block (which may resume on another thread, after other code handled other
// exceptions there) keeps `throw;` and std::uncaught_exceptions right.
TEST(Fiber, AnAwaitInsideACatchBlockKeepsTheExceptionBeingHandled) {
  spindle::runtime rt{two_workers()};
  std::vector<spindle::join_handle<int>> hs;
  for (int i = 0; i < 32; ++i) {
    hs.push_back(rt.spawn_fiber([i] {
      try {
        throw std::runtime_error(std::to_string(i));
      } catch (std::runtime_error const&) {
        for (int k = 0; k < 20; ++k) {
          tf::yield();
          try {  // another exception handled and finished meanwhile
            throw 1;
          } catch (int) {
          }
        }
        try {
          throw;
        } catch (std::runtime_error const& again) {
          return std::stoi(again.what());
        }
      }
    }));
  }
  for (int i = 0; i < 32; ++i)
    EXPECT_EQ(join(rt, std::move(hs[static_cast<std::size_t>(i)])), i);
  // And the thread's own state is untouched by the fibers'.
  EXPECT_EQ(std::uncaught_exceptions(), 0);
  EXPECT_EQ(std::current_exception(), nullptr);
}

// ------------------------------------------------------------ cancellation

TEST(Fiber, AbortInTheMiddleOfAnAwaitUnwindsTheFiber) {
  spindle::runtime rt{two_workers()};
  counts c;
  std::atomic<int> cancelled_seen{0};
  std::atomic<bool> parked{false};
  auto h = rt.spawn_fiber([&] {
    tracked t{c};
    try {
      parked = true;
      tf::await(spindle::sleep_for(1h));
    } catch (spindle::task_cancelled const&) {
      cancelled_seen.fetch_add(1);
      throw;
    }
  });
  while (!parked.load())
    std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(5ms);
  h.abort();
  EXPECT_THROW(join(rt, std::move(h)), spindle::task_cancelled);
  EXPECT_EQ(cancelled_seen.load(), 1);
  EXPECT_EQ(c.alive(), 0);
}

TEST(Fiber, AFiberThatSwallowsCancellationEndsAtItsNextAwait) {
  spindle::runtime rt{two_workers()};
  counts c;
  std::atomic<int> swallowed{0};
  std::atomic<int> again{0};
  std::atomic<bool> parked{false};
  auto h = rt.spawn_fiber([&] {
    tracked t{c};
    try {
      parked = true;
      tf::await(suspend_forever{});
    } catch (spindle::task_cancelled const&) {
      swallowed.fetch_add(1);  // and go on as if nothing happened
    }
    try {
      tf::yield();
    } catch (spindle::task_cancelled const&) {
      again.fetch_add(1);
    }
    spindle::event ready;
    ready.set();
    tf::await(ready.wait());  // ready or not: cancelled
    ADD_FAILURE() << "an await after cancellation returned";
  });
  while (!parked.load())
    std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(5ms);
  h.abort();
  EXPECT_THROW(join(rt, std::move(h)), spindle::task_cancelled);
  EXPECT_EQ(swallowed.load(), 1);
  EXPECT_EQ(again.load(), 1);
  EXPECT_EQ(c.alive(), 0);
}

TEST(Fiber, AbortOfAFiberAwaitingATaskDestroysTheWholeChain) {
  spindle::runtime rt{two_workers()};
  counts c;
  std::atomic<bool> parked{false};
  auto h = rt.spawn_fiber([&] {
    tracked outer{c};
    auto deep = [](counts* cc, std::atomic<bool>* p) -> spindle::task<void> {
      tracked inner{*cc};
      *p = true;
      co_await suspend_forever{};
    };
    tf::await(deep(&c, &parked));
  });
  while (!parked.load())
    std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(5ms);
  h.abort();
  EXPECT_THROW(join(rt, std::move(h)), spindle::task_cancelled);
  EXPECT_EQ(c.alive(), 0);
}

TEST(Fiber, AbortBeforeTheFirstPollNeverRunsIt) {
  spindle::runtime rt{{.workers = 1}};
  std::atomic<bool> ran{false};
  rt.block_on([&]() -> spindle::task<void> {
    // The fiber is queued behind this task on the only worker.
    auto h = spindle::spawn_fiber([&] { ran = true; });
    h.abort();
    EXPECT_THROW(co_await h, spindle::task_cancelled);
  }());
  EXPECT_FALSE(ran.load());
}

TEST(Fiber, ShutdownUnwindsEverySuspendedFiber) {
  counts c;
  long const n = 10'000;  // the figure, under the sanitizers too
  std::atomic<long> unwound{0};
  std::vector<spindle::join_handle<void>> hs;
  {
    // Outlive the runtime: the fibers' unwinding at its shutdown uses them.
    std::atomic<long> parked{0};
    spindle::channel<int> never{0};
    spindle::runtime rt{two_workers()};
    for (long i = 0; i < n; ++i) {
      hs.push_back(rt.spawn_fiber([&, i] {
        tracked t{c};
        parked.fetch_add(1);
        try {
          switch (i % 3) {
            case 0:
              tf::await(spindle::sleep_for(1h));
              break;
            case 1:
              (void)tf::await(never.recv());
              break;
            default:
              tf::await(suspend_forever{});
          }
        } catch (spindle::task_cancelled const&) {
          unwound.fetch_add(1);
          throw;
        }
      }));
    }
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (parked.load() < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    ASSERT_EQ(parked.load(), n);
  }  // the runtime's shutdown destroys every fiber's root frame
  EXPECT_EQ(unwound.load(), n);
  EXPECT_EQ(c.alive(), 0);
  for (auto& h : hs)
    EXPECT_TRUE(h.is_finished());
}

// ------------------------------------------------------------ scopes

TEST(Fiber, FiberHandlesInWhenAllWhenAnyAndTaskGroup) {
  spindle::runtime rt{two_workers()};
  counts c;
  rt.block_on([&]() -> spindle::task<void> {
    // when_all of fiber handles (and a task).
    auto a = spindle::spawn_fiber([] {
      tf::sleep_for(1ms);
      return 1;
    });
    auto b = spindle::spawn_fiber([] { return 2; });
    auto [x, y, z] = co_await spindle::when_all(std::move(a), std::move(b), add_one(2));
    EXPECT_EQ(x + y + z, 6);
    // when_any: the loser is a fiber suspended in an await; it is unwound
    // (its destructors ran) before when_any returns.
    std::atomic<bool> loser_parked{false};
    auto loser = spindle::spawn_fiber([&] {
      tracked t{c};
      loser_parked = true;
      tf::await(spindle::sleep_for(1h));
      return 0;
    });
    while (!loser_parked.load())
      co_await spindle::yield_now{};
    auto winner = spindle::spawn_fiber([] {
      tf::yield();
      return 7;
    });
    auto r = co_await spindle::when_any(std::move(loser), std::move(winner));
    EXPECT_EQ(r.index, 1u);
    EXPECT_EQ(c.alive(), 0);
    // task_group: adopted fibers; a failure aborts the suspended siblings.
    {
      spindle::task_group g;
      std::atomic<int> parked{0};
      for (int i = 0; i < 8; ++i) {
        g.spawn(spindle::spawn_fiber([&] {
          tracked t{c};
          parked.fetch_add(1);
          tf::await(suspend_forever{});
        }));
      }
      while (parked.load() < 8)
        co_await spindle::yield_now{};
      g.spawn(spindle::spawn_fiber([] {
        tf::yield();
        throw std::runtime_error("sibling failed");
      }));
      EXPECT_THROW(co_await g.join(), std::runtime_error);
      EXPECT_EQ(c.alive(), 0);
    }
    // A group destroyed without join reaps suspended fibers.
    {
      spindle::task_group g;
      std::atomic<int> parked{0};
      for (int i = 0; i < 8; ++i) {
        g.spawn(spindle::spawn_fiber([&] {
          tracked t{c};
          parked.fetch_add(1);
          tf::await(spindle::sleep_for(1h));
        }));
      }
      while (parked.load() < 8)
        co_await spindle::yield_now{};
    }
    EXPECT_EQ(c.alive(), 0);
  }());
}

// ------------------------------------------------------------ I/O

class FiberIo : public ::testing::TestWithParam<spindle::io_backend> {};

TEST_P(FiberIo, AFileReadInsideAFiber) {
  std::optional<spindle::runtime> rt;
  try {
    rt.emplace(spindle::runtime_config{.workers = 2, .io = GetParam()});
  } catch (std::system_error const& e) {
    GTEST_SKIP() << "io_uring not usable here: " << e.what();
  }
  auto dir =
      std::filesystem::temp_directory_path() / ("spindle-fiber-io-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / "data";
  std::string content;
  for (int i = 0; i < 100'000; ++i)
    content += static_cast<char>('a' + i % 26);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(content.data(), 1, content.size(), f), content.size());
    std::fclose(f);
  }
  auto h = rt->spawn_fiber([&] {
    auto file = tf::await(spindle::io::file::open(path));
    std::string got;
    std::vector<std::byte> buf(4096);
    std::uint64_t off = 0;
    for (;;) {
      std::size_t n = tf::await(file.read_at(buf, off));
      if (n == 0) break;
      got.append(reinterpret_cast<char const*>(buf.data()), n);
      off += n;
    }
    bool missing_threw = false;
    try {
      (void)tf::await(spindle::io::file::open(dir / "missing"));
    } catch (std::system_error const& e) {
      missing_threw = e.code() == std::errc::no_such_file_or_directory;
    }
    return std::pair{got, missing_threw};
  });
  auto [got, missing_threw] = join(*rt, std::move(h));
  EXPECT_EQ(got, content);
  EXPECT_TRUE(missing_threw);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, FiberIo,
                         ::testing::Values(spindle::io_backend::uring,
                                           spindle::io_backend::threadpool),
                         [](auto const& info) {
                           return info.param == spindle::io_backend::uring ? "uring" : "threadpool";
                         });

// ------------------------------------------------------------ stacks

// Deep enough to pass any guard page: each frame holds 1 KiB.
int volatile recursion_limit = 1 << 30;
[[gnu::noinline]] int recurse(int depth, char const* above) {
  if (depth > recursion_limit) return 0;
  char volatile frame[1024];
  frame[0] = static_cast<char>(depth);
  frame[1023] = above[0];
  return recurse(depth + 1, const_cast<char const*>(&frame[0])) + frame[1];
}

std::uintptr_t overflow_low = 0;  // the guard page must be in [low, high)
std::uintptr_t overflow_high = 0;

void on_segv(int, siginfo_t* info, void*) {
  auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  ::_exit(addr >= overflow_low && addr < overflow_high ? 42 : 43);
}

void overflow_a_fiber_stack() {
  spindle::runtime rt{{.workers = 1}};
  std::size_t const stack = 64 * 1024;
  std::size_t const page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  auto h = rt.spawn_fiber(
      [&] {
        // The signal handler needs its own stack on this (worker) thread.
        static std::array<char, 64 * 1024> alt;
        stack_t ss{};
        ss.ss_sp = alt.data();
        ss.ss_size = alt.size();
        ::sigaltstack(&ss, nullptr);
        struct sigaction sa {};
        sa.sa_sigaction = &on_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        ::sigaction(SIGSEGV, &sa, nullptr);
        // The stack's top is a little above this local; its guard page is
        // the page below top - stack.
        char here = 0;
        auto top = reinterpret_cast<std::uintptr_t>(&here);
        overflow_high = top - stack + 2 * page;
        overflow_low = top - stack - 2 * page;
        return recurse(0, &here);
      },
      {.stack_size = stack});
  (void)join(rt, std::move(h));
  ::_exit(44);  // not reached: the overflow must fault
}

TEST(FiberDeathTest, AStackOverflowFaultsAtTheGuardPage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(overflow_a_fiber_stack(), ::testing::ExitedWithCode(42), "");
}

// A stack that cannot be mapped fails the fiber (its join handle throws
// not_enough_memory), never the process. In a child with a small address
// space limit (not under the sanitizers, whose shadow needs the space).
void spawn_beyond_the_address_space() {
  spindle::runtime rt{{.workers = 1}};
  struct rlimit lim {};
  ::getrlimit(RLIMIT_AS, &lim);
  lim.rlim_cur = 4ull << 30;  // 4 GiB: the runtime is up; a 16 GiB stack cannot fit
  if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(45);
  auto h = rt.spawn_fiber([] { return 1; }, {.stack_size = std::size_t{16} << 30});
  try {
    (void)join(rt, std::move(h));
  } catch (std::system_error const& e) {
    ::_exit(e.code() == std::errc::not_enough_memory ? 42 : 43);
  }
  ::_exit(44);
}

TEST(FiberDeathTest, AStackThatCannotBeMappedFailsTheFiber) {
  if (spindle_test::under_asan || spindle_test::under_tsan) GTEST_SKIP() << "sanitizer shadow";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(spawn_beyond_the_address_space(), ::testing::ExitedWithCode(42), "");
}

TEST(Fiber, SteadySpawnAndJoinMapsNoNewStacks) {
  spindle::runtime rt{two_workers()};
  // Warm up the pools, then spawn and join one at a time.
  for (int i = 0; i < 100; ++i)
    join(rt, rt.spawn_fiber([] { tf::yield(); }));
  std::uint64_t const before = spindle::detail::fiber_stacks_mapped();
  rt.block_on([]() -> spindle::task<void> {
    for (int i = 0; i < 2000; ++i) {
      auto h = spindle::spawn_fiber([] { tf::yield(); });
      co_await h;
    }
  }());
  EXPECT_EQ(spindle::detail::fiber_stacks_mapped(), before);
}

TEST(Fiber, ThePoolsGiveStacksBackBeyondTheirBound) {
  // 6,000 fibers of 64 KiB alive at once: 390 MiB of stacks, more than the
  // shared pool's 256 MiB plus two threads' 64 each; when they end the pools
  // keep at most their bounds and unmap the rest.
  std::size_t const page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::size_t const per = 64 * 1024 + page;
  long const n = 6000;
  std::uint64_t const unmapped_before = spindle::detail::fiber_stacks_unmapped();
  {
    spindle::runtime rt{two_workers()};
    spindle::event go;
    std::vector<spindle::join_handle<void>> hs;
    std::atomic<long> parked{0};
    for (long i = 0; i < n; ++i) {
      hs.push_back(rt.spawn_fiber([&go, &parked] {
        parked.fetch_add(1);
        tf::await(go.wait());
      }));
    }
    // Stacks are taken when a fiber first runs: wait until all hold one.
    while (parked.load() < n)
      std::this_thread::sleep_for(1ms);
    go.set();
    for (auto& h : hs)
      join(rt, std::move(h));
  }
  // The workers have exited: their pools went to the shared pool or were
  // unmapped. The shared pool keeps at most its bound, this thread's pool
  // (block_on ran fibers here too) at most 64 stacks of the size.
  EXPECT_LE(spindle::detail::fiber_shared_pool_bytes(), 256u * 1024 * 1024);
  EXPECT_LE(spindle::detail::fiber_local_pool_stacks(64 * 1024), 64u);
  EXPECT_GE(spindle::detail::fiber_stacks_unmapped() - unmapped_before,
            static_cast<std::uint64_t>(n) - (256u * 1024 * 1024) / per - 3 * 64);
}

// ------------------------------------------------------------ at scale

// 10^6 fibers over both workers, each doing random awaits: sleeps, channel
// round trips with a partner fiber, joins of tasks and fibers, yields. At
// most `window` alive at once. A lost wake-up leaves a fiber parked: the
// watchdog fails the test when nothing finished for 30 s.
TEST(Fiber, AMillionFibersWithRandomAwaitsLoseNoWakeUp) {
  long const total = scaled(1'000'000, 20'000);
  // TSan maps shadow memory beside every stack mapping, and 10,000 stacks
  // freed in random order fragment those mappings past vm.max_map_count
  // (65,530): its own mmap then fails. It runs with a smaller window.
  long const window = spindle_test::under_tsan ? 2'000 : 10'000;
  spindle::runtime rt{two_workers()};
  std::atomic<long> finished{0};
  std::atomic<long> checksum{0};
  spindle_test::watchdog dog{30s};
  rt.block_on([&]() -> spindle::task<void> {
    spindle::semaphore slots{static_cast<std::size_t>(window)};
    spindle::latch all{static_cast<std::ptrdiff_t>(total)};
    for (long i = 0; i < total; ++i) {
      co_await slots.acquire();
      (void)spindle::spawn_fiber([&, i] {
        std::minstd_rand rng{static_cast<std::uint32_t>(i + 1)};
        long sum = 0;
        int const steps = 1 + static_cast<int>(rng() % 4);
        for (int s = 0; s < steps; ++s) {
          switch (rng() % 5) {
            case 0:
              tf::sleep_for(std::chrono::milliseconds(rng() % 3));
              sum += 1;
              break;
            case 1: {
              spindle::channel<long> ch{0};
              auto partner = spindle::spawn_fiber([&ch] {
                auto v = tf::await(ch.recv());
                tf::await(ch.send(*v + 1));
              });
              tf::await(ch.send(i));
              sum += *tf::await(ch.recv()) - i;
              tf::await(partner);
              break;
            }
            case 2:
              sum += tf::await(add_one(0));
              break;
            case 3: {
              auto child = spindle::spawn(add_one(0));
              sum += tf::await(child);
              break;
            }
            default:
              tf::yield();
              sum += 1;
          }
        }
        checksum.fetch_add(sum == steps ? 1 : 0);
        finished.fetch_add(1);
        spindle_test::progress();
        slots.release();
        all.count_down();
      });
    }
    co_await all.wait();
  }());
  EXPECT_EQ(finished.load(), total);
  EXPECT_EQ(checksum.load(), total);
}

}  // namespace
