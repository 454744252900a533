// Tests of spindle::task_group: many children across workers, the first
// exception aborting the siblings and being rethrown at join(), nested
// groups, children spawning siblings, abort_all, reuse, destruction without
// join (children's frames destroyed before the destructor returns, whether
// they are queued, suspended or running), the awaiting task being aborted,
// runtime shutdown with a group pending, and misuse errors; join handles
// adopted into a group (running, finished, failing, reaped by the
// destructor and by aborting the owner, outside a runtime).
#include "spindle/task_group.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <coroutine>
#include <exception>
#include <new>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/detail/frame_pool.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::task;
using spindle::task_group;
using spindle_test::counts;
using spindle_test::gate;
using spindle_test::suspend_forever;
using spindle_test::tracked;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(20)));

struct custom_error : std::runtime_error {
  explicit custom_error(int c) : std::runtime_error("custom error " + std::to_string(c)), code(c) {}
  int code;
};

task<int> add_after_yields(std::atomic<long>* sum, int v, int yields) {
  for (int i = 0; i < yields; ++i)
    co_await spindle::yield_now{};
  sum->fetch_add(v);
  co_return v;
}

task<void> throw_after_yields(int code, int yields) {
  for (int i = 0; i < yields; ++i)
    co_await spindle::yield_now{};
  throw custom_error(code);
}

task<void> park_forever(counts* c) {
  tracked t{*c};
  co_await suspend_forever{};
}

task<void> spin_forever(counts* c) {
  tracked t{*c};
  for (;;)
    co_await spindle::yield_now{};
}

TEST(TaskGroup, ThousandChildrenOnFourWorkers) {
  spindle::runtime rt{{.workers = 4}};
  std::atomic<long> sum{0};
  auto outer = [](std::atomic<long>* s) -> task<std::size_t> {
    task_group g;
    for (int i = 1; i <= 1000; ++i)
      g.spawn(add_after_yields(s, i, i % 4));
    co_await g.join();
    co_return g.size();
  };
  EXPECT_EQ(rt.block_on(outer(&sum)), 0u);
  EXPECT_EQ(sum.load(), 1000L * 1001 / 2);
}

TEST(TaskGroup, EmptyJoinReturnsAtOnce) {
  spindle::runtime rt{{.workers = 1}};
  auto outer = []() -> task<int> {
    task_group g;
    co_await g.join();
    co_await g.join();
    co_return 1;
  };
  EXPECT_EQ(rt.block_on(outer()), 1);
}

/// What join() rethrew in a group of 20 children that park or spin and one
/// `failing` child (nullptr when it threw nothing). Checks that every
/// sibling was aborted and its frame destroyed by then.
task<std::exception_ptr> join_with_failing_child(task<void> failing, counts* c) {
  task_group g;
  for (int i = 0; i < 20; ++i)
    g.spawn(i % 2 == 0 ? park_forever(c) : spin_forever(c));
  g.spawn(std::move(failing));
  try {
    co_await g.join();
  } catch (...) {
    EXPECT_EQ(c->alive(), 0);
    EXPECT_EQ(g.size(), 0u);
    co_return std::current_exception();
  }
  co_return nullptr;
}

