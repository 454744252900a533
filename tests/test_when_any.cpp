// Tests of spindle::when_any: the first child to finish wins (value or
// exception), the losers are aborted and their frames destroyed before
// when_any returns, whether they are suspended, yielding or queued; the
// variadic (variant) and vector forms; misuse errors; join handles adopted
// as children (the losers among them aborted, finished ones, mixes).
#include "spindle/when_any.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
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

/// Finishes when its gate opens.
task<int> gated(gate* g, counts* c, int v) {
  tracked t{*c};
  co_await *g;
  co_return v;
}

TEST(WhenAny, VariadicWinnerAndAbortedLosers) {
  for (std::size_t workers : {1u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    auto outer = [](counts* cp) -> task<int> {
      auto r =
          co_await spindle::when_any(park_forever<int>(cp), spin_forever<std::string>(cp),
                                     after_yields(std::string("win"), 3), park_forever<double>(cp));
      // Losers are gone before when_any returns.
      EXPECT_EQ(cp->alive(), 0);
      EXPECT_EQ(r.index, 2u);
      EXPECT_EQ(r.value.index(), 2u);
      EXPECT_EQ(std::get<2>(r.value), "win");
      co_return static_cast<int>(r.index);
    };
    EXPECT_EQ(rt.block_on(outer(&c)), 2) << workers << " workers";
    EXPECT_EQ(c.alive(), 0);  // losers may have been aborted before they started
  }
}

TEST(WhenAny, VectorWinnerAtEveryPosition) {
  spindle::runtime rt{{.workers = 3}};
  counts c;
  auto outer = [](counts* cp, int n, int win) -> task<int> {
    std::vector<task<int>> tasks;
    for (int i = 0; i < n; ++i) {
      if (i == win) {
        tasks.push_back(after_yields(100 + i, 2));
      } else {
        tasks.push_back(i % 2 == 0 ? park_forever<int>(cp) : spin_forever<int>(cp));
      }
    }
    auto r = co_await spindle::when_any(std::move(tasks));
    EXPECT_EQ(cp->alive(), 0);
    EXPECT_EQ(r.index, static_cast<std::size_t>(win));
    co_return r.value;
  };
  for (int win = 0; win < 8; ++win)
    EXPECT_EQ(rt.block_on(outer(&c, 8, win)), 100 + win);
}

TEST(WhenAny, ChosenByTheTestInAnyOrder) {
  // Every child waits at its own gate; the test opens one: that one wins.
  spindle::runtime rt{{.workers = 2}};
  for (int win = 0; win < 3; ++win) {
    counts c;
    gate g0, g1, g2;
    gate* gates[] = {&g0, &g1, &g2};
    auto run = [](gate* a, gate* b, gate* d, counts* cp) -> task<int> {
      auto r = co_await spindle::when_any(gated(a, cp, 10), gated(b, cp, 11), gated(d, cp, 12));
      EXPECT_EQ(cp->alive(), 0);
      co_return static_cast<int>(r.index) * 1000 + std::visit([](int v) { return v; }, r.value);
    };
    auto h = rt.spawn(run(&g0, &g1, &g2, &c));
    ASSERT_TRUE(spindle_test::wait_until(
        [&] { return g0.has_waiter() && g1.has_waiter() && g2.has_waiter(); }));
    ASSERT_TRUE(gates[win]->open());
    EXPECT_EQ(spindle_test::wait_and_take(h), win * 1000 + 10 + win);
    EXPECT_EQ(c.alive(), 0);
  }
}

TEST(WhenAny, WinnerExceptionIsRethrownAfterLosersAreGone) {
  spindle::runtime rt{{.workers = 4}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    try {
      (void)co_await spindle::when_any(park_forever<int>(cp), throw_after_yields(9, 2),
                                       spin_forever<int>(cp));
    } catch (custom_error const& e) {
      EXPECT_EQ(cp->alive(), 0);
      co_return e.code;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 9);
}

TEST(WhenAny, VoidAndMoveOnly) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    auto r = co_await spindle::when_any([]() -> task<void> { co_return; }(), park_forever<int>(cp));
    EXPECT_EQ(r.index, 0u);
    EXPECT_TRUE(std::holds_alternative<std::monostate>(r.value));
    std::vector<task<std::unique_ptr<int>>> tasks;
    tasks.push_back(park_forever<std::unique_ptr<int>>(cp));
    tasks.push_back(after_yields(std::make_unique<int>(42), 1));
    auto m = co_await spindle::when_any(std::move(tasks));
    EXPECT_EQ(m.index, 1u);
    co_return *m.value;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 42);
  EXPECT_EQ(c.alive(), 0);
}

