// spindle::net sockets: TCP, UDP and Unix streams over both I/O backends
// (every test runs with io_uring and with the thread pool's epoll reactor).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "io_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/fiber.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/net.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "spindle/time.hpp"
#include "spindle/when_all.hpp"
#include "uring_driver.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::io_backend;
using spindle::join_handle;
using spindle::runtime;
using spindle::runtime_config;
using spindle::task;
using spindle::net::endpoint;
using spindle::net::tcp_listener;
using spindle::net::tcp_stream;
using spindle::net::udp_socket;
using spindle::net::unix_listener;
using spindle::net::unix_stream;
using spindle_test::uring_available;

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

std::string string_of(std::span<std::byte const> b) {
  return std::string(reinterpret_cast<char const*>(b.data()), b.size());
}

/// Runs `t`; yields the errno of the std::system_error it throws (0 if none).
template <class T>
task<int> errno_of(task<T> t) {
  int code = 0;
  try {
    co_await std::move(t);
  } catch (std::system_error const& e) {
    code = e.code().value();
  }
  co_return code;
}

class NetTest : public ::testing::TestWithParam<io_backend> {
 protected:
  void SetUp() override {
    if (GetParam() == io_backend::uring && !uring_available()) {
      GTEST_SKIP() << "io_uring cannot be set up here";
    }
  }
  runtime_config config(std::size_t workers = 2) const {
    return runtime_config{.workers = workers, .io = GetParam()};
  }
};

endpoint loopback_v4() {
  return endpoint::parse("127.0.0.1:0");
}

/// Accepts one connection and echoes it until end of stream.
task<std::size_t> echo_one(tcp_listener* l) {
  tcp_stream s = co_await l->accept();
  std::vector<std::byte> buf(4096);
  std::size_t total = 0;
  for (;;) {
    std::size_t const n = co_await s.read_some(buf);
    if (n == 0) break;
    co_await s.write_all(std::span<std::byte const>(buf).first(n));
    total += n;
  }
  co_return total;
}

// --- TCP ---------------------------------------------------------------------

task<void> tcp_echo_round_trip(endpoint at) {
  tcp_listener l = tcp_listener::bind(at);
  endpoint const where = l.local_endpoint();
  EXPECT_NE(where.port(), 0);
  join_handle<std::size_t> server = spindle::spawn(echo_one(&l));

  tcp_stream c = co_await tcp_stream::connect(where);
  EXPECT_TRUE(c.is_open());
  EXPECT_EQ(c.peer_endpoint(), where);
  EXPECT_EQ(c.local_endpoint().address(), where.address());
  c.set_nodelay(true);

  auto const hello = bytes_of("hello, spindle");
  EXPECT_EQ(co_await c.write_all(hello), hello.size());
  std::vector<std::byte> back(hello.size());
  EXPECT_EQ(co_await c.read_exact(back), hello.size());
  EXPECT_EQ(string_of(back), "hello, spindle");

  c.shutdown_write();
  std::byte one[1];
  EXPECT_EQ(co_await c.read_some(one), 0u) << "end of stream after the server's echo loop ended";
  EXPECT_EQ(co_await server, hello.size());
}

TEST_P(NetTest, TcpEchoRoundTrip) {
  runtime rt{config()};
  rt.block_on(tcp_echo_round_trip(loopback_v4()));
}

TEST_P(NetTest, TcpEchoOverIpv6) {
  int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (probe < 0) GTEST_SKIP() << "no IPv6 here";
  ::close(probe);
  runtime rt{config()};
  try {
    (void)tcp_listener::bind(endpoint::parse("[::1]:0"));
  } catch (std::system_error const& e) {
    GTEST_SKIP() << "cannot bind ::1: " << e.what();
  }
  rt.block_on(tcp_echo_round_trip(endpoint::parse("[::1]:0")));
}

task<void> half_close_both_ways(tcp_listener* l) {
  auto server = [](tcp_listener* l) -> task<std::string> {
    tcp_stream s = co_await l->accept();
    std::string got;
    std::vector<std::byte> buf(7);
    for (;;) {
      std::size_t const n = co_await s.read_some(buf);
      if (n == 0) break;
      got += string_of(std::span<std::byte const>(buf).first(n));
    }
    // The client closed its sending side; this side still writes.
    co_await s.write_all(bytes_of("reply after half-close"));
    co_return got;
  };
  join_handle<std::string> h = spindle::spawn(server(l));
  tcp_stream c = co_await tcp_stream::connect(l->local_endpoint());
  co_await c.write_all(bytes_of("request that the server reads to its end"));
  c.shutdown_write();
  std::vector<std::byte> reply(64);
  std::size_t got = 0;
  for (;;) {
    std::size_t const n = co_await c.read_some(std::span<std::byte>(reply).subspan(got));
    if (n == 0) break;
    got += n;
  }
  EXPECT_EQ(string_of(std::span<std::byte const>(reply).first(got)), "reply after half-close");
  EXPECT_EQ(co_await h, "request that the server reads to its end");
}

