// Channel micro-benchmarks (Google Benchmark): uncontended send/recv in one
// task, several producers into one consumer, MPMC, and oneshot round trips.
// Workloads follow Tokio's benches/sync_mpsc.rs (contention_bounded,
// contention_bounded_full, contention_unbounded, uncontented_bounded) where
// one exists; the channel sizes are the argument (0 = unbounded).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "spindle/channel.hpp"
#include "spindle/oneshot.hpp"
#include "spindle/runtime.hpp"

namespace {

using spindle::channel;
using spindle::join_handle;
using spindle::runtime;
using spindle::task;

std::size_t capacity_arg(benchmark::State const& state) {
  return state.range(0) == 0 ? channel<int>::unbounded_capacity
                             : static_cast<std::size_t>(state.range(0));
}

// uncontended: one task sends `batch` values then receives them, 5,000 in all.
task<std::uint64_t> uncontended_body(channel<std::uint64_t>* ch, int total, int batch) {
  std::uint64_t sum = 0;
  for (int done = 0; done < total; done += batch) {
    int const n = total - done < batch ? total - done : batch;
    for (int i = 0; i < n; ++i)
      co_await ch->send(static_cast<std::uint64_t>(done + i));
    for (int i = 0; i < n; ++i)
      sum += *co_await ch->recv();
  }
  co_return sum;
}

void channel_uncontended(benchmark::State& state) {
  runtime rt{{.workers = 1}};
  constexpr int total = 5000;
  std::size_t cap = capacity_arg(state);
  int batch = cap > static_cast<std::size_t>(total) ? total : static_cast<int>(cap);
  for (auto _ : state) {
    channel<std::uint64_t> ch{cap};
    std::uint64_t sum = rt.block_on(uncontended_body(&ch, total, batch));
    if (sum != std::uint64_t{total} * (total - 1) / 2) state.SkipWithError("lost a value");
  }
  state.SetItemsProcessed(state.iterations() * total);
}
BENCHMARK(channel_uncontended)->Arg(16)->Arg(1000)->Arg(0)->UseRealTime();

// contention: 5 producer tasks x 1,000 values into one consumer task, on 2
// workers (capacity 1,000,000 ~ never full, 100 = often full, 0 = unbounded).
task<void> produce(channel<std::uint64_t>* ch, int n) {
  for (int i = 0; i < n; ++i)
    co_await ch->send(static_cast<std::uint64_t>(i));
}

task<std::uint64_t> contention_body(channel<std::uint64_t>* ch, int producers, int per,
                                    int consumers) {
  std::vector<join_handle<std::uint64_t>> cs;
  auto consume = [](channel<std::uint64_t>* c) -> task<std::uint64_t> {
    std::uint64_t count = 0;
    while (auto v = co_await c->recv())
      ++count;
    co_return count;
  };
  for (int i = 0; i < consumers; ++i)
    cs.push_back(spindle::spawn(consume(ch)));
  std::vector<join_handle<void>> ps;
  for (int i = 0; i < producers; ++i)
    ps.push_back(spindle::spawn(produce(ch, per)));
  for (auto& h : ps)
    co_await h;
  ch->close();
  std::uint64_t count = 0;
  for (auto& h : cs)
    count += co_await h;
  co_return count;
}

void channel_contention(benchmark::State& state) {
  runtime rt{{.workers = 2}};
  constexpr int producers = 5;
  constexpr int per = 1000;
  for (auto _ : state) {
    channel<std::uint64_t> ch{capacity_arg(state)};
    if (rt.block_on(contention_body(&ch, producers, per, 1)) != producers * per) {
      state.SkipWithError("lost a value");
    }
  }
  state.SetItemsProcessed(state.iterations() * producers * per);
}
BENCHMARK(channel_contention)->Arg(1'000'000)->Arg(100)->Arg(0)->UseRealTime();

// mpmc: 4 producers x 10,000 values, 4 consumers, on 2 workers.
void channel_mpmc(benchmark::State& state) {
  runtime rt{{.workers = 2}};
  constexpr int producers = 4;
  constexpr int per = 10'000;
  for (auto _ : state) {
    channel<std::uint64_t> ch{capacity_arg(state)};
    if (rt.block_on(contention_body(&ch, producers, per, 4)) != producers * per) {
      state.SkipWithError("lost a value");
    }
  }
  state.SetItemsProcessed(state.iterations() * producers * per);
}
BENCHMARK(channel_mpmc)->Arg(1)->Arg(16)->Arg(0)->UseRealTime()->Unit(benchmark::kMicrosecond);

// oneshot: 1,000 create/send/await round trips in one task.
task<int> oneshot_body(int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) {
    auto [tx, rx] = spindle::make_oneshot<int>();
    tx.send(i);
    sum += co_await rx;
  }
  co_return sum;
}

void oneshot_round_trip(benchmark::State& state) {
  runtime rt{{.workers = 1}};
  constexpr int n = 1000;
  for (auto _ : state) {
    if (rt.block_on(oneshot_body(n)) != n * (n - 1) / 2) state.SkipWithError("lost a value");
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(oneshot_round_trip)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
