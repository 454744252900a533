// The fallback driver: blocking system calls on a pool of threads.
//
// Shape: `threads` pool threads (started at construction) take io_ops from
// one FIFO job queue (mutex + condition variable), run the blocking call
// (openat, statx, pread, pwrite, close), store the result and wake the op's
// task from the pool thread. Workers never park in this driver
// (park_in_driver is false, poll reaps nothing): completions arrive as wakes.
//
// Reads and writes on descriptors that cannot seek (pipes, sockets, ttys:
// pread answers ESPIPE) wait in poll(2) together with the shutdown eventfd
// and the pool thread's own eventfd and then read(2)/write(2), like io_uring
// does for them (the offset is ignored), so that shutdown or an abort can
// interrupt a read that would never complete.
//
// Sockets: net.cpp makes non-blocking socket calls itself and, when one
// answers EAGAIN, submits a `poll` op. Those never reach the pool threads:
// one reactor thread waits for them all in epoll (Tokio's readiness model,
// not a blocked thread per socket). Per descriptor the driver keeps the list
// of its waiting poll ops; the descriptor is registered EPOLLONESHOT with the
// union of their events, and re-armed (EPOLL_CTL_MOD, or ADD when the kernel
// forgot it because the descriptor was closed) whenever that union changes
// or an event fired. An event completes every op of that descriptor whose
// events it covers (all of them on EPOLLERR/EPOLLHUP) with the revents; the
// woken task retries its call. An op is withdrawn by cancel() while it
// waits (it then never completes), or completes as usual when the reactor
// took it first. A readiness that is no longer true only costs a retry.
//
// Cancellation (join_handle::abort, through io_op's cancel hook): an op still
// in the queue is unlinked (never run; a close op's descriptor is closed) and
// the task's frame is destroyed at once. An op a pool thread is running is
// marked cancel_state::requested and that thread's eventfd is signalled: a pipe or
// socket wait ends with -ECANCELED; any other call (a regular-file pread, an
// open, a close) just finishes. Either way its completion wakes the task and
// the scheduler destroys the frame instead of resuming it. A signal that
// arrives after the op finished is ignored by the thread's next wait (it
// checks the op's own flag, not the eventfd).
//
// Shutdown: the first on_worker_stop drops queued ops (-ECANCELED), signals
// the cancellation eventfd and from then on completes ops without waking
// their tasks (a file opened by such an op is closed). shutdown() waits until
// no op is queued or running, then joins the threads. A blocking call that
// cannot be interrupted (a regular-file read on a hung NFS mount, an open of
// a FIFO without writer) delays shutdown until it returns.
//
// Thread-safety: submit() and cancel() from any thread; the queue (and each
// op's `queued` and `home`) is guarded by its mutex.
// The wake-versus-stop race is closed by a count of wakes in progress that
// on_worker_stop waits to drop to zero after raising `stopping_`.
// Design source: docs/design.md "I/O driver" (fallback), Tokio's blocking pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "io_op.hpp"

namespace spindle::io::detail {

class threadpool_driver final : public spindle::detail::driver {
 public:
  /// Starts `threads` pool threads (0 = max(4, 2 x workers)) for the runtime
  /// of `host` (completions wake their tasks through io_host::wake). Throws
  /// std::system_error (EAGAIN, EMFILE, ...) when a thread or the
  /// cancellation eventfd cannot be created.
  threadpool_driver(spindle::detail::io_host& host, std::size_t workers, std::size_t threads);
  ~threadpool_driver() override;
  threadpool_driver(threadpool_driver const&) = delete;
  threadpool_driver& operator=(threadpool_driver const&) = delete;

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

  /// Number of pool threads (for tests).
  [[nodiscard]] std::size_t thread_count() const noexcept { return threads_.size(); }

 private:
  void run(std::size_t index) noexcept;
  int execute(io_op& op, int wake_fd) noexcept;
  int stream_io(io_op& op, int wake_fd) noexcept;
  void complete(io_op& op, int result) noexcept;
  void begin_stop() noexcept;
  bool submit_poll(io_op& op) noexcept;
  bool cancel_poll(io_op& op) noexcept;
  int rearm(int fd) noexcept;
  void run_reactor() noexcept;

  spindle::detail::io_host* host_;  ///< completions wake their tasks through it
  std::mutex mutex_;
  std::condition_variable work_cv_;  ///< queue not empty, or stop_threads_
  std::condition_variable idle_cv_;  ///< queue empty and nothing running
  io_op* head_ = nullptr;
  io_op* tail_ = nullptr;
  std::size_t running_ = 0;
  bool stop_threads_ = false;
  bool shut_down_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> wakes_in_progress_{0};
  int cancel_fd_ = -1;           ///< shutdown: ends every stream wait
  std::vector<int> thread_fds_;  ///< per pool thread: ends that thread's stream wait (abort)
  std::vector<std::thread> threads_;

  // The epoll reactor for `poll` ops (see the file comment).
  int epoll_fd_ = -1;
  int reactor_fd_ = -1;       ///< eventfd: ends the reactor thread at shutdown
  std::mutex reactor_mutex_;  ///< guards waiters_ and the `queued` flag of poll ops
  /// Per descriptor: its waiting poll ops (linked through next/prev).
  std::unordered_map<int, io_op*> waiters_;
  std::atomic<bool> reactor_exit_{false};
  std::thread reactor_;
};

}  // namespace spindle::io::detail
