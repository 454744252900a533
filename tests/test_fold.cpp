// Tree folds (spindle/fold.hpp): fold_pool and spindle::fold / runtime::fold
// against a sequential reference on several tree shapes, exceptions from
// every callback (rethrown, nothing leaked, the pool or runtime usable
// afterwards), sessions and concurrent runs, folds from tasks, fibers and
// plain threads, and the dispatch latch (a pool thread delayed between
// reading the job pointer and entering the job is never inside a fold that
// run() already returned from).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/detail/fold_dispatch.hpp"
#include "spindle/detail/fold_walk.hpp"
#include "spindle/fiber.hpp"
#include "spindle/fold.hpp"

namespace {

using spindle_test::scaled;

// An implicit tree: a node is (id, depth); its children depend on the shape.
struct node {
  std::uint64_t id;
  std::uint32_t depth;
};

enum class shape { wide, binary, chain, random, single };

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

struct tree {
  shape kind;
  std::uint32_t size;  // fan-out (wide), depth (binary, chain, random)
  template <class E>
  void children(node const& n, E&& emit) const {
    switch (kind) {
      case shape::wide:
        if (n.depth < 2) {
          for (std::uint32_t i = 0; i < size; ++i)
            emit(node{n.id * size + i + 1, n.depth + 1});
        }
        break;
      case shape::binary:
        if (n.depth < size) {
          emit(node{2 * n.id + 1, n.depth + 1});
          emit(node{2 * n.id + 2, n.depth + 1});
        }
        break;
      case shape::chain:
        if (n.depth < size) emit(node{n.id + 1, n.depth + 1});
        break;
      case shape::random:
        if (n.depth < size) {
          std::uint64_t k = mix(n.id) % 5;  // 0..4 children
          for (std::uint64_t i = 0; i < k; ++i)
            emit(node{mix(n.id * 7 + i + 1), n.depth + 1});
        }
        break;
      case shape::single:
        break;
    }
  }
};

// Counts nodes and sums a hash of ids and depths (order-independent).
struct result {
  std::uint64_t count = 0;
  std::uint64_t sum = 0;
  std::uint32_t max_depth = 0;
  bool operator==(result const&) const = default;
};

struct count_fold {
  result init(node const& n) const { return {1, mix(n.id) + n.depth, n.depth}; }
  void accumulate(result& h, result&& c) const {
    h.count += c.count;
    h.sum += c.sum;
    if (c.max_depth > h.max_depth) h.max_depth = c.max_depth;
  }
  result finalize(result&& h) const { return h; }
};

template <class G, class F>
result sequential(G const& g, F const& f, node const& n) {
  // Iterative post-order, so that the chain shape does not overflow the stack.
  struct frame {
    node n;
    result heap;
    std::vector<node> kids;
    std::size_t next = 0;
  };
  std::vector<frame> stack;
  auto push = [&](node const& x) {
    frame fr{x, f.init(x), {}, 0};
    g.children(x, [&](node c) { fr.kids.push_back(c); });
    stack.push_back(std::move(fr));
  };
  push(n);
  result out;
  for (;;) {
    frame& top = stack.back();
    if (top.next < top.kids.size()) {
      node c = top.kids[top.next++];
      push(c);
      continue;
    }
    result r = f.finalize(std::move(top.heap));
    stack.pop_back();
    if (stack.empty()) {
      out = r;
      break;
    }
    f.accumulate(stack.back().heap, std::move(r));
  }
  return out;
}

std::vector<tree> shapes() {
  return {tree{shape::wide, static_cast<std::uint32_t>(scaled(200, 20))},
          tree{shape::binary, static_cast<std::uint32_t>(spindle_test::under_tsan ? 10 : 14)},
          tree{shape::chain, static_cast<std::uint32_t>(scaled(50000, 2000))},
          tree{shape::random, 14}, tree{shape::single, 0}};
}

TEST(FoldPool, MatchesTheSequentialFoldOnEveryShape) {
  for (std::size_t threads : {0, 1, 3}) {
    spindle::fold_pool::with(threads, [&](spindle::fold_pool& pool) {
      EXPECT_EQ(pool.thread_count(), threads);
      for (tree const& t : shapes()) {
        result want = sequential(t, count_fold{}, node{0, 0});
        for (auto policy : {spindle::fold_policy::standard(), spindle::fold_policy::wide_light(),
                            spindle::fold_policy::deep_narrow()}) {
          EXPECT_EQ(pool.run(t, count_fold{}, node{0, 0}, policy), want)
              << "threads " << threads << " shape " << static_cast<int>(t.kind);
        }
      }
    });
  }
}

TEST(FoldPool, WithReturnsTheBodysValueAndASessionRunsManyFolds) {
  tree t{shape::random, 9};
  result want = sequential(t, count_fold{}, node{5, 0});
  int runs = static_cast<int>(scaled(300, 20));
  int ok = spindle::fold_pool::with(2, [&](spindle::fold_pool& pool) {
    int n = 0;
    for (int i = 0; i < runs; ++i)
      n += pool.run(t, count_fold{}, node{5, 0}) == want ? 1 : 0;
    return n;
  });
  EXPECT_EQ(ok, runs);
}

TEST(FoldPool, ConcurrentRunsTakeTurnsAndAllSucceed) {
  tree t{shape::binary, 9};
  result want = sequential(t, count_fold{}, node{0, 0});
  int const per_thread = static_cast<int>(scaled(40, 5));
  std::atomic<int> good{0};
  spindle::fold_pool::with(2, [&](spindle::fold_pool& pool) {
    std::vector<std::thread> callers;
    for (int c = 0; c < 3; ++c) {
      callers.emplace_back([&] {
        for (int i = 0; i < per_thread; ++i) {
          if (pool.run(t, count_fold{}, node{0, 0}) == want) good.fetch_add(1);
        }
      });
    }
    for (auto& th : callers)
      th.join();
  });
  EXPECT_EQ(good.load(), 3 * per_thread);
}

// A chain stays private (its owner counts its children's results without
// atomics) until a steal from the owner's deque makes the owner settle it.
// Here, on one thread, participant 0's walk of the root leaves the root's
// children in its deque, and shares them all (a pop shares half when a
// thief asks; sharing all is the extreme); participant 1 steals every one
// before participant 0 pops any: all of the root's results arrive from
// participant 1, and only participant 0's settling (on finding its deque
// empty) can finish the root.
TEST(FoldWalk, AChainWhoseChildrenWereAllStolenIsFinishedByItsOwnersSettling) {
  for (tree const& t : {tree{shape::binary, 6}, tree{shape::wide, 12}, tree{shape::random, 8}}) {
    result want = sequential(t, count_fold{}, node{1, 0});
    count_fold const f{};
    spindle::detail::fold_state<tree, count_fold, node> st(t, f, spindle::fold_policy::standard(),
                                                           2);
    st.start(st.part(0), node{1, 0});
    ASSERT_FALSE(st.root_done());
    std::size_t children = st.part(0).deque.size();
    ASSERT_GE(children, 2u);
    st.part(0).deque.share(static_cast<std::uint32_t>(children));
    st.participate(st.part(1), true);  // steals it all, then gives up idle
    EXPECT_EQ(st.part(0).deque.stolen(), static_cast<std::int64_t>(children))
        << static_cast<int>(t.kind);
    EXPECT_FALSE(st.root_done()) << "the root finished before its owner settled it";
    st.participate(st.part(0), false);
    ASSERT_TRUE(st.root_done());
    EXPECT_EQ(st.take_result(), want) << static_cast<int>(t.kind);
  }
}

// Many folds whose nodes take uneven time, with more participants than
// cores: steals land at every point of a chain's life (before its owner's
// first result, between two, after all but the last), so chains finish
// privately, by their owner's settling, and by another participant's last
// result. Every fold must still match the sequential one.
struct uneven_fold {
  result init(node const& n) const {
    std::uint64_t spins = mix(n.id) % 97;
    for (std::uint64_t i = 0; i < spins; ++i)
      spindle::detail::cpu_relax();
    return {1, mix(n.id) + n.depth, n.depth};
  }
  void accumulate(result& h, result&& c) const { count_fold{}.accumulate(h, std::move(c)); }
  result finalize(result&& h) const { return h; }
};

TEST(FoldPool, StealsAtEveryPointOfAChainsLifeNeverLoseOrRepeatAResult) {
  std::vector<tree> trees = {tree{shape::binary, spindle_test::under_tsan ? 7u : 11u},
                             tree{shape::random, spindle_test::under_tsan ? 7u : 10u},
                             tree{shape::wide, 30}};
  int const rounds = static_cast<int>(scaled(60, 6));
  for (tree const& t : trees) {
    result want = sequential(t, count_fold{}, node{3, 0});
    spindle::fold_pool::with(3, [&](spindle::fold_pool& pool) {
      for (int i = 0; i < rounds; ++i) {
        auto policy =
            i % 2 == 0 ? spindle::fold_policy::deep_narrow() : spindle::fold_policy::standard();
        ASSERT_EQ(pool.run(t, uneven_fold{}, node{3, 0}, policy), want)
            << "shape " << static_cast<int>(t.kind) << " round " << i;
      }
    });
  }
}

// ------------------------------------------------------------ exceptions

// Heaps and results that count their live instances: nothing may leak when
// a fold stops early.
std::atomic<long> live{0};
struct tracked {
  std::uint64_t v = 0;
  std::string pad;  // a heap allocation, for AddressSanitizer's leak check
  explicit tracked(std::uint64_t x) : v(x), pad(40, 'x') { live.fetch_add(1); }
  tracked(tracked&& o) noexcept : v(o.v), pad(std::move(o.pad)) { live.fetch_add(1); }
  tracked(tracked const&) = delete;
  tracked& operator=(tracked&&) = delete;
  ~tracked() { live.fetch_sub(1); }
};

enum class where { init, accumulate, finalize, children };

struct boom : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct failing_tree {
  tree inner;
  where at;
  std::uint64_t victim;  // the node id that throws
  template <class E>
  void children(node const& n, E&& emit) const {
    bool fail = at == where::children && n.id == victim;
    std::uint32_t k = 0;
    inner.children(n, [&](node c) {
      if (fail && ++k == 2) throw boom("children");
      emit(c);
    });
    if (fail && k < 2) throw boom("children");
  }
};

struct failing_fold {
  where at;
  std::uint64_t victim;
  struct heap {
    tracked t;
    std::uint64_t id;
  };
  heap init(node const& n) const {
    if (at == where::init && n.id == victim) throw boom("init");
    return heap{tracked(1), n.id};
  }
  void accumulate(heap& h, tracked&& c) const {
    if (at == where::accumulate && h.id == victim) throw boom("accumulate");
    h.t.v += c.v;
  }
  tracked finalize(heap&& h) const {
    if (at == where::finalize && h.id == victim) throw boom("finalize");
    return tracked(h.t.v);
  }
};

TEST(FoldPool, AnExceptionFromAnyCallbackStopsTheFoldIsRethrownAndLeaksNothing) {
  tree t{shape::binary, spindle_test::under_tsan ? 8u : 11u};
  std::uint64_t nodes = (std::uint64_t{1} << (t.size + 1)) - 1;
  spindle::fold_pool::with(2, [&](spindle::fold_pool& pool) {
    for (where w : {where::init, where::accumulate, where::finalize, where::children}) {
      // The root, an inner node, a leaf.
      for (std::uint64_t victim : {std::uint64_t{0}, std::uint64_t{5}, nodes - 1}) {
        if (w == where::children && victim == nodes - 1) continue;    // a leaf has no children
        if (w == where::accumulate && victim == nodes - 1) continue;  // nor a child to accumulate
        EXPECT_THROW(
            (void)pool.run(failing_tree{t, w, victim}, failing_fold{w, victim}, node{0, 0}), boom)
            << static_cast<int>(w) << " at " << victim;
        EXPECT_EQ(live.load(), 0) << static_cast<int>(w) << " at " << victim;
        // The pool is still usable.
        tracked ok =
            pool.run(failing_tree{t, w, nodes + 1}, failing_fold{w, nodes + 1}, node{0, 0});
        EXPECT_EQ(ok.v, nodes);
      }
    }
  });
  EXPECT_EQ(live.load(), 0);
}

// A fold that must stop early: after the failure no new node starts, so far
// fewer than all nodes run their init.
TEST(FoldPool, AFailureStopsNewNodesFromStarting) {
  std::atomic<std::uint64_t> inits{0};
  struct counting_fold : count_fold {
    std::atomic<std::uint64_t>* inits;
    result init(node const& n) const {
      inits->fetch_add(1, std::memory_order_relaxed);
      if (n.depth == 1) throw boom("first level");
      return count_fold::init(n);
    }
  };
  tree t{shape::binary, 16};
  spindle::fold_pool::with(1, [&](spindle::fold_pool& pool) {
    EXPECT_THROW((void)pool.run(t, counting_fold{{}, &inits}, node{0, 0}), boom);
  });
  EXPECT_LT(inits.load(), std::uint64_t{1} << 16);
}

// ------------------------------------------------------------ the latch

std::atomic<int> inside_job{0};
std::atomic<std::uint32_t> delay_seed{1};

void delaying_hook(std::size_t /*index*/, bool entering) {
  if (entering) {
    inside_job.fetch_add(1);
    std::uint32_t r = delay_seed.fetch_add(0x9e3779b9U);
    if ((r >> 7) % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(r % 200));
  } else {
    inside_job.fetch_sub(1);
  }
}

TEST(FoldPool, NoThreadIsInsideAFoldThatRunReturnedFrom) {
  spindle::detail::fold_pool_entry_hook.store(&delaying_hook);
  tree t{shape::wide, 3};
  result want = sequential(t, count_fold{}, node{0, 0});
  int const runs = static_cast<int>(scaled(2000, 200));
  int violations = 0;
  spindle::fold_pool::with(3, [&](spindle::fold_pool& pool) {
    for (int i = 0; i < runs; ++i) {
      // Tiny folds: the caller usually finishes before the threads wake,
      // so threads arrive late, between the job read and the job call.
      EXPECT_EQ(pool.run(t, count_fold{}, node{0, 0}), want);
      if (inside_job.load() != 0) ++violations;
    }
  });
  spindle::detail::fold_pool_entry_hook.store(nullptr);
  EXPECT_EQ(violations, 0);
}

// The same invariant in a deterministic simulation of the dispatch protocol
// (detail/fold_dispatch.hpp, the steps fold_pool runs): one caller runs fold
// after fold (publish, body steps, seal, latch, then its job "dies": the
// stack frame is gone) while virtual pool threads step through count-in,
// read the job pointer, an arbitrary delay, entering the job (touching it)
// and leaving, interleaved by a seeded RNG one step at a time. A thread
// must never touch a dead job. The control run swaps the thread's first two
// steps (read the pointer, then count in: the TOCTOU the seed warns of) and
// must be caught by the same check, so the simulation can fail.
struct sim_job {
  bool alive = false;
};

// Returns the number of touches of a dead job over `seeds` seeds.
int simulate_dispatch(int seeds, bool count_in_first) {
  int violations = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    std::uint64_t rng = mix(static_cast<std::uint64_t>(seed));
    auto next = [&](std::uint64_t n) {
      rng = mix(rng + 0x9e3779b97f4a7c15ULL);
      return rng % n;
    };
    spindle::detail::fold_dispatch<sim_job> proto;
    std::vector<sim_job> jobs(40);
    enum class caller_at { publish, body, seal, latch, done } c = caller_at::publish;
    std::size_t current = 0;
    int body_left = 0;
    struct vthread {
      int step = 0;  // 0 idle, 1 after first step, 2 holding pointer (delay), 3 in job
      sim_job const* held = nullptr;
      int delay = 0;
      bool counted = false;
    };
    std::vector<vthread> ts(3);
    for (int guard = 0; guard < 100000 && c != caller_at::done; ++guard) {
      std::size_t who = next(ts.size() + 1);
      if (who == ts.size()) {  // the caller's step
        switch (c) {
          case caller_at::publish:
            jobs[current].alive = true;
            proto.publish(&jobs[current]);
            body_left = static_cast<int>(next(4));
            c = caller_at::body;
            break;
          case caller_at::body:
            if (body_left-- <= 0) c = caller_at::seal;
            break;
          case caller_at::seal:
            proto.seal();
            c = caller_at::latch;
            break;
          case caller_at::latch:
            if (proto.latched()) {
              jobs[current].alive = false;  // run() returns: the frame is gone
              c = ++current == jobs.size() ? caller_at::done : caller_at::publish;
            }
            break;
          case caller_at::done:
            break;
        }
        continue;
      }
      vthread& t = ts[who];
      switch (t.step) {
        case 0:  // woken: the first of enter()'s two steps
          if (count_in_first) {
            proto.count_in();
            t.counted = true;
          } else {
            t.held = proto.read_job();
          }
          t.step = 1;
          break;
        case 1:  // the second
          if (count_in_first) {
            t.held = proto.read_job();
          } else {
            proto.count_in();
            t.counted = true;
          }
          t.delay = static_cast<int>(next(8));  // preempted before entering
          t.step = 2;
          break;
        case 2:
          if (t.delay-- > 0) break;
          if (t.held != nullptr && !t.held->alive) ++violations;  // touches the job
          t.step = 3;
          break;
        case 3:
          if (t.held != nullptr && !t.held->alive) ++violations;
          proto.leave();
          t = vthread{};
          break;
      }
    }
  }
  return violations;
}