TEST(TaskGroup, FirstExceptionAbortsSiblingsAndIsRethrownAtJoin) {
  for (std::size_t workers : {1u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    std::exception_ptr e = rt.block_on(join_with_failing_child(throw_after_yields(5, 3), &c));
    ASSERT_NE(e, nullptr) << workers << " workers";
    try {
      std::rethrow_exception(e);
    } catch (custom_error const& x) {
      EXPECT_EQ(x.code, 5) << workers << " workers";
    } catch (...) {
      ADD_FAILURE() << "not the child's exception, " << workers << " workers";
    }
  }
}

// A child that fails with no memory left for its exception's box
// (promise_base: it then reports std::bad_alloc, detail::
// frame_pool_fail_next_allocation makes that allocation fail): the group
// sees a failure all the same, aborts the siblings and rethrows
// std::bad_alloc at join.
task<void> fails_with_no_memory_for_its_box(int yields) {
  for (int i = 0; i < yields; ++i)
    co_await spindle::yield_now{};
  // The box (a continuation and an exception_ptr) is this thread's next
  // allocation of its size: no suspension comes between.
  spindle::detail::frame_pool_fail_next_allocation(sizeof(std::coroutine_handle<>) +
                                                   sizeof(std::exception_ptr));
  throw custom_error(5);
}

TEST(TaskGroup, AChildWithNoMemoryForItsExceptionFailsTheGroupWithBadAlloc) {
  for (std::size_t workers : {1u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    std::exception_ptr e =
        rt.block_on(join_with_failing_child(fails_with_no_memory_for_its_box(3), &c));
    ASSERT_NE(e, nullptr) << workers << " workers";
    EXPECT_THROW(std::rethrow_exception(e), std::bad_alloc)
        << "its box was allocated after all, " << workers << " workers";
  }
}

TEST(TaskGroup, StopTokenIsStoppedByAFailureAndFreshAfterJoin) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    task_group g;
    std::stop_token const token = g.get_stop_token();
    EXPECT_TRUE(token.stop_possible());
    EXPECT_FALSE(token.stop_requested());
    std::atomic<int> callbacks{0};
    std::stop_callback cb(token, [&callbacks] { callbacks.fetch_add(1); });
    g.spawn(park_forever(cp));
    g.spawn(throw_after_yields(7, 2));
    int code = -1;
    try {
      co_await g.join();
    } catch (custom_error const& e) {
      code = e.code;
    }
    EXPECT_TRUE(token.stop_requested()) << "the failure requested stop";
    EXPECT_EQ(callbacks.load(), 1);
    // Reused after join: a fresh token; the old one stays stopped.
    std::stop_token const fresh = g.get_stop_token();
    EXPECT_FALSE(fresh.stop_requested());
    g.spawn(spindle_test::value_of(1));
    co_await g.join();
    EXPECT_FALSE(fresh.stop_requested()) << "a clean join stops nothing";
    co_return code;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 7);
  EXPECT_EQ(c.alive(), 0);
}

TEST(TaskGroup, StopTokenIsStoppedByAbortAllAndByDestruction) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto body = [](counts* cp) -> task<bool> {
    std::stop_token by_destruction;
    {
      task_group g;
      g.spawn(park_forever(cp));
      std::stop_token const t = g.get_stop_token();
      g.abort_all();
      EXPECT_TRUE(t.stop_requested());
      co_await g.join();  // aborted children are not errors
      task_group h;
      h.spawn(park_forever(cp));
      by_destruction = h.get_stop_token();
      EXPECT_FALSE(by_destruction.stop_requested());
    }  // h destroyed unjoined
    co_return by_destruction.stop_requested();
  };
  EXPECT_TRUE(rt.block_on(body(&c)));
  EXPECT_EQ(c.alive(), 0);
}

TEST(TaskGroup, FailureAbortsSiblingsBeforeJoinIsAwaited) {
  // The owner is busy elsewhere (waits at a gate): the failure aborts the
  // siblings at once, not only when join() runs.
  spindle::runtime rt{{.workers = 2}};
  counts c;
  gate owner_gate;
  std::atomic<task_group*> group{nullptr};
  auto outer = [](counts* cp, gate* og, std::atomic<task_group*>* gp) -> task<int> {
    task_group g;
    g.spawn(park_forever(cp));
    g.spawn(spin_forever(cp));
    g.spawn(throw_after_yields(3, 2));
    gp->store(&g);
    co_await *og;
    EXPECT_EQ(cp->alive(), 0);
    try {
      co_await g.join();
    } catch (custom_error const& e) {
      co_return e.code;
    }
    co_return -1;
  };
  auto h = rt.spawn(outer(&c, &owner_gate, &group));
  ASSERT_TRUE(spindle_test::wait_until([&] { return owner_gate.has_waiter(); }));
  // No child left (constructed == destroyed alone also holds before the
  // siblings ever ran): the failure aborted them while the owner was away.
  ASSERT_TRUE(spindle_test::wait_until([&] { return group.load()->size() == 0; }))
      << "siblings were not aborted while the owner was away";
  EXPECT_EQ(c.constructed.load(), c.destroyed.load());
  ASSERT_TRUE(owner_gate.open());
  EXPECT_EQ(spindle_test::wait_and_take(h), 3);
}

