// Process benchmarks (Google Benchmark, spindle/process.hpp), 2 workers:
//   process_ring     10,000 processes pass one token (hops = the argument): ns per hop
//   process_fan_in   1,000 sender processes x 1,000 messages into one process: messages/s
//   process_skynet   10^6 processes spawned as a 10-ary tree, sums returned by message
//   process_idle_bytes  heap bytes per process parked in receive (mallinfo2 delta)
// The same workloads run against CAF, Go and Tokio in bench/compare.py's
// process section.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "spindle/process.hpp"
#include "spindle/runtime.hpp"

namespace {

using spindle::pid;
using spindle::process_context;
using spindle::task;

// Workers: 2, or SPINDLE_BENCH_WORKERS=N (bench/compare.py's --workers).
std::size_t bench_workers() {
  char const* env = std::getenv("SPINDLE_BENCH_WORKERS");
  long const n = env != nullptr ? std::strtol(env, nullptr, 10) : 0;
  return n > 0 ? static_cast<std::size_t>(n) : 2;
}

// ---------------------------------------------------------------------------
// ring

struct ring {
  std::vector<pid<long>> members;
  spindle::event built;
};

task<void> ring_member(process_context<long>& ctx, ring* r, std::size_t me) {
  co_await r->built.wait();
  pid<long> const next = r->members[(me + 1) % r->members.size()];
  for (;;) {
    long const v = co_await ctx.receive();
    if (v <= 0) {
      (void)spindle::send(next, 0L);
      co_return;
    }
    (void)spindle::send(next, v - 1);
  }
}

void process_ring(benchmark::State& state) {
  spindle::runtime rt{{.workers = bench_workers()}};
  long const hops = state.range(0);
  std::size_t const n = 10000;
  for (auto _ : state) {
    state.PauseTiming();
    ring r;
    for (std::size_t i = 0; i < n; ++i) {
      r.members.push_back(rt.spawn_process<long>(
          [&r, i](process_context<long>& ctx) { return ring_member(ctx, &r, i); }));
    }
    r.built.set();
    state.ResumeTiming();
    (void)spindle::send(r.members[0], hops);
    for (auto const& p : r.members)
      rt.block_on(spindle::monitor(p));
  }
  state.SetItemsProcessed(state.iterations() * (hops + static_cast<long>(n)));
}
BENCHMARK(process_ring)->Arg(1'000'000)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// fan-in

task<void> fan_sender(process_context<int>& ctx, pid<long> sink, int n) {
  (void)co_await ctx.receive();  // go
  for (int i = 0; i < n; ++i)
    (void)spindle::send(sink, 1L);
}

task<void> fan_sink(process_context<long>& ctx, long total) {
  long got = 0;
  while (got < total)
    got += co_await ctx.receive();
}

void process_fan_in(benchmark::State& state) {
  spindle::runtime rt{{.workers = bench_workers()}};
  int const senders = 1000;
  int const per = static_cast<int>(state.range(0));
  long const total = static_cast<long>(senders) * per;
  for (auto _ : state) {
    state.PauseTiming();
    pid<long> sink = rt.spawn_process<long>(
        [total](process_context<long>& ctx) { return fan_sink(ctx, total); });
    std::vector<pid<int>> ss;
    for (int i = 0; i < senders; ++i) {
      ss.push_back(rt.spawn_process<int>(
          [sink, per](process_context<int>& ctx) { return fan_sender(ctx, sink, per); }));
    }
    state.ResumeTiming();
    for (auto const& s : ss)
      (void)spindle::send(s, 0);
    rt.block_on(spindle::monitor(sink));
    state.PauseTiming();
    for (auto const& s : ss)
      rt.block_on(spindle::monitor(s));
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * total);
}
BENCHMARK(process_fan_in)->Arg(1000)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// skynet: process `num` at `level` spawns 10 children (level - 1) and sends
// its parent the sum of what they send it; leaves send their number.

task<void> skynet_node(process_context<long>& ctx, pid<long> parent, long num, int level);

auto skynet_body(pid<long> parent, long num, int level) {
  return [parent, num, level](process_context<long>& ctx) {
    return skynet_node(ctx, parent, num, level);
  };
}

task<void> skynet_node(process_context<long>& ctx, pid<long> parent, long num, int level) {
  if (level == 0) {
    (void)spindle::send(parent, num);
    co_return;
  }
  long const child_span = [level] {
    long s = 1;
    for (int i = 1; i < level; ++i)
      s *= 10;
    return s;
  }();
  for (long i = 0; i < 10; ++i)
    (void)spindle::spawn_process<long>(skynet_body(ctx.self(), num + i * child_span, level - 1));
  long sum = 0;
  for (int i = 0; i < 10; ++i)
    sum += co_await ctx.receive();
  (void)spindle::send(parent, sum);
}

task<void> skynet_root(process_context<long>& ctx, std::atomic<long>* out) {
  (void)spindle::spawn_process<long>(skynet_body(ctx.self(), 0, 6));
  out->store(co_await ctx.receive());
}

void process_skynet(benchmark::State& state) {
  spindle::runtime rt{{.workers = bench_workers()}};
  for (auto _ : state) {
    std::atomic<long> out{0};
    pid<long> root = rt.spawn_process<long>(
        [&out](process_context<long>& ctx) { return skynet_root(ctx, &out); });
    rt.block_on(spindle::monitor(root));
    if (out.load() != 499'999'500'000L) state.SkipWithError("wrong sum");
  }
  state.SetItemsProcessed(state.iterations() * 1'111'111);
}
BENCHMARK(process_skynet)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// bytes per idle process: resident memory after spawning 100,000 processes
// that park in receive, minus before, per process (the first iteration's
// pages are new; later ones reuse freed heap, so the first counts): the
// process's task (header and body frame, one pool block) and its 80-byte pid
// table slot (slots come in 320 KiB chunks of 4096, counted when a chunk is
// new).

// Resident set size, bytes (/proc/self/statm; 0 if unreadable).
std::uint64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0;
  unsigned long long resident = 0;
  int const got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

task<void> idle_body(process_context<int>& ctx) {
  (void)co_await ctx.receive();
}

void process_idle_bytes(benchmark::State& state) {
  std::size_t const n = 100'000;
  double per = 0;
  bool first = true;
  for (auto _ : state) {
    state.PauseTiming();
    // A fresh runtime each time: its workers' frame pools start empty, so
    // the frames come from malloc and are counted.
    spindle::runtime rt{{.workers = bench_workers()}};
    std::vector<pid<int>> ps;
    ps.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      ps.emplace_back();  // the vector's pages are resident before the count
    ps.clear();
    std::uint64_t const before = resident_bytes();
    state.ResumeTiming();
    for (std::size_t i = 0; i < n; ++i)
      ps.push_back(rt.spawn_process<int>([](process_context<int>& ctx) { return idle_body(ctx); }));
    for (auto const& p : ps) {
      while (spindle::state_of(p) != spindle::process_state::idle) {
      }
    }
    state.PauseTiming();
    std::uint64_t const after = resident_bytes();
    if (first) per = static_cast<double>(after - before) / static_cast<double>(n);
    first = false;
    for (auto const& p : ps)
      (void)spindle::send(p, 0);
    for (auto const& p : ps)
      rt.block_on(spindle::monitor(p));
    state.ResumeTiming();
  }
  state.counters["bytes_per_process"] = per;
}
BENCHMARK(process_idle_bytes)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
