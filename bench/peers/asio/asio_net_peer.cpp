// Boost.Asio side of bench/compare.py's `net` section: C++20 coroutines
// (asio::awaitable, co_spawn) on one io_context run by N threads.
//
//   usage: asio_net_peer http|echo [--port P] [--threads N]   (7000, 2)
//
// http: HTTP/1.1 with keep-alive; each connection a coroutine that reads a
//   request with Boost.Beast's parser (http::async_read into a flat_buffer)
//   and answers GET / with 200 "Hello, World!\n" (text/plain), anything else
//   with 404, until the client closes or asks for Connection: close.
// echo: each connection a coroutine that reads what arrives (async_read_some,
//   up to 4 KiB) and writes it back (async_write) until the client closes.
// TCP_NODELAY on every connection, as the spindle and Tokio servers. Listens
// on 127.0.0.1 only; runs until killed.
// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>
// (keep <utility> first)
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;

namespace {

awaitable<void> http_session(tcp::socket socket) {
  boost::beast::flat_buffer buffer;
  try {
    for (;;) {
      http::request<http::empty_body> request;
      co_await http::async_read(socket, buffer, request, use_awaitable);
      http::response<http::string_body> response;
      response.version(request.version());
      response.keep_alive(request.keep_alive());
      if (request.method() == http::verb::get && request.target() == "/") {
        response.result(http::status::ok);
        response.set(http::field::content_type, "text/plain");
        response.body() = "Hello, World!\n";
      } else {
        response.result(http::status::not_found);
      }
      response.prepare_payload();
      co_await http::async_write(socket, response, use_awaitable);
      if (!request.keep_alive()) break;
    }
  } catch (std::exception const&) {
    // End of stream or a reset: drop the connection.
  }
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_send, ignored);
}

awaitable<void> echo_session(tcp::socket socket) {
  char data[4096];
  try {
    for (;;) {
      std::size_t const n = co_await socket.async_read_some(asio::buffer(data), use_awaitable);
      co_await asio::async_write(socket, asio::buffer(data, n), use_awaitable);
    }
  } catch (std::exception const&) {
    // End of stream or a reset: drop the connection.
  }
}

awaitable<void> accept_loop(tcp::acceptor& acceptor, bool http_mode) {
  for (;;) {
    tcp::socket socket = co_await acceptor.async_accept(use_awaitable);
    socket.set_option(tcp::no_delay(true));
    auto executor = socket.get_executor();
    if (http_mode) {
      asio::co_spawn(executor, http_session(std::move(socket)), asio::detached);
    } else {
      asio::co_spawn(executor, echo_session(std::move(socket)), asio::detached);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::string(argv[1]) != "http" && std::string(argv[1]) != "echo")) {
    std::fprintf(stderr, "usage: asio_net_peer http|echo [--port P] [--threads N]\n");
    return 2;
  }
  bool const http_mode = std::string(argv[1]) == "http";
  int port = 7000;
  int threads = 2;
  for (int i = 2; i < argc; ++i) {
    std::string const arg = argv[i];
    if (i + 1 >= argc || (arg != "--port" && arg != "--threads")) {
      std::fprintf(stderr, "usage: asio_net_peer http|echo [--port P] [--threads N]\n");
      return 2;
    }
    (arg == "--port" ? port : threads) = std::atoi(argv[++i]);
  }
  if (port < 0 || port > 65535 || threads < 1) {
    std::fprintf(stderr, "asio_net_peer: bad --port or --threads\n");
    return 2;
  }
  try {
    asio::io_context io(threads);
    tcp::acceptor acceptor(
        io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
    asio::co_spawn(io, accept_loop(acceptor, http_mode), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
    // N threads run the io_context: the main thread is one of them.
    std::vector<std::thread> pool;
    for (int i = 1; i < threads; ++i)
      pool.emplace_back([&io] { io.run(); });
    io.run();
    for (auto& t : pool)
      t.join();
  } catch (std::exception const& e) {
    std::fprintf(stderr, "asio_net_peer: %s\n", e.what());
    return 1;
  }
  return 0;
}