TEST(TaskGroup, ChildrenSpawnSiblings) {
  spindle::runtime rt{{.workers = 3}};
  std::atomic<long> sum{0};
  // Each child spawns two more until depth 0: 2^(d+1) - 1 children in all.
  struct tree {
    static task<void> grow(task_group* g, std::atomic<long>* s, int depth) {
      s->fetch_add(1);
      co_await spindle::yield_now{};
      if (depth > 0) {
        g->spawn(grow(g, s, depth - 1));
        g->spawn(grow(g, s, depth - 1));
      }
    }
  };
  auto outer = [](std::atomic<long>* s) -> task<int> {
    task_group g;
    g.spawn(tree::grow(&g, s, 7));
    co_await g.join();
    co_return 1;
  };
  EXPECT_EQ(rt.block_on(outer(&sum)), 1);
  EXPECT_EQ(sum.load(), 255);
}

task<long> nested_sum(int fanout, int depth) {
  if (depth == 0) co_return 1;
  std::atomic<long> sum{0};
  {
    task_group g;
    for (int i = 0; i < fanout; ++i)
      g.spawn([](std::atomic<long>* s, int f, int d) -> task<void> {
        s->fetch_add(co_await nested_sum(f, d));
      }(&sum, fanout, depth - 1));
    co_await g.join();
  }
  co_return sum.load();
}

TEST(TaskGroup, NestedGroups) {
  spindle::runtime rt{{.workers = 4}};
  EXPECT_EQ(rt.block_on(nested_sum(4, 4)), 256);
}

void fail_if(bool fail, int code) {
  if (fail) throw custom_error(code);
}

task<void> failing_leaf(counts* c, bool fail) {
  tracked t{*c};
  co_await spindle::yield_now{};
  fail_if(fail, 100);
  co_await suspend_forever{};
}

task<void> nested_failing(counts* c, int depth, bool fail) {
  tracked t{*c};
  task_group g;
  for (int i = 0; i < 3; ++i) {
    bool child_fails = fail && i == 2;
    g.spawn(depth == 1 ? failing_leaf(c, child_fails) : nested_failing(c, depth - 1, child_fails));
  }
  co_await g.join();
}

TEST(TaskGroup, NestedFailureCancelsCousins) {
  // One leaf fails; the exception climbs through every join; all the other
  // leaves (suspended forever, in other subtrees) are cancelled.
  spindle::runtime rt{{.workers = 4}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    try {
      co_await nested_failing(cp, 3, true);
    } catch (custom_error const& e) {
      EXPECT_EQ(cp->alive(), 0);
      co_return e.code;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 100);
  EXPECT_EQ(c.constructed.load(), c.destroyed.load());
}

TEST(TaskGroup, AbortAllIsNotAnError) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    task_group g;
    for (int i = 0; i < 10; ++i)
      g.spawn(i % 2 == 0 ? park_forever(cp) : spin_forever(cp));
    co_await spindle::yield_now{};
    g.abort_all();
    co_await g.join();  // no exception
    EXPECT_EQ(cp->alive(), 0);
    // Reusable after join.
    std::atomic<long> sum{0};
    g.spawn(add_after_yields(&sum, 2, 1));
    co_await g.join();
    co_return static_cast<int>(sum.load());
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 2);
}

TEST(TaskGroup, ReusableAfterAnException) {
  spindle::runtime rt{{.workers = 2}};
  auto outer = []() -> task<long> {
    task_group g;
    g.spawn(throw_after_yields(1, 0));
    try {
      co_await g.join();
    } catch (custom_error const&) {
    }
    std::atomic<long> sum{0};
    for (int i = 0; i < 10; ++i)
      g.spawn(add_after_yields(&sum, 1, i % 3));
    co_await g.join();
    co_return sum.load();
  };
  EXPECT_EQ(rt.block_on(outer()), 10);
}