TEST_P(NetTest, HalfClose) {
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  rt.block_on(half_close_both_ways(&l));
}

task<void> large_writes(tcp_listener* l, std::size_t size) {
  // 16 MiB each way, far beyond the socket buffers: write_all must wait for
  // room several times while the peer reads in small pieces.
  std::vector<std::byte> data(size);
  for (std::size_t i = 0; i < size; ++i)
    data[i] = static_cast<std::byte>((i * 7919) >> 8);
  auto reader = [](tcp_listener* l, std::size_t size) -> task<std::vector<std::byte>> {
    tcp_stream s = co_await l->accept();
    std::vector<std::byte> got(size);
    std::size_t done = 0;
    while (done < size) {
      std::size_t const want = std::min<std::size_t>(1000, size - done);
      std::size_t const n = co_await s.read_some(std::span<std::byte>(got).subspan(done, want));
      if (n == 0) break;
      done += n;
    }
    got.resize(done);
    co_return got;
  };
  join_handle<std::vector<std::byte>> h = spindle::spawn(reader(l, size));
  tcp_stream c = co_await tcp_stream::connect(l->local_endpoint());
  EXPECT_EQ(co_await c.write_all(data), size);
  std::vector<std::byte> const got = co_await h;
  EXPECT_EQ(got.size(), size);
  EXPECT_TRUE(got == data) << "bytes differ";
}

TEST_P(NetTest, WritesLargerThanTheSocketBuffer) {
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  rt.block_on(large_writes(&l, 16u << 20));
}

task<void> read_exact_short(tcp_listener* l) {
  auto server = [](tcp_listener* l) -> task<void> {
    tcp_stream s = co_await l->accept();
    co_await s.write_all(bytes_of("abc"));
  };  // closes: the client sees 3 bytes, then end of stream
  join_handle<void> h = spindle::spawn(server(l));
  tcp_stream c = co_await tcp_stream::connect(l->local_endpoint());
  std::vector<std::byte> buf(10);
  int const err = co_await errno_of(c.read_exact(buf));
  EXPECT_EQ(err, static_cast<int>(std::errc::connection_reset));
  EXPECT_EQ(string_of(std::span<std::byte const>(buf).first(3)), "abc");
  co_await h;
}

TEST_P(NetTest, ReadExactThrowsAtEarlyEndOfStream) {
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  rt.block_on(read_exact_short(&l));
}

TEST_P(NetTest, ConnectionRefused) {
  runtime rt{config()};
  endpoint closed;
  {
    tcp_listener l = tcp_listener::bind(loopback_v4());
    closed = l.local_endpoint();
  }  // nobody listens there now
  int const err = rt.block_on(errno_of(tcp_stream::connect(closed)));
  EXPECT_EQ(err, ECONNREFUSED);
}

