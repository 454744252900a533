// Tree-fold benchmarks (Google Benchmark): one bottom-up fold (each node's
// value is a hash of its id after `work` rounds of mixing; a node's result
// is the sum over its subtree) on three synthetic trees, four ways, 2
// threads each (SPINDLE_BENCH_WORKERS=N changes that):
//
//   trees        wide_light   fan-out 100, depth 3: 1,010,101 nodes, ~20 ns each
//                deep_narrow  binary, depth 22: 8,388,607 nodes, ~20 ns each
//                heavy        fan-out 100, depth 2: 10,101 nodes, ~20 us each
//   ways         sequential   a recursive fold on the calling thread
//                spawn        spindle task per node: spawn every child, await each
//                fold_pool    spindle::fold_pool (1 thread + the caller), one
//                             pool for all iterations (a session)
//                runtime_fold runtime::fold on a 2-worker runtime
//
// items = nodes; counter ns_per_node. Work per node is calibrated at start
// (rounds of a dependent multiply-xorshift chain) to the target time.
//
// The policies (fold_policy) were chosen on these trees, on a 2-core VM
// shared with other jobs (so figures move by +-20%): see docs or the issue
// report for the table.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "spindle/fold.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

struct node {
  std::uint64_t id;
  std::uint32_t depth;
};

[[gnu::noinline]] std::uint64_t work(std::uint64_t x, std::uint32_t rounds) {
  for (std::uint32_t i = 0; i < rounds; ++i) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ULL;
    x ^= x >> 27;
  }
  return x;
}

std::uint32_t calibrate(double target_ns) {
  std::uint32_t rounds = 64;
  auto t0 = std::chrono::steady_clock::now();
  std::uint64_t x = 1;
  constexpr int n = 200000;
  for (int i = 0; i < n; ++i)
    x = work(x + i, rounds);
  benchmark::DoNotOptimize(x);
  double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
  double per_round = ns / rounds;
  auto r = static_cast<std::uint32_t>(target_ns / per_round);
  return r == 0 ? 1 : r;
}

std::uint32_t light_rounds() {
  static std::uint32_t r = calibrate(20.0);
  return r;
}
std::uint32_t heavy_rounds() {
  static std::uint32_t r = calibrate(20'000.0);
  return r;
}

struct tree {
  std::uint32_t fanout;
  std::uint32_t depth;
  std::uint32_t rounds;
  template <class E>
  void children(node const& n, E&& emit) const {
    if (n.depth >= depth) return;
    for (std::uint32_t i = 0; i < fanout; ++i)
      emit(node{n.id * fanout + i + 1, n.depth + 1});
  }
  [[nodiscard]] std::uint64_t nodes() const {
    std::uint64_t total = 0;
    std::uint64_t level = 1;
    for (std::uint32_t d = 0; d <= depth; ++d) {
      total += level;
      level *= fanout;
    }
    return total;
  }
};

struct sum_fold {
  std::uint32_t rounds;
  std::uint64_t init(node const& n) const { return work(n.id, rounds); }
  void accumulate(std::uint64_t& h, std::uint64_t&& c) const { h += c; }
  std::uint64_t finalize(std::uint64_t&& h) const { return h; }
};

std::uint64_t sequential(tree const& t, node const& n) {
  std::uint64_t h = work(n.id, t.rounds);
  if (n.depth < t.depth) {
    for (std::uint32_t i = 0; i < t.fanout; ++i)
      h += sequential(t, node{n.id * t.fanout + i + 1, n.depth + 1});
  }
  return h;
}

spindle::task<std::uint64_t> spawned(tree const* t, node n) {
  std::uint64_t h = work(n.id, t->rounds);
  if (n.depth < t->depth) {
    std::vector<spindle::join_handle<std::uint64_t>> kids;
    kids.reserve(t->fanout);
    for (std::uint32_t i = 0; i < t->fanout; ++i) {
      kids.push_back(spindle::spawn(spawned(t, node{n.id * t->fanout + i + 1, n.depth + 1})));
    }
    for (auto& k : kids)
      h += co_await k;
  }
  co_return h;
}

std::size_t threads() {
  char const* e = std::getenv("SPINDLE_BENCH_WORKERS");
  return e != nullptr ? static_cast<std::size_t>(std::atoi(e)) : 2;
}

tree make(int shape) {
  switch (shape) {
    case 0:
      return {100, 3, light_rounds()};
    case 1:
      return {2, 22, light_rounds()};
    default:
      return {100, 2, heavy_rounds()};
  }
}
char const* name_of(int shape) {
  return shape == 0 ? "wide_light" : shape == 1 ? "deep_narrow" : "heavy";
}
spindle::fold_policy policy_of(int shape) {
  return shape == 0   ? spindle::fold_policy::wide_light()
         : shape == 1 ? spindle::fold_policy::deep_narrow()
                      : spindle::fold_policy::standard();
}

void finish(benchmark::State& state, tree const& t, int shape) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * t.nodes()));
  state.counters["ns_per_node"] =
      benchmark::Counter(static_cast<double>(state.iterations() * t.nodes()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel(name_of(shape));
}

void BM_fold_sequential(benchmark::State& state) {
  int shape = static_cast<int>(state.range(0));
  tree t = make(shape);
  for (auto _ : state)
    benchmark::DoNotOptimize(sequential(t, node{0, 0}));
  finish(state, t, shape);
}

void BM_fold_spawn(benchmark::State& state) {
  int shape = static_cast<int>(state.range(0));
  tree t = make(shape);
  spindle::runtime rt{{.workers = threads()}};
  for (auto _ : state)
    benchmark::DoNotOptimize(rt.block_on(spawned(&t, node{0, 0})));
  finish(state, t, shape);
}

void BM_fold_pool(benchmark::State& state) {
  int shape = static_cast<int>(state.range(0));
  int preset = static_cast<int>(state.range(1));
  tree t = make(shape);
  spindle::fold_policy pol = preset < 0 ? policy_of(shape) : policy_of(preset);
  spindle::fold_pool::with(threads() - 1, [&](spindle::fold_pool& pool) {
    for (auto _ : state)
      benchmark::DoNotOptimize(pool.run(t, sum_fold{t.rounds}, node{0, 0}, pol));
  });
  finish(state, t, shape);
}

void BM_fold_runtime(benchmark::State& state) {
  int shape = static_cast<int>(state.range(0));
  int preset = static_cast<int>(state.range(1));
  tree t = make(shape);
  spindle::fold_policy pol = preset < 0 ? policy_of(shape) : policy_of(preset);
  spindle::runtime rt{{.workers = threads()}};
  for (auto _ : state)
    benchmark::DoNotOptimize(rt.fold(t, sum_fold{t.rounds}, node{0, 0}, pol));
  finish(state, t, shape);
}

// Arguments: tree (0 wide_light, 1 deep_narrow, 2 heavy); for the folds a
// policy (-1: the tree's preset; 0, 1, 2: wide_light, deep_narrow, standard).
BENCHMARK(BM_fold_sequential)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_fold_spawn)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_fold_pool)
    ->ArgsProduct({{0, 1, 2}, {-1, 0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_fold_runtime)
    ->ArgsProduct({{0, 1, 2}, {-1, 0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
