// spindle/net.hpp: networking (namespace spindle::net): socket addresses
// (endpoint), name resolution (resolve), TCP (tcp_listener, tcp_stream),
// UDP (udp_socket) and Unix-domain streams (unix_listener, unix_stream).
//
// Sockets. Every socket is a move-only owner of one non-blocking descriptor
// (SOCK_NONBLOCK | SOCK_CLOEXEC); the destructor closes it. Operations that
// wait (accept, connect, read_some, read_exact, write_all, send_to,
// receive_from) are lazy spindle tasks: `co_await` them from a task or a
// fiber (this_fiber::await) of a spindle runtime; awaited elsewhere they
// throw std::system_error(std::errc::operation_not_permitted). The socket
// must outlive the awaited operation. One reader and one writer may wait on
// one stream at once (full duplex); several tasks may accept on one listener.
//
// I/O paths. With the io_uring backend an operation is one SQE on the
// calling worker's ring: IORING_OP_ACCEPT, CONNECT, RECV, SEND (with
// MSG_NOSIGNAL), RECVMSG/SENDMSG for UDP. A listener accepts with one
// multishot ACCEPT (Linux 5.19+) that the first accept() from a worker arms
// on that worker's ring and that stays armed while connections keep coming:
// each connection it yields goes to the longest-waiting accept() (any
// worker's), or waits in the listener's queue for the next one (at most 256;
// past that the SQE is cancelled until accept() catches up, and the kernel's
// backlog holds the rest). A read_some of at most 16 KiB names no buffer in
// its RECV: the kernel takes one of the worker's 64 provided buffers
// (IOSQE_BUFFER_SELECT, Linux 5.19+) when the data arrives, and the bytes are
// copied into the caller's span at the completion. A write first tries a non-blocking
// send(2) on the calling thread, which on a socket with buffer room finishes
// without a trip through the ring. With the thread-pool backend (or a kernel
// without an opcode) the operation is a non-blocking system call made by the
// task itself; when it answers EAGAIN the task waits for readiness in the
// driver (the thread pool's epoll reactor, or IORING_OP_POLL_ADD) and
// retries: Tokio's readiness model. Both paths give the same results.
// shutdown_write(), close() and the socket options are plain system calls:
// they never block on a socket without SO_LINGER.
//
// Cancellation: aborting a task (join_handle::abort, spindle::timeout,
// when_any's losers) suspended in any of these operations cancels its SQE
// (IORING_OP_ASYNC_CANCEL) or withdraws its readiness wait; the frame, and
// with it the buffer, is released only once the kernel gave the SQE back.
// Bytes an aborted read or write may already have moved are lost with it, as
// in Tokio: abort a stream's operation only to give the stream up. A
// descriptor accepted by an aborted accept is closed.
//
// Errors: std::system_error with the errno (std::system_category, which
// compares equal to the matching std::errc): connection_refused,
// connection_reset, broken_pipe (a write to a stream the peer closed: never
// SIGPIPE), timed_out, network_unreachable, address_in_use (bind),
// permission_denied, too_many_files_open (socket, connect), bad_file_descriptor
// (an operation on a closed socket). read_exact throws
// std::errc::connection_reset when the stream ends before the span is full.
// accept() never throws for EMFILE/ENFILE/ENOBUFS/ENOMEM: it backs off (1 ms,
// doubling up to 100 ms) and retries until a descriptor is free, and it
// retries at once after ECONNABORTED/EPROTO (a connection that died in the
// backlog), so a server loop keeps serving without spinning.
//
// Socket thread-safety: a socket object is not synchronized (like
// std::vector): concurrent calls need their own synchronization, except the
// documented full-duplex and many-acceptor cases above, which are safe.
//
// Shape: `endpoint` is a value type (copyable, 28 bytes): an IPv4 or IPv6
// address and a port, stored as a union of sockaddr_in / sockaddr_in6 so
// that data()/size() hand it to bind/connect/sendto as they are. Ports are
// host byte order in the API (0..65535); the stored sockaddr is in network
// byte order. Text form (parse, to_string): "a.b.c.d:port" for IPv4,
// "[v6addr]:port" or "[v6addr%scope]:port" for IPv6 (brackets required,
// scope = interface name or number). Addresses are parsed and printed by
// inet_pton / inet_ntop, so only their canonical forms are accepted
// (dotted-quad IPv4 without leading zeros, RFC 4291 IPv6 text).
//
// `resolve(host, service)` is a lazy spindle task: `co_await
// net::resolve("localhost", "80")` runs getaddrinfo (hints: AF_UNSPEC,
// SOCK_STREAM, AI_ADDRCONFIG not set) on the runtime's blocking pool
// (spindle::spawn_blocking) and yields the endpoints in getaddrinfo's order,
// duplicates removed. Numeric hosts ("127.0.0.1", "::1") and numeric services
// ("8080") are resolved without any lookup. An empty host means the loopback
// addresses, an empty service port 0 (both empty is EAI_NONAME).
//
// Errors: every failure throws std::system_error.
//  - endpoint::parse and the endpoint constructors: std::errc::invalid_argument
//    (generic category) for text that is not an address (missing port or
//    brackets, port > 65535 or not decimal, bad address, unknown scope, junk
//    before or after) and for a sockaddr that is neither AF_INET nor AF_INET6
//    or shorter than its family's struct.
//  - resolve: getaddrinfo's error mapped to a std::errc, with gai_strerror's
//    text in what():
//      EAI_NONAME, EAI_NODATA, EAI_ADDRFAMILY (the name has no address),
//      EAI_FAIL (the name server failed for good)  -> std::errc::host_unreachable
//      EAI_SERVICE (unknown service name)          -> std::errc::invalid_argument
//      EAI_AGAIN (temporary DNS failure)           -> std::errc::resource_unavailable_try_again
//      EAI_MEMORY                                  -> std::errc::not_enough_memory
//      EAI_SYSTEM                                  -> errno (std::system_category)
//      EAI_FAMILY, EAI_SOCKTYPE, EAI_BADFLAGS      -> std::errc::invalid_argument
//      EAI_OVERFLOW                                -> std::errc::value_too_large
//      anything else                               -> std::errc::io_error
//    (asio reports these in its own netdb/addrinfo categories, Tokio as an
//    io::Error of kind Other; a std::errc lets callers compare portably.)
//    Awaited outside a spindle runtime: std::errc::operation_not_permitted
//    (from spawn_blocking). At runtime shutdown: spindle::task_cancelled.
//
// Cancellation: aborting a task suspended in resolve withdraws the lookup if
// it has not started; a lookup already running in getaddrinfo runs to its
// end on the pool thread (getaddrinfo cannot be interrupted) and its result
// is dropped.
//
// Thread-safety: endpoint has no shared state; const members may be called
// from any number of threads at once, as for int. resolve may be called from
// any number of tasks at once (getaddrinfo is thread-safe in glibc).
//
// Design source: asio's ip::tcp::endpoint (sockaddr view: data()/size(),
// address()/port()) and ip::tcp::resolver; Tokio's std::net::SocketAddr (the
// text form, parse errors) and tokio::net::lookup_host (getaddrinfo on the
// blocking pool).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/task.hpp"

