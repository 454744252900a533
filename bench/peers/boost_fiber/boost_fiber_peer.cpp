// Boost.Fiber side of bench/compare.py's fiber section: stackful fibers on
// boost::fibers::algo::work_stealing with N threads (the measuring thread is
// one of them: its main fiber joins the workload's root fiber and, while it
// waits, the thread runs and steals fibers like the other N - 1). Idle
// threads spin on stealing (work_stealing's default, suspend = false): with
// suspend = true an idle thread sleeps until a fiber is made ready on its own
// queue, and it would never steal the fibers that another thread spawns.
//
// Usage: boost_fiber_peer [--stack-size BYTES] PEER-OPTIONS (peer_common.hpp).
// --stack-size 0 (the default): Boost's default stack (fixedsize_stack of
// 128 KiB, malloc'ed: above glibc's mmap threshold, each one is a mapping of
// its own); otherwise a fixedsize_stack of BYTES (the system is then called
// "boost-fiber-64k" for 65536, "boost-fiber-<BYTES>" else).
//
// fiber_spawn_join: a root fiber creates 10,000 empty fibers, then joins each
//   (ns per fiber).
// fiber_yield: 200 fibers x 1,000 boost::this_fiber::yield() (ns per yield).
// fiber_ping_pong: the root fiber (ping) and a fiber it launches (pong),
//   10,000 round trips over two unbuffered_channel<int> (ns per round trip).
// fiber_park: 100,000 detached fibers in this_fiber::sleep_for(1 h): emits
//   fiber_park_memory (VmRSS growth per fiber, bytes) and fiber_park_time
//   (ms until the last one runs), one sample per process; run it alone in a
//   fresh process. The process leaves with _Exit (the fibers still sleep).
#include <atomic>
#include <barrier>
#include <boost/fiber/algo/work_stealing.hpp>
#include <boost/fiber/all.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../peer_common.hpp"

namespace fibers = boost::fibers;

namespace {

constexpr int spawn_join_fibers = 10'000;
constexpr int yielders = 200;
constexpr int yields_each = 1'000;
constexpr int round_trips = 10'000;
constexpr int parked_fibers = 100'000;

std::size_t stack_size = 0;  // 0: Boost's default stack

template <class F>
fibers::fiber launch(F&& fn) {
  if (stack_size == 0) return fibers::fiber(std::forward<F>(fn));
  return fibers::fiber(std::allocator_arg, fibers::fixedsize_stack(stack_size),
                       std::forward<F>(fn));
}

void spawn_join() {
  std::vector<fibers::fiber> children;
  children.reserve(spawn_join_fibers);
  for (int i = 0; i < spawn_join_fibers; ++i)
    children.push_back(launch([] {}));
  for (auto& f : children)
    f.join();
}

void yield_many() {
  std::vector<fibers::fiber> children;
  children.reserve(yielders);
  for (int i = 0; i < yielders; ++i) {
    children.push_back(launch([] {
      for (int j = 0; j < yields_each; ++j)
        boost::this_fiber::yield();
    }));
  }
  for (auto& f : children)
    f.join();
}

void ping_pong() {
  fibers::unbuffered_channel<int> there;
  fibers::unbuffered_channel<int> back;
  fibers::fiber pong = launch([&] {
    int v = 0;
    for (int i = 0; i < round_trips; ++i) {
      if (there.pop(v) != fibers::channel_op_status::success) std::abort();
      back.push(v + 1);
    }
  });
  int v = 0;
  for (int i = 0; i < round_trips; ++i) {
    there.push(i);
    if (back.pop(v) != fibers::channel_op_status::success || v != i + 1) std::abort();
  }
  pong.join();
}

double status_bytes(char const* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  double kib = 0;
  std::size_t len = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, len) == 0) {
      kib = std::strtod(line + len, nullptr);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

/// 100,000 fibers parked in a long sleep: {bytes per fiber, ms to park}.
std::pair<double, double> park() {
  std::atomic<int> parked{0};
  fibers::promise<void> all_parked;
  fibers::future<void> all_parked_future = all_parked.get_future();
  double before = status_bytes("VmRSS:");
  auto start = std::chrono::steady_clock::now();
  launch([&] {
    for (int i = 0; i < parked_fibers; ++i) {
      launch([&] {
        if (parked.fetch_add(1, std::memory_order_relaxed) + 1 == parked_fibers)
          all_parked.set_value();
        boost::this_fiber::sleep_for(std::chrono::hours(1));
      }).detach();
    }
  }).detach();
  all_parked_future.get();
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  double bytes = (status_bytes("VmRSS:") - before) / parked_fibers;
  return {bytes, ms};
}

// The other N - 1 threads: each installs the algorithm, meets the others,
// and lets its main fiber wait for the end (the thread runs fibers then).
fibers::mutex stop_mutex;
fibers::condition_variable stop_cv;
bool stop = false;

void helper(std::uint32_t threads, std::barrier<>* registered) {
  fibers::use_scheduling_algorithm<fibers::algo::work_stealing>(threads);
  registered->arrive_and_wait();
  std::unique_lock lock(stop_mutex);
  stop_cv.wait(lock, [] { return stop; });
}

}  // namespace

