// oneTBB side of bench/compare.py: the spawn workloads and fork-join fib with
// tbb::task_group, on an arena of N threads (the thread that enters the arena
// counts as one of them, as a worker). TBB tasks cannot yield or wait for a
// message without blocking a thread, so yield_many, ping_pong,
// spawn_many_remote_busy and memory_per_task have no TBB version.
//
// spawn_many_local: inside the arena, task_group::run 10,000 tasks that
//   decrement an atomic, then task_group::wait (TBB's join).
// spawn_many_remote_idle: 10,000 task_arena::enqueue from the measuring
//   thread (outside the arena); the last task signals completion.
// chained_spawn: each task runs the next on the same task_group; wait.
// spawn_await: inside the arena, 100,000 x (run a trivial task, wait).
// fib_30 / fib_35: run fib(n-1) on a task_group, fib(n-2) inline, wait.
//
// With --from-outside 1 (system onetbb-outside) the measuring thread does
// not enter the arena: spawn_many_local, chained_spawn, spawn_await and fib
// run in one task enqueued on an arena of N worker threads (no slot kept
// for the measuring thread), which signals the measuring thread when done,
// the shape of spindle's and Tokio's versions (the measuring thread only
// starts and waits). spawn_many_remote_idle is the same in both.
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include "../peer_common.hpp"

namespace {

constexpr int num_spawn = 10'000;
constexpr int spawn_await_pairs = 100'000;

long fib(int n) {
  if (n < 2) return n;
  long a = 0;
  tbb::task_group tg;
  tg.run([&a, n] { a = fib(n - 1); });
  long b = fib(n - 2);
  tg.wait();
  return a + b;
}

void chain(tbb::task_group* tg, int left) {
  if (left > 0) tg->run([tg, left] { chain(tg, left - 1); });
}

}  // namespace

int main(int argc, char** argv) {
  peer::options o = peer::parse(argc, argv, "tbb_peer");
  if (o.workloads.empty()) {
    o.workloads = {"spawn_many_local", "spawn_many_remote_idle",
                   "chained_spawn",    "spawn_await",
                   "fib_30",           "fib_35"};
  }
  // N workers in all: an arena of N slots; for enqueue (no thread of ours
  // inside) no slot is reserved for a master.
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                            static_cast<std::size_t>(o.workers) + 1);
  tbb::task_arena arena(o.workers);
  tbb::task_arena remote_arena(o.workers, 0);
  arena.initialize();
  remote_arena.initialize();

  std::vector<peer::result> results;
  peer::done_signal done;
  // Runs `body` in the arena: entered by this thread (the default), or
  // enqueued from outside and waited for (--from-outside 1).
  auto in_arena = [&](auto body) {
    if (!o.from_outside) {
      arena.execute(body);
      return;
    }
    done.reset();
    remote_arena.enqueue([&] {
      body();
      done.set();
    });
    done.wait();
  };
  for (std::string const& w : o.workloads) {
    if (w == "spawn_many_local") {
      results.push_back({w, "us", peer::measure(o, 1e-3, 1, [&] {
                           std::atomic<int> remaining{num_spawn};
                           in_arena([&] {
                             tbb::task_group tg;
                             for (int i = 0; i < num_spawn; ++i)
                               tg.run([&] { remaining.fetch_sub(1, std::memory_order_relaxed); });
                             tg.wait();
                           });
                           if (remaining.load() != 0) std::abort();
                         })});
    } else if (w == "spawn_many_remote_idle") {
      results.push_back({w, "us", peer::measure(o, 1e-3, 1, [&] {
                           std::atomic<int> remaining{num_spawn};
                           done.reset();
                           for (int i = 0; i < num_spawn; ++i) {
                             remote_arena.enqueue([&] {
                               if (remaining.fetch_sub(1, std::memory_order_relaxed) == 1)
                                 done.set();
                             });
                           }
                           done.wait();
                         })});
    } else if (w == "chained_spawn") {
      results.push_back({w, "us", peer::measure(o, 1e-3, 1, [&] {
                           in_arena([&] {
                             tbb::task_group tg;
                             chain(&tg, 1000);
                             tg.wait();
                           });
                         })});
    } else if (w == "spawn_await") {
      results.push_back({w, "ns/pair", peer::measure(o, 1, spawn_await_pairs, [&] {
                           in_arena([&] {
                             long sum = 0;
                             tbb::task_group tg;
                             for (int i = 0; i < spawn_await_pairs; ++i) {
                               long v = 0;
                               tg.run([&v, i] { v = i; });
                               tg.wait();
                               sum += v;
                             }
                             if (sum !=
                                 static_cast<long>(spawn_await_pairs) * (spawn_await_pairs - 1) / 2)
                               std::abort();
                           });
                         })});
    } else if (w == "fib_30" || w == "fib_35") {
      int n = w == "fib_30" ? 30 : 35;
      results.push_back({w, "ms", peer::measure(o, 1e-6, 1, [&] {
                           long v = 0;
                           in_arena([&] { v = fib(n); });
                           if (v <= 0) std::abort();
                         })});
    } else {
      std::fprintf(stderr, "tbb_peer: workload %s is not supported\n", w.c_str());
      return 2;
    }
  }
  peer::print(o.from_outside ? "onetbb-outside" : "onetbb", o, results);
  return 0;
}
