// net_echo_server: the spindle side of bench/compare.py's TCP echo workload
// (the `net` section). A TCP echo server on spindle::net: one accept loop
// task, one task per connection that reads what arrives (read_some, up to
// 4 KiB) and writes it back (write_all) until the peer closes. TCP_NODELAY
// on every connection, as the Tokio and Asio echo peers
// (bench/peers/tokio-net, bench/peers/asio/asio_net_peer.cpp).
//
//   usage: net_echo_server [--port P] [--workers N]   (default 7000, 2)
//
// Listens on 127.0.0.1 only; runs until killed.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <spindle/net.hpp>
#include <spindle/spindle.hpp>
#include <string>
#include <system_error>

namespace net = spindle::net;

namespace {

spindle::task<void> echo(net::tcp_stream stream) {
  std::byte buffer[4096];
  try {
    for (;;) {
      std::size_t const n = co_await stream.read_some(buffer);
      if (n == 0) break;
      co_await stream.write_all(std::span<std::byte const>(buffer, n));
    }
  } catch (std::system_error const&) {
    // The client went away (reset, broken pipe): drop the connection.
  }
}

// Accepts until accept fails; then reports it and wakes main through `done`.
spindle::task<void> serve(net::tcp_listener listener, std::atomic<bool>& done) {
  try {
    for (;;) {
      net::tcp_stream stream = co_await listener.accept();
      stream.set_nodelay(true);
      (void)spindle::spawn(echo(std::move(stream)));  // dropping the handle detaches
    }
  } catch (std::exception const& e) {
    std::fprintf(stderr, "net_echo_server: accept: %s\n", e.what());
  }
  done.store(true);
  done.notify_one();
}

}  // namespace

int main(int argc, char** argv) {
  int port = 7000;
  std::size_t workers = 2;
  for (int i = 1; i < argc; ++i) {
    std::string const arg = argv[i];
    if (i + 1 >= argc || (arg != "--port" && arg != "--workers")) {
      std::fprintf(stderr, "usage: net_echo_server [--port P] [--workers N]\n");
      return 2;
    }
    int const value = std::atoi(argv[++i]);
    if (arg == "--port") {
      port = value;
    } else {
      workers = static_cast<std::size_t>(value);
    }
  }
  if (port < 0 || port > 65535 || workers < 1) {
    std::fprintf(stderr, "net_echo_server: bad --port or --workers\n");
    return 2;
  }
  try {
    spindle::runtime rt{spindle::runtime_config{.workers = workers}};
    auto listener =
        net::tcp_listener::bind(net::endpoint("127.0.0.1", static_cast<std::uint16_t>(port)));
    // The accept loop is a spawned task and the main thread only waits on an
    // atomic, so that the N workers alone serve (block_on would run tasks on
    // this thread too: a third one).
    std::atomic<bool> done{false};
    auto server = rt.spawn(serve(std::move(listener), done));
    done.wait(false);
    return 1;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "net_echo_server: %s\n", e.what());
    return 1;
  }
  return 0;
}
