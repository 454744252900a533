// Socket benchmarks (Google Benchmark), loopback only, with both spindle
// backends (io_uring SQEs; the thread pool's epoll reactor) and 2 workers:
//   tcp_ping_pong/<backend>/<bytes>  one connection; a client task writes
//       `bytes` and reads the echo from a server task: time per round trip.
//   tcp_ping_pong_many/<backend>/64  64 connections, each a client and a
//       server task doing round trips of 64 bytes at once: round trips/s.
//   tcp_stream/<backend>             one connection, 64 KiB writes read in
//       64 KiB reads: bytes/s.
//   os_ping_pong/<bytes>             the floor: two threads with blocking
//       sockets doing the same round trips (no runtime).
// Cross-runtime comparisons (nginx, redis-server, Tokio, Asio) are in
// bench/compare.py's net section; these isolate spindle's own costs.
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "spindle/spindle.hpp"

namespace {

using spindle::io_backend;
using spindle::join_handle;
using spindle::task;
using spindle::net::endpoint;
using spindle::net::tcp_listener;
using spindle::net::tcp_stream;

/// Echoes whatever arrives until end of stream.
task<void> echo_until_eof(tcp_stream s) {
  std::vector<std::byte> buf(64 * 1024);
  while (std::size_t n = co_await s.read_some(buf))
    co_await s.write_all(std::span<std::byte const>(buf).first(n));
}

task<void> ping_rounds(tcp_stream* c, std::size_t bytes, std::int64_t rounds) {
  std::vector<std::byte> out(bytes, std::byte{'x'});
  std::vector<std::byte> in(bytes);
  for (std::int64_t i = 0; i < rounds; ++i) {
    co_await c->write_all(out);
    co_await c->read_exact(in);
  }
}

/// Connects `n` clients to `l`; each accepted stream gets an echo task.
task<std::vector<tcp_stream>> connect_echoed(tcp_listener* l, std::size_t n) {
  std::vector<tcp_stream> clients;
  for (std::size_t i = 0; i < n; ++i) {
    join_handle<tcp_stream> accepted = spindle::spawn(l->accept());
    tcp_stream c = co_await tcp_stream::connect(l->local_endpoint());
    c.set_nodelay(true);
    tcp_stream s = co_await accepted;
    s.set_nodelay(true);
    (void)spindle::spawn(echo_until_eof(std::move(s)));  // ends when the client closes
    clients.push_back(std::move(c));
  }
  co_return clients;
}

task<void> run_clients(std::vector<tcp_stream>* clients, std::size_t bytes, std::int64_t rounds) {
  std::vector<join_handle<void>> hs;
  for (auto& c : *clients)
    hs.push_back(spindle::spawn(ping_rounds(&c, bytes, rounds)));
  for (auto& h : hs)
    co_await h;
}

/// Round trips per Google Benchmark iteration (one block_on each).
constexpr std::int64_t batch = 200;

void tcp_ping_pong(benchmark::State& state, io_backend backend, std::size_t connections,
                   std::size_t bytes) {
  spindle::runtime rt{{.workers = 2, .io = backend}};
  tcp_listener l = tcp_listener::bind(endpoint::parse("127.0.0.1:0"));
  std::vector<tcp_stream> clients = rt.block_on(connect_echoed(&l, connections));
  for (auto _ : state)
    rt.block_on(run_clients(&clients, bytes, batch));
  clients.clear();  // the echo tasks see end of stream and finish
  auto const rounds =
      static_cast<double>(state.iterations() * batch * static_cast<std::int64_t>(connections));
  state.counters["round_trips"] = benchmark::Counter(rounds, benchmark::Counter::kIsRate);
  state.counters["ns_per_round_trip"] =
      benchmark::Counter(rounds / static_cast<double>(connections) * 1e-9,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

task<void> stream_out(tcp_stream* c, std::size_t chunk, std::int64_t chunks) {
  std::vector<std::byte> out(chunk, std::byte{'y'});
  for (std::int64_t i = 0; i < chunks; ++i)
    co_await c->write_all(out);
}

task<void> drain(tcp_stream s) {
  std::vector<std::byte> in(64 * 1024);
  while (co_await s.read_some(in) != 0) {
  }
}

task<tcp_stream> connect_drained(tcp_listener* l) {
  join_handle<tcp_stream> accepted = spindle::spawn(l->accept());
  tcp_stream c = co_await tcp_stream::connect(l->local_endpoint());
  (void)spindle::spawn(drain(co_await accepted));
  co_return c;
}

void tcp_stream_bench(benchmark::State& state, io_backend backend) {
  constexpr std::size_t chunk = 64 * 1024;
  spindle::runtime rt{{.workers = 2, .io = backend}};
  tcp_listener l = tcp_listener::bind(endpoint::parse("127.0.0.1:0"));
  tcp_stream c = rt.block_on(connect_drained(&l));
  for (auto _ : state)
    rt.block_on(stream_out(&c, chunk, 64));
  c.close();
  state.SetBytesProcessed(state.iterations() * 64 * static_cast<std::int64_t>(chunk));
}

// The floor: blocking sockets, one thread each side.
void os_ping_pong(benchmark::State& state, std::size_t bytes) {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 1) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
    state.SkipWithError("socket setup");
    return;
  }
  int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    state.SkipWithError("connect");
    return;
  }
  int s = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  int one = 1;
  ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto exact = [](int fd, std::byte* p, std::size_t n, bool reading) {
    while (n > 0) {
      ssize_t r = reading ? ::recv(fd, p, n, 0) : ::send(fd, p, n, MSG_NOSIGNAL);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  };
  std::thread server([&] {
    std::vector<std::byte> buf(bytes);
    while (exact(s, buf.data(), bytes, true) && exact(s, buf.data(), bytes, false)) {
    }
  });
  std::vector<std::byte> out(bytes, std::byte{'x'});
  std::vector<std::byte> in(bytes);
  for (auto _ : state) {
    if (!exact(c, out.data(), bytes, false) || !exact(c, in.data(), bytes, true)) {
      state.SkipWithError("round trip");
    }
  }
  ::shutdown(c, SHUT_WR);  // the server thread reads end of stream
  server.join();
  ::close(c);
  ::close(s);
  ::close(lfd);
  state.counters["ns_per_round_trip"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 1e-9,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void register_all() {
  for (io_backend b : {io_backend::uring, io_backend::threadpool}) {
    std::string const name = b == io_backend::uring ? "uring" : "threadpool";
    for (std::size_t bytes : {64, 4096}) {
      benchmark::RegisterBenchmark(("tcp_ping_pong/" + name + "/" + std::to_string(bytes)).c_str(),
                                   tcp_ping_pong, b, 1, bytes)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
    benchmark::RegisterBenchmark(("tcp_ping_pong_many/" + name + "/64").c_str(), tcp_ping_pong, b,
                                 64, 64)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("tcp_stream/" + name).c_str(), tcp_stream_bench, b)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (std::size_t bytes : {64, 4096}) {
    benchmark::RegisterBenchmark(("os_ping_pong/" + std::to_string(bytes)).c_str(), os_ping_pong,
                                 bytes)
        ->Unit(benchmark::kNanosecond)
        ->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
