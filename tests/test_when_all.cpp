// Tests of spindle::when_all: results in argument order (variadic and
// vector forms, void and move-only results), real concurrency, the first
// exception cancelling and awaiting the siblings, cancellation of the
// awaiting task, and misuse errors; join handles adopted as children
// (running, finished, failing, aborted with the call, mixed with tasks).
#include "spindle/when_all.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <variant>
#include <vector>

#include "combinator_test_support.hpp"
#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

using namespace std::chrono_literals;
using combinator_test::after_yields;
using combinator_test::custom_error;
using combinator_test::park_forever;
using combinator_test::spin_forever;
using combinator_test::throw_after_yields;
using spindle::join_handle;
using spindle::task;
using spindle_test::counts;
using spindle_test::gate;
using spindle_test::tracked;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(20)));

task<void> count_after_yields(std::atomic<int>* counter, int yields) {
  for (int i = 0; i < yields; ++i)
    co_await spindle::yield_now{};
  counter->fetch_add(1);
}

TEST(WhenAll, VariadicResultsInArgumentOrder) {
  for (std::size_t workers : {1u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    auto outer = []() -> task<int> {
      // The later arguments finish first.
      auto [a, b, c, d] =
          co_await spindle::when_all(after_yields(1, 30), after_yields(std::string("two"), 10),
                                     after_yields(3.5, 0), []() -> task<void> { co_return; }());
      EXPECT_EQ(a, 1);
      EXPECT_EQ(b, "two");
      EXPECT_EQ(c, 3.5);
      static_assert(std::is_same_v<decltype(d), std::monostate>);
      co_return a;
    };
    EXPECT_EQ(rt.block_on(outer()), 1);
    EXPECT_EQ(spindle_test::run_on_worker(rt, outer()), 1);
  }
}

TEST(WhenAll, EmptyVariadicAndEmptyVector) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<std::size_t> {
    std::tuple<> none = co_await spindle::when_all();
    (void)none;
    std::vector<int> v = co_await spindle::when_all(std::vector<task<int>>{});
    co_return v.size();
  };
  EXPECT_EQ(rt.block_on(outer()), 0u);
}

