// CAF side of spindle's bench/compare.py process section: CAF 0.17
// (Debian libcaf-dev) event-based actors on CAF's work-stealing scheduler
// with scheduler.max-threads = --workers.
//
// Workloads (as bench/bench_process.cpp and the Go peer):
//   - process_ring: 10,000 actors pass one int token 10^6 hops; a member
//     that sees 0 passes it on and quits (ns per hop, counting those
//     10,000). The actors are spawned and linked before the clock starts.
//   - process_fan_in: 1,000 actors x 1,000 int messages into one actor
//     (messages/s; spawning included, as for Go).
//   - process_skynet: 10^6 leaves of a 10-ary tree of actors (1,111,111 in
//     all), each sending its sum (long) to its parent (ms).
//   - process_idle: 100,000 actors waiting for a message: VmRSS growth per
//     actor (bytes), one sample; the peer then leaves with _Exit (the
//     actors still wait).
// Usage and output: bench/peers/peer_common.hpp.
#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../peer_common.hpp"

namespace {

constexpr int ring_size = 10'000;
constexpr int ring_hops = 1'000'000;
constexpr int fan_senders = 1'000;
constexpr int fan_each = 1'000;
constexpr long skynet_leaves = 1'000'000;
constexpr int idle_actors = 100'000;

struct ring_state {
  std::atomic<int> finished{0};
  peer::done_signal done;
};

caf::behavior ring_member(caf::event_based_actor* self, ring_state* st) {
  auto next = std::make_shared<caf::actor>();
  return {
      [=](caf::actor const& n) { *next = n; },
      [=](int v) {
        if (v <= 0) {
          self->send(*next, 0);
          *next = caf::actor{};  // no cycle of strong references
          if (st->finished.fetch_add(1) + 1 == ring_size) st->done.set();
          self->quit();
          return;
        }
        self->send(*next, v - 1);
      },
  };
}

void ring(caf::actor_system& sys, std::vector<double>& samples, peer::options const& o) {
  ring_state st;
  auto once = [&] {
    st.finished.store(0);
    st.done.reset();
    std::vector<caf::actor> members;
    members.reserve(ring_size);
    for (int i = 0; i < ring_size; ++i)
      members.push_back(sys.spawn(ring_member, &st));
    for (int i = 0; i < ring_size; ++i)
      caf::anon_send(members[static_cast<std::size_t>(i)],
                     members[static_cast<std::size_t>((i + 1) % ring_size)]);
    return members;
  };
  // Warm-up, then reps samples of one ring each (spawning not timed).
  for (int r = -1; r < o.reps; ++r) {
    auto members = once();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the links are in
    auto start = std::chrono::steady_clock::now();
    caf::anon_send(members[0], ring_hops);
    st.done.wait();
    double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    if (r >= 0) samples.push_back(ns / (ring_hops + ring_size));
  }
}

struct fan_state {
  peer::done_signal done;
};

caf::behavior fan_sink(caf::event_based_actor* self, fan_state* st) {
  auto got = std::make_shared<long>(0);
  return {[=](int v) {
    *got += v;
    if (*got == static_cast<long>(fan_senders) * fan_each) {
      st->done.set();
      self->quit();
    }
  }};
}

void fan_sender(caf::event_based_actor* self, caf::actor sink) {
  for (int i = 0; i < fan_each; ++i)
    self->send(sink, 1);
}

caf::behavior skynet_node(caf::event_based_actor* self, caf::actor parent, long num, long size) {
  if (size == 1) {
    self->send(parent, num);
    self->quit();
    return {};
  }
  for (long i = 0; i < 10; ++i)
    self->spawn(skynet_node, caf::actor_cast<caf::actor>(self), num + i * (size / 10), size / 10);
  auto state = std::make_shared<std::pair<int, long>>(0, 0);
  return {[=](long v) {
    state->second += v;
    if (++state->first == 10) {
      self->send(parent, state->second);
      self->quit();
    }
  }};
}

struct skynet_state {
  std::atomic<long> sum{0};
  peer::done_signal done;
};

caf::behavior skynet_collector(caf::event_based_actor* self, skynet_state* st) {
  return {[=](long v) {
    st->sum.store(v);
    st->done.set();
    self->quit();
  }};
}

double rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) * 1024.0;
  }
  return 0;
}

caf::behavior idle_actor(caf::event_based_actor*, std::atomic<int>* started) {
  started->fetch_add(1);
  return {[](int) {}};
}

}  // namespace

int main(int argc, char** argv) {
  peer::options o = peer::parse(argc, argv, "caf_peer");
  if (o.workloads.empty()) o.workloads = {"process_ring", "process_fan_in", "process_skynet"};
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", static_cast<size_t>(o.workers));
  caf::actor_system sys{cfg};
  std::vector<peer::result> results;
  for (auto const& w : o.workloads) {
    if (w == "process_ring") {
      std::vector<double> samples;
      ring(sys, samples, o);
      results.push_back({w, "ns/hop", samples});
    } else if (w == "process_fan_in") {
      fan_state st;
      auto samples = peer::measure(o, 1, fan_senders * fan_each, [&] {
        st.done.reset();
        auto sink = sys.spawn(fan_sink, &st);
        for (int i = 0; i < fan_senders; ++i)
          sys.spawn(fan_sender, sink);
        st.done.wait();
      });
      for (auto& s : samples)
        s = 1e9 / s;
      results.push_back({w, "msgs/s", samples});
    } else if (w == "process_skynet") {
      skynet_state st;
      auto samples = peer::measure(o, 1e-6, 1, [&] {
        st.done.reset();
        auto collector = sys.spawn(skynet_collector, &st);
        sys.spawn(skynet_node, collector, 0L, skynet_leaves);
        st.done.wait();
        if (st.sum.load() != 499'999'500'000L) {
          std::fprintf(stderr, "caf_peer: skynet: wrong sum\n");
          std::_Exit(1);
        }
      });
      results.push_back({w, "ms", samples});
    } else if (w == "process_idle") {
      std::atomic<int> started{0};
      double const before = rss_bytes();
      std::vector<caf::actor> actors;
      actors.reserve(idle_actors);
      for (int i = 0; i < idle_actors; ++i)
        actors.push_back(sys.spawn(idle_actor, &started));
      while (started.load() != idle_actors)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      double const per = (rss_bytes() - before) / idle_actors;
      results.push_back({"process_idle_memory", "bytes/process", {per}});
      peer::print("caf", o, results);
      std::fflush(stdout);
      std::_Exit(0);  // the actors still wait: no orderly shutdown
    } else {
      std::fprintf(stderr, "caf_peer: workload %s is not supported\n", w.c_str());
      return 2;
    }
  }
  peer::print("caf", o, results);
  return 0;
}