task<void> reset_and_broken_pipe(tcp_listener* l) {
  auto server = [](tcp_listener* l) -> task<void> {
    tcp_stream s = co_await l->accept();
    std::byte go[1];
    co_await s.read_exact(go);  // the client is connected for sure
    // SO_LINGER 0: close sends RST instead of FIN.
    linger lg{1, 0};
    EXPECT_EQ(::setsockopt(s.native_handle(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    s.close();
    co_return;
  };
  join_handle<void> h = spindle::spawn(server(l));
  tcp_stream c = co_await tcp_stream::connect(l->local_endpoint());
  co_await c.write_all(bytes_of("!"));
  co_await h;
  // Wait until the reset arrived.
  pollfd p{c.native_handle(), POLLIN, 0};
  for (int i = 0; i < 500 && ::poll(&p, 1, 0) == 0; ++i)
    co_await spindle::sleep_for(2ms);
  std::byte buf[16];
  EXPECT_EQ(co_await errno_of(c.read_some(buf)), ECONNRESET);
  // Writing to a dead connection: EPIPE (never SIGPIPE, or this process
  // would be gone).
  std::vector<std::byte> data(1 << 16);
  int err = 0;
  for (int i = 0; i < 10 && err == 0; ++i)
    err = co_await errno_of(c.write_all(data));
  EXPECT_TRUE(err == EPIPE || err == ECONNRESET) << err;
}

TEST_P(NetTest, ResetAndBrokenPipeAreErrorsOfThatStreamOnly) {
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  rt.block_on(reset_and_broken_pipe(&l));
  // The runtime goes on serving.
  rt.block_on(tcp_echo_round_trip(loopback_v4()));
}

TEST_P(NetTest, BindErrors) {
  tcp_listener l = tcp_listener::bind(loopback_v4());
  // SO_REUSEADDR does not allow two listeners on one port.
  try {
    (void)tcp_listener::bind(l.local_endpoint());
    ADD_FAILURE() << "second bind succeeded";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::address_in_use) << e.what();
  }
  try {
    (void)tcp_listener::bind(endpoint::parse("192.0.2.1:0"));  // TEST-NET-1: not ours
    ADD_FAILURE() << "bind to a foreign address succeeded";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::address_not_available) << e.what();
  }
}

TEST_P(NetTest, OperationsOnClosedSocketsThrowEBADF) {
  runtime rt{config()};
  tcp_stream s;
  std::byte buf[4];
  EXPECT_EQ(rt.block_on(errno_of(s.read_some(buf))), EBADF);
  EXPECT_EQ(rt.block_on(errno_of(s.write_all(buf))), EBADF);
  tcp_listener l;
  EXPECT_EQ(rt.block_on(errno_of(l.accept())), EBADF);
  EXPECT_THROW(s.shutdown_write(), std::system_error);
  EXPECT_THROW((void)l.local_endpoint(), std::system_error);
}

// --- cancellation -------------------------------------------------------------

task<void> abort_pending_accept(tcp_listener* l) {
  auto waiter = [](tcp_listener* l) -> task<void> { (void)co_await l->accept(); };
  join_handle<void> h = spindle::spawn(waiter(l));
  co_await spindle::sleep_for(20ms);  // in its accept by now (or soon: either way aborted)
  EXPECT_FALSE(h.is_finished());
  h.abort();
  bool cancelled = false;
  try {
    co_await h;
  } catch (spindle::task_cancelled const&) {
    cancelled = true;
  }
  EXPECT_TRUE(cancelled);
  // The listener still works, and the aborted accept took no connection.
  join_handle<std::size_t> server = spindle::spawn(echo_one(l));
  tcp_stream c = co_await tcp_stream::connect(l->local_endpoint());
  co_await c.write_all(bytes_of("x"));
  c.shutdown_write();
  std::byte b[2];
  EXPECT_EQ(co_await c.read_some(b), 1u);
  EXPECT_EQ(co_await server, 1u);
}

TEST_P(NetTest, AbortPendingAccept) {
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  rt.block_on(abort_pending_accept(&l));
}

task<void> abort_pending_read(tcp_listener* l) {
  join_handle<tcp_stream> accepted = spindle::spawn(l->accept());
  tcp_stream c = co_await tcp_stream::connect(l->local_endpoint());
  tcp_stream s = co_await accepted;
  // A read nobody answers, ended by a timeout (which aborts it).
  std::vector<std::byte> buf(16);
  bool timed_out = false;
  try {
    (void)co_await spindle::timeout(30ms, s.read_some(buf));
  } catch (spindle::timed_out const&) {
    timed_out = true;
  }
  EXPECT_TRUE(timed_out);
  // And through abort(): the stream stays usable for a new read.
  auto reader = [](tcp_stream* s) -> task<std::size_t> {
    std::byte b[8];
    co_return co_await s->read_some(b);
  };
  join_handle<std::size_t> r = spindle::spawn(reader(&s));
  co_await spindle::sleep_for(10ms);
  r.abort();
  EXPECT_THROW(co_await r, spindle::task_cancelled);
  co_await c.write_all(bytes_of("late"));
  EXPECT_EQ(co_await s.read_exact(std::span<std::byte>(buf).first(4)), 4u);
  EXPECT_EQ(string_of(std::span<std::byte const>(buf).first(4)), "late");
}

TEST_P(NetTest, AbortPendingRead) {
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  rt.block_on(abort_pending_read(&l));
}

TEST_P(NetTest, ConnectUnderTimeoutToABlackHoleTimesOut) {
  // A listener whose backlog is full does not answer SYNs: connect hangs
  // until the timeout aborts it.
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4(), 0);
  std::vector<int> fillers;
  for (int i = 0; i < 8; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    (void)::connect(fd, l.local_endpoint().data(), l.local_endpoint().size());
    fillers.push_back(fd);
  }
  auto attempt = [](endpoint at) -> task<int> {
    try {
      (void)co_await spindle::timeout(100ms, tcp_stream::connect(at));
      co_return 0;
    } catch (spindle::timed_out const&) {
      co_return 1;
    }
  };
  // Linux drops SYNs to a listener with a full accept queue: the connect
  // waits in the kernel until the timeout cancels it.
  EXPECT_EQ(rt.block_on(attempt(l.local_endpoint())), 1);
  for (int fd : fillers)
    ::close(fd);
}

