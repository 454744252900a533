// Reading the SPINDLE_* environment variables of the runtime and the I/O
// layer (SPINDLE_IDLE, SPINDLE_CACHED_READS, SPINDLE_TRACE, SPINDLE_IO,
// SPINDLE_NET_MULTISHOT, SPINDLE_NET_PROVIDED_BUFFERS): what each means is
// documented where it is read; these say how a value is taken.
//
// Thread-safety: std::getenv's (safe unless the environment is changed at
// the same time).
#pragma once

#include <cstdlib>
#include <string_view>

namespace spindle::detail {

/// The value of environment variable `name`; nullptr when it is unset or
/// empty (an empty value leaves the default, as unset does).
[[nodiscard]] inline char const* env_value(char const* name) noexcept {
  char const* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

/// False when environment variable `name` is "0", which turns off something
/// on by default (to compare with and without it); true otherwise, unset
/// included.
[[nodiscard]] inline bool env_switch_on(char const* name) noexcept {
  char const* value = std::getenv(name);
  return value == nullptr || std::string_view(value) != "0";
}

}  // namespace spindle::detail
