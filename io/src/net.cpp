// spindle::net::endpoint and resolve (see spindle/net.hpp).
#include "spindle/net.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"

namespace spindle::net {

namespace {

[[noreturn]] void throw_invalid(char const* what) {
  throw std::system_error(std::make_error_code(std::errc::invalid_argument), what);
}

// Decimal port, 0..65535, digits only.
bool parse_port(std::string_view text, std::uint16_t& port) {
  if (text.empty() || text.size() > 5) return false;
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value > 65535) return false;
  port = static_cast<std::uint16_t>(value);
  return true;
}

// An interface name or a decimal index; 0 when neither.
std::uint32_t parse_scope(std::string_view scope) {
  if (scope.empty() || scope.size() >= IF_NAMESIZE) return 0;
  std::uint32_t index = 0;
  auto [end, ec] = std::from_chars(scope.data(), scope.data() + scope.size(), index);
  if (ec == std::errc{} && end == scope.data() + scope.size()) return index;
  char name[IF_NAMESIZE] = {};
  std::memcpy(name, scope.data(), scope.size());
  return ::if_nametoindex(name);
}

// inet_pton of `text` (not null-terminated) for `family` into `out`.
bool pton(int family, std::string_view text, void* out) {
  char buf[INET6_ADDRSTRLEN + 1] = {};
  if (text.empty() || text.size() >= sizeof buf) return false;
  std::memcpy(buf, text.data(), text.size());
  return ::inet_pton(family, buf, out) == 1;
}

// The std::error_code a getaddrinfo error maps to (see net.hpp).
std::error_code gai_error_code(int rc, int saved_errno) {
  switch (rc) {
    case EAI_NONAME:
#ifdef EAI_NODATA
    case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
    case EAI_ADDRFAMILY:
#endif
    case EAI_FAIL:
      return std::make_error_code(std::errc::host_unreachable);
    case EAI_SERVICE:
    case EAI_FAMILY:
    case EAI_SOCKTYPE:
    case EAI_BADFLAGS:
      return std::make_error_code(std::errc::invalid_argument);
    case EAI_AGAIN:
      return std::make_error_code(std::errc::resource_unavailable_try_again);
    case EAI_MEMORY:
      return std::make_error_code(std::errc::not_enough_memory);
    case EAI_OVERFLOW:
      return std::make_error_code(std::errc::value_too_large);
    case EAI_SYSTEM:
      return {saved_errno != 0 ? saved_errno : EIO, std::system_category()};
    default:
      return std::make_error_code(std::errc::io_error);
  }
}

struct addrinfo_deleter {
  void operator()(addrinfo* ai) const noexcept { ::freeaddrinfo(ai); }
};

std::vector<endpoint> resolve_blocking(std::string const& host, std::string const& service) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* raw = nullptr;
  errno = 0;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(),
                         service.empty() ? nullptr : service.c_str(), &hints, &raw);
  int saved_errno = errno;
  std::unique_ptr<addrinfo, addrinfo_deleter> list(raw);
  if (rc != 0) {
    throw std::system_error(
        gai_error_code(rc, saved_errno),
        "spindle::net::resolve(\"" + host + "\", \"" + service + "\"): " + ::gai_strerror(rc));
  }
  std::vector<endpoint> out;
  for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addr == nullptr) continue;
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    endpoint e(ai->ai_addr, ai->ai_addrlen);
    if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
  }
  if (out.empty()) {
    throw std::system_error(
        std::make_error_code(std::errc::host_unreachable),
        "spindle::net::resolve(\"" + host + "\", \"" + service + "\"): no IPv4 or IPv6 address");
  }
  return out;
}

}  // namespace

endpoint::endpoint() noexcept : addr_{} {
  addr_.v4.sin_family = AF_INET;
}

endpoint::endpoint(std::string_view address, std::uint16_t port) : addr_{} {
  if (address.find(':') == std::string_view::npos) {
    addr_.v4.sin_family = AF_INET;
    if (!pton(AF_INET, address, &addr_.v4.sin_addr)) {
      throw_invalid("spindle::net::endpoint: not an IPv4 address");
    }
    addr_.v4.sin_port = htons(port);
    return;
  }
  addr_.v6.sin6_family = AF_INET6;
  std::string_view text = address;
  auto percent = address.find('%');
  if (percent != std::string_view::npos) {
    text = address.substr(0, percent);
    addr_.v6.sin6_scope_id = parse_scope(address.substr(percent + 1));
    if (addr_.v6.sin6_scope_id == 0) {
      throw_invalid("spindle::net::endpoint: bad IPv6 scope (no such interface)");
    }
  }
  if (!pton(AF_INET6, text, &addr_.v6.sin6_addr)) {
    throw_invalid("spindle::net::endpoint: not an IPv6 address");
  }
  addr_.v6.sin6_port = htons(port);
}