namespace spindle::net {

/// An IPv4 or IPv6 socket address: address, port and (IPv6) scope id.
class endpoint {
 public:
  /// 0.0.0.0:0 (IPv4 any address, port 0).
  endpoint() noexcept;

  /// `address` is an IPv4 dotted quad ("127.0.0.1") or an IPv6 address
  /// without brackets ("::1", "fe80::1%lo" with a scope: interface name or
  /// number); `port` in host byte order. Throws
  /// std::system_error(std::errc::invalid_argument) for any other text.
  endpoint(std::string_view address, std::uint16_t port);

  /// Copies a socket address as the kernel reports it (accept, getsockname,
  /// recvfrom, getaddrinfo): `len` bytes at `addr`, whose family must be
  /// AF_INET (len >= sizeof(sockaddr_in)) or AF_INET6 (len >=
  /// sizeof(sockaddr_in6)); otherwise throws
  /// std::system_error(std::errc::invalid_argument). addr must not be null.
  endpoint(sockaddr const* addr, socklen_t len);

  /// As above, with the length taken from `storage.ss_family`.
  explicit endpoint(sockaddr_storage const& storage);

  /// Parses "a.b.c.d:port", "[v6addr]:port" or "[v6addr%scope]:port" (port:
  /// decimal, 0..65535). Throws std::system_error(std::errc::invalid_argument)
  /// for anything else, including an unbracketed IPv6 address, a missing or
  /// empty port, spaces, and a scope naming no interface.
  static endpoint parse(std::string_view text);