task<void> wait_in_read_forever(tcp_listener* l) {
  tcp_stream s = co_await l->accept();
  std::vector<std::byte> buf(64);
  (void)co_await s.read_some(buf);
}

TEST_P(NetTest, RuntimeShutdownWithConnectionsOpen) {
  // Server tasks suspended in accept and read when the runtime goes away:
  // their SQEs or readiness waits are cancelled, frames and descriptors freed
  // (ASan/LSan check the frames; this checks the descriptors).
  auto count_fds = [] {
    std::size_t n = 0;
    for ([[maybe_unused]] auto const& e : std::filesystem::directory_iterator("/proc/self/fd"))
      ++n;
    return n;
  };
  std::size_t const before = count_fds();
  {
    // Declared before the runtime: it goes first, with the tasks that use them.
    tcp_listener l = tcp_listener::bind(loopback_v4());
    std::vector<tcp_stream> clients;
    runtime rt{config()};
    for (int i = 0; i < 8; ++i)
      (void)rt.spawn(wait_in_read_forever(&l));  // detached
    auto connect_all = [](endpoint at) -> task<std::vector<tcp_stream>> {
      std::vector<tcp_stream> cs;
      for (int i = 0; i < 4; ++i)
        cs.push_back(co_await tcp_stream::connect(at));
      co_return cs;
    };
    clients = rt.block_on(connect_all(l.local_endpoint()));
    std::this_thread::sleep_for(20ms);  // 4 tasks reading, 4 in accept
  }
  EXPECT_EQ(count_fds(), before) << "descriptors leaked";
}

// --- the listener's accept queue (multishot ACCEPT on io_uring) ------------------

std::size_t count_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] auto const& e : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

/// A blocking client socket connected to `to` (the kernel's backlog
/// completes the handshake whether or not anyone accepts yet).
int connect_plain(endpoint const& to) {
  int fd = ::socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::connect(fd, to.data(), to.size()), 0) << std::strerror(errno);
  return fd;
}

/// Accepts `n` connections; each sends its index (4 bytes). Yields the
/// indices in the order accepted.
task<std::vector<std::uint32_t>> accept_indexed(tcp_listener* l, std::size_t n) {
  std::vector<std::uint32_t> seen;
  for (std::size_t i = 0; i < n; ++i) {
    tcp_stream s = co_await l->accept();
    std::uint32_t index = 0;
    co_await s.read_exact(std::as_writable_bytes(std::span(&index, 1)));
    seen.push_back(index);
  }
  co_return seen;
}

TEST_P(NetTest, ConnectionsMadeBetweenAcceptsAreAllAccepted) {
  // 300 connections arrive while one accept() waits and the server is busy
  // elsewhere: on io_uring the multishot ACCEPT queues them (past 256 it is
  // cancelled and the kernel's backlog keeps the rest), then every one is
  // accepted exactly once.
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  constexpr std::uint32_t n = 300;
  auto first = rt.spawn(accept_indexed(&l, 1));
  std::vector<int> clients;
  for (std::uint32_t i = 0; i < n; ++i) {
    clients.push_back(connect_plain(l.local_endpoint()));
    ASSERT_EQ(::send(clients.back(), &i, sizeof i, MSG_NOSIGNAL), 4);
  }
  std::vector<std::uint32_t> seen = rt.block_on(std::move(first));
  auto rest = rt.block_on(accept_indexed(&l, n - 1));
  seen.insert(seen.end(), rest.begin(), rest.end());
  std::sort(seen.begin(), seen.end());
  std::vector<std::uint32_t> all(n);
  std::iota(all.begin(), all.end(), 0u);
  EXPECT_EQ(seen, all);
  for (int fd : clients)
    ::close(fd);
}

task<void> accept_from_many_tasks(tcp_listener* l, std::size_t tasks, std::size_t per_task) {
  std::vector<join_handle<std::vector<std::uint32_t>>> acceptors;
  for (std::size_t t = 0; t < tasks; ++t)
    acceptors.push_back(spindle::spawn(accept_indexed(l, per_task)));
  std::vector<std::uint32_t> seen;
  for (auto& a : acceptors) {
    auto part = co_await a;
    seen.insert(seen.end(), part.begin(), part.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<std::uint32_t> all(tasks * per_task);
  std::iota(all.begin(), all.end(), 0u);
  EXPECT_EQ(seen, all);
}

TEST_P(NetTest, ManyAcceptorsOnBothWorkersShareOneListener) {
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  constexpr std::size_t tasks = 8;
  constexpr std::size_t per_task = 25;
  std::thread clients([at = l.local_endpoint()] {
    for (std::uint32_t i = 0; i < tasks * per_task; ++i) {
      int fd = connect_plain(at);
      EXPECT_EQ(::send(fd, &i, sizeof i, MSG_NOSIGNAL), 4);
      ::close(fd);  // the 4 bytes stay readable after the close
    }
  });
  rt.block_on(accept_from_many_tasks(&l, tasks, per_task));
  clients.join();
}

/// The io_uring SQEs this process's rings have consumed so far (the
/// kernel's SqHead of every ring, from /proc/self/fdinfo).
std::uint64_t sqes_consumed() {
  std::uint64_t total = 0;
  for (auto const& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string() != "anon_inode:[io_uring]") continue;
    FILE* f = std::fopen(("/proc/self/fdinfo/" + e.path().filename().string()).c_str(), "r");
    if (f == nullptr) continue;
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      unsigned long long head = 0;
      if (std::sscanf(line, "SqHead: %llu", &head) == 1) total += head;
    }
    std::fclose(f);
  }
  return total;
}

