// Helpers shared by the io/ test files.
#pragma once

#include <system_error>

#include "spindle/runtime.hpp"

namespace spindle_test {

/// True when this machine lets spindle set up io_uring (checked once).
inline bool uring_available() {
  static bool const available = [] {
    try {
      spindle::runtime rt{spindle::runtime_config{.workers = 1, .io = spindle::io_backend::uring}};
      return true;
    } catch (std::system_error const&) {
      return false;
    }
  }();
  return available;
}

}  // namespace spindle_test