  /// The port, host byte order.
  [[nodiscard]] std::uint16_t port() const noexcept;
  /// Replaces the port (host byte order).
  void set_port(std::uint16_t port) noexcept;

  /// True for an IPv4 address.
  [[nodiscard]] bool is_v4() const noexcept { return addr_.sa.sa_family == AF_INET; }
  /// True for an IPv6 address.
  [[nodiscard]] bool is_v6() const noexcept { return addr_.sa.sa_family == AF_INET6; }
  /// AF_INET or AF_INET6.
  [[nodiscard]] int family() const noexcept { return addr_.sa.sa_family; }
  /// The IPv6 scope id (interface index), 0 for IPv4 and unscoped IPv6.
  [[nodiscard]] std::uint32_t scope_id() const noexcept;

  /// The address as text, without port or brackets: "127.0.0.1", "::1",
  /// "fe80::1%2" (a scope is printed as its number, as Tokio does).
  [[nodiscard]] std::string address() const;
  /// The text form parse() accepts: "127.0.0.1:80", "[::1]:80",
  /// "[fe80::1%2]:80". parse(e.to_string()) == e.
  [[nodiscard]] std::string to_string() const;

  /// The socket address for bind/connect/sendto: sockaddr_in or sockaddr_in6.
  [[nodiscard]] sockaddr const* data() const noexcept { return &addr_.sa; }
  /// sizeof(sockaddr_in) or sizeof(sockaddr_in6), the valid bytes at data().
  [[nodiscard]] socklen_t size() const noexcept;

  /// Same family, address, port, and for IPv6 also scope id and flow info.
  friend bool operator==(endpoint const& a, endpoint const& b) noexcept;

 private:
  union storage {
    sockaddr sa;
    sockaddr_in v4;
    sockaddr_in6 v6;
  };
  storage addr_;
};

/// Resolves `host` (a name or a numeric address) and `service` (a service
/// name such as "http" or a decimal port) to TCP endpoints with getaddrinfo,
/// run on the blocking pool of the calling task's runtime. Yields at least
/// one endpoint, in getaddrinfo's order, without duplicates. Errors: see the
/// file comment (std::system_error with a std::errc per EAI_* code).
task<std::vector<endpoint>> resolve(std::string host, std::string service);

namespace detail {

/// Owns one socket descriptor (-1 when empty). Move-only; closes on
/// destruction. The base of every socket type.
class socket_handle {
 public:
  socket_handle() noexcept = default;
  /// Takes ownership of `fd` (a socket; -1 for none).
  explicit socket_handle(int fd) noexcept : fd_(fd) {}
  socket_handle(socket_handle&& other) noexcept : fd_(other.release()) {}
  socket_handle& operator=(socket_handle&& other) noexcept;
  socket_handle(socket_handle const&) = delete;
  socket_handle& operator=(socket_handle const&) = delete;
  ~socket_handle() { close(); }