task<void> accept_and_close(tcp_listener* l, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    (void)co_await l->accept();
}

TEST_P(NetTest, MultishotAcceptTakesManyConnectionsFromOneSqe) {
  if (GetParam() != io_backend::uring) GTEST_SKIP() << "an io_uring feature";
  utsname u{};
  int major = 0;
  int minor = 0;
  ASSERT_EQ(::uname(&u), 0);
  ASSERT_EQ(std::sscanf(u.release, "%d.%d", &major, &minor), 2);
  if (major < 5 || (major == 5 && minor < 19)) GTEST_SKIP() << "multishot ACCEPT needs 5.19";
  if (char const* env = std::getenv("SPINDLE_NET_MULTISHOT"); env && std::strcmp(env, "0") == 0)
    GTEST_SKIP() << "SPINDLE_NET_MULTISHOT=0";
  // One worker, so that no unpark re-arms another worker's eventfd read:
  // the ring's SQEs are then the multishot ACCEPT and next to nothing else.
  runtime rt{config(1)};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  constexpr std::size_t n = 200;
  auto server = rt.spawn(accept_and_close(&l, n));
  std::this_thread::sleep_for(10ms);  // armed (either way the count below holds)
  std::uint64_t const before = sqes_consumed();
  for (std::size_t i = 0; i < n; ++i)
    ::close(connect_plain(l.local_endpoint()));
  rt.block_on(std::move(server));
  std::uint64_t const used = sqes_consumed() - before;
  // A single-shot ACCEPT per connection would consume at least n.
  EXPECT_LT(used, n / 4) << used << " SQEs for " << n << " accepts";
}

TEST_P(NetTest, ClosingAListenerReleasesItsQueueAndPort) {
  std::size_t const fds_before = count_fds();
  endpoint at;
  std::vector<int> clients;
  {
    runtime rt{config()};
    tcp_listener l = tcp_listener::bind(loopback_v4());
    at = l.local_endpoint();
    clients.push_back(connect_plain(at));
    (void)rt.block_on(l.accept());  // arms the multishot ACCEPT on io_uring
    for (int i = 0; i < 5; ++i)
      clients.push_back(connect_plain(at));
    std::this_thread::sleep_for(20ms);  // queued by the listener (io_uring) or the kernel
    l.close();
    // Nobody listens any more: a new connection is refused, and the port
    // can be bound again at once.
    int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(probe, 0);
    EXPECT_NE(::connect(probe, at.data(), at.size()), 0);
    EXPECT_EQ(errno, ECONNREFUSED);
    ::close(probe);
    tcp_listener again = tcp_listener::bind(at);
    EXPECT_EQ(again.local_endpoint().port(), at.port());
  }
  // The connections queued but never accepted were closed: each client
  // reads end of stream (or a reset).
  for (std::size_t i = 1; i < clients.size(); ++i) {
    char c = 0;
    ssize_t r = ::recv(clients[i], &c, 1, 0);
    EXPECT_TRUE(r == 0 || (r < 0 && errno == ECONNRESET)) << r << " " << std::strerror(errno);
  }
  for (int fd : clients)
    ::close(fd);
  EXPECT_EQ(count_fds(), fds_before) << "descriptors leaked";
}

// --- provided-buffer receives (io_uring) -----------------------------------------

/// Reads `expected` bytes from the next accepted stream in reads of at most
/// 700 bytes and yields whether they match.
task<bool> read_pattern(tcp_listener* l, std::size_t expected) {
  tcp_stream s = co_await l->accept();
  std::vector<std::byte> got;
  std::vector<std::byte> chunk(700);
  for (;;) {
    std::size_t n = co_await s.read_some(chunk);
    if (n == 0) break;
    got.insert(got.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n));
  }
  if (got.size() != expected || got.size() < 4) co_return false;
  std::uint32_t id = 0;
  std::memcpy(&id, got.data(), 4);
  for (std::size_t i = 4; i < got.size(); ++i) {
    if (got[i] != static_cast<std::byte>((id * 31 + i) & 0xff)) co_return false;
  }
  co_return true;
}

