// Tracing (runtime_config::trace_path, SPINDLE_TRACE=path): per-worker
// bounded rings of scheduler events, written at shutdown as Chrome /
// Perfetto trace-event JSON (trace.cpp).
//
// Shape: one trace_ring per worker (written by that worker only, read by
// the thread that destroys the runtime once the workers have stopped) and
// one more, behind a mutex, for events of other threads (the thread-pool
// I/O backend's completions). A ring holds the last `capacity` events: when
// it is full the oldest one is overwritten (the trace shows how the run
// ended, which is what a hang or a slow shutdown needs), and the count of
// overwritten events is written into the file's metadata.
//
// Cost when off: each event site is one predictable branch. The scheduler's
// sites test the worker's (or thread context's) ring pointer, null when
// off (through tracing()); the I/O sites, which do not know their runtime,
// test one global counter of tracing runtimes (trace_active()), read-only
// while no runtime traces. When on: a steady_clock read and a 48-byte store
// per event. A build with -Dtrace_sites=false (SPINDLE_TRACE_SITES=0)
// compiles every site out: bench/compare.py's tracing section runs the
// workloads on both builds side by side to show what the branches cost.
//
// Thread-safety: trace_ring::push on its worker's thread only; tracer's
// external events from any thread; write() after every producer stopped.
// Design source: the Chrome trace-event format ("X" complete events, "i"
// instant events, "M" metadata), Tokio's tracing spans, Go's runtime/trace.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "clock.hpp"

namespace spindle::detail {

struct task_header;

#ifndef SPINDLE_TRACE_SITES
#define SPINDLE_TRACE_SITES 1
#endif
/// Whether this build has the event sites (meson option trace_sites).
inline constexpr bool trace_sites = SPINDLE_TRACE_SITES != 0;

/// Runtimes that trace now, in this process (any thread reads it).
inline std::atomic<unsigned> tracing_runtimes{0};

/// The I/O sites' branch: is any runtime tracing?
[[nodiscard]] inline bool trace_active() noexcept {
  return trace_sites && tracing_runtimes.load(std::memory_order_relaxed) != 0;
}

class trace_ring;
/// The scheduler's sites' branch: `ring` (a worker's or the thread
/// context's, null when its runtime does not trace), or null in a build
/// without the sites, where the site then compiles to nothing.
[[nodiscard]] inline trace_ring* tracing(trace_ring* ring) noexcept {
  if constexpr (trace_sites) {
    return ring;
  } else {
    static_cast<void>(ring);
    return nullptr;
  }
}

enum class trace_kind : std::uint8_t {
  poll,         ///< span: one poll of task `a`
  park,         ///< span: the worker slept
  unpark,       ///< instant: the worker left its park (b: 1 to run, 0 to sleep again)
  steal,        ///< instant: took `b` tasks from worker `a`
  io_submit,    ///< instant: task `a` submitted an operation (`name`)
  io_complete,  ///< instant: the operation (`name`) of task `a` completed with `b`
  timer_fire,   ///< instant: a timer woke task `a`
};

struct trace_record {
  std::uint64_t ts_ns = 0;   ///< steady_clock ns
  std::uint64_t dur_ns = 0;  ///< spans
  std::uint64_t a = 0;
  std::int64_t b = 0;
  char const* name = nullptr;  ///< static string (the I/O operation)
  trace_kind kind = trace_kind::poll;
};

/// One worker's events, the newest `capacity` of them.
class trace_ring {
 public:
  explicit trace_ring(std::size_t capacity) : records_(capacity) {}

  void push(trace_record const& r) noexcept {
    records_[static_cast<std::size_t>(pushed_ % records_.size())] = r;
    ++pushed_;
  }
  /// Calls fn(record) oldest first.
  template <class Fn>
  void for_each(Fn&& fn) const {
    std::uint64_t const n = pushed_ < records_.size() ? pushed_ : records_.size();
    for (std::uint64_t i = pushed_ - n; i != pushed_; ++i)
      fn(records_[static_cast<std::size_t>(i % records_.size())]);
  }
  [[nodiscard]] std::uint64_t overwritten() const noexcept {
    return pushed_ > records_.size() ? pushed_ - records_.size() : 0;
  }

 private:
  std::vector<trace_record> records_;
  std::uint64_t pushed_ = 0;
};

/// A runtime's trace: opens the file at construction, writes it at write().
class tracer {
 public:
  /// Opens `path` for writing (truncating it). Throws std::system_error
  /// with the errno of fopen (ENOENT, EACCES, EISDIR, ...) and the path in
  /// its message.
  tracer(std::string const& path, std::size_t workers, std::size_t capacity,
         std::uint64_t epoch_ns);
  ~tracer();
  tracer(tracer const&) = delete;
  tracer& operator=(tracer const&) = delete;

  [[nodiscard]] trace_ring* ring(std::size_t worker) noexcept { return &rings_[worker]; }
  /// An event of a thread that is not a worker (mutex).
  void push_external(trace_record const& r) noexcept;
  /// Writes the JSON file and closes it; errors go to stderr. Call once,
  /// after every producer stopped.
  void write() noexcept;

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::uint64_t epoch_ns_;
  std::vector<trace_ring> rings_;
  std::mutex external_mutex_;
  trace_ring external_;
};

/// An I/O event (io_submit / io_complete) of `task`'s runtime, recorded in
/// the calling worker's ring, or in its runtime's external ring from other
/// threads; nothing when that runtime does not trace. Call only when
/// trace_active().
[[gnu::cold]] void trace_io(task_header* task, trace_kind kind, char const* op,
                            std::int64_t result) noexcept;

}  // namespace spindle::detail