int main(int argc, char** argv) {
  // --stack-size is this peer's own; the rest goes to peer::parse.
  std::vector<char*> args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--stack-size") == 0 && i + 1 < argc) {
      stack_size = static_cast<std::size_t>(std::strtoull(argv[++i], nullptr, 10));
    } else {
      args.push_back(argv[i]);
    }
  }
  peer::options o = peer::parse(static_cast<int>(args.size()), args.data(), "boost_fiber_peer");
  if (o.workloads.empty()) o.workloads = {"fiber_spawn_join", "fiber_yield", "fiber_ping_pong"};
  std::string system = "boost-fiber";
  if (stack_size == 64 * 1024) {
    system += "-64k";
  } else if (stack_size != 0) {
    system += '-';
    system += std::to_string(stack_size);
  }

  auto threads = static_cast<std::uint32_t>(o.workers);
  std::barrier<> registered(o.workers);
  std::vector<std::thread> helpers;
  for (std::uint32_t i = 1; i < threads; ++i)
    helpers.emplace_back(helper, threads, &registered);
  fibers::use_scheduling_algorithm<fibers::algo::work_stealing>(threads);
  registered.arrive_and_wait();  // every scheduler is registered before anyone steals

  std::vector<peer::result> results;
  bool parked = false;
  for (std::string const& w : o.workloads) {
    if (w == "fiber_spawn_join") {
      results.push_back({w, "ns/fiber", peer::measure(o, 1, spawn_join_fibers, [] {
                           launch(spawn_join).join();
                         })});
    } else if (w == "fiber_yield") {
      results.push_back({w, "ns/yield", peer::measure(o, 1, yielders * yields_each, [] {
                           launch(yield_many).join();
                         })});
    } else if (w == "fiber_ping_pong") {
      results.push_back(
          {w, "ns/round trip", peer::measure(o, 1, round_trips, [] { launch(ping_pong).join(); })});
    } else if (w == "fiber_park") {
      auto [bytes, ms] = park();
      results.push_back({"fiber_park_memory", "bytes/fiber", {bytes}});
      results.push_back({"fiber_park_time", "ms", {ms}});
      parked = true;
    } else {
      std::fprintf(stderr, "boost_fiber_peer: workload %s is not supported\n", w.c_str());
      std::_Exit(2);
    }
  }
  peer::print(system.c_str(), o, results);
  std::fflush(stdout);
  if (parked) std::_Exit(0);  // 100,000 fibers still sleep
  {
    std::unique_lock lock(stop_mutex);
    stop = true;
  }
  stop_cv.notify_all();
  for (auto& t : helpers)
    t.join();
  return 0;
}