TEST(FoldPool, SimulatedDispatchNeverLetsADelayedThreadTouchAFinishedFold) {
  int const seeds = static_cast<int>(scaled(1000, 200));
  EXPECT_EQ(simulate_dispatch(seeds, true), 0);
  // The control: reading the job pointer before counting in is caught.
  EXPECT_GT(simulate_dispatch(seeds, false), 0);
}

// ------------------------------------------------------------ on the runtime

spindle::runtime_config two_workers() {
  return {.workers = 2};
}

TEST(RuntimeFold, FromATaskMatchesTheSequentialFold) {
  spindle::runtime rt{two_workers()};
  for (tree const& t : shapes()) {
    result want = sequential(t, count_fold{}, node{0, 0});
    result got = rt.block_on([](tree t) -> spindle::task<result> {
      co_return co_await spindle::fold(t, count_fold{}, node{0, 0});
    }(t));
    EXPECT_EQ(got, want) << static_cast<int>(t.kind);
  }
}

TEST(RuntimeFold, RuntimeFoldBlocksAPlainThread) {
  spindle::runtime rt{{.workers = 3}};
  for (tree const& t : shapes()) {
    EXPECT_EQ(rt.fold(t, count_fold{}, node{0, 0}), sequential(t, count_fold{}, node{0, 0}));
    EXPECT_EQ(rt.fold(t, count_fold{}, node{0, 0}, spindle::fold_policy::deep_narrow()),
              sequential(t, count_fold{}, node{0, 0}));
  }
}

