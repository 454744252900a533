// The synthetic trees of the fold benchmarks, shared by bench/bench_fold.cpp
// and its oneTBB and OpenMP peers (bench/peers/fold): a node's own work is
// `rounds` rounds of a dependent multiply-xorshift chain, calibrated at start
// to about 20 ns (light) or 20 us (heavy), or taken from the environment
// (SPINDLE_FOLD_ROUNDS=LIGHT,HEAVY, as bench/compare.py passes the rounds
// bench_fold calibrated to every peer, so that all do the same work).
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace fold_trees {

template <class T>
inline void keep(T const& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

struct node {
  std::uint64_t id;
  std::uint32_t depth;
};

[[gnu::noinline]] inline std::uint64_t work(std::uint64_t x, std::uint32_t rounds) {
  for (std::uint32_t i = 0; i < rounds; ++i) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ULL;
    x ^= x >> 27;
  }
  return x;
}

// Thread CPU time, not wall time: on a loaded machine the calibrating
// thread is descheduled, which wall time would count as work.
inline double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// Rounds of `work` that take about target_ns (the best of 5 tries).
inline std::uint32_t calibrate(double target_ns) {
  constexpr std::uint32_t rounds = 1000;
  constexpr int n = 2000;
  double best = 1e30;
  std::uint64_t x = 1;
  for (int attempt = 0; attempt < 5; ++attempt) {
    double t0 = thread_cpu_ns();
    for (int i = 0; i < n; ++i)
      x = work(x + static_cast<std::uint64_t>(i), rounds);
    double per_round = (thread_cpu_ns() - t0) / (static_cast<double>(n) * rounds);
    if (per_round < best) best = per_round;
  }
  keep(x);
  auto r = static_cast<std::uint32_t>(target_ns / best);
  return r == 0 ? 1 : r;
}

// SPINDLE_FOLD_ROUNDS=LIGHT,HEAVY, or calibrated.
inline std::uint32_t env_rounds(int which) {
  char const* e = std::getenv("SPINDLE_FOLD_ROUNDS");
  unsigned light = 0;
  unsigned heavy = 0;
  if (e == nullptr || std::sscanf(e, "%u,%u", &light, &heavy) != 2) return 0;
  return which == 0 ? light : heavy;
}
inline std::uint32_t light_rounds() {
  static std::uint32_t r = env_rounds(0) != 0 ? env_rounds(0) : calibrate(20.0);
  return r;
}
inline std::uint32_t heavy_rounds() {
  static std::uint32_t r = env_rounds(1) != 0 ? env_rounds(1) : calibrate(20'000.0);
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

inline std::uint64_t sequential(tree const& t, node const& n) {
  std::uint64_t h = work(n.id, t.rounds);
  if (n.depth < t.depth) {
    for (std::uint32_t i = 0; i < t.fanout; ++i)
      h += sequential(t, node{n.id * t.fanout + i + 1, n.depth + 1});
  }
  return h;
}

/// Tree 0: wide_light, 1: deep_narrow, 2: heavy.
inline tree make(int shape) {
  switch (shape) {
    case 0:
      return {100, 3, light_rounds()};
    case 1:
      return {2, 22, light_rounds()};
    default:
      return {100, 2, heavy_rounds()};
  }
}
inline char const* name_of(int shape) {
  return shape == 0 ? "wide_light" : shape == 1 ? "deep_narrow" : "heavy";
}

}  // namespace fold_trees
