// spindle-http's command line: see cli.hpp.
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <spindle/net.hpp>
#include <system_error>

namespace http_server {

namespace {

constexpr char const* kFooter =
    R"(GET / answers "Hello, World!" without --root. With --root, GET and HEAD
serve the files below DIR (a directory: its index.html); symlinks may point
anywhere inside DIR, not outside it. SIGINT or SIGTERM stops the server
(exit status 0). Exit status 1: the address cannot be listened on; 2: a
usage error.)";

}  // namespace

std::optional<int> parse_command_line(int argc, char** argv, options& out) {
  CLI::App app{"spindle-http: an HTTP/1.1 keep-alive server on spindle's sockets", "spindle-http"};
  app.set_help_flag("--help", "Print this help and exit");
  app.footer(kFooter);

  bool version = false;
  app.add_option("-p,--port", out.port, "TCP port (default 8080; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("-b,--bind", out.bind, "Address to listen on (default 127.0.0.1; IPv6: ::1)");
  app.add_option("-w,--workers", out.workers, "Worker threads (default: all CPUs)")
      ->check(CLI::Range(0, 65535));
  app.add_option("-r,--root", out.root, "Serve the files below this directory")
      ->check(CLI::ExistingDirectory);
  app.add_option("--max-body", out.max_body,
                 "Largest request body read and discarded, in bytes (default 1 MiB)");
  app.add_flag("-V,--version", version, "Print the version and exit");

  try {
    app.parse(argc, argv);
    (void)spindle::net::endpoint(out.bind, out.port);  // an address, not a name
  } catch (CLI::CallForHelp const& e) {
    return app.exit(e);
  } catch (CLI::ParseError const& e) {
    std::fprintf(stderr,
                 "spindle-http: %s\nUsage: spindle-http [--port P] [--workers N] [--root DIR] "
                 "[--bind ADDR]\nTry 'spindle-http --help' for more information.\n",
                 e.what());
    return 2;
  } catch (std::system_error const&) {
    std::fprintf(stderr, "spindle-http: --bind: '%s' is not an IPv4 or IPv6 address\n",
                 out.bind.c_str());
    return 2;
  }
  if (version) {
    std::printf("spindle-http %s\n", SPINDLE_HTTP_VERSION);
    return 0;
  }
  return std::nullopt;
}

}  // namespace http_server
