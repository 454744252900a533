// The boundary between the scheduler and an I/O driver: the driver interface
// the scheduler parks and drives I/O through, and the host interface the
// driver is given to reach back into the scheduler.
//
// Shape: the runtime owns one driver, made at construction by the
// driver_factory its owner passes (spindle::runtime passes io/'s, which
// picks io_uring or the thread pool; a runtime-only build can pass its own).
// Each worker calls on_worker_start() once on its own thread, poll() at the
// end of every tick and after every park, and park() instead of its futex
// park while park_in_driver() is true (it has completions only it can reap).
// unpark() must make a concurrent or later park() of the same worker return.
// At shutdown each worker calls on_worker_stop() on its own thread (cancel
// in-flight operations and reap them, waking no task), then the runtime calls
// shutdown() once, before any task frame is destroyed.
//
// Operations: submit()/cancel() take an io_op, a record that lives in the
// awaiting task's frame and that only the I/O layer defines (io/src/io_op.hpp):
// the scheduler never looks inside one. File operations go through them now,
// socket operations will.
//
// Dependencies run one way: io/ includes this header and the runtime's; the
// runtime includes nothing of io/.
//
// Thread-safety: poll/park/on_worker_* for worker i run only on worker i's
// thread; unpark(), submit() and cancel() may come from any thread. io_host's
// calls may come from any thread.
// Design source: Tokio's driver/park split (runtime/driver.rs: the I/O
// driver is given a handle to unpark and wake with), Volt's parking,
// and Veloq's park integrated with the I/O driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "clock.hpp"
#include "spindle/detail/task_header.hpp"

namespace spindle {
enum class io_backend : std::uint8_t;
struct runtime_config;
}  // namespace spindle

namespace spindle::detail {

/// One I/O operation in flight. Defined by the I/O layer (io/src/io_op.hpp);
/// opaque to the scheduler.
struct io_op;

/// What a driver may ask of the runtime that owns it. A context pointer and
/// a table of plain functions, not virtual ones: no vptr in the host, so
/// nothing for UBSan's -fsanitize=vptr to look up at each call (its lookup
/// needs a free file descriptor, which a runtime at its RLIMIT_NOFILE, as
/// spindle-scan under `ulimit -n 16`, has not: a false report). Copyable;
/// the context (the scheduler) outlives its driver.
class io_host {
 public:
  struct calls {
    std::size_t (*current_worker)(void const* context) noexcept;
    void (*unpark)(void* context, std::size_t index) noexcept;
    void (*count_completions)(void* context, std::size_t index, std::size_t n) noexcept;
  };

  io_host(void* context, calls const& table) noexcept : context_(context), table_(&table) {}

  /// The index of the calling thread's worker if it is a worker of this
  /// runtime, else not_a_worker.
  [[nodiscard]] std::size_t current_worker() const noexcept {
    return table_->current_worker(context_);
  }
  /// Wakes worker `index` if it is parked (through its park word, which
  /// calls driver::unpark when it parks in the driver). Any thread.
  void unpark(std::size_t index) const noexcept { table_->unpark(context_, index); }
  /// Records `n` I/O completions reaped by worker `index`, or completed on
  /// a thread of the driver's own when `index` is not_a_worker
  /// (runtime_stats::io_completions). Any thread for not_a_worker; else
  /// only worker `index`.
  void count_completions(std::size_t index, std::size_t n) const noexcept {
    table_->count_completions(context_, index, n);
  }
  /// Wakes the task an operation completed for. Any thread.
  void wake(task_header* task) const noexcept { detail::wake(task); }

 private:
  void* context_;
  calls const* table_;
};

class driver {
 public:
  virtual ~driver() = default;
  /// The backend this driver implements (uring or threadpool).
  [[nodiscard]] virtual io_backend backend() const noexcept = 0;
  /// Worker `index` starts (on its thread). May throw std::system_error.
  virtual void on_worker_start(std::size_t index) = 0;
  /// Submits queued operations and reaps completions without blocking,
  /// waking their tasks. Returns the number of completions reaped.
  virtual std::size_t poll(std::size_t index) noexcept = 0;
  /// True when worker `index` has operations whose completions only it
  /// reaps: it must then park inside the driver.
  [[nodiscard]] virtual bool park_in_driver(std::size_t index) const noexcept = 0;
  /// Blocks until a completion for worker `index` arrives, unpark(index), or
  /// `deadline_ns` (std::chrono::steady_clock time in ns; no_deadline: none)
  /// passes.
  virtual void park(std::size_t index, std::uint64_t deadline_ns) noexcept = 0;
  /// Wakes worker `index` out of park() (now or its next one). Any thread.
  virtual void unpark(std::size_t index) noexcept = 0;
  /// Worker `index` stops: cancels its in-flight operations and reaps their
  /// completions, waking no task.
  virtual void on_worker_stop(std::size_t index) noexcept = 0;
  /// After every worker stopped: waits for remaining operations, stops threads.
  virtual void shutdown() noexcept = 0;

  /// Takes `op` (fully set up, its task set). Returns true when the op will
  /// complete later by waking its task (io_host::wake); after that the
  /// caller must not touch the op. Returns false when it completed at once
  /// (its result is stored, e.g. -ECANCELED during shutdown); the caller
  /// resumes directly. Any thread.
  virtual bool submit(io_op& op) noexcept = 0;
  /// The cancel hook of an op that submit() took (true returned): called at
  /// most once, on the aborting thread (any thread), while the op's task is
  /// held so that it is neither resumed nor destroyed. Returns true when the
  /// op was withdrawn before any driver thread took it (it will never
  /// complete or wake the task), false when its completion will still wake
  /// the task (cancellation was requested if the op can be interrupted, or
  /// it has completed already).
  virtual bool cancel(io_op& op) noexcept = 0;
};

/// Makes a runtime's driver (resolved `config`: workers known). Throws
/// std::system_error when the driver cannot be set up.
using driver_factory = std::unique_ptr<driver> (*)(io_host& host, runtime_config const& config);

/// The driver of the calling thread's runtime (a worker, or a thread inside
/// block_on), or nullptr elsewhere.
[[nodiscard]] driver* current_driver() noexcept;

}  // namespace spindle::detail
