// spindle-resp: a Redis-protocol (RESP2) key-value server on spindle's
// sockets.
//
// Shape: main binds the listener, blocks SIGINT and SIGTERM (before the
// runtime starts, so that every worker thread inherits the mask) and
// spawns the accept loop on the runtime. The accept loop spawns one task
// per connection (spindle::spawn: the runtime's workers share them). A
// connection task reads a chunk, gives it to its resp::session (hiredis
// parses the requests, the commands run against the sharded keyspace, the
// replies are appended to one buffer) and writes that buffer with one
// write_all: a pipelined batch costs one read and one write.
//
// Shutdown: main waits for SIGINT/SIGTERM with sigtimedwait (the signals
// are blocked everywhere, so none interrupts a worker), polling every
// 100 ms whether the accept loop died. On a signal it aborts the accept
// loop and destroys the runtime, which cancels every connection's pending
// read or write and destroys their frames (closing their sockets); the
// status is 0. An accept loop that failed gives status 1.
#include <pthread.h>
#include <signal.h>

#include <csignal>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <optional>
#include <span>
#include <spindle/spindle.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "keyspace.hpp"
#include "session.hpp"

namespace {

namespace net = spindle::net;

// Bytes read per read_some (Redis reads 16 KiB at a time too).
constexpr std::size_t kReadChunk = 16 * 1024;
// A reply buffer that grew past this (a large GET) is given back afterwards.
constexpr std::size_t kKeepCapacity = 256 * 1024;

// One client: read, parse and run, write the batch's replies, until the
// client closes, QUIT, a protocol error, or a socket error (which ends this
// connection only).
spindle::task<void> serve_connection(net::tcp_stream stream, resp::keyspace& keys) {
  try {
    stream.set_nodelay(true);
    resp::session session(keys);
    std::vector<std::byte> buffer(kReadChunk);
    std::string out;
    for (;;) {
      std::size_t const got = co_await stream.read_some(buffer);
      if (got == 0) break;
      std::string_view const chunk(reinterpret_cast<char const*>(buffer.data()), got);
      resp::after_reply const next = session.feed(chunk, out);
      if (!out.empty()) {
        co_await stream.write_all(std::as_bytes(std::span(out)));
        out.clear();
        if (out.capacity() > kKeepCapacity) out.shrink_to_fit();
      }
      if (next == resp::after_reply::close) break;
    }
  } catch (std::exception const&) {
    // Reset by the peer, broken pipe, out of memory: this connection ends,
    // the others go on.
  }
}

// Accepts connections until aborted; each gets a task of its own.
spindle::task<void> accept_loop(net::tcp_listener& listener, resp::keyspace& keys) {
  for (;;) {
    net::tcp_stream stream = co_await listener.accept();
    (void)spindle::spawn(serve_connection(std::move(stream), keys));
  }
}

char const* backend_name(spindle::io_backend b) {
  return b == spindle::io_backend::uring ? "io_uring" : "thread pool";
}

}  // namespace

int main(int argc, char** argv) {
  resp::options opt;
  if (auto stop = resp::parse_command_line(argc, argv, opt)) return *stop;

  net::endpoint at;
  try {
    at = net::endpoint(opt.bind, opt.port);
  } catch (std::system_error const&) {
    std::fprintf(stderr, "spindle-resp: --bind %s: not an IPv4 or IPv6 address\n",
                 opt.bind.c_str());
    return 2;
  }
  net::tcp_listener listener;
  try {
    listener = net::tcp_listener::bind(at);
  } catch (std::system_error const& e) {
    std::fprintf(stderr, "spindle-resp: cannot listen on %s: %s\n", at.to_string().c_str(),
                 e.code().message().c_str());
    return 1;
  }

  // A background job of a non-interactive shell starts with SIGINT ignored,
  // and an ignored signal is never pending: restore the default action,
  // then block both signals so that only sigtimedwait takes them.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  resp::keyspace keys;  // outlives the runtime, hence every connection
  spindle::runtime_config config;
  config.workers = opt.workers;
  config.io = opt.io == resp::io_choice::uring        ? spindle::io_backend::uring
              : opt.io == resp::io_choice::threadpool ? spindle::io_backend::threadpool
                                                      : spindle::io_backend::automatic;
  std::optional<spindle::runtime> rt;
  try {
    rt.emplace(config);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle-resp: cannot start the runtime: %s\n", e.what());
    return 1;
  }

  int status = 0;
  {
    spindle::join_handle<void> server = rt->spawn(accept_loop(listener, keys));
    std::fprintf(stderr, "spindle-resp: listening on %s (%zu workers, %s)\n",
                 listener.local_endpoint().to_string().c_str(), rt->worker_count(),
                 backend_name(rt->io_backend_in_use()));
    for (;;) {
      timespec const tick{0, 100'000'000};
      int const sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
        std::fprintf(stderr, "spindle-resp: %s, shutting down\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM");
        break;
      }
      if (server.is_finished()) {
        try {
          server.take();
          std::fprintf(stderr, "spindle-resp: the accept loop ended\n");
        } catch (std::exception const& e) {
          std::fprintf(stderr, "spindle-resp: accept failed: %s\n", e.what());
        }
        status = 1;
        break;
      }
    }
    server.abort();
  }
  rt.reset();  // cancels every connection's pending operation and closes it
  return status;
}
