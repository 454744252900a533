#include "cli.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <vector>

#ifndef SPINDLE_RESP_VERSION
#define SPINDLE_RESP_VERSION "0.1.0"
#endif

namespace resp {

namespace {

constexpr char const* kFooter = R"(
Serves a subset of the Redis protocol (RESP2) from memory: PING, ECHO, SET
(NX, XX, GET), GET, DEL, EXISTS, INCR, DECR, INCRBY, DECRBY, QUIT, with
redis-server 7.0's replies and error texts. Nothing is persisted. One task
per connection on spindle's workers; pipelined requests are answered in one
write per batch.

The default port is 6380, beside a system redis-server's 6379. SIGINT or
SIGTERM stops the server: it closes the listener and every connection and
exits with status 0.

Exit status: 0 after a signal, 1 when the server cannot start (address in
use, bad address, no runtime), 2 for a wrong command line.)";

}  // namespace

std::optional<int> parse_command_line(int argc, char const* const* argv, options& out) {
  CLI::App app{"spindle-resp: a Redis-protocol key-value server on spindle", "spindle-resp"};
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.footer(kFooter);

  bool version = false;
  std::string io = "auto";
  app.add_option("-p,--port", out.port, "TCP port (default 6380; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("-b,--bind", out.bind, "Address to listen on (default 127.0.0.1; IPv6: ::1)");
  app.add_option("-w,--workers", out.workers, "Worker threads (default 0: all CPUs)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--io", io, "I/O backend: auto, uring or threadpool (env SPINDLE_IO)")
      ->check(CLI::IsMember({"auto", "uring", "threadpool"}));
  app.add_flag("-V,--version", version, "Print the version and exit");

  std::vector<std::string> args;
  for (int k = argc - 1; k >= 1; --k)
    args.emplace_back(argv[k]);
  try {
    app.parse(args);  // CLI11 takes the arguments in reverse order
  } catch (CLI::CallForHelp const& e) {
    return app.exit(e);
  } catch (CLI::ParseError const& e) {
    std::fprintf(stderr,
                 "spindle-resp: %s\nUsage: spindle-resp [--port P] [--workers N] [--bind ADDR]\n"
                 "Try 'spindle-resp --help' for more information.\n",
                 e.what());
    return 2;
  }
  if (version) {
    std::printf("spindle-resp %s\n", SPINDLE_RESP_VERSION);
    return 0;
  }
  out.io = io == "uring"        ? io_choice::uring
           : io == "threadpool" ? io_choice::threadpool
                                : io_choice::automatic;
  return std::nullopt;
}

}  // namespace resp
