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
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include "env.hpp"
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
  return op_awaiter{{},
                    io_op{.code = code,
                          .fd = fd,
                          .flags = flags,
                          .buffer = buffer,
                          .length = length,
                          .addr = addr}};
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

/// What an accept loop does after accept answered `err`: waits for
/// readiness (EAGAIN) or backs off (descriptor exhaustion; `backoff` doubles
/// up to accept_backoff_max), or nothing (a connection that died in the
/// backlog), before the caller tries again; throws for any other error.
task<void> after_accept_error(int listen_fd, int err, std::chrono::milliseconds& backoff) {
  if (err == EAGAIN) {
    check_readiness(co_await readiness(listen_fd, POLLIN), "accept");
  } else if (out_of_descriptors(err)) {
    // Tokio leaves this to the server loop (hyper sleeps a second); asio
    // reports it. Retrying here keeps every caller's loop correct.
    co_await spindle::sleep_for(backoff);
    backoff = std::min(backoff * 2, accept_backoff_max);
  } else if (!accept_retry_now(err)) {
    throw_errno(err, "accept");
  }
}

/// Accepts one connection on `listen_fd` with one single-shot ACCEPT SQE
/// (or accept4 and readiness waits) per call; yields the new non-blocking
/// descriptor.
task<int> accept_single(int listen_fd, bool ring) {
  std::chrono::milliseconds backoff = accept_backoff_min;
  for (;;) {
    int r;
    if (ring) {
      r = co_await ring_op(op_code::accept, listen_fd, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } else {
      r = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (r < 0) r = -errno;
    }
    if (r >= 0) co_return r;
    co_await after_accept_error(listen_fd, -r, backoff);
  }
}

/// SPINDLE_NET_MULTISHOT=0 turns multishot ACCEPT off (every accept() is
/// one single-shot SQE), for comparing the two.
bool multishot_allowed() noexcept {
  static bool const allowed = spindle::detail::env_switch_on("SPINDLE_NET_MULTISHOT");
  return allowed;
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
  // Reads that fit one provided buffer take it from the worker's ring;
  // larger ones go straight into the caller's buffer.
  bool select = ring && len <= io::detail::uring_driver::provided_buffer_size;
  for (;;) {
    int r;
    if (ring) {
      op_awaiter recv = ring_op(op_code::recv, fd, 0, buffer.data(), len);
      recv.op.select_buffer = select;
      r = co_await recv;
      if (r == -ENOBUFS && select) {
        select = false;  // every provided buffer is in use: use the caller's
        continue;
      }
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

// ------------------------------------------------------------ accept queue

namespace detail {

/// One accept() waiting for the listener's multishot ACCEPT. Lives in the
/// waiting task's frame (accept_wait); linked into accept_queue::waiters.
struct accept_waiter {
  spindle::detail::task_header* task = nullptr;
  accept_waiter* next = nullptr;
  accept_waiter* prev = nullptr;
  int result = 0;          ///< a descriptor, -errno, or accept_queue::rearm
  bool linked = false;     ///< in the waiter list (under the queue's mutex)
  bool delivered = false;  ///< result stored by the queue, wake sent
};

/// A listener's multishot ACCEPT and what it produced.
///
/// The op is armed (submitted) by the first accept() that finds the queue
/// empty and the op idle, on that task's worker ring. Each CQE carrying a
/// descriptor goes to the longest-waiting accept() (woken on whatever worker
/// it waits) or, with none waiting, to `ready`. The op's last CQE (an error
/// such as EMFILE, a cancellation, or the kernel ending the multishot) is
/// handed to the first waiter, which acts on the error or, with `rearm`,
/// arms the op again. The queue is shared by the listener and the armed op
/// (`refs`) and freed by whichever lets go last: the listener's close()
/// cancels the op and closes the descriptors nobody took; the op's last CQE
/// drops the op's share.
/// Thread-safety: everything but `op` under `mutex`; `op` belongs to the
/// driver while armed.
struct accept_queue {
  /// accept_waiter::result telling the waiter to arm the op again.
  static constexpr int rearm = std::numeric_limits<int>::min();
  /// More unaccepted connections than this: the op is cancelled until
  /// accept() catches up (the kernel's backlog queues the rest).
  static constexpr std::size_t max_ready = 256;

  explicit accept_queue(int fd) noexcept {
    op.code = op_code::accept;
    op.fd = fd;
    op.flags = SOCK_NONBLOCK | SOCK_CLOEXEC;
    op.multishot = true;
    op.on_cqe = &accept_queue::on_cqe;
    op.buffer = this;
  }
  ~accept_queue() {
    for (int fd : ready)
      ::close(fd);
  }

  io_op op;
  std::mutex mutex;
  std::deque<int> ready;  ///< accepted descriptors nobody took yet
  accept_waiter* head = nullptr;
  accept_waiter* tail = nullptr;
  io::detail::uring_driver* driver = nullptr;  ///< where the op is armed
  int refs = 1;                                ///< the listener's, +1 while armed
  bool armed = false;
  bool paused = false;  ///< cancelled because `ready` is full
  bool released = false;

  void push(accept_waiter* w) noexcept {
    w->prev = tail;
    w->next = nullptr;
    (tail != nullptr ? tail->next : head) = w;
    tail = w;
    w->linked = true;
  }
  void unlink(accept_waiter* w) noexcept {
    (w->prev != nullptr ? w->prev->next : head) = w->next;
    (w->next != nullptr ? w->next->prev : tail) = w->prev;
    w->next = w->prev = nullptr;
    w->linked = false;
  }
  /// Gives `result` to the first waiter; returns its task to wake (or null).
  spindle::detail::task_header* deliver(int result) noexcept {
    accept_waiter* w = head;
    if (w == nullptr) return nullptr;
    unlink(w);
    w->result = result;
    w->delivered = true;
    return w->task;
  }

  static void on_cqe(io_op& op, int res, bool more, bool stopping) noexcept {
    auto* q = static_cast<accept_queue*>(op.buffer);
    spindle::detail::task_header* wake[2] = {nullptr, nullptr};
    bool pause = false;
    bool free = false;
    {
      std::lock_guard lock(q->mutex);
      if (res >= 0) {
        if (q->released) {
          ::close(res);
        } else if (q->head != nullptr) {
          wake[0] = q->deliver(res);
        } else {
          q->ready.push_back(res);
          if (more && !q->paused && q->ready.size() >= max_ready) pause = q->paused = true;
        }
      }
      if (!more) {
        q->armed = false;
        q->driver = nullptr;
        if (!q->released && !stopping) {
          // The first waiter acts on the error, or arms the op again.
          wake[1] = q->deliver(res < 0 && res != -ECANCELED ? res : rearm);
        }
        free = --q->refs == 0;
      }
    }
    for (auto* t : wake) {
      if (t != nullptr) spindle::detail::wake(t);
    }
    if (pause) q->driver->request_cancel(op);  // still armed: `more`
    if (free) delete q;
  }
};

namespace {

/// Waits for the next descriptor of a listener's accept_queue (arming its
/// multishot ACCEPT when idle). Yields a descriptor, -errno, or
/// accept_queue::rearm.
struct accept_wait : spindle::detail::cancel_hook {
  accept_queue* q;
  io::detail::uring_driver* driver;
  accept_waiter w{};
  bool resumed = false;

  accept_wait(accept_queue* queue, io::detail::uring_driver* d) noexcept : q(queue), driver(d) {}
  accept_wait(accept_wait const&) = delete;
  accept_wait& operator=(accept_wait const&) = delete;
  ~accept_wait() {
    if (resumed) return;
    // Destroyed without resuming: aborted, or the runtime went away.
    std::lock_guard lock(q->mutex);
    if (w.linked) q->unlink(&w);
    if (w.delivered && w.result >= 0) ::close(w.result);
  }

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> caller) {
    spindle::detail::task_header* self = spindle::detail::suspend_current(caller);
    spindle::detail::require_task(self, "spindle::net: accept awaited outside a spindle task");
    bool arm = false;
    {
      std::lock_guard lock(q->mutex);
      if (!q->ready.empty()) {
        w.result = q->ready.front();
        q->ready.pop_front();
        if (q->paused && !q->armed) q->paused = false;
        w.delivered = true;
        return false;
      }
      if (!q->armed) {
        q->armed = true;
        q->paused = false;
        q->driver = driver;
        ++q->refs;
        q->op.cancel.store(io::detail::cancel_state::none, std::memory_order_relaxed);
        arm = true;
      }
      w.task = self;
      q->push(&w);
    }
    if (arm && !driver->submit(q->op)) {
      // Could not be armed (no SQE, or the runtime stops): this accept gets
      // the error; a waiter that came meanwhile arms it again.
      spindle::detail::task_header* next = nullptr;
      {
        std::lock_guard lock(q->mutex);
        q->armed = false;
        q->driver = nullptr;
        --q->refs;  // the listener's share remains
        if (w.linked) q->unlink(&w);
        next = q->deliver(accept_queue::rearm);
      }
      if (next != nullptr) spindle::detail::wake(next);
      w.result = q->op.result < 0 ? q->op.result : -ECANCELED;
      w.delivered = true;
      return false;
    }
    spindle::detail::set_cancel_hook(self, this, &accept_wait::on_cancel);
    return true;  // a wake comes (or came) for `w`, or the hook withdraws it
  }
  int await_resume() noexcept {
    resumed = true;
    return w.result;
  }

  static bool on_cancel(spindle::detail::cancel_hook* hook) noexcept {
    auto* self = static_cast<accept_wait*>(hook);
    std::lock_guard lock(self->q->mutex);
    if (!self->w.linked) return false;  // a result is on its way: the wake comes
    self->q->unlink(&self->w);
    return true;
  }
};

}  // namespace

listener_socket::listener_socket(listener_socket&& other) noexcept
    : socket_handle(std::move(other)), queue_(std::exchange(other.queue_, nullptr)) {}

listener_socket& listener_socket::operator=(listener_socket&& other) noexcept {
  if (this != &other) {
    close();
    socket_handle::operator=(std::move(other));
    queue_ = std::exchange(other.queue_, nullptr);
  }
  return *this;
}

listener_socket::~listener_socket() {
  close();
}

void listener_socket::close() noexcept {
  if (accept_queue* q = std::exchange(queue_, nullptr)) {
    std::deque<int> unclaimed;
    io::detail::uring_driver* armed_on = nullptr;
    {
      std::lock_guard lock(q->mutex);
      q->released = true;
      unclaimed.swap(q->ready);
      armed_on = q->armed ? q->driver : nullptr;
    }
    for (int fd : unclaimed)
      ::close(fd);
    if (armed_on != nullptr) {
      // Stop listening now (a TCP listener leaves LISTEN, which also ends the
      // armed ACCEPT), and cancel the SQE in any case: the ring holds the
      // socket open until its last CQE.
      ::shutdown(fd_, SHUT_RDWR);
      armed_on->request_cancel(q->op);
    }
    bool free = false;
    {
      std::lock_guard lock(q->mutex);
      free = --q->refs == 0;
    }
    if (free) delete q;
  }
  socket_handle::close();
}

task<int> listener_socket::accept_descriptor() {
  int const listen_fd = require_open(fd_, "accept");
  bool const ring = on_ring(op_code::accept);
  auto* uring =
      ring ? static_cast<io::detail::uring_driver*>(spindle::detail::current_driver()) : nullptr;
  if (uring == nullptr || !uring->multishot_accept() || queue_ == nullptr || !multishot_allowed()) {
    co_return co_await accept_single(listen_fd, ring);
  }
  std::chrono::milliseconds backoff = accept_backoff_min;
  for (;;) {
    int r = 0;
    {
      accept_wait wait{queue_, uring};
      r = co_await wait;
    }
    if (r >= 0) co_return r;
    if (r != accept_queue::rearm) co_await after_accept_error(listen_fd, -r, backoff);
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
  l.queue_ = new detail::accept_queue(l.fd_);
  return l;
}

endpoint tcp_listener::local_endpoint() const {
  return socket_name(fd_, false);
}

task<tcp_stream> tcp_listener::accept() {
  int const fd = co_await accept_descriptor();
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
  l.queue_ = new detail::accept_queue(l.fd_);
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
  int const fd = co_await accept_descriptor();
  unix_stream s;
  s.fd_ = fd;
  co_return s;
}

}  // namespace spindle::net