TEST(RuntimeFold, FromAFiber) {
  spindle::runtime rt{two_workers()};
  tree t{shape::random, 12};
  result want = sequential(t, count_fold{}, node{0, 0});
  auto h = rt.spawn_fiber([&] {
    return spindle::this_fiber::await(spindle::fold(t, count_fold{}, node{0, 0}));
  });
  result got = rt.block_on(std::move(h));
  EXPECT_EQ(got, want);
}

TEST(RuntimeFold, ManyFoldsAtOnceFromManyTasks) {
  spindle::runtime rt{two_workers()};
  tree t{shape::binary, 8};
  result want = sequential(t, count_fold{}, node{0, 0});
  int const n = static_cast<int>(scaled(64, 8));
  int ok = rt.block_on([](tree t, result want, int n) -> spindle::task<int> {
    std::vector<spindle::join_handle<bool>> hs;
    for (int i = 0; i < n; ++i) {
      hs.push_back(spindle::spawn([](tree t, result want) -> spindle::task<bool> {
        co_return (co_await spindle::fold(t, count_fold{}, node{0, 0})) == want;
      }(t, want)));
    }
    int good = 0;
    for (auto& h : hs)
      good += (co_await h) ? 1 : 0;
    co_return good;
  }(t, want, n));
  EXPECT_EQ(ok, n);
}

