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
// The policies (fold_policy) were chosen on these trees (the per-preset
// rows: BM_fold_pool/TREE/PRESET, BM_fold_runtime/TREE/PRESET); the table
// is in fold_policy's comment (runtime/include/spindle/detail/fold_walk.hpp).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "fold_trees.hpp"
#include "spindle/fold.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

using namespace fold_trees;

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
  state.counters["rounds"] = static_cast<double>(t.rounds);
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
