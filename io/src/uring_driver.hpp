// The io_uring driver: one ring per worker.
//
// Shape: make() creates every worker's ring on the constructing thread with
// IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED
// (falling back to fewer flags while the kernel answers EINVAL), so every
// setup failure surfaces there and the factory can fall back to the thread
// pool. on_worker_start enables the ring on the worker's own thread (which
// makes that thread the ring's single issuer) and arms a read on the worker's
// eventfd.
//
// Submission: a task awaiting I/O on worker i fills an SQE of ring i directly
// (no lock, no syscall); poll() at the tick's end submits the batch and reaps
// completions (io_uring_submit_and_get_events), storing each result in its
// io_op and waking the op's task. A task awaiting I/O on a thread that is not
// a worker (block_on) pushes its op onto a mutex-protected list of a worker
// chosen round-robin and unparks that worker, which submits it in its next
// poll() or park().
//
// Parking: while worker i has operations in flight, the scheduler parks it in
// park(), which blocks in io_uring_submit_and_wait(1). The eventfd read is
// always armed (tag wake_tag, not counted as in flight); unpark() writes the
// eventfd, so a completion or an unpark, concurrent or earlier, ends the wait.
//
// Cancellation (join_handle::abort, through io_op's cancel hook): an op still
// on a remote list is unlinked under the list's mutex (never submitted; the
// task's frame is destroyed at once). An op prepared on ring i gets an
// IORING_OP_ASYNC_CANCEL SQE on ring i, prepared right away when the aborting
// thread is worker i itself, otherwise queued as a request on worker i's
// cancel list (intrusive links in the op, guarded by the remote mutex; no
// allocation) and worker i is unparked: it turns requests into SQEs at the
// start of its next poll() or park(). The op's own CQE (-ECANCELED, or its
// real result when it finished first) then wakes the task as usual, and the
// scheduler destroys the frame instead of resuming it. Completing an op
// removes its pending request (under the mutex) before the wake, so a request
// never outlives its op, and a cancel SQE is only prepared, on worker i's
// thread, for an op that has not been reaped: it always precedes the reuse of
// the op's address on that ring. Close ops are never cancelled (they finish
// promptly, and a cancelled close would leak the descriptor).
//
// Shutdown: on_worker_stop cancels every op in flight with per-op
// IORING_OP_ASYNC_CANCEL (re-issued every 100 ms for ops the kernel could not
// cancel yet), reaps until none is left, waking no task (a file opened by an
// op nobody will see is closed), then exits the ring. The eventfds stay open
// until the driver is destroyed so that a late unpark() never writes to a
// recycled descriptor.
//
// Thread-safety: ring i, its in-flight list and counters are touched only by
// worker i's thread (the single issuer). The remote list and the cancel list
// are guarded by the remote mutex; unpark(), cancel() and submit() from
// non-workers may come from any thread.
// Design source: docs/design.md "I/O driver"; Tokio's driver/park split; Veloq
// for parking inside the ring; liburing's man pages for the
// SINGLE_ISSUER / DEFER_TASKRUN / R_DISABLED rules.
#pragma once

#include <liburing.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "io_op.hpp"

namespace spindle::io::detail {

class uring_driver final : public spindle::detail::driver {
 public:
  /// Creates `workers` rings of `entries` SQEs each (rounded up to a power of
  /// two by the kernel). Throws std::system_error with the errno of the
  /// failing step (io_uring_setup: EPERM, ENOSYS, ENOMEM, ...; ENOSYS as well
  /// when the kernel lacks an opcode the driver uses).
  static std::unique_ptr<uring_driver> make(spindle::detail::io_host& host, std::size_t workers,
                                            std::uint32_t entries);
  ~uring_driver() override;
  uring_driver(uring_driver const&) = delete;
  uring_driver& operator=(uring_driver const&) = delete;

  [[nodiscard]] io_backend backend() const noexcept override;
  void on_worker_start(std::size_t index) override;
  std::size_t poll(std::size_t index) noexcept override;
  [[nodiscard]] bool park_in_driver(std::size_t index) const noexcept override;
  void park(std::size_t index, std::uint64_t deadline_ns) noexcept override;
  void unpark(std::size_t index) noexcept override;
  void on_worker_stop(std::size_t index) noexcept override;
  void shutdown() noexcept override;
  bool submit(io_op& op) noexcept override;
  bool cancel(io_op& op) noexcept override;

  /// True when the kernel has the io_uring opcode of `code` (probed at
  /// make()). File ops and poll are always there (make() fails otherwise);
  /// socket ops may be missing on kernels older than 5.6.
  [[nodiscard]] bool supports(op_code code) const noexcept {
    auto const i = static_cast<std::size_t>(code);
    return i < supported_.size() && supported_[i];
  }

  /// The size of each buffer of a worker's provided-buffer ring (bytes), and
  /// their number per worker. A recv with io_op::select_buffer gets at most
  /// this many bytes.
  static constexpr std::uint32_t provided_buffer_size = 16384;
  static constexpr std::uint32_t provided_buffer_count = 64;

  /// Receives served from a provided buffer so far, all workers (for tests
  /// and diagnostics). Any thread.
  [[nodiscard]] std::uint64_t provided_buffer_receives() const noexcept;

  /// True when the kernel accepts multishot ACCEPT (IORING_ACCEPT_MULTISHOT,
  /// Linux 5.19; read from uname at make()).
  [[nodiscard]] bool multishot_accept() const noexcept { return multishot_accept_; }

  /// Asks the ring that took multishot `op` to cancel it, from any thread
  /// (the owning worker included, even inside the op's on_cqe): the request
  /// is queued on the op's worker, which issues IORING_OP_ASYNC_CANCEL in its
  /// next poll() or park(); the op's last CQE then reaches on_cqe as usual.
  /// An op still on a remote list never reaches the ring: on_cqe(op,
  /// -ECANCELED, false, false) is called here, on the calling thread.
  void request_cancel(io_op& op) noexcept;

  /// The io_uring_setup flags the rings were created with (for tests).
  [[nodiscard]] unsigned setup_flags() const noexcept { return setup_flags_; }

 private:
  /// One worker's ring, its in-flight list, remote and cancel lists.
  struct worker_ring;
  uring_driver(spindle::detail::io_host& host, std::size_t workers);

  int prepare(worker_ring& w, io_op& op) noexcept;
  io_uring_sqe* acquire_sqe(worker_ring& w) noexcept;
  void arm_wake(worker_ring& w) noexcept;
  void drain_remote(worker_ring& w) noexcept;
  void drain_cancels(worker_ring& w) noexcept;
  void finish(worker_ring& w, io_op& op, int res) noexcept;
  void finish_multishot(worker_ring& w, io_op& op, int res, bool more) noexcept;
  void setup_provided_buffers(worker_ring& w) noexcept;
  void take_provided_buffer(worker_ring& w, io_op& op, int res, unsigned cqe_flags) noexcept;
  std::size_t reap(worker_ring& w) noexcept;
  void flush(worker_ring& w) noexcept;
  void cancel_all(worker_ring& w) noexcept;
  void close_remote(worker_ring& w) noexcept;

  spindle::detail::io_host* host_;
  std::size_t worker_count_;
  std::unique_ptr<worker_ring[]> rings_;
  unsigned setup_flags_ = 0;
  /// Per op_code: the kernel has its opcode. File ops are always supported.
  std::array<bool, 16> supported_{true, true, true, true, true};
  std::atomic<std::size_t> next_remote_{0};
  bool multishot_accept_ = false;
};

}  // namespace spindle::io::detail
