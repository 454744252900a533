// spindle/dump.hpp: runtime::dump(), a snapshot of a runtime's live tasks,
// for finding out which tasks wait where when a program hangs.
//
//   spindle::runtime_dump d = rt.dump();
//   std::cerr << d;                  // a table, one task per line
//   std::string json = d.to_json();  // the same as a JSON object
//
// Shape: one task_snapshot per live (spawned, not yet finished) task: its
// id (unique among the live tasks), its state (queued, running, suspended, or
// suspended on an I/O operation in the driver), what it waits on when
// suspended (the kind of awaiter: spindle/task_info.hpp), the file and line
// of its spawn, and its age (since the spawn; a worker's spawn is timed at
// the start of the worker's tick, and ages are kept in units of 2^20 ns:
// exact to about 2 ms).
//
// How it is taken, and what it costs the workers: no worker is ever stopped
// as a whole. dump() walks the owned-task lists (every task that has been
// suspended once), one shard (one
// per worker, one for other threads) at a time under that shard's spinlock,
// held for the copy of that shard's list only (about 10 ns a task); a
// worker waits on it only if it suspends or completes such a task of that
// shard meanwhile. Tasks that only sit in queues (spawned on a worker and
// not yet suspended) are reported by the workers themselves: dump() raises
// a request flag and unparks every worker; each one answers at the end of
// its current tick (at most `budget` polls, one load and one predictable
// branch per tick when there is no request) or when it wakes from its park,
// by listing its LIFO slot, its batch buffer and its ring (at most 289
// entries: popped and pushed back in order, a few microseconds), then goes
// on. The global queue is walked under its mutex, each worker's inbox
// (placement::p2c) under its consumer flag. dump() waits at most
// `timeout` (100 ms by default) for the answers; a worker that does not
// answer in time (a task that blocks its thread, or a very long poll) is
// named in `unanswered_workers`, with the task it is polling (as running;
// each worker publishes its current task's address, state word and spawn
// site at every poll that is not run inline, three stores to a line of its
// own at the poll's start and one at its end; a poll run inline by a join
// shows as the awaiting task's), and only the
// never-suspended tasks in its LIFO slot, batch buffer and ring are
// missing. The snapshot is not atomic: a task that moves between queues
// while it is taken may be missed or, with the same id, reported once.
//
// Thread-safety: dump() may be called from any thread, including from a
// task on one of the runtime's own workers (that worker answers for itself
// at once, and its current task is reported as running); concurrent dumps
// are serialized. runtime_dump is a plain value.
// Design source: tokio-console's task list (id, state, location, waker
// kind), Go's goroutine dump (SIGQUIT), the scanner executor's per-shard lists.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "spindle/task_info.hpp"

namespace spindle {

/// Where a task stands when a dump is taken.
enum class task_run_state : std::uint8_t {
  queued,             ///< in a run queue (or the LIFO slot, or the global queue)
  running,            ///< being polled on a thread now
  suspended,          ///< parked in an awaiter (see task_snapshot::waits_on)
  blocked_in_driver,  ///< suspended on an I/O operation the driver holds
};

/// The lower-case name of `s`: "queued", "running", "suspended",
/// "blocked_in_driver".
[[nodiscard]] char const* to_string(task_run_state s) noexcept;

/// One live task in a runtime_dump.
struct task_snapshot {
  /// Unique among the live tasks (the task header's address / 16: a task
  /// spawned after another ended may reuse its id); traces use the same.
  std::uint64_t id = 0;
  task_run_state state = task_run_state::queued;  ///< where it stands (see task_run_state)
  /// What it waits on: meaningful for suspended and blocked_in_driver
  /// tasks (none: never suspended yet; yield: it yielded and is queued).
  wait_kind waits_on = wait_kind::none;
  spawn_location spawned_at;        ///< file and line of its spawn
  std::chrono::nanoseconds age{0};  ///< since its spawn
};

/// A snapshot of a runtime's live tasks (runtime::dump()).
struct runtime_dump {
  std::vector<task_snapshot> tasks;  ///< oldest first (then by id)
  std::size_t workers = 0;           ///< the runtime's worker count
  /// Workers that did not report their queues within the timeout (see the
  /// file comment), by index.
  std::vector<std::size_t> unanswered_workers;
  /// How long taking the dump took.
  std::chrono::nanoseconds took{0};

  /// The tasks in `state` (a count).
  [[nodiscard]] std::size_t count(task_run_state state) const noexcept;
  /// The dump as one JSON object:
  /// {"workers":N,"took_us":T,"unanswered_workers":[...],"tasks":[{"id":1,
  /// "state":"suspended","waits_on":"timer","file":"f.cpp","line":12,
  /// "age_us":1500}, ...]}. Throws std::bad_alloc.
  [[nodiscard]] std::string to_json() const;
};

/// Prints `d` as a table: a summary line, then one line per task
/// ("id state waits-on age file:line").
std::ostream& operator<<(std::ostream& os, runtime_dump const& d);

}  // namespace spindle
