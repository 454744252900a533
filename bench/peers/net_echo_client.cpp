// net_echo_client: the load generator of bench/compare.py's TCP echo workload
// (the `net` section), the same client for every echo server (spindle's
// bench/net_echo_server.cpp, Tokio's, Asio's). Plain epoll, no runtime: a
// fixed number of threads (default 1), each with its own epoll set over its
// share of the connections, so that neither a runtime under test nor one
// thread per connection shapes the numbers.
//
// Each connection sends one message of --size bytes, waits until the whole
// echo is back, records the round trip and sends the next, for --duration
// seconds after --warmup seconds whose round trips are not recorded.
//
//   usage: net_echo_client --port P [--host 127.0.0.1] [--connections 64]
//                          [--size 64] [--duration 5] [--warmup 1]
//                          [--threads 1]
//
// Prints one JSON object on stdout: {"connections": C, "size": S,
// "messages": M, "seconds": T, "messages_per_s": R, "p50_us": .., "p99_us":
// .., "max_us": ..}, percentiles over every recorded round trip (sorted
// samples). Exit status 1 (and a message on stderr) when a connection cannot
// be made or is closed or reset by the server; 2 for bad arguments.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  std::string host = "127.0.0.1";
  int port = 0;
  int connections = 64;
  int size = 64;
  double duration = 5.0;
  double warmup = 1.0;
  int threads = 1;
};

struct connection {
  int fd = -1;
  int received = 0;  // bytes of the current echo read so far
  clock_type::time_point sent_at;
};

struct thread_result {
  std::vector<std::uint32_t> samples_ns;  // round trips after the warm-up
  std::string error;                      // empty: no failure
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: net_echo_client --port P [--host A] [--connections C] [--size S] "
               "[--duration SECONDS] [--warmup SECONDS] [--threads T]\n");
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string const arg = argv[i];
    if (i + 1 >= argc) usage();
    char const* value = argv[++i];
    if (arg == "--host") {
      o.host = value;
    } else if (arg == "--port") {
      o.port = std::atoi(value);
    } else if (arg == "--connections") {
      o.connections = std::atoi(value);
    } else if (arg == "--size") {
      o.size = std::atoi(value);
    } else if (arg == "--duration") {
      o.duration = std::atof(value);
    } else if (arg == "--warmup") {
      o.warmup = std::atof(value);
    } else if (arg == "--threads") {
      o.threads = std::atoi(value);
    } else {
      usage();
    }
  }
  if (o.port <= 0 || o.port > 65535 || o.connections < 1 || o.size < 1 || o.size > 65536 ||
      o.duration <= 0 || o.warmup < 0 || o.threads < 1) {
    usage();
  }
  o.threads = std::min(o.threads, o.connections);
  return o;
}

