// spindle::net sockets: tcp_listener, tcp_stream, udp_socket, unix_listener,
// unix_stream (see spindle/net.hpp for the contract and the two I/O paths).
//
// Every waiting operation here is written twice over one loop: the ring path
// co_awaits an io_op of the socket's opcode (the io_uring driver turns it
// into one SQE), the readiness path makes the non-blocking system call on
// the calling thread. Either, on EAGAIN, co_awaits a `poll` op (epoll in the
// thread-pool driver, POLL_ADD on the ring) and goes round again. The ring
// path can see EAGAIN too: kernels before 5.x-something return it for an
// O_NONBLOCK socket instead of arming their internal poll.
// Design source: Tokio's readiness loop (PollEvented: try the call, on
// WouldBlock await readiness and retry); io_uring's ACCEPT/CONNECT/RECV/SEND
// opcodes as liburing's examples use them.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "io_op.hpp"
#include "spindle/net.hpp"
#include "spindle/runtime.hpp"
#include "spindle/time.hpp"
#include "uring_driver.hpp"

namespace spindle::net {

namespace {

using io::detail::io_op;
using io::detail::op_awaiter;
using io::detail::op_code;

[[noreturn]] void throw_errno(int err, char const* what) {
  throw std::system_error(err, std::system_category(), std::string("spindle::net: ") + what);
}

/// True when `code` goes through an SQE (io_uring backend whose kernel has
/// the opcode), false for the readiness path. Throws
/// std::errc::operation_not_permitted outside a runtime's task.
bool on_ring(op_code code) {
  spindle::detail::driver* d = spindle::detail::current_driver();
  if (d == nullptr) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle::net: socket I/O awaited outside a spindle task");
  }
  return d->backend() == io_backend::uring &&
         static_cast<io::detail::uring_driver*>(d)->supports(code);
}

std::uint32_t clamp_length(std::size_t bytes) noexcept {
  return static_cast<std::uint32_t>(std::min<std::size_t>(bytes, io::detail::max_rw_count));
}

/// The awaiter of one operation on the ring.
op_awaiter ring_op(op_code code, int fd, int flags, void* buffer = nullptr,
                   std::uint32_t length = 0, void* addr = nullptr) {
  return op_awaiter{io_op{
      .code = code, .fd = fd, .flags = flags, .buffer = buffer, .length = length, .addr = addr}};
}

/// Waits until `fd` is ready for `events` (POLLIN or POLLOUT); yields the
/// revents or -errno.
op_awaiter readiness(int fd, short events) {
  return ring_op(op_code::poll, fd, events);
}

void check_readiness(int revents, char const* what) {
  if (revents < 0) throw_errno(-revents, what);
  if (revents & POLLNVAL) throw_errno(EBADF, what);
}

int require_open(int fd, char const* what) {
  if (fd < 0) throw_errno(EBADF, what);
  return fd;
}

/// Descriptor exhaustion: accept waits for a descriptor to be freed.
bool out_of_descriptors(int err) noexcept {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/// The connection died in the backlog: accept the next one at once.
bool accept_retry_now(int err) noexcept {
  return err == ECONNABORTED || err == EPROTO || err == EINTR;
}

constexpr auto accept_backoff_min = std::chrono::milliseconds(1);
constexpr auto accept_backoff_max = std::chrono::milliseconds(100);

/// Accepts one connection on `listen_fd`; yields the new non-blocking
/// descriptor.
task<int> accept_descriptor(int listen_fd) {
  require_open(listen_fd, "accept");
  bool const ring = on_ring(op_code::accept);
  auto backoff = accept_backoff_min;
  for (;;) {
    int r;
    if (ring) {
      r = co_await ring_op(op_code::accept, listen_fd, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } else {
      r = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (r < 0) r = -errno;
    }
    if (r >= 0) co_return r;
    int const err = -r;
    if (err == EAGAIN) {
      check_readiness(co_await readiness(listen_fd, POLLIN), "accept");
    } else if (out_of_descriptors(err)) {
      // Tokio leaves this to the server loop (hyper sleeps a second);
      // asio reports it. Retrying here keeps every caller's loop correct.
      co_await spindle::sleep_for(backoff);
      backoff = std::min(backoff * 2, accept_backoff_max);
    } else if (!accept_retry_now(err)) {
      throw_errno(err, "accept");
    }
  }
}

/// Connects `fd` to `addr` (which must stay valid until this completes).
task<void> connect_descriptor(int fd, sockaddr const* addr, socklen_t len) {
  int r;
  if (on_ring(op_code::connect)) {
    r = co_await ring_op(op_code::connect, fd, 0, nullptr, len, const_cast<sockaddr*>(addr));
  } else {
    r = ::connect(fd, addr, len);
    if (r < 0) r = -errno;
  }
  if (r == 0) co_return;
  if (r != -EINPROGRESS && r != -EAGAIN && r != -EALREADY && r != -EINTR) {
    throw_errno(-r, "connect");
  }
  // In progress: writable once it succeeded or failed; SO_ERROR says which.
  check_readiness(co_await readiness(fd, POLLOUT), "connect");
  int err = 0;
  socklen_t err_len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) < 0) throw_errno(errno, "connect");
  if (err != 0) throw_errno(err, "connect");
}

/// Sends (sendmsg when `msg`, else send of `data`/`len`) without blocking;
/// yields bytes sent or -errno.
int send_now(int fd, void const* data, std::size_t len, msghdr const* msg) noexcept {
  ssize_t r;
  do {
    r = msg != nullptr ? ::sendmsg(fd, msg, MSG_DONTWAIT | MSG_NOSIGNAL)
                       : ::send(fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : static_cast<int>(r);
}

/// One send of at most `len` bytes (or of `msg`) after a non-blocking send
/// answered EAGAIN (the socket buffer is full): through the ring's
/// SEND/SENDMSG, or a readiness wait and a retry. Yields the bytes sent.
task<std::size_t> send_when_writable(int fd, void const* data, std::size_t len, msghdr* msg) {
  char const* const what = msg != nullptr ? "send_to" : "write";
  bool const ring = on_ring(msg != nullptr ? op_code::sendmsg : op_code::send);
  for (;;) {
    int r = -EAGAIN;
    if (ring) {
      // (Not a conditional expression around two co_awaits: docs/compilers.md.)
      if (msg != nullptr) {
        r = co_await ring_op(op_code::sendmsg, fd, MSG_NOSIGNAL, msg);
      } else {
        r = co_await ring_op(op_code::send, fd, MSG_NOSIGNAL, const_cast<void*>(data),
                             clamp_length(len));
      }
      if (r == -EINTR) r = -EAGAIN;
    }
    if (r == -EAGAIN) {
      check_readiness(co_await readiness(fd, POLLOUT), what);
      r = send_now(fd, data, len, msg);
    }
    if (r >= 0) co_return static_cast<std::size_t>(r);
    if (r != -EAGAIN) throw_errno(-r, what);
  }
}

/// Builds a sockaddr_un for `path` ('@' first: abstract). Throws
/// filename_too_long or invalid_argument (empty path).
socklen_t unix_address(std::string const& path, sockaddr_un& out) {
  out = {};
  out.sun_family = AF_UNIX;
  if (path.empty()) throw_errno(EINVAL, "unix socket path is empty");
  bool const abstract = path[0] == '@';
  std::size_t const max = sizeof out.sun_path - (abstract ? 0 : 1);
  if (path.size() > max) throw_errno(ENAMETOOLONG, ("unix socket path " + path).c_str());
  std::memcpy(out.sun_path, path.data(), path.size());
  if (abstract) out.sun_path[0] = '\0';
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + (abstract ? 0 : 1));
}

std::string unix_path(sockaddr_un const& addr, socklen_t len) {
  std::size_t const base = offsetof(sockaddr_un, sun_path);
  if (len <= base) return {};
  std::size_t const n = std::min<std::size_t>(len - base, sizeof addr.sun_path);
  std::string path(addr.sun_path, n);
  if (path[0] == '\0') {
    path[0] = '@';  // abstract: every byte counts, NULs included
    return path;
  }
  path.resize(strnlen(path.data(), n));
  return path;
}

int open_socket(int family, int type) {
  int const fd = ::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_errno(errno, "socket");
  return fd;
}

void set_option(int fd, int level, int name, int value, char const* what) {
  if (::setsockopt(fd, level, name, &value, sizeof value) < 0) throw_errno(errno, what);
}

void make_nonblocking(int fd) noexcept {
  if (fd < 0) return;
  int const fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0 && (fl & O_NONBLOCK) == 0) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

endpoint socket_name(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  int const r = peer ? ::getpeername(require_open(fd, "peer_endpoint"),
                                     reinterpret_cast<sockaddr*>(&ss), &len)
                     : ::getsockname(require_open(fd, "local_endpoint"),
                                     reinterpret_cast<sockaddr*>(&ss), &len);
  if (r < 0) throw_errno(errno, peer ? "getpeername" : "getsockname");
  return endpoint(reinterpret_cast<sockaddr const*>(&ss), len);
}

}  // namespace

// ------------------------------------------------------------ socket_handle

namespace detail {

socket_handle& socket_handle::operator=(socket_handle&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void socket_handle::close() noexcept {
  if (fd_ >= 0) ::close(fd_);  // EINTR: Linux released the descriptor anyway
  fd_ = -1;
}

// ------------------------------------------------------------ stream_socket

task<std::size_t> stream_socket::read_some(std::span<std::byte> buffer) {
  int const fd = require_open(fd_, "read");
  if (buffer.empty()) co_return 0;
  std::uint32_t const len = clamp_length(buffer.size());
  bool const ring = on_ring(op_code::recv);
  for (;;) {
    int r;
    if (ring) {
      r = co_await ring_op(op_code::recv, fd, 0, buffer.data(), len);
    } else {
      ssize_t const n = ::recv(fd, buffer.data(), len, MSG_DONTWAIT);
      r = n < 0 ? -errno : static_cast<int>(n);
    }
    if (r >= 0) co_return static_cast<std::size_t>(r);
    if (r == -EAGAIN) {
      check_readiness(co_await readiness(fd, POLLIN), "read");
    } else if (r != -EINTR) {
      throw_errno(-r, "read");
    }
  }
}

task<std::size_t> stream_socket::read_exact(std::span<std::byte> buffer) {
  std::size_t done = 0;
  while (done < buffer.size()) {
    std::size_t const n = co_await read_some(buffer.subspan(done));
    if (n == 0) {
      throw std::system_error(std::make_error_code(std::errc::connection_reset),
                              "spindle::net: read_exact: end of stream after " +
                                  std::to_string(done) + " of " + std::to_string(buffer.size()) +
                                  " bytes");
    }
    done += n;
  }
  co_return done;
}

task<std::size_t> stream_socket::write_all(std::span<std::byte const> data) {
  int const fd = require_open(fd_, "write");
  std::size_t done = 0;
  while (done < data.size()) {
    // The common case, room in the socket buffer, costs no nested task.
    int const r = send_now(fd, data.data() + done, data.size() - done, nullptr);
    if (r >= 0) {
      done += static_cast<std::size_t>(r);
    } else if (r == -EAGAIN) {
      done += co_await send_when_writable(fd, data.data() + done, data.size() - done, nullptr);
    } else {
      throw_errno(-r, "write");
    }
  }
  co_return data.size();
}

void stream_socket::shutdown_write() {
  if (::shutdown(require_open(fd_, "shutdown_write"), SHUT_WR) < 0) {
    throw_errno(errno, "shutdown_write");
  }
}

}  // namespace detail

// ------------------------------------------------------------ TCP

tcp_stream::tcp_stream(int fd) noexcept : stream_socket(fd) {
  make_nonblocking(fd);
}

task<tcp_stream> tcp_stream::connect(endpoint to) {
  tcp_stream s;
  s.fd_ = open_socket(to.family(), SOCK_STREAM);
  co_await connect_descriptor(s.fd_, to.data(), to.size());
  co_return s;
}

void tcp_stream::set_nodelay(bool on) {
  set_option(require_open(fd_, "set_nodelay"), IPPROTO_TCP, TCP_NODELAY, on ? 1 : 0, "set_nodelay");
}

endpoint tcp_stream::peer_endpoint() const {
  return socket_name(fd_, true);
}

endpoint tcp_stream::local_endpoint() const {
  return socket_name(fd_, false);
}

tcp_listener tcp_listener::bind(endpoint const& at, int backlog) {
  tcp_listener l;
  l.fd_ = open_socket(at.family(), SOCK_STREAM);
  set_option(l.fd_, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
  if (at.is_v6()) set_option(l.fd_, IPPROTO_IPV6, IPV6_V6ONLY, 1, "IPV6_V6ONLY");
  if (::bind(l.fd_, at.data(), at.size()) < 0)
    throw_errno(errno, ("bind " + at.to_string()).c_str());
  if (::listen(l.fd_, backlog) < 0) throw_errno(errno, "listen");
  return l;
}

endpoint tcp_listener::local_endpoint() const {
  return socket_name(fd_, false);
}

task<tcp_stream> tcp_listener::accept() {
  int const fd = co_await accept_descriptor(fd_);
  tcp_stream s;
  s.fd_ = fd;  // accepted with SOCK_NONBLOCK
  co_return s;
}

// ------------------------------------------------------------ UDP

udp_socket udp_socket::bind(endpoint const& at) {
  udp_socket u;
  u.fd_ = open_socket(at.family(), SOCK_DGRAM);
  if (at.is_v6()) set_option(u.fd_, IPPROTO_IPV6, IPV6_V6ONLY, 1, "IPV6_V6ONLY");
  if (::bind(u.fd_, at.data(), at.size()) < 0)
    throw_errno(errno, ("bind " + at.to_string()).c_str());
  return u;
}

endpoint udp_socket::local_endpoint() const {
  return socket_name(fd_, false);
}

task<std::size_t> udp_socket::send_to(std::span<std::byte const> data, endpoint to) {
  int const fd = require_open(fd_, "send_to");
  iovec iov{const_cast<std::byte*>(data.data()), data.size()};
  msghdr msg{};
  msg.msg_name = const_cast<sockaddr*>(to.data());
  msg.msg_namelen = to.size();
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  int const r = send_now(fd, nullptr, 0, &msg);
  if (r >= 0) co_return static_cast<std::size_t>(r);
  if (r != -EAGAIN) throw_errno(-r, "send_to");
  co_return co_await send_when_writable(fd, nullptr, 0, &msg);
}

task<receive_result> udp_socket::receive_from(std::span<std::byte> buffer) {
  int const fd = require_open(fd_, "receive_from");
  sockaddr_storage from{};
  iovec iov{buffer.data(), buffer.size()};
  msghdr msg{};
  bool const ring = on_ring(op_code::recvmsg);
  for (;;) {
    msg = {};
    msg.msg_name = &from;
    msg.msg_namelen = sizeof from;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    int r;
    // MSG_TRUNC: the result is the datagram's real length.
    if (ring) {
      r = co_await ring_op(op_code::recvmsg, fd, MSG_TRUNC, &msg);
    } else {
      ssize_t const n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_TRUNC);
      r = n < 0 ? -errno : static_cast<int>(n);
    }
    if (r >= 0) {
      auto const n = static_cast<std::size_t>(r);
      co_return receive_result{
          .bytes = std::min(n, buffer.size()),
          .from = endpoint(reinterpret_cast<sockaddr const*>(&from), msg.msg_namelen),
          .truncated = n > buffer.size()};
    }
    if (r == -EAGAIN) {
      check_readiness(co_await readiness(fd, POLLIN), "receive_from");
    } else if (r != -EINTR) {
      throw_errno(-r, "receive_from");
    }
  }
}

// ------------------------------------------------------------ Unix

unix_stream::unix_stream(int fd) noexcept : stream_socket(fd) {
  make_nonblocking(fd);
}

task<unix_stream> unix_stream::connect(std::string path) {
  sockaddr_un addr{};
  socklen_t const len = unix_address(path, addr);
  unix_stream s;
  s.fd_ = open_socket(AF_UNIX, SOCK_STREAM);
  co_await connect_descriptor(s.fd_, reinterpret_cast<sockaddr const*>(&addr), len);
  co_return s;
}

std::string unix_stream::peer_path() const {
  sockaddr_un addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(require_open(fd_, "peer_path"), reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
    throw_errno(errno, "getpeername");
  }
  return unix_path(addr, len);
}

unix_listener unix_listener::bind(std::string const& path, int backlog) {
  sockaddr_un addr{};
  socklen_t const len = unix_address(path, addr);
  unix_listener l;
  l.fd_ = open_socket(AF_UNIX, SOCK_STREAM);
  if (::bind(l.fd_, reinterpret_cast<sockaddr const*>(&addr), len) < 0) {
    throw_errno(errno, ("bind " + path).c_str());
  }
  if (::listen(l.fd_, backlog) < 0) throw_errno(errno, "listen");
  return l;
}

std::string unix_listener::local_path() const {
  sockaddr_un addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(require_open(fd_, "local_path"), reinterpret_cast<sockaddr*>(&addr), &len) <
      0) {
    throw_errno(errno, "getsockname");
  }
  return unix_path(addr, len);
}

task<unix_stream> unix_listener::accept() {
  int const fd = co_await accept_descriptor(fd_);
  unix_stream s;
  s.fd_ = fd;
  co_return s;
}

}  // namespace spindle::net