  /// Closes the descriptor now (idempotent). Operations afterwards fail with
  /// std::errc::bad_file_descriptor. Must not be called while an operation
  /// of this socket is in flight.
  void close() noexcept;
  /// The descriptor, -1 after close() or a move.
  [[nodiscard]] int native_handle() const noexcept { return fd_; }
  [[nodiscard]] bool is_open() const noexcept { return fd_ >= 0; }
  /// Gives the descriptor up without closing it.
  [[nodiscard]] int release() noexcept {
    int const fd = fd_;
    fd_ = -1;
    return fd;
  }

 protected:
  int fd_ = -1;
};

/// The byte-stream operations tcp_stream and unix_stream share.
class stream_socket : public socket_handle {
 public:
  using socket_handle::socket_handle;

  /// Reads at most buffer.size() bytes (io_uring: one RECV). Yields the
  /// count, 0 at end of stream (and for an empty buffer). Throws
  /// std::system_error (connection_reset, ...).
  [[nodiscard]] task<std::size_t> read_some(std::span<std::byte> buffer);
  /// Reads exactly buffer.size() bytes and yields that count. Throws
  /// std::system_error(std::errc::connection_reset) when the stream ends
  /// first (the bytes read so far are in the buffer), or the read's error.
  [[nodiscard]] task<std::size_t> read_exact(std::span<std::byte> buffer);
  /// Writes every byte of `data` (several sends when the socket buffer is
  /// smaller) and yields data.size(). Throws std::system_error: broken_pipe
  /// or connection_reset when the peer is gone (no SIGPIPE).
  [[nodiscard]] task<std::size_t> write_all(std::span<std::byte const> data);
  /// Half-close: shutdown(SHUT_WR). The peer reads end of stream; this side
  /// can still read. Throws std::system_error (not_connected, ...).
  void shutdown_write();
};

/// The connections a listener's multishot ACCEPT produced and the accept()
/// calls waiting for one (io/src/socket.cpp). Opaque here.
struct accept_queue;

/// The base of tcp_listener and unix_listener: the listening descriptor and,
/// on the io_uring backend with multishot ACCEPT, the queue its one armed
/// SQE fills. Move-only; close() (and the destructor) cancel that SQE and
/// close the connections it accepted that nobody took.
class listener_socket : public socket_handle {
 public:
  listener_socket() noexcept = default;
  listener_socket(listener_socket&& other) noexcept;
  listener_socket& operator=(listener_socket&& other) noexcept;
  ~listener_socket();

  /// Closes the listening descriptor now (idempotent) and ends its
  /// multishot ACCEPT. Must not be called while an accept() of it is
  /// awaited.
  void close() noexcept;

 protected:
  /// Accepts one connection; yields its non-blocking descriptor.
  [[nodiscard]] task<int> accept_descriptor();

  accept_queue* queue_ = nullptr;  ///< made by bind(); freed as its comment says
};

}  // namespace detail

/// A connected TCP stream. Move-only; the destructor closes it.
/// Design source: Tokio's net::TcpStream, asio's ip::tcp::socket.
class tcp_stream : public detail::stream_socket {
 public:
  /// An empty stream (not open).
  tcp_stream() noexcept = default;
  /// Adopts a connected TCP socket descriptor (made non-blocking here).
  explicit tcp_stream(int fd) noexcept;

  /// Connects to `to` (io_uring: CONNECT). Throws std::system_error:
  /// connection_refused, network_unreachable, timed_out, ...; bound it with
  /// spindle::timeout.
  [[nodiscard]] static task<tcp_stream> connect(endpoint to);

  /// TCP_NODELAY on (no Nagle delay for small writes) or off. Throws
  /// std::system_error.
  void set_nodelay(bool on);
  /// The peer's address (getpeername). Throws std::system_error(not_connected).
  [[nodiscard]] endpoint peer_endpoint() const;
  /// This side's address (getsockname).
  [[nodiscard]] endpoint local_endpoint() const;