TEST(RuntimeFold, ExceptionsAreRethrownAndTheRuntimeStaysUsable) {
  // Leaks are counted once the runtime is gone: a finished task's frame
  // (holding a moved-from result) may be freed on a worker just after
  // block_on returned.
  {
    spindle::runtime rt{two_workers()};
    tree t{shape::binary, 9};
    std::uint64_t nodes = (std::uint64_t{1} << 10) - 1;
    for (where w : {where::init, where::accumulate, where::finalize, where::children}) {
      EXPECT_THROW((void)rt.fold(failing_tree{t, w, 3}, failing_fold{w, 3}, node{0, 0}), boom);
      tracked ok = rt.fold(failing_tree{t, w, nodes + 1}, failing_fold{w, nodes + 1}, node{0, 0});
      EXPECT_EQ(ok.v, nodes);
    }
    EXPECT_EQ(rt.block_on(spindle_test::value_of(7)), 7);
  }
  EXPECT_EQ(live.load(), 0);
}

TEST(RuntimeFold, MisuseIsRefusedWithAnError) {
  spindle::runtime rt{two_workers()};
  tree t{shape::single, 0};
  // runtime::fold from a worker would block it.
  EXPECT_THROW(
      {
        try {
          rt.block_on([](spindle::runtime* r, tree t) -> spindle::task<void> {
            (void)r->fold(t, count_fold{}, node{0, 0});
            co_return;
          }(&rt, t));
        } catch (std::system_error const& e) {
          EXPECT_EQ(e.code(), std::errc::resource_deadlock_would_occur);
          throw;
        }
      },
      std::system_error);
  // Awaited outside any task.
  bool threw = false;
  [&]() -> spindle_test::eager {
    try {
      (void)co_await spindle::fold(t, count_fold{}, node{0, 0});
    } catch (std::system_error const& e) {
      threw = e.code() == std::errc::operation_not_permitted;
    }
  }();
  EXPECT_TRUE(threw);
}

}  // namespace
