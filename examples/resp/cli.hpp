// spindle-resp's command line (CLI11), apart from main so that it can be
// tested on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace resp {

enum class io_choice { automatic, uring, threadpool };

struct options {
  std::uint16_t port = 6380;            ///< --port; 0 picks a free port (printed at start)
  std::string bind = "127.0.0.1";       ///< --bind: an IPv4 or IPv6 address
  std::size_t workers = 0;              ///< --workers; 0: all CPUs
  io_choice io = io_choice::automatic;  ///< --io
};

/// Parses argv into `out`. Returns std::nullopt to go on serving, or the
/// exit status to stop with: 0 after --help/--version, 2 after a usage
/// error (the message is already on stderr).
std::optional<int> parse_command_line(int argc, char const* const* argv, options& out);

}  // namespace resp
