// spindle/net.hpp: networking (namespace spindle::net). First slice of
// issue 16: socket addresses (net::endpoint) and name resolution
// (net::resolve). Sockets come later and build on endpoint's sockaddr view.
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

#include <cstdint>
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

  [[nodiscard]] bool is_v4() const noexcept { return addr_.sa.sa_family == AF_INET; }
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

}  // namespace spindle::net
