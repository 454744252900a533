// Tests of spindle::net::endpoint (parse / to_string round trips, invalid
// text, sockaddr conversions, equality) and spindle::net::resolve (localhost,
// numeric hosts, bad names and services, several lookups at once) inside a
// runtime. Loopback and numeric hosts only: the test machine has no network.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/net.hpp"
#include "spindle/runtime.hpp"
#include "spindle/spindle.hpp"
#include "spindle/task.hpp"

namespace {

using spindle::runtime;
using spindle::task;
using spindle::net::endpoint;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

void expect_invalid(std::string_view text) {
  try {
    (void)endpoint::parse(text);
    ADD_FAILURE() << "parse(\"" << text << "\") did not throw";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::invalid_argument) << text;
  }
}

TEST(NetEndpoint, ParseV4) {
  endpoint e = endpoint::parse("127.0.0.1:8080");
  EXPECT_TRUE(e.is_v4());
  EXPECT_FALSE(e.is_v6());
  EXPECT_EQ(e.family(), AF_INET);
  EXPECT_EQ(e.port(), 8080);
  EXPECT_EQ(e.address(), "127.0.0.1");
  EXPECT_EQ(e.to_string(), "127.0.0.1:8080");
  EXPECT_EQ(e.scope_id(), 0u);
}

TEST(NetEndpoint, ParseV6) {
  endpoint e = endpoint::parse("[::1]:8080");
  EXPECT_TRUE(e.is_v6());
  EXPECT_FALSE(e.is_v4());
  EXPECT_EQ(e.family(), AF_INET6);
  EXPECT_EQ(e.port(), 8080);
  EXPECT_EQ(e.address(), "::1");
  EXPECT_EQ(e.to_string(), "[::1]:8080");
}

TEST(NetEndpoint, RoundTrips) {
  for (std::string_view text :
       {"127.0.0.1:8080", "0.0.0.0:0", "255.255.255.255:65535", "10.1.2.3:1", "[::1]:8080",
        "[::]:0", "[::]:65535", "[2001:db8::1]:443", "[fe80::1:2:3:4]:80", "[::ffff:1.2.3.4]:80",
        "[2001:db8:1:2:3:4:5:6]:65535"}) {
    endpoint e = endpoint::parse(text);
    EXPECT_EQ(e.to_string(), text);
    EXPECT_EQ(endpoint::parse(e.to_string()), e) << text;
  }
}

TEST(NetEndpoint, PortsZeroAndMax) {
  EXPECT_EQ(endpoint::parse("1.2.3.4:0").port(), 0);
  EXPECT_EQ(endpoint::parse("1.2.3.4:65535").port(), 65535);
  EXPECT_EQ(endpoint::parse("[::1]:0").port(), 0);
  EXPECT_EQ(endpoint::parse("[::1]:65535").port(), 65535);
}

TEST(NetEndpoint, CanonicalV6Text) {
  // inet_ntop's canonical form: the longest run of zeros compressed, lower case.
  endpoint e = endpoint::parse("[2001:DB8:0:0:0:0:0:1]:80");
  EXPECT_EQ(e.to_string(), "[2001:db8::1]:80");
  EXPECT_EQ(endpoint::parse(e.to_string()), e);
}

TEST(NetEndpoint, ScopeId) {
  unsigned lo = ::if_nametoindex("lo");
  if (lo == 0) GTEST_SKIP() << "no loopback interface";
  endpoint named = endpoint::parse("[fe80::1%lo]:80");
  EXPECT_EQ(named.scope_id(), lo);
  endpoint numbered = endpoint::parse("[fe80::1%" + std::to_string(lo) + "]:80");
  EXPECT_EQ(named, numbered);
  EXPECT_EQ(named.to_string(), "[fe80::1%" + std::to_string(lo) + "]:80");
  EXPECT_EQ(endpoint::parse(named.to_string()), named);
  EXPECT_NE(named, endpoint::parse("[fe80::1]:80"));
  EXPECT_EQ(endpoint("fe80::1%lo", 80), named);
}

TEST(NetEndpoint, InvalidTextThrowsInvalidArgument) {
  for (std::string_view text : {
           "",
           "127.0.0.1",         // missing port
           "127.0.0.1:",        // empty port
           "127.0.0.1:65536",   // port too large
           "127.0.0.1:99999",   // port too large
           "127.0.0.1:100000",  // port too long
           "127.0.0.1:-1",      // sign
           "127.0.0.1:+1",      // sign
           "127.0.0.1:8a",      // junk in port
           "127.0.0.1:80 ",     // trailing space
           " 127.0.0.1:80",     // leading space
           "127.0.0.1:0x50",    // hex port
           "256.0.0.1:80",      // bad octet
           "1.2.3:80",          // too few octets
           "1.2.3.4.5:80",      // too many octets
           "localhost:80",      // a name, not an address
           ":80",               // no address
           "::1:80",            // v6 without brackets
           "[::1]",             // v6 missing port
           "[::1]:",            // v6 empty port
           "[::1]80",           // missing colon
           "[::1:80",           // missing close bracket
           "::1]:80",           // missing open bracket
           "[]:80",             // empty v6
           "[127.0.0.1]:80",    // v4 in brackets
           "[::g]:80",          // bad v6
           "[1:2:3:4:5:6:7:8:9]:80",
           "[::1]:65536",
           "[::1]:80x",
           "[fe80::1%]:80",                    // empty scope
           "[fe80::1%no-such-interface0]:80",  // unknown interface
           "1.2.3.4%lo:80",                    // scope on v4
           "junk",
           "[[::1]]:80",
       }) {
    expect_invalid(text);
  }
}