TEST(WhenAny, LosersThatAlsoFinishAreDropped) {
  // Every child finishes at once: exactly one wins, the rest are dropped
  // (finished or aborted), without errors.
  spindle::runtime rt{{.workers = 4}};
  auto outer = []() -> task<int> {
    int wins = 0;
    for (int round = 0; round < 50; ++round) {
      std::vector<task<int>> tasks;
      for (int i = 0; i < 6; ++i)
        tasks.push_back(after_yields(i, 0));
      auto r = co_await spindle::when_any(std::move(tasks));
      EXPECT_EQ(r.value, static_cast<int>(r.index));
      ++wins;
    }
    co_return wins;
  };
  EXPECT_EQ(rt.block_on(outer()), 50);
}

TEST(WhenAny, AbortingTheAwaitingTaskCancelsTheChildren) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    auto r = co_await spindle::when_any(park_forever<int>(cp), spin_forever<int>(cp));
    co_return static_cast<int>(r.index);
  };
  auto h = rt.spawn(outer(&c));
  ASSERT_TRUE(spindle_test::wait_until([&] { return c.constructed.load() == 2; }));
  h.abort();
  EXPECT_THROW(spindle_test::wait_and_take(h), spindle::task_cancelled);
  EXPECT_EQ(c.alive(), 0);
}

TEST(WhenAny, MisuseErrors) {
  spindle::runtime rt{{.workers = 1}};
  auto outer = []() -> task<int> {
    int errors = 0;
    try {
      (void)co_await spindle::when_any(std::vector<task<int>>{});
    } catch (std::system_error const& e) {
      errors += e.code() == std::errc::invalid_argument;
    }
    try {
      task<int> empty;
      (void)co_await spindle::when_any(after_yields(1, 0), std::move(empty));
    } catch (std::system_error const& e) {
      errors += e.code() == std::errc::invalid_argument;
    }
    co_return errors;
  };
  EXPECT_EQ(rt.block_on(outer()), 2);
}

// ---------------------------------------------------------------------------
// Adopted join handles

TEST(WhenAny, AdoptedLosersAreAbortedAndDestroyed) {
  for (std::size_t workers : {1u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    auto outer = [](counts* cp) -> task<int> {
      join_handle<int> p = spindle::spawn(park_forever<int>(cp));
      join_handle<std::string> s = spindle::spawn(spin_forever<std::string>(cp));
      join_handle<double> q = spindle::spawn(park_forever<double>(cp));
      // The losers run (hold their tracked objects) before they are adopted.
      while (cp->constructed.load() != 3)
        co_await spindle::yield_now{};
      auto r = co_await spindle::when_any(std::move(p), std::move(s),
                                          spindle::spawn(after_yields(std::string("win"), 3)),
                                          std::move(q));
      // The adopted losers are gone before when_any returns.
      EXPECT_EQ(cp->alive(), 0);
      EXPECT_EQ(cp->destroyed.load(), 3);
      EXPECT_EQ(r.index, 2u);
      EXPECT_EQ(std::get<2>(r.value), "win");
      co_return static_cast<int>(r.index);
    };
    EXPECT_EQ(rt.block_on(outer(&c)), 2) << workers << " workers";
    EXPECT_EQ(c.alive(), 0);
  }
}

TEST(WhenAny, VectorOfHandlesWinnerAtEveryPosition) {
  spindle::runtime rt{{.workers = 3}};
  counts c;
  auto outer = [](counts* cp, int n, int win) -> task<int> {
    std::vector<join_handle<int>> handles;
    for (int i = 0; i < n; ++i) {
      if (i == win) {
        handles.push_back(spindle::spawn(after_yields(100 + i, 2)));
      } else {
        handles.push_back(
            spindle::spawn(i % 2 == 0 ? park_forever<int>(cp) : spin_forever<int>(cp)));
      }
    }
    auto r = co_await spindle::when_any(std::move(handles));
    EXPECT_EQ(cp->alive(), 0);
    EXPECT_EQ(r.index, static_cast<std::size_t>(win));
    co_return r.value;
  };
  for (int win = 0; win < 6; ++win)
    EXPECT_EQ(rt.block_on(outer(&c, 6, win)), 100 + win);
}

TEST(WhenAny, FinishedHandleWins) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    join_handle<int> done = spindle::spawn(after_yields(7, 1));
    join_handle<int> parked = spindle::spawn(park_forever<int>(cp));
    while (!(done.is_finished() && cp->constructed.load() == 1))
      co_await spindle::yield_now{};
    // The finished handle completes as it is adopted; the children after it
    // are aborted as they are spawned or adopted.
    auto r = co_await spindle::when_any(park_forever<int>(cp), std::move(done), std::move(parked),
                                        spin_forever<int>(cp));
    EXPECT_EQ(cp->alive(), 0);
    EXPECT_EQ(r.index, 1u);
    int value = std::get<1>(r.value);

    // A finished task's exception is the winner's, rethrown.
    join_handle<int> failed = spindle::spawn(throw_after_yields(9, 0));
    while (!failed.is_finished())
      co_await spindle::yield_now{};
    std::vector<join_handle<int>> handles;
    handles.push_back(std::move(failed));
    handles.push_back(spindle::spawn(park_forever<int>(cp)));
    try {
      (void)co_await spindle::when_any(std::move(handles));
    } catch (custom_error const& e) {
      EXPECT_EQ(cp->alive(), 0);
      co_return value * 10 + e.code;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 79);
  EXPECT_EQ(c.alive(), 0);
}