/// Spawns children of every kind into a group that is destroyed without
/// join by an exception; the children use `local`, which dies right after
/// the group.
task<int> unwind_without_join(counts* c, std::atomic<int>* ran, int spawn_count) {
  std::atomic<int> local{0};  // outlives the group by one statement only
  try {
    task_group g;
    for (int i = 0; i < spawn_count; ++i) {
      switch (i % 3) {
        case 0:
          g.spawn([](counts* cp, std::atomic<int>* l, std::atomic<int>* r) -> task<void> {
            tracked t{*cp};
            r->fetch_add(1);
            l->fetch_add(1);
            co_await suspend_forever{};
          }(c, &local, ran));
          break;
        case 1:
          g.spawn([](counts* cp, std::atomic<int>* l, std::atomic<int>* r) -> task<void> {
            tracked t{*cp};
            r->fetch_add(1);
            for (;;) {
              l->fetch_add(1);
              co_await spindle::yield_now{};
            }
          }(c, &local, ran));
          break;
        default:
          g.spawn([](counts* cp, std::atomic<int>* l) -> task<void> {
            tracked t{*cp};
            // Its destructor-time use of `local` must happen before the group dies.
            struct toucher {
              std::atomic<int>* l;
              ~toucher() { l->fetch_add(1); }
            } touch{l};
            co_await suspend_forever{};
          }(c, &local));
          break;
      }
    }
    co_await spindle::yield_now{};
    throw custom_error(1);
  } catch (custom_error const&) {
    // The group is destroyed: every child frame is gone already.
    EXPECT_EQ(c->alive(), 0);
    EXPECT_EQ(c->constructed.load(), c->destroyed.load());
  }
  int seen = local.load();
  co_return seen;
}