TEST(NetEndpoint, ConstructorFromAddressAndPort) {
  endpoint v4("192.168.0.1", 22);
  EXPECT_EQ(v4.to_string(), "192.168.0.1:22");
  endpoint v6("::1", 443);
  EXPECT_EQ(v6.to_string(), "[::1]:443");
  EXPECT_EQ(v6, endpoint::parse("[::1]:443"));
  for (std::string_view bad : {"", "[::1]", "1.2.3.4:80", "example", "::g", "1.2.3"}) {
    try {
      endpoint e(bad, 1);
      ADD_FAILURE() << "endpoint(\"" << bad << "\", 1) did not throw";
    } catch (std::system_error const& e) {
      EXPECT_EQ(e.code(), std::errc::invalid_argument) << bad;
    }
  }
}

TEST(NetEndpoint, DefaultAndSetPort) {
  endpoint e;
  EXPECT_TRUE(e.is_v4());
  EXPECT_EQ(e.to_string(), "0.0.0.0:0");
  e.set_port(65535);
  EXPECT_EQ(e.port(), 65535);
  endpoint v6 = endpoint::parse("[::1]:1");
  v6.set_port(2);
  EXPECT_EQ(v6.to_string(), "[::1]:2");
}

TEST(NetEndpoint, Equality) {
  EXPECT_EQ(endpoint::parse("1.2.3.4:5"), endpoint::parse("1.2.3.4:5"));
  EXPECT_NE(endpoint::parse("1.2.3.4:5"), endpoint::parse("1.2.3.4:6"));
  EXPECT_NE(endpoint::parse("1.2.3.4:5"), endpoint::parse("1.2.3.5:5"));
  EXPECT_NE(endpoint::parse("127.0.0.1:5"), endpoint::parse("[::1]:5"));
  EXPECT_NE(endpoint::parse("[::1]:5"), endpoint::parse("[::2]:5"));
  endpoint copy = endpoint::parse("[::1]:5");
  endpoint other = copy;
  EXPECT_EQ(copy, other);
}

TEST(NetEndpoint, SockaddrV4RoundTrip) {
  endpoint e = endpoint::parse("10.0.0.7:4242");
  ASSERT_EQ(e.size(), sizeof(sockaddr_in));
  sockaddr_in sin{};
  std::memcpy(&sin, e.data(), e.size());
  EXPECT_EQ(sin.sin_family, AF_INET);
  EXPECT_EQ(ntohs(sin.sin_port), 4242);
  EXPECT_EQ(ntohl(sin.sin_addr.s_addr), 0x0a000007u);
  EXPECT_EQ(endpoint(reinterpret_cast<sockaddr const*>(&sin), sizeof sin), e);

  sockaddr_storage ss{};
  std::memcpy(&ss, e.data(), e.size());
  EXPECT_EQ(endpoint(ss), e);
  EXPECT_EQ(endpoint(reinterpret_cast<sockaddr const*>(&ss), sizeof ss), e);
}

TEST(NetEndpoint, SockaddrV6RoundTrip) {
  endpoint e = endpoint::parse("[2001:db8::42]:65535");
  ASSERT_EQ(e.size(), sizeof(sockaddr_in6));
  sockaddr_in6 sin6{};
  std::memcpy(&sin6, e.data(), e.size());
  EXPECT_EQ(sin6.sin6_family, AF_INET6);
  EXPECT_EQ(ntohs(sin6.sin6_port), 65535);
  in6_addr expected{};
  ASSERT_EQ(::inet_pton(AF_INET6, "2001:db8::42", &expected), 1);
  EXPECT_EQ(std::memcmp(&sin6.sin6_addr, &expected, sizeof expected), 0);
  EXPECT_EQ(endpoint(reinterpret_cast<sockaddr const*>(&sin6), sizeof sin6), e);

  sockaddr_storage ss{};
  std::memcpy(&ss, e.data(), e.size());
  EXPECT_EQ(endpoint(ss), e);
}

TEST(NetEndpoint, SockaddrFromKernel) {
  // getsockname on a socket bound to 127.0.0.1, port 0 (no traffic).
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  endpoint want = endpoint::parse("127.0.0.1:0");
  ASSERT_EQ(::bind(fd, want.data(), want.size()), 0);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len), 0);
  ::close(fd);
  endpoint got(reinterpret_cast<sockaddr const*>(&ss), len);
  EXPECT_EQ(got.address(), "127.0.0.1");
  EXPECT_NE(got.port(), 0);
}