TEST(WhenAny, TaskWinsOverAdoptedHandles) {
  // A spawned task wins; the adopted handles are the losers.
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    join_handle<void> v = spindle::spawn(spin_forever<void>(cp));
    auto r = co_await spindle::when_any(std::move(v), after_yields(std::string("task"), 2),
                                        spindle::spawn(spin_forever<int>(cp)));
    EXPECT_EQ(cp->alive(), 0);
    EXPECT_EQ(r.index, 1u);
    static_assert(
        std::is_same_v<decltype(r.value), std::variant<std::monostate, std::string, int>>);
    co_return std::get<1>(r.value) == "task" ? 1 : 0;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 1);
  EXPECT_EQ(c.alive(), 0);
}

TEST(WhenAny, AbortingTheAwaitingTaskAbortsAdoptedChildren) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    join_handle<int> p = spindle::spawn(park_forever<int>(cp));
    join_handle<int> s = spindle::spawn(spin_forever<int>(cp));
    auto r = co_await spindle::when_any(std::move(p), std::move(s), park_forever<int>(cp));
    co_return static_cast<int>(r.index);
  };
  auto h = rt.spawn(outer(&c));
  ASSERT_TRUE(spindle_test::wait_until([&] { return c.constructed.load() == 3; }));
  h.abort();
  EXPECT_THROW(spindle_test::wait_and_take(h), spindle::task_cancelled);
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(c.destroyed.load(), 3);
}

TEST(WhenAny, EmptyOrTakenHandleErrors) {
  spindle::runtime rt{{.workers = 1}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    int errors = 0;
    try {
      (void)co_await spindle::when_any(std::vector<join_handle<int>>{});
    } catch (std::system_error const& e) {
      errors += e.code() == std::errc::invalid_argument;
    }
    try {
      (void)co_await spindle::when_any(park_forever<int>(cp), join_handle<int>{});
    } catch (std::system_error const& e) {
      errors += e.code() == std::errc::invalid_argument;
    }
    try {
      join_handle<int> h = spindle::spawn(after_yields(1, 0));
      EXPECT_EQ(co_await h, 1);
      std::vector<join_handle<int>> handles;
      handles.push_back(std::move(h));
      (void)co_await spindle::when_any(std::move(handles));
    } catch (std::system_error const& e) {
      errors += e.code() == std::errc::invalid_argument;
    }
    co_return errors;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 3);
  EXPECT_EQ(c.constructed.load(), 0);  // nothing was spawned by the failing calls
}

}  // namespace
