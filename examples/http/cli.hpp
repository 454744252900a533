// spindle-http's command line (CLI11), apart from the server so that it can
// be tested on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace http_server {

/// What the command line asks for.
struct options {
  std::uint16_t port = 8080;         ///< --port; 0: a free port (printed at start)
  std::string bind = "127.0.0.1";    ///< --bind: an IPv4 or IPv6 address
  std::size_t workers = 0;           ///< --workers; 0: all CPUs
  std::string root;                  ///< --root: serve files below it; empty: GET / only
  std::uint64_t max_body = 1 << 20;  ///< --max-body: request bodies beyond it get 413
};

/// Parses argv into `out`. Returns std::nullopt to go on serving, or the exit
/// status to stop with: 0 after --help/--version, 2 after a usage error (the
/// message is already on stderr).
std::optional<int> parse_command_line(int argc, char** argv, options& out);

}  // namespace http_server
