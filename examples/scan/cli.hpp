// spindle-scan's command line (CLI11), kept apart from the runtime so that it
// can be tested on its own.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "matcher.hpp"

namespace scan {

enum class io_choice { automatic, uring, threadpool };
enum class name_mode { automatic, always, never };

struct options {
  match_options match;
  std::vector<std::string> paths;  ///< empty: walk "." naming files without "./"
  std::size_t workers = 0;         ///< 0: hardware concurrency
  bool all = false;                ///< print files with no matching line too
  bool json = false;               ///< JSON Lines on stdout
  bool stats = false;              ///< summary on stderr
  bool progress = true;            ///< progress line when stderr is a terminal
  bool quiet = false;              ///< -s: no messages about unreadable files (exit 2 stays)
  name_mode names = name_mode::automatic;
  io_choice io = io_choice::automatic;
  std::size_t max_in_flight = 0;         ///< files being scanned at once; 0: from workers
  std::size_t buffer_size = 128 * 1024;  ///< read buffer per file in flight
};

/// Parses argv into `out`. Returns std::nullopt to go on scanning, or the
/// exit status to stop with: 0 after --help/--version, 2 after a usage error
/// (the message is already on stderr).
std::optional<int> parse_command_line(int argc, char** argv, options& out);

}  // namespace scan