task<std::size_t> serve_patterns(tcp_listener* l, std::size_t connections, std::size_t bytes) {
  std::vector<join_handle<bool>> readers;
  for (std::size_t i = 0; i < connections; ++i)
    readers.push_back(spindle::spawn(read_pattern(l, bytes)));
  std::size_t good = 0;
  for (auto& r : readers)
    good += (co_await r) ? 1 : 0;
  co_return good;
}

task<std::uint64_t> provided_receives_so_far() {
  auto* d = spindle::detail::current_driver();
  if (d == nullptr || d->backend() != io_backend::uring) co_return 0;
  co_return static_cast<spindle::io::detail::uring_driver*>(d)->provided_buffer_receives();
}

TEST_P(NetTest, SmallReadsOfManyConnectionsDeliverEveryByte) {
  // 200 connections send 20,000 bytes each at once while 200 tasks read them
  // in 700-byte reads: on io_uring each read takes one of a worker's 64
  // provided buffers when its data arrives (more arrivals than buffers
  // between two reaps fall back to the caller's buffer), and every byte
  // reaches the right reader.
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  constexpr std::size_t connections = 200;
  constexpr std::size_t bytes = 20'000;
  auto server = rt.spawn(serve_patterns(&l, connections, bytes));
  std::thread clients([at = l.local_endpoint()] {
    std::vector<int> fds;
    for (std::uint32_t id = 0; id < connections; ++id)
      fds.push_back(connect_plain(at));
    for (std::size_t off = 0; off < bytes; off += 5'000) {
      for (std::uint32_t id = 0; id < connections; ++id) {
        std::vector<std::uint8_t> part(5'000);
        for (std::size_t i = 0; i < part.size(); ++i)
          part[i] = static_cast<std::uint8_t>((id * 31 + off + i) & 0xff);
        if (off == 0) std::memcpy(part.data(), &id, 4);
        std::size_t sent = 0;
        while (sent < part.size()) {
          ssize_t r = ::send(fds[id], part.data() + sent, part.size() - sent, MSG_NOSIGNAL);
          ASSERT_GT(r, 0);
          sent += static_cast<std::size_t>(r);
        }
      }
    }
    for (int fd : fds)
      ::close(fd);
  });
  EXPECT_EQ(rt.block_on(std::move(server)), connections);
  clients.join();
  if (GetParam() == io_backend::uring) {
    std::uint64_t const provided = rt.block_on(provided_receives_so_far());
    char const* env = std::getenv("SPINDLE_NET_PROVIDED_BUFFERS");
    bool const off = env != nullptr && std::strcmp(env, "0") == 0;
    utsname u{};
    int major = 0;
    int minor = 0;
    ASSERT_EQ(::uname(&u), 0);
    ASSERT_EQ(std::sscanf(u.release, "%d.%d", &major, &minor), 2);
    if (!off && (major > 5 || (major == 5 && minor >= 19))) {
      EXPECT_GT(provided, connections) << "reads did not take provided buffers";
    } else {
      EXPECT_EQ(provided, 0u);
    }
  }
}

// --- descriptor limits ------------------------------------------------------------

task<void> accept_survives_emfile(tcp_listener* l, std::vector<int>* fillers) {
  join_handle<tcp_stream> accepted = spindle::spawn(l->accept());
  // The client socket exists before the table fills up; connect needs no
  // new descriptor on this side.
  int client = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(client, 0);
  for (;;) {
    int fd = ::dup(0);
    if (fd < 0) break;
    fillers->push_back(fd);
  }
  EXPECT_EQ(::connect(client, l->local_endpoint().data(), l->local_endpoint().size()), 0);
  co_await spindle::sleep_for(50ms);  // accept answers EMFILE and backs off meanwhile
  EXPECT_FALSE(accepted.is_finished());
  ::close(fillers->back());
  fillers->pop_back();
  tcp_stream s = co_await accepted;
  EXPECT_TRUE(s.is_open());
  ::close(client);
}

TEST_P(NetTest, AcceptBacksOffOnEmfileAndKeepsServing) {
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fillers;
  rt.block_on(accept_survives_emfile(&l, &fillers));
  for (int fd : fillers)
    ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
}

task<std::size_t> echo_many(tcp_listener* l, std::size_t n) {
  std::vector<join_handle<std::size_t>> hs;
  hs.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    hs.push_back(spindle::spawn(echo_one(l)));
  std::size_t total = 0;
  for (auto& h : hs)
    total += co_await h;
  co_return total;
}

task<std::size_t> clients_all_open(endpoint at, std::size_t n) {
  // Opens all n connections first (all held open at once), then each sends
  // its index and reads the echo.
  std::vector<tcp_stream> cs;
  cs.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    cs.push_back(co_await tcp_stream::connect(at));
  auto talk = [](tcp_stream* s, std::uint32_t i) -> task<std::size_t> {
    std::byte out[4];
    std::memcpy(out, &i, 4);
    co_await s->write_all(out);
    s->shutdown_write();
    std::byte in[4];
    co_await s->read_exact(in);
    EXPECT_EQ(std::memcmp(in, out, 4), 0);
    co_return 4;
  };
  std::vector<join_handle<std::size_t>> hs;
  hs.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    hs.push_back(spindle::spawn(talk(&cs[i], static_cast<std::uint32_t>(i))));
  std::size_t total = 0;
  for (auto& h : hs)
    total += co_await h;
  co_return total;
}

TEST_P(NetTest, TenThousandConcurrentConnections) {
  // 10,000 connections held open at once. Server and clients live in two
  // processes (each needs 10,000 descriptors; machines here often cap the
  // hard limit at 20,000 per process, which root may or may not lift).
  constexpr std::size_t n = 10'000;
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit want = old;
  want.rlim_cur = std::max<rlim_t>(old.rlim_cur, n + 512);
  if (want.rlim_cur > old.rlim_max) want.rlim_max = want.rlim_cur;  // root may raise it
  if (::setrlimit(RLIMIT_NOFILE, &want) != 0) {
    GTEST_SKIP() << "cannot raise RLIMIT_NOFILE to " << want.rlim_cur;
  }
  tcp_listener l = tcp_listener::bind(loopback_v4(), 4096);
  endpoint const at = l.local_endpoint();
  pid_t const child = ::fork();  // before any runtime: no threads to lose
  ASSERT_GE(child, 0);
  if (child == 0) {
    l.close();
    int code = 1;
    try {
      runtime rt{config()};
      code = rt.block_on(clients_all_open(at, n)) == 4 * n ? 0 : 2;
    } catch (std::exception const& e) {
      std::fprintf(stderr, "client process: %s\n", e.what());
      code = 3;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  {
    runtime rt{config()};
    EXPECT_EQ(rt.block_on(echo_many(&l, n)), 4 * n);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "client process status " << status;
  ::setrlimit(RLIMIT_NOFILE, &old);
}

// --- fibers ----------------------------------------------------------------------

TEST_P(NetTest, FibersAwaitSocketOperations) {
  // A fiber server and a fiber client: every socket operation through
  // this_fiber::await, suspending the fiber, not the worker.
  runtime rt{config()};
  tcp_listener l = tcp_listener::bind(loopback_v4());
  auto server = rt.spawn_fiber([&l] {
    tcp_stream s = spindle::this_fiber::await(l.accept());
    std::vector<std::byte> buf(64);
    std::size_t total = 0;
    while (std::size_t n = spindle::this_fiber::await(s.read_some(buf))) {
      spindle::this_fiber::await(s.write_all(std::span<std::byte const>(buf).first(n)));
      total += n;
    }
    return total;
  });
  auto client = rt.spawn_fiber([at = l.local_endpoint()] {
    tcp_stream c = spindle::this_fiber::await(tcp_stream::connect(at));
    std::string got;
    for (int i = 0; i < 100; ++i) {
      std::string const msg = "message " + std::to_string(i);
      spindle::this_fiber::await(c.write_all(bytes_of(msg)));
      std::vector<std::byte> back(msg.size());
      spindle::this_fiber::await(c.read_exact(back));
      got += string_of(back) == msg ? "" : "mismatch at " + std::to_string(i) + "; ";
    }
    c.shutdown_write();
    return got;
  });
  auto join_both = [](join_handle<std::size_t> s,
                      join_handle<std::string> c) -> task<std::pair<std::size_t, std::string>> {
    std::string const errors = co_await c;
    co_return std::pair{co_await s, errors};
  };
  auto [bytes, errors] = rt.block_on(join_both(std::move(server), std::move(client)));
  EXPECT_EQ(errors, "");
  std::size_t expected = 0;
  for (int i = 0; i < 100; ++i)
    expected += ("message " + std::to_string(i)).size();
  EXPECT_EQ(bytes, expected);
}

// --- UDP ------------------------------------------------------------------------

task<void> udp_round_trip(endpoint at) {
  udp_socket a = udp_socket::bind(at);
  udp_socket b = udp_socket::bind(at);
  auto const msg = bytes_of("datagram");
  EXPECT_EQ(co_await a.send_to(msg, b.local_endpoint()), msg.size());
  std::vector<std::byte> buf(64);
  auto r = co_await b.receive_from(buf);
  EXPECT_EQ(r.bytes, msg.size());
  EXPECT_FALSE(r.truncated);
  EXPECT_EQ(r.from, a.local_endpoint());
  EXPECT_EQ(string_of(std::span<std::byte const>(buf).first(r.bytes)), "datagram");

  // Truncation: a datagram longer than the buffer fills it; the rest is lost.
  auto const big = bytes_of("0123456789abcdef");
  co_await b.send_to(big, a.local_endpoint());
  std::vector<std::byte> small(10);
  auto t = co_await a.receive_from(small);
  EXPECT_EQ(t.bytes, 10u);
  EXPECT_TRUE(t.truncated);
  EXPECT_EQ(string_of(small), "0123456789");
  EXPECT_EQ(t.from, b.local_endpoint());

  // A receive that waits (nothing sent yet), then gets one.
  auto recv_later = [](udp_socket* s) -> task<std::size_t> {
    std::vector<std::byte> buf(8);
    co_return (co_await s->receive_from(buf)).bytes;
  };
  join_handle<std::size_t> h = spindle::spawn(recv_later(&a));
  co_await spindle::sleep_for(10ms);
  co_await b.send_to(bytes_of("late"), a.local_endpoint());
  EXPECT_EQ(co_await h, 4u);
}

TEST_P(NetTest, UdpSendReceiveAndTruncation) {
  runtime rt{config()};
  rt.block_on(udp_round_trip(loopback_v4()));
}

TEST_P(NetTest, UdpOverIpv6) {
  runtime rt{config()};
  try {
    (void)udp_socket::bind(endpoint::parse("[::1]:0"));
  } catch (std::system_error const& e) {
    GTEST_SKIP() << "cannot bind ::1: " << e.what();
  }
  rt.block_on(udp_round_trip(endpoint::parse("[::1]:0")));
}

TEST_P(NetTest, UdpAbortPendingReceive) {
  runtime rt{config()};
  udp_socket s = udp_socket::bind(loopback_v4());
  auto wait = [](udp_socket* s) -> task<int> {
    std::byte b[4];
    try {
      (void)co_await spindle::timeout(20ms, s->receive_from(b));
    } catch (spindle::timed_out const&) {
      co_return 1;
    }
    co_return 0;
  };
  EXPECT_EQ(rt.block_on(wait(&s)), 1);
}

// --- Unix -----------------------------------------------------------------------

task<void> unix_echo(std::string path) {
  unix_listener l = unix_listener::bind(path);
  EXPECT_EQ(l.local_path(), path);
  auto server = [](unix_listener* l) -> task<std::size_t> {
    unix_stream s = co_await l->accept();
    std::vector<std::byte> buf(64);
    std::size_t const n = co_await s.read_some(buf);
    co_await s.write_all(std::span<std::byte const>(buf).first(n));
    co_return n;
  };
  join_handle<std::size_t> h = spindle::spawn(server(&l));
  unix_stream c = co_await unix_stream::connect(path);
  EXPECT_EQ(c.peer_path(), path);
  co_await c.write_all(bytes_of("over unix"));
  std::vector<std::byte> back(9);
  co_await c.read_exact(back);
  EXPECT_EQ(string_of(back), "over unix");
  EXPECT_EQ(co_await h, 9u);
}

TEST_P(NetTest, UnixStreamEcho) {
  runtime rt{config()};
  char tmpl[] = "/tmp/spindle-test-net-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string const path = std::string(tmpl) + "/sock";
  rt.block_on(unix_echo(path));
  // An existing path is refused.
  EXPECT_THROW((void)unix_listener::bind(path), std::system_error);
  std::filesystem::remove_all(tmpl);
}

TEST_P(NetTest, UnixAbstractNameAndErrors) {
  runtime rt{config()};
  std::string const name = "@spindle-test-" + std::to_string(::getpid()) + "-" +
                           std::to_string(static_cast<int>(GetParam()));
  rt.block_on(unix_echo(name));
  EXPECT_EQ(rt.block_on(errno_of(unix_stream::connect("/nonexistent/spindle.sock"))), ENOENT);
  EXPECT_EQ(rt.block_on(errno_of(unix_stream::connect(std::string(200, 'x')))), ENAMETOOLONG);
}

INSTANTIATE_TEST_SUITE_P(Backends, NetTest,
                         ::testing::Values(io_backend::uring, io_backend::threadpool),
                         [](auto const& info) {
                           return info.param == io_backend::uring ? std::string("uring")
                                                                  : std::string("threadpool");
                         });

}  // namespace
