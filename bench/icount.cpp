// Instructions per operation, for a noisy shared machine: a plain program
// (not Google Benchmark) that runs N operations of one workload on a
// 1-worker runtime, so that `bench/icount` can run it under
// `valgrind --tool=callgrind` at two sizes and divide the difference of the
// instruction totals by the difference of N. Instruction counts repeat
// exactly for the same binary and input whatever else the machine does; they
// are not times (an atomic RMW or a fence costs far more than its one
// instruction), so they back a change that removes work, and the timed
// benchmarks (bench_runtime, bench/compare.py) stay the measure of speed.
//
// Usage: bench_icount WORKLOAD N
//   spawn_await   N x (spawn a trivial task, await it), from a worker
//   yield         100 tasks x N/100 yield_now each
//   chain         a chain of N spawns (each task spawns the next and ends)
//   spawn_many    N/10000 rounds of spawn_many_local's pattern: a task on
//                 the worker spawns 10,000 tasks without awaiting them, each
//                 decrements a shared counter, the last sets an event
//   remote_spawn  N spawns from the main thread, then join them all
//   tcp_ping_pong N round trips of 64 bytes between a client and an echo
//                 task over loopback TCP (user-space instructions only:
//                 callgrind does not see the kernel's share)
// Prints the workload's checksum.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "spindle/event.hpp"
#include "spindle/net.hpp"
#include "spindle/runtime.hpp"

namespace {

using spindle::join_handle;
using spindle::task;

task<int> leaf(int i) {
  co_return i + 1;
}

task<long> spawn_await(int n) {
  long sum = 0;
  for (int i = 0; i < n; ++i)
    sum += co_await spindle::spawn(leaf(i));
  co_return sum;
}

task<int> yielder(int n) {
  for (int i = 0; i < n; ++i)
    co_await spindle::yield_now{};
  co_return n;
}

task<long> yields(int tasks, int each) {
  std::vector<join_handle<int>> handles;
  handles.reserve(static_cast<std::size_t>(tasks));
  for (int i = 0; i < tasks; ++i)
    handles.push_back(spindle::spawn(yielder(each)));
  long sum = 0;
  for (auto& h : handles)
    sum += co_await h;
  co_return sum;
}

task<void> chain_link(int left, spindle::event* done) {
  if (left == 0) {
    done->set();
  } else {
    static_cast<void>(spindle::spawn(chain_link(left - 1, done)));
  }
  co_return;
}

task<long> chain(int n) {
  spindle::event done;
  static_cast<void>(spindle::spawn(chain_link(n, &done)));
  co_await done.wait();
  co_return n;
}

task<void> count_down(std::atomic<int>* remaining, spindle::event* done) {
  if (remaining->fetch_sub(1, std::memory_order_relaxed) == 1) done->set();
  co_return;
}

task<void> spawn_detached(int n, std::atomic<int>* remaining, spindle::event* done) {
  for (int i = 0; i < n; ++i)
    static_cast<void>(spindle::spawn(count_down(remaining, done)));
  co_return;
}

task<long> spawn_many(int rounds) {
  constexpr int per_round = 10'000;
  for (int r = 0; r < rounds; ++r) {
    std::atomic<int> remaining{per_round};
    spindle::event done;
    // Spawned, so that the spawns come from the worker (block_on's root
    // may run on this thread).
    co_await spindle::spawn(spawn_detached(per_round, &remaining, &done));
    co_await done.wait();
  }
  co_return static_cast<long>(rounds) * per_round;
}

task<void> nothing() {
  co_return;
}

task<long> join_all(std::vector<join_handle<void>>* handles) {
  for (auto& h : *handles)
    co_await h;
  co_return static_cast<long>(handles->size());
}

task<void> echo(spindle::net::tcp_stream s) {
  std::vector<std::byte> buf(4096);
  while (std::size_t n = co_await s.read_some(buf))
    co_await s.write_all(std::span<std::byte const>(buf).first(n));
}

task<long> tcp_ping_pong(int n) {
  using spindle::net::tcp_listener;
  using spindle::net::tcp_stream;
  tcp_listener l = tcp_listener::bind(spindle::net::endpoint::parse("127.0.0.1:0"));
  join_handle<tcp_stream> accepted = spindle::spawn(l.accept());
  tcp_stream c = co_await tcp_stream::connect(l.local_endpoint());
  c.set_nodelay(true);
  join_handle<void> server = spindle::spawn(echo(co_await accepted));
  std::vector<std::byte> out(64, std::byte{'x'});
  std::vector<std::byte> in(64);
  long total = 0;
  for (int i = 0; i < n; ++i) {
    co_await c.write_all(out);
    total += static_cast<long>(co_await c.read_exact(in));
  }
  c.shutdown_write();
  co_await server;
  co_return total;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::atoi(argv[2]) <= 0) {
    std::fprintf(
        stderr,
        "usage: bench_icount spawn_await|yield|chain|spawn_many|remote_spawn|tcp_ping_pong N\n");
    return 2;
  }
  int n = std::atoi(argv[2]);
  spindle::runtime rt{{.workers = 1}};
  long result = 0;
  if (std::strcmp(argv[1], "spawn_await") == 0) {
    result = rt.block_on(spawn_await(n));
  } else if (std::strcmp(argv[1], "yield") == 0) {
    result = rt.block_on(yields(100, n / 100));
  } else if (std::strcmp(argv[1], "chain") == 0) {
    result = rt.block_on(chain(n));
  } else if (std::strcmp(argv[1], "spawn_many") == 0) {
    result = rt.block_on(spawn_many(n / 10'000 > 0 ? n / 10'000 : 1));
  } else if (std::strcmp(argv[1], "remote_spawn") == 0) {
    std::vector<join_handle<void>> handles;
    handles.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
      handles.push_back(rt.spawn(nothing()));
    result = rt.block_on(join_all(&handles));
  } else if (std::strcmp(argv[1], "tcp_ping_pong") == 0) {
    result = rt.block_on(tcp_ping_pong(n));
  } else {
    std::fprintf(stderr, "bench_icount: unknown workload %s\n", argv[1]);
    return 2;
  }
  std::printf("%ld\n", result);
  return 0;
}