std::string errno_text(char const* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// A blocking connect, then non-blocking with TCP_NODELAY. Returns -1 and sets
// `error` on failure.
int open_connection(options const& o, std::string& error) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(o.port));
  if (inet_pton(AF_INET, o.host.c_str(), &addr.sin_addr) != 1) {
    error = "bad --host " + o.host;
    return -1;
  }
  int const fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = errno_text("socket");
    return -1;
  }
  if (connect(fd, reinterpret_cast<sockaddr const*>(&addr), sizeof addr) != 0) {
    error = errno_text("connect");
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// Sends one message on `c` (it fits in an empty socket buffer: one send).
bool send_message(connection& c, std::vector<char> const& message, std::string& error) {
  c.received = 0;
  c.sent_at = clock_type::now();
  std::size_t sent = 0;
  while (sent < message.size()) {
    ssize_t const n = send(c.fd, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // cannot happen with one small message in flight
        std::this_thread::yield();
        continue;
      }
      error = errno_text("send");
      return false;
    }
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// One thread: drives `conns`, its share of the connections.
void drive(options const& o, std::vector<connection>& conns, clock_type::time_point record_from,
           clock_type::time_point stop_at, thread_result& out) {
  int const ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    out.error = errno_text("epoll_create1");
    return;
  }
  std::vector<char> const message(static_cast<std::size_t>(o.size), 'x');
  std::vector<char> buffer(static_cast<std::size_t>(o.size));
  int in_flight = 0;
  for (std::size_t i = 0; i < conns.size(); ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev) != 0) {
      out.error = errno_text("epoll_ctl");
      close(ep);
      return;
    }
    if (!send_message(conns[i], message, out.error)) {
      close(ep);
      return;
    }
    ++in_flight;
  }
  std::vector<epoll_event> events(conns.size());
  while (in_flight > 0) {
    int const n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 1000);
    if (n < 0) {
      if (errno == EINTR) continue;
      out.error = errno_text("epoll_wait");
      break;
    }
    if (n == 0 && clock_type::now() > stop_at + std::chrono::seconds(5)) {
      out.error = "no echo for 5 s after the end of the run";
      break;
    }
    for (int e = 0; e < n; ++e) {
      connection& c = conns[events[e].data.u64];
      ssize_t const got =
          recv(c.fd, buffer.data(), static_cast<std::size_t>(o.size - c.received), 0);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got <= 0) {
        out.error = got == 0 ? "connection closed by the server" : errno_text("recv");
        in_flight = 0;
        break;
      }
      c.received += static_cast<int>(got);
      if (c.received < o.size) continue;
      auto const now = clock_type::now();
      if (c.sent_at >= record_from) {
        auto const ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - c.sent_at);
        out.samples_ns.push_back(
            static_cast<std::uint32_t>(std::min<std::int64_t>(ns.count(), UINT32_MAX)));
      }
      if (now >= stop_at) {
        --in_flight;
      } else if (!send_message(c, message, out.error)) {
        in_flight = 0;
        break;
      }
    }
  }
  close(ep);
}

double percentile_us(std::vector<std::uint32_t> const& sorted, double p) {
  if (sorted.empty()) return 0;
  auto const rank = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(rank, sorted.size() - 1)] / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  options const o = parse(argc, argv);
  std::vector<std::vector<connection>> shares(static_cast<std::size_t>(o.threads));
  std::string error;
  for (int i = 0; i < o.connections; ++i) {
    connection c;
    c.fd = open_connection(o, error);
    if (c.fd < 0) {
      std::fprintf(stderr, "net_echo_client: %s\n", error.c_str());
      return 1;
    }
    shares[static_cast<std::size_t>(i % o.threads)].push_back(c);
  }
  auto const start = clock_type::now();
  auto const record_from = start + std::chrono::duration_cast<clock_type::duration>(
                                       std::chrono::duration<double>(o.warmup));
  auto const stop_at = record_from + std::chrono::duration_cast<clock_type::duration>(
                                         std::chrono::duration<double>(o.duration));
  std::vector<thread_result> results(shares.size());
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < shares.size(); ++t) {
    threads.emplace_back([&, t] { drive(o, shares[t], record_from, stop_at, results[t]); });
  }
  for (auto& t : threads)
    t.join();
  double const seconds = std::chrono::duration<double>(clock_type::now() - record_from).count();
  for (auto& share : shares) {
    for (auto& c : share)
      close(c.fd);
  }
  std::vector<std::uint32_t> all;
  for (auto& r : results) {
    if (!r.error.empty()) {
      std::fprintf(stderr, "net_echo_client: %s\n", r.error.c_str());
      return 1;
    }
    all.insert(all.end(), r.samples_ns.begin(), r.samples_ns.end());
  }
  if (all.empty()) {
    std::fprintf(stderr, "net_echo_client: no round trip recorded\n");
    return 1;
  }
  std::sort(all.begin(), all.end());
  std::printf(
      "{\"connections\": %d, \"size\": %d, \"messages\": %zu, \"seconds\": %.3f, "
      "\"messages_per_s\": %.1f, \"p50_us\": %.2f, \"p99_us\": %.2f, \"max_us\": %.2f}\n",
      o.connections, o.size, all.size(), seconds, static_cast<double>(all.size()) / seconds,
      percentile_us(all, 0.50), percentile_us(all, 0.99), all.back() / 1e3);
  return 0;
}
