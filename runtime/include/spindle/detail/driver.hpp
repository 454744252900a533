// The interface through which the scheduler parks and drives I/O.
//
// Shape: the runtime owns one driver, made by make_driver() (defined in io/).
// Each worker calls on_worker_start() once on its own thread, poll() at the
// end of every tick and after every park, and park() instead of its futex
// park while park_in_driver() is true (it has completions only it can reap).
// unpark() must make a concurrent or later park() of the same worker return.
// At shutdown each worker calls on_worker_stop() on its own thread (cancel
// in-flight operations and reap them, waking no task), then the runtime calls
// shutdown() once, before any task frame is destroyed.
//
// Thread-safety: poll/park/on_worker_* for worker i run only on worker i's
// thread; unpark() and submissions from other threads may come from any thread.
// Design source: Tokio's driver/park split, Volt's parking (seed 002), and
// Veloq's park integrated with the I/O driver (seed 003).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

namespace spindle {
enum class io_backend : std::uint8_t;
struct runtime_config;
}  // namespace spindle

namespace spindle::detail {

class scheduler;

/// A park without a deadline.
inline constexpr std::uint64_t no_deadline = std::numeric_limits<std::uint64_t>::max();

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
};

/// Makes the driver for `config` (io/src/driver_factory.cpp). Throws
/// std::system_error when `config.io` (or SPINDLE_IO) demands io_uring and it
/// cannot be set up.
[[nodiscard]] std::unique_ptr<driver> make_driver(scheduler& sched, runtime_config const& config,
                                                  std::size_t workers);

inline constexpr std::size_t not_a_worker = std::numeric_limits<std::size_t>::max();

/// Index of the calling thread's worker in its runtime, or not_a_worker.
[[nodiscard]] std::size_t current_worker_index() noexcept;
/// The driver of `sched`.
[[nodiscard]] driver& scheduler_driver(scheduler* sched) noexcept;
/// Number of workers of `sched`.
[[nodiscard]] std::size_t scheduler_worker_count(scheduler* sched) noexcept;
/// Wakes worker `index` of `sched` if it is parked (through its park word,
/// which calls driver::unpark when it parks in the driver). Any thread.
void unpark_worker(scheduler* sched, std::size_t index) noexcept;
/// Records reaped I/O completions in worker `index`'s stats.
void count_io_completions(scheduler* sched, std::size_t index, std::size_t n) noexcept;

}  // namespace spindle::detail