 private:
  friend class tcp_listener;
};

/// A listening TCP socket. Move-only; the destructor closes it.
/// Design source: Tokio's net::TcpListener, asio's ip::tcp::acceptor.
class tcp_listener : public detail::listener_socket {
 public:
  tcp_listener() noexcept = default;

  /// socket + SO_REUSEADDR + bind + listen(backlog). Port 0 picks a free
  /// port (read it with local_endpoint()). An IPv6 address listens on IPv6
  /// only (IPV6_V6ONLY). Plain call, usable outside a runtime. Throws
  /// std::system_error: address_in_use, permission_denied,
  /// address_not_available, too_many_files_open.
  [[nodiscard]] static tcp_listener bind(endpoint const& at, int backlog = 1024);

  /// The bound address, with the port the kernel picked.
  [[nodiscard]] endpoint local_endpoint() const;

  /// Waits for the next connection and yields it (io_uring: ACCEPT).
  /// Descriptor exhaustion backs off and retries (see the file comment).
  [[nodiscard]] task<tcp_stream> accept();
};

/// What udp_socket::receive_from yields.
struct receive_result {
  std::size_t bytes = 0;   ///< bytes stored in the buffer
  endpoint from;           ///< the sender
  bool truncated = false;  ///< the datagram was longer than the buffer (rest dropped)
};

/// A UDP socket. Move-only; the destructor closes it.
/// Design source: Tokio's net::UdpSocket, asio's ip::udp::socket.
class udp_socket : public detail::socket_handle {
 public:
  udp_socket() noexcept = default;

  /// socket + bind (port 0 picks one; an IPv6 address is IPv6 only). Plain
  /// call. Throws std::system_error (address_in_use, ...).
  [[nodiscard]] static udp_socket bind(endpoint const& at);
  /// The address bound (getsockname), e.g. to learn the port bind() picked.
  /// Throws std::system_error (bad_file_descriptor when not open).
  [[nodiscard]] endpoint local_endpoint() const;

  /// Sends one datagram of `data` to `to` (io_uring: SENDMSG) and yields the
  /// bytes sent (all of them). Throws std::system_error: message_size
  /// (larger than 65,507 bytes over IPv4), network_unreachable, ...
  [[nodiscard]] task<std::size_t> send_to(std::span<std::byte const> data, endpoint to);
  /// Waits for one datagram (io_uring: RECVMSG). A datagram longer than
  /// `buffer` fills it and the rest is dropped (`truncated`).
  [[nodiscard]] task<receive_result> receive_from(std::span<std::byte> buffer);
};

/// A connected Unix-domain stream socket. Move-only.
/// Design source: Tokio's net::UnixStream.
class unix_stream : public detail::stream_socket {
 public:
  unix_stream() noexcept = default;
  /// Adopts a connected Unix-domain stream socket descriptor (made
  /// non-blocking here).
  explicit unix_stream(int fd) noexcept;

  /// Connects to the socket at filesystem path `path` (or, when it starts
  /// with '@', the abstract name after it). Throws std::system_error:
  /// no_such_file_or_directory, connection_refused, filename_too_long
  /// (longer than 107 bytes), ...
  [[nodiscard]] static task<unix_stream> connect(std::string path);
  /// The peer's path ("" for an unnamed socket).
  [[nodiscard]] std::string peer_path() const;

 private:
  friend class unix_listener;
};

/// A listening Unix-domain stream socket. Move-only; the destructor closes
/// it (and does not unlink its path).
class unix_listener : public detail::listener_socket {
 public:
  unix_listener() noexcept = default;

  /// socket + bind(path) + listen(backlog); a leading '@' names an abstract
  /// socket. The path must not exist (std::errc::address_in_use otherwise).
  [[nodiscard]] static unix_listener bind(std::string const& path, int backlog = 1024);
  /// The bound path ('@' first for an abstract name).
  [[nodiscard]] std::string local_path() const;
  /// Waits for the next connection (as tcp_listener::accept).
  [[nodiscard]] task<unix_stream> accept();
};

}  // namespace spindle::net