endpoint::endpoint(sockaddr const* addr, socklen_t len) : addr_{} {
  if (addr == nullptr) throw_invalid("spindle::net::endpoint: null sockaddr");
  if (len >= static_cast<socklen_t>(sizeof(sa_family_t))) {
    sa_family_t family{};
    std::memcpy(&family, reinterpret_cast<char const*>(addr) + offsetof(sockaddr, sa_family),
                sizeof family);
    if (family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
      std::memcpy(&addr_.v4, addr, sizeof(sockaddr_in));
      return;
    }
    if (family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
      std::memcpy(&addr_.v6, addr, sizeof(sockaddr_in6));
      return;
    }
  }
  throw_invalid("spindle::net::endpoint: not an AF_INET or AF_INET6 sockaddr");
}

endpoint::endpoint(sockaddr_storage const& storage)
    : endpoint(reinterpret_cast<sockaddr const*>(&storage),
               storage.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in)) {}

endpoint endpoint::parse(std::string_view text) {
  std::string_view host;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw_invalid("spindle::net::endpoint::parse: expected \"[v6addr]:port\"");
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
    if (host.find(':') == std::string_view::npos) {
      throw_invalid("spindle::net::endpoint::parse: not an IPv6 address in brackets");
    }
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      throw_invalid("spindle::net::endpoint::parse: missing \":port\"");
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      throw_invalid("spindle::net::endpoint::parse: IPv6 addresses need brackets, \"[::1]:80\"");
    }
    if (host.find('%') != std::string_view::npos) {
      throw_invalid("spindle::net::endpoint::parse: not an IPv4 address");
    }
  }
  std::uint16_t port = 0;
  if (!parse_port(port_text, port)) {
    throw_invalid("spindle::net::endpoint::parse: port is not a decimal number in 0..65535");
  }
  return endpoint(host, port);
}

std::uint16_t endpoint::port() const noexcept {
  return ntohs(is_v6() ? addr_.v6.sin6_port : addr_.v4.sin_port);
}

void endpoint::set_port(std::uint16_t port) noexcept {
  if (is_v6()) {
    addr_.v6.sin6_port = htons(port);
  } else {
    addr_.v4.sin_port = htons(port);
  }
}

std::uint32_t endpoint::scope_id() const noexcept {
  return is_v6() ? addr_.v6.sin6_scope_id : 0;
}

std::string endpoint::address() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (is_v6()) {
    ::inet_ntop(AF_INET6, &addr_.v6.sin6_addr, buf, sizeof buf);
    std::string out(buf);
    if (addr_.v6.sin6_scope_id != 0) {
      out += '%';
      out += std::to_string(addr_.v6.sin6_scope_id);
    }
    return out;
  }
  ::inet_ntop(AF_INET, &addr_.v4.sin_addr, buf, sizeof buf);
  return buf;
}

std::string endpoint::to_string() const {
  // Appended piece by piece: GCC 12 -O3 warns (-Wrestrict, a false positive)
  // about "[" + std::string&&.
  std::string out;
  out.reserve(INET6_ADDRSTRLEN + 20);
  if (is_v6()) out.push_back('[');
  out.append(address());
  if (is_v6()) out.push_back(']');
  out.push_back(':');
  out.append(std::to_string(port()));
  return out;
}

socklen_t endpoint::size() const noexcept {
  return is_v6() ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

bool operator==(endpoint const& a, endpoint const& b) noexcept {
  if (a.family() != b.family()) return false;
  if (a.is_v6()) {
    auto const& x = a.addr_.v6;
    auto const& y = b.addr_.v6;
    return x.sin6_port == y.sin6_port && x.sin6_scope_id == y.sin6_scope_id &&
           x.sin6_flowinfo == y.sin6_flowinfo &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  auto const& x = a.addr_.v4;
  auto const& y = b.addr_.v4;
  return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
}

task<std::vector<endpoint>> resolve(std::string host, std::string service) {
  // GCC 12: name the handle before awaiting it (docs/compilers.md).
  auto handle = spindle::spawn_blocking([host = std::move(host), service = std::move(service)] {
    return resolve_blocking(host, service);
  });
  co_return co_await handle;
}

}  // namespace spindle::net