TEST(TaskGroup, DestroyedWithoutJoinDestroysChildrenFirst) {
  for (std::size_t workers : {1u, 2u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    for (int round = 0; round < 20; ++round) {
      counts c;
      std::atomic<int> ran{0};
      (void)rt.block_on(unwind_without_join(&c, &ran, 1 + round % 9));
      EXPECT_EQ(c.alive(), 0);
      spindle_test::progress();
    }
    // Children destroyed while queued complete when a worker pops their
    // (frameless) queue entry.
    EXPECT_TRUE(spindle_test::wait_until([&] { return rt.stats().tasks_alive == 0; }));
  }
}

TEST(TaskGroup, QueuedChildrenNeverRunAfterDestruction) {
  // One worker, busy with the owner: the children are still queued when the
  // group dies, so none of their code ever runs.
  spindle::runtime rt{{.workers = 1}};
  std::atomic<int> ran{0};
  auto outer = [](std::atomic<int>* r) -> task<int> {
    {
      task_group g;
      for (int i = 0; i < 10; ++i)
        g.spawn([](std::atomic<int>* rr) -> task<void> {
          rr->fetch_add(1);
          co_return;
        }(r));
    }
    co_await spindle::yield_now{};
    co_await spindle::yield_now{};
    co_return r->load();
  };
  // Not block_on: its thread could run the owner while the worker runs the
  // children.
  EXPECT_EQ(spindle_test::run_on_worker(rt, outer(&ran)), 0);
  EXPECT_EQ(ran.load(), 0);
}

TEST(TaskGroup, AbortingTheOwnerCancelsTheChildren) {
  for (std::size_t workers : {1u, 3u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    auto outer = [](counts* cp) -> task<int> {
      task_group g;
      for (int i = 0; i < 6; ++i)
        g.spawn(i % 2 == 0 ? park_forever(cp) : spin_forever(cp));
      co_await g.join();
      co_return 1;
    };
    auto h = rt.spawn(outer(&c));
    ASSERT_TRUE(spindle_test::wait_until([&] { return c.constructed.load() == 6; }));
    h.abort();
    EXPECT_THROW(spindle_test::wait_and_take(h), spindle::task_cancelled);
    EXPECT_EQ(c.alive(), 0) << workers << " workers";
  }
}

TEST(TaskGroup, RuntimeShutdownWithAGroupPending) {
  // The owner waits in join() and its children wait forever when the
  // runtime is destroyed: shutdown destroys everything without hanging.
  counts c;
  std::atomic<bool> joined{false};
  spindle::join_handle<int> h;
  {
    spindle::runtime rt{{.workers = 2}};
    auto outer = [](counts* cp, std::atomic<bool>* j) -> task<int> {
      task_group g;
      for (int i = 0; i < 8; ++i)
        g.spawn(park_forever(cp));
      j->store(true);
      co_await g.join();
      co_return 1;
    };
    h = rt.spawn(outer(&c, &joined));
    ASSERT_TRUE(spindle_test::wait_until([&] { return joined.load() && c.constructed == 8; }));
  }
  EXPECT_EQ(c.alive(), 0);
  EXPECT_THROW((void)h.take(), spindle::task_cancelled);
}

TEST(TaskGroup, MisuseErrors) {
  task_group outside;
  auto code_of = [](auto fn) {
    try {
      fn();
    } catch (std::system_error const& e) {
      return e.code();
    }
    return std::error_code{};
  };
  EXPECT_EQ(code_of([&] { outside.spawn([]() -> task<void> { co_return; }()); }),
            std::errc::operation_not_permitted);
  EXPECT_EQ(code_of([&] { outside.spawn(task<int>{}); }), std::errc::invalid_argument);
  bool refused = false;
  [](task_group* g, bool* r) -> spindle_test::eager {
    try {
      co_await g->join();
    } catch (std::system_error const& e) {
      *r = e.code() == std::errc::operation_not_permitted;
    }
  }(&outside, &refused);
  // Nothing pending: join is ready without suspending, so it succeeds.
  EXPECT_FALSE(refused);
}

// ---------------------------------------------------------------------------
// Adopted join handles

TEST(TaskGroup, AdoptsHandlesAndTasks) {
  for (std::size_t workers : {1u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    std::atomic<long> sum{0};
    auto outer = [](std::atomic<long>* s) -> task<std::size_t> {
      task_group g;
      // A finished one first.
      join_handle<int> done = spindle::spawn(add_after_yields(s, 1000, 0));
      while (!done.is_finished())
        co_await spindle::yield_now{};
      g.spawn(std::move(done));
      EXPECT_FALSE(done.valid());  // handed over
      for (int i = 1; i <= 200; ++i) {
        if (i % 2 == 0) {
          g.spawn(spindle::spawn(add_after_yields(s, i, i % 4)));
        } else {
          g.spawn(add_after_yields(s, i, i % 3));
        }
      }
      g.spawn(spindle::spawn([]() -> task<void> { co_return; }()));
      co_await g.join();
      co_return g.size();
    };
    EXPECT_EQ(rt.block_on(outer(&sum)), 0u);
    EXPECT_EQ(sum.load(), 1000 + 200L * 201 / 2) << workers << " workers";
  }
}

TEST(TaskGroup, AdoptedFailureAbortsSiblingsAndIsRethrown) {
  for (std::size_t workers : {1u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    auto outer = [](counts* cp) -> task<int> {
      task_group g;
      for (int i = 0; i < 10; ++i)
        g.spawn(spindle::spawn(i % 2 == 0 ? park_forever(cp) : spin_forever(cp)));
      g.spawn(park_forever(cp));
      while (cp->constructed.load() != 11)
        co_await spindle::yield_now{};
      g.spawn(spindle::spawn(throw_after_yields(6, 2)));
      try {
        co_await g.join();
      } catch (custom_error const& e) {
        // Every adopted sibling is aborted and its frame destroyed by now.
        EXPECT_EQ(cp->alive(), 0);
        EXPECT_EQ(g.size(), 0u);
        co_return e.code;
      }
      co_return -1;
    };
    EXPECT_EQ(rt.block_on(outer(&c)), 6) << workers << " workers";
    EXPECT_EQ(c.destroyed.load(), 11);
  }
}

TEST(TaskGroup, AdoptedFinishedFailureIsRethrown) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    task_group g;
    g.spawn(park_forever(cp));
    join_handle<void> failed = spindle::spawn(throw_after_yields(4, 0));
    while (!failed.is_finished())
      co_await spindle::yield_now{};
    g.spawn(std::move(failed));  // completes at once: aborts the sibling
    try {
      co_await g.join();
    } catch (custom_error const& e) {
      EXPECT_EQ(cp->alive(), 0);
      co_return e.code;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 4);
}

TEST(TaskGroup, AdoptedAbortedHandleIsAnErrorUnlessTheGroupAborts) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto outer = [](counts* cp) -> task<int> {
    task_group g;
    join_handle<void> h = spindle::spawn(park_forever(cp));
    h.abort();
    g.spawn(std::move(h));
    int result = 0;
    try {
      co_await g.join();
    } catch (spindle::task_cancelled const&) {
      result = 1;
    }
    // Aborted by the group: not an error.
    g.spawn(spindle::spawn(park_forever(cp)));
    g.spawn(spindle::spawn(spin_forever(cp)));
    g.abort_all();
    co_await g.join();
    EXPECT_EQ(cp->alive(), 0);
    co_return result;
  };
  EXPECT_EQ(rt.block_on(outer(&c)), 1);
}

TEST(TaskGroup, DestructorReapsAdoptedChildren) {
  for (std::size_t workers : {1u, 2u, 4u}) {
    spindle::runtime rt{{.workers = workers}};
    auto outer = [](counts* cp, int n) -> task<int> {
      try {
        task_group g;
        for (int i = 0; i < n; ++i)
          g.spawn(spindle::spawn(i % 2 == 0 ? park_forever(cp) : spin_forever(cp)));
        while (cp->constructed.load() != n)
          co_await spindle::yield_now{};
        throw custom_error(1);
      } catch (custom_error const&) {
        // The group is destroyed: every adopted child's frame is gone already.
        EXPECT_EQ(cp->alive(), 0);
        EXPECT_EQ(cp->destroyed.load(), n);
      }
      co_return static_cast<int>(cp->destroyed.load());
    };
    for (int round = 1; round <= 8; ++round) {
      counts c;
      EXPECT_EQ(rt.block_on(outer(&c, round)), round) << workers << " workers";
      spindle_test::progress();
    }
  }
}

TEST(TaskGroup, AdoptsHandlesOutsideTheRuntime) {
  // A group on a plain thread: adopting spawns nothing, so it needs no
  // runtime; its destructor reaps the adopted children from here.
  spindle::runtime rt{{.workers = 2}};
  counts c;
  {
    task_group g;
    for (int i = 0; i < 6; ++i)
      g.spawn(rt.spawn(i % 2 == 0 ? park_forever(&c) : spin_forever(&c)));
    EXPECT_EQ(g.size(), 6u);
    ASSERT_TRUE(spindle_test::wait_until([&] { return c.constructed.load() == 6; }));
  }
  EXPECT_EQ(c.alive(), 0);
  EXPECT_EQ(c.destroyed.load(), 6);
}

TEST(TaskGroup, AbortingTheOwnerCancelsAdoptedChildren) {
  for (std::size_t workers : {1u, 3u}) {
    spindle::runtime rt{{.workers = workers}};
    counts c;
    auto outer = [](counts* cp) -> task<int> {
      task_group g;
      for (int i = 0; i < 6; ++i)
        g.spawn(spindle::spawn(i % 2 == 0 ? park_forever(cp) : spin_forever(cp)));
      co_await g.join();
      co_return 1;
    };
    auto h = rt.spawn(outer(&c));
    ASSERT_TRUE(spindle_test::wait_until([&] { return c.constructed.load() == 6; }));
    h.abort();
    EXPECT_THROW(spindle_test::wait_and_take(h), spindle::task_cancelled);
    EXPECT_EQ(c.alive(), 0) << workers << " workers";
    EXPECT_EQ(c.destroyed.load(), 6);
  }
}

TEST(TaskGroup, EmptyOrTakenHandleErrors) {
  spindle::runtime rt{{.workers = 1}};
  auto outer = []() -> task<int> {
    task_group g;
    int errors = 0;
    auto adopt = [&](join_handle<int> h) {
      try {
        g.spawn(std::move(h));
      } catch (std::system_error const& e) {
        errors += e.code() == std::errc::invalid_argument;
      }
    };
    adopt(join_handle<int>{});
    join_handle<int> h = spindle::spawn(spindle_test::value_of(3));
    join_handle<int> moved = std::move(h);
    adopt(std::move(h));  // moved-from
    EXPECT_EQ(co_await moved, 3);
    adopt(std::move(moved));  // result taken
    EXPECT_EQ(g.size(), 0u);
    co_await g.join();
    co_return errors;
  };
  EXPECT_EQ(rt.block_on(outer()), 3);
}

}  // namespace
