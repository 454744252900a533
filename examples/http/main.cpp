// spindle-http: an HTTP/1.1 keep-alive server on spindle's sockets.
//
// Shape: main binds the listener (before the runtime: a port in use is a
// plain error, exit 1), starts the runtime and spawns the server task: an
// accept loop that spawns one task per connection (TCP_NODELAY on) into a
// spindle::task_group. Each connection task runs
// http_server::serve_connection (connection.hpp): Beast's parser fed from
// the connection's read buffer, answers written with one write_all per
// batch of pipelined requests, files read with spindle::io::file.
//
// Shutdown: SIGINT and SIGTERM are blocked in every thread (the mask is set
// before the runtime's workers start, and they inherit it). A dedicated
// thread waits for them with sigwait() and then requests stop on a
// std::stop_source; the server task was spawned with its token
// (spindle::spawn(rt, task, token)), so the stop aborts it like
// join_handle::abort(): its pending accept is cancelled, and its frame goes
// with the task_group, whose destructor aborts every connection task (their
// pending reads and writes are cancelled, their sockets closed). block_on
// then returns, the runtime shuts down and the process exits 0. An answer
// being written at that moment is cut: connections are not drained.
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <spindle/spindle.hpp>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "cli.hpp"
#include "connection.hpp"
#include "response.hpp"

namespace {

/// One connection: TCP_NODELAY, then the request loop.
spindle::task<void> connection_task(spindle::net::tcp_stream stream, http_server::site const* s) {
  try {
    stream.set_nodelay(true);
  } catch (std::system_error const&) {
    co_return;  // the connection is already gone
  }
  co_await http_server::serve_connection(stream, *s);
}

/// The accept loop: one task per connection, until the task is aborted.
spindle::task<void> serve(spindle::net::tcp_listener* listener, http_server::site const* s) {
  spindle::task_group connections;  // its destructor ends the connections
  for (;;) {
    spindle::net::tcp_stream stream = co_await listener->accept();
    connections.spawn(connection_task(std::move(stream), s));
  }
}

/// Waits for the server task (block_on takes a task).
spindle::task<void> await_server(spindle::join_handle<void> server) {
  co_await server;
}

}  // namespace

int main(int argc, char** argv) {
  http_server::options opt;
  if (auto stop = http_server::parse_command_line(argc, argv, opt)) return *stop;

  http_server::site site;
  site.limits.body = opt.max_body;
  if (!opt.root.empty()) {
    std::unique_ptr<char, decltype(&::free)> const real(::realpath(opt.root.c_str(), nullptr),
                                                        &::free);
    if (!real) {
      std::fprintf(stderr, "spindle-http: --root %s: %s\n", opt.root.c_str(), std::strerror(errno));
      return 2;
    }
    site.root = real.get();
  }

  spindle::net::endpoint const at(opt.bind, opt.port);
  spindle::net::tcp_listener listener;
  try {
    listener = spindle::net::tcp_listener::bind(at);
  } catch (std::system_error const& e) {
    std::fprintf(stderr, "spindle-http: cannot listen on %s: %s\n", at.to_string().c_str(),
                 e.code().message().c_str());
    return 1;
  }

  // Before any other thread exists: every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::optional<spindle::runtime> rt;
  try {
    rt.emplace(spindle::runtime_config{.workers = opt.workers});
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle-http: cannot start the runtime: %s\n", e.what());
    return 1;
  }
  std::printf("spindle-http: listening on http://%s/ (%zu workers, %s)\n",
              listener.local_endpoint().to_string().c_str(), rt->worker_count(),
              rt->io_backend_in_use() == spindle::io_backend::uring ? "io_uring" : "thread pool");
  std::fflush(stdout);

  std::stop_source stop;
  std::thread signal_waiter([&stop, &stop_signals] {
    int signal = 0;
    while (sigwait(&stop_signals, &signal) != 0) {
    }
    stop.request_stop();
  });

  int status = 0;
  try {
    rt->block_on(await_server(spindle::spawn(*rt, serve(&listener, &site), stop.get_token())));
  } catch (spindle::task_cancelled const&) {
    // Stopped by a signal.
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle-http: %s\n", e.what());
    status = 1;
  }
  if (!stop.stop_requested()) pthread_kill(signal_waiter.native_handle(), SIGTERM);
  signal_waiter.join();
  rt.reset();
  return status;
}
