// spindle/task_info.hpp: what the runtime records about each spawned task
// for runtime::dump() (spindle/dump.hpp): where it was spawned and what it
// waits on.
//
// Shape: spawn_location is a file name (a string literal of static storage:
// never copied, never freed) and a 1-based line, captured as a default
// argument of spawn / runtime::spawn / spawn_blocking / block_on, as
// std::source_location::current() would be (clang 14 with libstdc++ 12 has
// no std::source_location, so spindle uses the __builtin_FILE/__builtin_LINE
// builtins both compilers provide). wait_kind says which kind of awaiter a
// suspended task is parked in; each spindle awaiter names its own when it
// suspends (detail::suspend_current).
//
// Thread-safety: plain values.
// Design source: std::source_location; tokio-console's task "location" and
// waker fields.
#pragma once

#include <cstdint>

namespace spindle {

/// Where a task was spawned: a file name (static storage) and a line.
struct spawn_location {
  char const* file = "";   ///< the file name ("" when unknown); not owned
  std::uint32_t line = 0;  ///< 1-based (0 when unknown)

  /// The caller's location when used as a default argument (as
  /// std::source_location::current()); lines above 65535 read 65535 (the
  /// spawn-site table keeps 16 bits of it).
  [[nodiscard]] static constexpr spawn_location current(char const* file = __builtin_FILE(),
                                                        unsigned line = __builtin_LINE()) noexcept {
    return spawn_location{file, static_cast<std::uint32_t>(line < 0xffffU ? line : 0xffffU)};
  }
};

/// Which kind of awaiter a suspended task waits in.
enum class wait_kind : std::uint8_t {
  none,      ///< never suspended yet
  other,     ///< an awaiter that does not say (a user's awaiter)
  yield,     ///< yield_now (re-queued at once)
  timer,     ///< sleep_for / sleep_until / a deadline
  join,      ///< a join_handle, a task_group's join, a timeout on a join
  channel,   ///< channel / make_channel send or recv
  oneshot,   ///< oneshot receive
  sync,      ///< mutex, rwlock, semaphore, notify, event, latch, barrier, watch, broadcast
  stop,      ///< a stop_token's stop request
  blocking,  ///< a spawn_blocking job
  io,        ///< an I/O operation in the driver (file, socket)
  fiber,     ///< a fiber's stack awaiting something
};

/// The lower-case name of `k` ("timer", "io", ...).
[[nodiscard]] constexpr char const* to_string(wait_kind k) noexcept {
  switch (k) {
    case wait_kind::none:
      return "none";
    case wait_kind::other:
      return "other";
    case wait_kind::yield:
      return "yield";
    case wait_kind::timer:
      return "timer";
    case wait_kind::join:
      return "join";
    case wait_kind::channel:
      return "channel";
    case wait_kind::oneshot:
      return "oneshot";
    case wait_kind::sync:
      return "sync";
    case wait_kind::stop:
      return "stop";
    case wait_kind::blocking:
      return "blocking";
    case wait_kind::io:
      return "io";
    case wait_kind::fiber:
      return "fiber";
  }
  return "other";
}

}  // namespace spindle