TEST(WhenAll, VectorResultsInOrder) {
  spindle::runtime rt{{.workers = 4}};
  auto outer = []() -> task<bool> {
    constexpr int n = 200;
    std::vector<task<int>> tasks;
    for (int i = 0; i < n; ++i)
      tasks.push_back(after_yields(i * 7, (n - i) % 13));
    std::vector<int> out = co_await spindle::when_all(std::move(tasks));
    EXPECT_EQ(out.size(), static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(out[static_cast<std::size_t>(i)], i * 7) << i;
    co_return true;
  };
  EXPECT_TRUE(rt.block_on(outer()));
}

TEST(WhenAll, VoidTasksGiveMonostate) {
  spindle::runtime rt{{.workers = 4}};
  std::atomic<int> counter{0};
  auto outer = [](std::atomic<int>* c) -> task<std::size_t> {
    std::vector<task<void>> tasks;
    for (int i = 0; i < 50; ++i)
      tasks.push_back(count_after_yields(c, i % 5));
    std::vector<std::monostate> out = co_await spindle::when_all(std::move(tasks));
    auto [x, y] = co_await spindle::when_all(count_after_yields(c, 1), count_after_yields(c, 0));
    static_assert(std::is_same_v<decltype(x), std::monostate>);
    (void)x;
    (void)y;
    co_return out.size();
  };
  EXPECT_EQ(rt.block_on(outer(&counter)), 50u);
  EXPECT_EQ(counter.load(), 52);
}

TEST(WhenAll, MoveOnlyResults) {
  spindle::runtime rt{{.workers = 2}};
  auto make = [](int v, int yields) -> task<std::unique_ptr<int>> {
    for (int i = 0; i < yields; ++i)
      co_await spindle::yield_now{};
    co_return std::make_unique<int>(v);
  };
  auto outer = [make]() -> task<int> {
    auto [p, q] = co_await spindle::when_all(make(4, 3), make(5, 0));
    std::vector<task<std::unique_ptr<int>>> tasks;
    tasks.push_back(make(6, 0));
    tasks.push_back(make(7, 2));
    auto v = co_await spindle::when_all(std::move(tasks));
    co_return *p * 1000 + *q * 100 + *v[0] * 10 + *v[1];
  };
  EXPECT_EQ(rt.block_on(outer()), 4567);
}

TEST(WhenAll, ChildrenRunConcurrently) {
  // The first child waits for the second: run one after the other, this
  // would never finish. One worker: concurrency, not parallelism.
  spindle::runtime rt{{.workers = 1}};
  auto outer = []() -> task<int> {
    gate g;
    auto waiter = [](gate* gp) -> task<int> {
      co_await *gp;
      co_return 1;
    };
    auto opener = [](gate* gp) -> task<int> {
      while (!gp->has_waiter())
        co_await spindle::yield_now{};
      gp->open();
      co_return 2;
    };
    auto [a, b] = co_await spindle::when_all(waiter(&g), opener(&g));
    co_return a + b;
  };
  EXPECT_EQ(rt.block_on(outer()), 3);
}

TEST(WhenAll, ExceptionCancelsAndAwaitsSiblings) {
  for (std::size_t workers : {1u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    auto outer = [](counts* cp) -> task<int> {
      int code = 0;
      try {
        (void)co_await spindle::when_all(park_forever(cp), throw_after_yields(7, 5),
                                         spin_forever(cp), park_forever(cp));
      } catch (custom_error const& e) {
        code = e.code;
      }
      // when_all returned: every sibling's frame is already destroyed.
      EXPECT_EQ(cp->alive(), 0);
      EXPECT_EQ(cp->constructed.load(), cp->destroyed.load());
      co_return code;
    };
    EXPECT_EQ(rt.block_on(outer(&c)), 7) << workers << " workers";
    EXPECT_EQ(c.alive(), 0);
  }
}

TEST(WhenAll, VectorExceptionCancelsSiblings) {
  spindle::runtime rt{{.workers = 4}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    std::vector<task<int>> tasks;
    for (int i = 0; i < 40; ++i) {
      if (i == 25) {
        tasks.push_back(throw_after_yields(25, 3));
      } else {
        tasks.push_back(i % 2 == 0 ? park_forever(cp) : spin_forever(cp));
      }
    }
    try {
      (void)co_await spindle::when_all(std::move(tasks));
    } catch (custom_error const& e) {
      EXPECT_EQ(cp->alive(), 0);
      co_return e.code;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 25);
}

TEST(WhenAll, FirstExceptionInCompletionOrderWins) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<int> {
    gate late;
    auto slow_thrower = [](gate* g) -> task<int> {
      co_await *g;  // never opened: aborted by the other failure
      throw custom_error(1);
    };
    try {
      (void)co_await spindle::when_all(slow_thrower(&late), throw_after_yields(2, 10));
    } catch (custom_error const& e) {
      co_return e.code;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(outer()), 2);
}

TEST(WhenAll, AbortingTheAwaitingTaskCancelsTheChildren) {
  for (std::size_t workers : {1u, 3u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    std::atomic<bool> started{false};
    auto outer = [](counts* cp, std::atomic<bool>* s) -> task<int> {
      tracked mine{*cp};
      s->store(true);
      auto [a, b, d] =
          co_await spindle::when_all(park_forever(cp), spin_forever(cp), park_forever(cp));
      co_return a + b + d;
    };
    auto h = rt.spawn(outer(&c, &started));
    ASSERT_TRUE(spindle_test::wait_until([&] { return started.load() && c.constructed >= 4; }));
    h.abort();
    EXPECT_THROW(spindle_test::wait_and_take(h), spindle::task_cancelled);
    // The outer frame (and so when_all's) is destroyed only after the children.
    EXPECT_EQ(c.alive(), 0) << workers << " workers";
  }
}

TEST(WhenAll, MisuseErrors) {
  spindle::runtime rt{{.workers = 1}};
  auto outer = []() -> task<int> {
    task<int> empty;
    try {
      (void)co_await spindle::when_all(after_yields(1, 0), std::move(empty));
    } catch (std::system_error const& e) {
      EXPECT_EQ(e.code(), std::errc::invalid_argument);
      co_return 1;
    }
    co_return 0;
  };
  EXPECT_EQ(rt.block_on(outer()), 1);

  // Awaited outside any runtime: nothing can be spawned.
  bool refused = false;
  [](bool* r) -> spindle_test::eager {
    try {
      (void)co_await spindle::when_all(after_yields(1, 0));
    } catch (std::system_error const& e) {
      *r = e.code() == std::errc::operation_not_permitted;
    }
  }(&refused);
  EXPECT_TRUE(refused);
}

TEST(WhenAll, ManyRoundsUnderLoad) {
  spindle::runtime rt{{.workers = 4}};
  counts c;
  long rounds = spindle_test::scaled(400, 20);
  auto outer = [](counts* cp, long n) -> task<long> {
    long sum = 0;
    for (long r = 0; r < n; ++r) {
      if (r % 3 == 0) {
        try {
          (void)co_await spindle::when_all(spin_forever(cp), throw_after_yields(1, int(r % 4)),
                                           park_forever(cp));
        } catch (custom_error const&) {
          EXPECT_EQ(cp->alive(), 0);
        }
      } else {
        auto [a, b] = co_await spindle::when_all(after_yields(1, int(r % 3)), after_yields(2, 1));
        sum += a + b;
      }
      spindle_test::progress();
    }
    co_return sum;
  };
  long expected = 0;
  for (long r = 0; r < rounds; ++r)
    if (r % 3 != 0) expected += 3;
  EXPECT_EQ(rt.block_on(outer(&c, rounds)), expected);
  EXPECT_EQ(c.alive(), 0);
}

// ---------------------------------------------------------------------------
// Adopted join handles

TEST(WhenAll, AdoptsHandlesOfRunningTasks) {
  for (std::size_t workers : {1u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    auto outer = []() -> task<int> {
      join_handle<int> a = spindle::spawn(after_yields(1, 30));
      join_handle<std::string> b = spindle::spawn(after_yields(std::string("two"), 10));
      join_handle<void> d = spindle::spawn([]() -> task<void> { co_return; }());
      auto [x, y, z] = co_await spindle::when_all(std::move(a), std::move(b), std::move(d));
      static_assert(std::is_same_v<decltype(z), std::monostate>);
      EXPECT_FALSE(a.valid());  // handed over
      EXPECT_EQ(x, 1);
      EXPECT_EQ(y, "two");

      std::vector<join_handle<int>> handles;
      for (int i = 0; i < 50; ++i)
        handles.push_back(spindle::spawn(after_yields(i * 3, (50 - i) % 7)));
      std::vector<int> v = co_await spindle::when_all(std::move(handles));
      EXPECT_EQ(v.size(), 50u);
      int sum = 0;
      for (std::size_t i = 0; i < v.size(); ++i) {
        EXPECT_EQ(v[i], static_cast<int>(i) * 3) << i;
        sum += v[i];
      }
      co_return x + sum;
    };
    EXPECT_EQ(rt.block_on(outer()), 1 + 3 * 49 * 50 / 2) << workers << " workers";
    EXPECT_EQ(spindle_test::run_on_worker(rt, outer()), 1 + 3 * 49 * 50 / 2);
  }
}

TEST(WhenAll, AdoptsHandlesOfFinishedTasks) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<int> {
    join_handle<int> a = spindle::spawn(after_yields(5, 0));
    join_handle<std::unique_ptr<int>> b = spindle::spawn(after_yields(std::make_unique<int>(6), 2));
    while (!(a.is_finished() && b.is_finished()))
      co_await spindle::yield_now{};
    auto [x, p] = co_await spindle::when_all(std::move(a), std::move(b));

    // A finished task's exception is rethrown.
    join_handle<int> failed = spindle::spawn(throw_after_yields(8, 1));
    while (!failed.is_finished())
      co_await spindle::yield_now{};
    std::vector<join_handle<int>> handles;
    handles.push_back(spindle::spawn(after_yields(1, 0)));
    handles.push_back(std::move(failed));
    int code = 0;
    try {
      (void)co_await spindle::when_all(std::move(handles));
    } catch (custom_error const& e) {
      code = e.code;
    }
    co_return x * 100 + *p * 10 + code;
  };
  EXPECT_EQ(rt.block_on(outer()), 568);
}

TEST(WhenAll, MixesTasksAndHandles) {
  spindle::runtime rt{{.workers = 3}};
  std::atomic<int> counter{0};
  auto outer = [](std::atomic<int>* c) -> task<int> {
    join_handle<std::string> s = spindle::spawn(after_yields(std::string("h"), 4));
    join_handle<void> v = spindle::spawn(count_after_yields(c, 2));
    auto [a, b, d, e] = co_await spindle::when_all(after_yields(1, 3), std::move(s),
                                                   count_after_yields(c, 0), std::move(v));
    static_assert(std::is_same_v<decltype(a), int>);
    static_assert(std::is_same_v<decltype(b), std::string>);
    static_assert(std::is_same_v<decltype(d), std::monostate>);
    static_assert(std::is_same_v<decltype(e), std::monostate>);
    EXPECT_EQ(b, "h");
    co_return a + c->load() * 10;
  };
  EXPECT_EQ(rt.block_on(outer(&counter)), 21);
}

TEST(WhenAll, FailingHandleAbortsAdoptedSiblings) {
  for (std::size_t workers : {1u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    auto outer = [](counts* cp) -> task<int> {
      join_handle<int> p1 = spindle::spawn(park_forever(cp));
      join_handle<int> s1 = spindle::spawn(spin_forever(cp));
      join_handle<int> p2 = spindle::spawn(park_forever(cp));
      // Every sibling runs (holds its tracked object) before it is adopted.
      while (cp->constructed.load() != 3)
        co_await spindle::yield_now{};
      int code = 0;
      try {
        (void)co_await spindle::when_all(std::move(p1), spindle::spawn(throw_after_yields(7, 3)),
                                         std::move(s1), park_forever(cp), std::move(p2));
      } catch (custom_error const& e) {
        code = e.code;
      }
      // when_all returned: the adopted siblings' destructors ran already.
      EXPECT_EQ(cp->alive(), 0);
      EXPECT_EQ(cp->constructed.load(), cp->destroyed.load());
      co_return code;
    };
    EXPECT_EQ(rt.block_on(outer(&c)), 7) << workers << " workers";
    EXPECT_GE(c.destroyed.load(), 3);
    EXPECT_EQ(c.alive(), 0);
  }
}

TEST(WhenAll, FailingTaskAbortsAdoptedHandlesInAVector) {
  spindle::runtime rt{{.workers = 4}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    std::vector<join_handle<int>> handles;
    for (int i = 0; i < 30; ++i) {
      if (i == 17) {
        handles.push_back(spindle::spawn(throw_after_yields(17, 4)));
      } else {
        handles.push_back(spindle::spawn(i % 2 == 0 ? park_forever(cp) : spin_forever(cp)));
      }
    }
    while (cp->constructed.load() != 29)
      co_await spindle::yield_now{};
    try {
      (void)co_await spindle::when_all(std::move(handles));
    } catch (custom_error const& e) {
      EXPECT_EQ(cp->alive(), 0);
      co_return e.code;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 17);
  EXPECT_EQ(c.destroyed.load(), 29);
}

TEST(WhenAll, AbortedHandleFailsWithTaskCancelled) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<bool> {
    join_handle<int> h = spindle::spawn(park_forever(cp));
    h.abort();
    try {
      (void)co_await spindle::when_all(after_yields(1, 2), std::move(h));
    } catch (spindle::task_cancelled const&) {
      co_return true;
    }
    co_return false;
  };
  EXPECT_TRUE(rt.block_on(outer(&c)));
  EXPECT_EQ(c.alive(), 0);
}

TEST(WhenAll, AbortingTheAwaitingTaskAbortsAdoptedChildren) {
  for (std::size_t workers : {1u, 3u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    std::atomic<bool> started{false};
    auto outer = [](counts* cp, std::atomic<bool>* s) -> task<int> {
      join_handle<int> a = spindle::spawn(park_forever(cp));
      join_handle<int> b = spindle::spawn(spin_forever(cp));
      s->store(true);
      auto [x, y, z] = co_await spindle::when_all(std::move(a), park_forever(cp), std::move(b));
      co_return x + y + z;
    };
    auto h = rt.spawn(outer(&c, &started));
    ASSERT_TRUE(spindle_test::wait_until([&] { return started.load() && c.constructed >= 3; }));
    h.abort();
    EXPECT_THROW(spindle_test::wait_and_take(h), spindle::task_cancelled);
    // The outer frame is destroyed only after the adopted children's.
    EXPECT_EQ(c.alive(), 0) << workers << " workers";
    EXPECT_EQ(c.destroyed.load(), 3);
  }
}

TEST(WhenAll, AdoptsHandlesOfAnotherRuntime) {
  spindle::runtime rt{{.workers = 2}};
  spindle::runtime other{{.workers = 2}};
  counts c;
  join_handle<int> value = other.spawn(after_yields(40, 5));
  join_handle<int> parked = other.spawn(park_forever(&c));
  ASSERT_TRUE(spindle_test::wait_until([&] { return c.constructed.load() == 1; }));
  auto ok = [](join_handle<int> v) -> task<int> {
    auto [a, b] = co_await spindle::when_all(std::move(v), after_yields(2, 1));
    co_return a + b;
  };
  EXPECT_EQ(rt.block_on(ok(std::move(value))), 42);
  auto failing = [](join_handle<int> p) -> task<int> {
    try {
      (void)co_await spindle::when_all(std::move(p), throw_after_yields(3, 2));
    } catch (custom_error const& e) {
      co_return e.code;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(failing(std::move(parked))), 3);
  EXPECT_EQ(c.alive(), 0);
}

TEST(WhenAll, HandlesAwaitedOutsideARuntime) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  // Finished: nothing to spawn or wait for, so no runtime is needed.
  join_handle<int> done = rt.spawn(after_yields(5, 1));
  ASSERT_TRUE(spindle_test::wait_until([&] { return done.is_finished(); }));
  int value = 0;
  [](join_handle<int> h, int* out) -> spindle_test::eager {
    auto [v] = co_await spindle::when_all(std::move(h));
    *out = v;
  }(std::move(done), &value);
  EXPECT_EQ(value, 5);

  // Running: refused, and the adopted task is aborted and reaped first.
  join_handle<int> parked = rt.spawn(park_forever(&c));
  ASSERT_TRUE(spindle_test::wait_until([&] { return c.constructed.load() == 1; }));
  bool refused = false;
  [](join_handle<int> h, bool* r, counts* cp) -> spindle_test::eager {
    try {
      (void)co_await spindle::when_all(std::move(h));
    } catch (std::system_error const& e) {
      *r = e.code() == std::errc::operation_not_permitted;
      EXPECT_EQ(cp->alive(), 0);
    }
  }(std::move(parked), &refused, &c);
  EXPECT_TRUE(refused);
  EXPECT_EQ(c.alive(), 0);
}

TEST(WhenAll, EmptyOrTakenHandleErrors) {
  spindle::runtime rt{{.workers = 1}};
  counts c;
  auto code_of = [](task<void> t) -> task<std::error_code> {
    try {
      co_await std::move(t);
    } catch (std::system_error const& e) {
      co_return e.code();
    }
    co_return std::error_code{};
  };
  auto outer = [code_of](counts* cp) -> task<int> {
    int errors = 0;
    // Default-constructed: the task argument is never spawned.
    errors += co_await code_of([](counts* p) -> task<void> {
                (void)co_await spindle::when_all(park_forever(p), join_handle<int>{});
              }(cp)) == std::errc::invalid_argument;
    // Moved-from.
    errors += co_await code_of([]() -> task<void> {
                join_handle<int> h = spindle::spawn(after_yields(1, 0));
                join_handle<int> keep = std::move(h);
                (void)co_await spindle::when_all(std::move(h));
              }()) == std::errc::invalid_argument;
    // Result already taken.
    errors += co_await code_of([]() -> task<void> {
                join_handle<int> h = spindle::spawn(after_yields(1, 0));
                EXPECT_EQ(co_await h, 1);
                (void)co_await spindle::when_all(after_yields(2, 0), std::move(h));
              }()) == std::errc::invalid_argument;
    // In a vector.
    errors += co_await code_of([]() -> task<void> {
                std::vector<join_handle<int>> handles;
                handles.push_back(spindle::spawn(after_yields(1, 0)));
                handles.emplace_back();
                (void)co_await spindle::when_all(std::move(handles));
              }()) == std::errc::invalid_argument;
    co_return errors;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 4);
  EXPECT_EQ(c.constructed.load(), 0);  // nothing was spawned by the failing calls
}

}  // namespace
