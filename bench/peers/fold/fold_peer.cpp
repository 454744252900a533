// bench/compare.py's fold section, oneTBB and OpenMP peers: the same three
// trees and per-node work as bench/bench_fold.cpp (bench/fold_trees.hpp;
// SPINDLE_FOLD_ROUNDS gives the rounds bench_fold calibrated), folded by
// recursion with one task per child and a wait per node:
//   FOLD_PEER_TBB     tbb::task_group per node inside a tbb::task_arena of
//                     --workers slots (the measuring thread is one of them)
//   FOLD_PEER_OPENMP  #pragma omp task per child + taskwait, in a parallel
//                     region of --workers threads (single producer)
// Workloads: fold_wide_light, fold_deep_narrow, fold_heavy; unit ms per fold.
// Output and options: bench/peers/peer_common.hpp.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "../peer_common.hpp"
#include "fold_trees.hpp"

#if defined(FOLD_PEER_TBB)
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>
#define FOLD_SYSTEM "onetbb"
#elif defined(FOLD_PEER_OPENMP)
#include <omp.h>
#define FOLD_SYSTEM "openmp"
#else
#error "define FOLD_PEER_TBB or FOLD_PEER_OPENMP"
#endif

namespace {

using namespace fold_trees;
constexpr std::uint32_t max_fanout = 100;

std::uint64_t fold(tree const& t, node n) {
  std::uint64_t h = work(n.id, t.rounds);
  if (n.depth >= t.depth) return h;
  std::array<std::uint64_t, max_fanout> kids{};
#if defined(FOLD_PEER_TBB)
  tbb::task_group g;
  for (std::uint32_t i = 0; i < t.fanout; ++i) {
    g.run([&t, &kids, n, i] { kids[i] = fold(t, node{n.id * t.fanout + i + 1, n.depth + 1}); });
  }
  g.wait();
#else
  for (std::uint32_t i = 0; i < t.fanout; ++i) {
#pragma omp task shared(t, kids) firstprivate(n, i)
    kids[i] = fold(t, node{n.id * t.fanout + i + 1, n.depth + 1});
  }
#pragma omp taskwait
#endif
  for (std::uint32_t i = 0; i < t.fanout; ++i)
    h += kids[i];
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  peer::options o = peer::parse(argc, argv, "fold_peer");
  if (o.workloads.empty()) o.workloads = {"fold_wide_light", "fold_deep_narrow", "fold_heavy"};
  std::vector<peer::result> results;
#if defined(FOLD_PEER_TBB)
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                         static_cast<std::size_t>(o.workers));
  tbb::task_arena arena(o.workers);
#endif
  for (auto const& w : o.workloads) {
    int shape = w == "fold_wide_light"    ? 0
                : w == "fold_deep_narrow" ? 1
                : w == "fold_heavy"       ? 2
                                          : -1;
    if (shape < 0) {
      std::fprintf(stderr, "fold_peer: unknown workload %s\n", w.c_str());
      return 2;
    }
    tree t = make(shape);
    std::uint64_t want = sequential(t, node{0, 0});
    std::uint64_t got = 0;
    auto body = [&] {
#if defined(FOLD_PEER_TBB)
      arena.execute([&] { got = fold(t, node{0, 0}); });
#else
#pragma omp parallel num_threads(o.workers)
#pragma omp single
      got = fold(t, node{0, 0});
#endif
    };
    auto samples = peer::measure(o, 1e-6, 1.0, body);
    if (got != want) {
      std::fprintf(stderr, "fold_peer: %s: wrong result\n", w.c_str());
      return 1;
    }
    results.push_back({w, "ms", samples});
  }
  peer::print(FOLD_SYSTEM, o, results);
  return 0;
}