TEST(NetEndpoint, BadSockaddrThrows) {
  sockaddr_storage ss{};
  ss.ss_family = AF_UNIX;
  auto const* sa = reinterpret_cast<sockaddr const*>(&ss);
  auto expect_bad = [](auto&& make) {
    try {
      make();
      ADD_FAILURE() << "no throw";
    } catch (std::system_error const& e) {
      EXPECT_EQ(e.code(), std::errc::invalid_argument);
    }
  };
  expect_bad([&] { return endpoint(sa, sizeof ss); });
  expect_bad([&] { return endpoint(ss); });
  ss.ss_family = AF_INET;
  expect_bad([&] { return endpoint(sa, sizeof(sockaddr_in) - 1); });
  ss.ss_family = AF_INET6;
  expect_bad([&] { return endpoint(sa, sizeof(sockaddr_in6) - 1); });
  expect_bad([&] { return endpoint(nullptr, 0); });
}

// ---- resolve ----

std::vector<endpoint> resolve_in(runtime& rt, std::string host, std::string service) {
  return rt.block_on(spindle::net::resolve(std::move(host), std::move(service)));
}

std::error_code resolve_error(runtime& rt, std::string host, std::string service) {
  try {
    auto r = resolve_in(rt, host, service);
    ADD_FAILURE() << "resolve(\"" << host << "\", \"" << service << "\") did not throw, got "
                  << r.size() << " endpoints";
  } catch (std::system_error const& e) {
    EXPECT_NE(std::string(e.what()).find(host), std::string::npos) << e.what();
    return e.code();
  }
  return {};
}

TEST(NetResolve, Localhost) {
  runtime rt{{.workers = 2}};
  auto eps = resolve_in(rt, "localhost", "80");
  ASSERT_FALSE(eps.empty());
  for (endpoint const& e : eps) {
    EXPECT_TRUE(e == endpoint::parse("127.0.0.1:80") || e == endpoint::parse("[::1]:80"))
        << e.to_string();
  }
  // No duplicates.
  for (std::size_t i = 0; i < eps.size(); ++i) {
    for (std::size_t j = i + 1; j < eps.size(); ++j)
      EXPECT_NE(eps[i], eps[j]);
  }
}

TEST(NetResolve, NumericHosts) {
  runtime rt{{.workers = 2}};
  auto v4 = resolve_in(rt, "127.0.0.1", "8080");
  ASSERT_EQ(v4.size(), 1u);
  EXPECT_EQ(v4[0], endpoint::parse("127.0.0.1:8080"));
  auto v6 = resolve_in(rt, "::1", "65535");
  ASSERT_EQ(v6.size(), 1u);
  EXPECT_EQ(v6[0], endpoint::parse("[::1]:65535"));
  auto zero = resolve_in(rt, "127.0.0.1", "0");
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_EQ(zero[0].port(), 0);
}

TEST(NetResolve, UnresolvableNameThrows) {
  runtime rt{{.workers = 2}};
  std::error_code ec = resolve_error(rt, "nonexistent.invalid", "80");
  EXPECT_TRUE(ec) << "no error";
  // EAI_NONAME -> host_unreachable; a machine without a working resolver may
  // report EAI_AGAIN (try again) or EAI_SYSTEM (an errno) instead.
  EXPECT_NE(ec, std::errc::invalid_argument) << ec.message();
  if (ec.category() == std::generic_category()) {
    EXPECT_TRUE(ec == std::errc::host_unreachable ||
                ec == std::errc::resource_unavailable_try_again)
        << ec.message();
  }
}

TEST(NetResolve, BadServiceThrowsInvalidArgument) {
  runtime rt{{.workers = 2}};
  std::error_code ec = resolve_error(rt, "127.0.0.1", "no-such-service-xyz");
  EXPECT_EQ(ec, std::errc::invalid_argument) << ec.message();
}

TEST(NetResolve, InsideTasksAndConcurrently) {
  runtime rt{{.workers = 2}};
  auto eps = rt.block_on([]() -> task<std::vector<endpoint>> {
    std::vector<spindle::join_handle<std::vector<endpoint>>> handles;
    for (int i = 0; i < 8; ++i) {
      handles.push_back(
          spindle::spawn(spindle::net::resolve("127.0.0.1", std::to_string(1000 + i))));
    }
    std::vector<endpoint> all;
    for (auto& h : handles) {
      auto r = co_await h;
      all.insert(all.end(), r.begin(), r.end());
    }
    co_return all;
  }());
  ASSERT_EQ(eps.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(eps[static_cast<std::size_t>(i)],
              endpoint("127.0.0.1", static_cast<std::uint16_t>(1000 + i)));
  }
}

}  // namespace
