// spindle-wc's command line (CLI11), apart from the runtime so that it can
// be tested on its own.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "count.hpp"

namespace wc {

enum class io_choice { automatic, uring, threadpool };

struct options {
  selection what;                  ///< -l -w -c (none: all three)
  std::vector<std::string> paths;  ///< empty: standard input, as GNU wc
  std::size_t workers = 0;         ///< -j; 0: all CPUs
  std::size_t fibers = 4;          ///< counting fibers per worker
  std::size_t buffer_size = 128 * 1024;
  io_choice io = io_choice::automatic;
};

/// Parses argv into `out`. Returns std::nullopt to go on counting, or the
/// exit status to stop with: 0 after --help/--version, 1 after a usage error
/// (the message is already on stderr; GNU wc's status for it).
std::optional<int> parse_command_line(int argc, char** argv, options& out);

}  // namespace wc
