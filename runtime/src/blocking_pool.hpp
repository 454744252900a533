// The blocking pool: the threads that run spawn_blocking jobs.
//
// Shape: one FIFO queue of intrusive jobs (detail/blocking_job.hpp) and a
// set of threads, all guarded by one mutex. The pool starts with no thread.
// submit() queues the job and claims an idle thread if there is one (idle
// count down, claim count up, notify one); otherwise it starts a new thread
// while fewer than `max_threads` exist; otherwise the job waits in the queue
// for the next thread that finishes a job. A thread runs jobs until the
// queue is empty, then waits for a claim; a thread that waits longer than
// `keep_alive` without being claimed exits (the next exiting thread, or
// shutdown, joins it). A thread that finishes a job with the queue empty
// counts itself idle before it wakes the job's task, so a task that submits
// its next job as soon as it resumes reuses that thread.
//
// Pool threads run with the runtime as their context: spindle::spawn and
// spindle::spawn_blocking work inside a job (as remote spawns), and so does
// runtime::block_on.
//
// Shutdown (the runtime's destructor): stop() withdraws the queued jobs
// (never run; their tasks stay suspended and are destroyed with the other
// unfinished tasks), ends idle threads at once and refuses later submits
// (shutting_down: the task stays suspended likewise). shutdown() then waits
// for every running job to return (like Tokio, a job that never returns
// makes it wait forever) and joins the threads. Jobs that finish after
// stop() do not wake their tasks.
//
// Thread-safety: submit, cancel and stats from any thread; shutdown from the
// runtime's owner.
// Design source: Tokio's blocking pool (spawn on demand up to a cap, idle
// count plus notification count against spurious wake-ups, keep-alive,
// shutdown drops queued tasks and waits for running ones).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <thread>

#include "spindle/detail/blocking_job.hpp"

namespace spindle::detail {

class scheduler;

struct blocking_pool_stats {
  std::uint64_t threads = 0;      ///< alive (busy or idle)
  std::uint64_t idle = 0;         ///< waiting for a job, unclaimed
  std::uint64_t queue_depth = 0;  ///< queued jobs no thread has taken
  std::uint64_t completed = 0;    ///< jobs run to the end
};

class blocking_pool {
 public:
  /// Throws std::system_error(std::errc::invalid_argument) when
  /// `max_threads` is 0 or `keep_alive` is negative. Starts no thread.
  blocking_pool(scheduler& sched, std::size_t max_threads, std::chrono::milliseconds keep_alive);
  /// Shuts down (see the file comment).
  ~blocking_pool();
  blocking_pool(blocking_pool const&) = delete;
  blocking_pool& operator=(blocking_pool const&) = delete;

  /// Queues `job` (run and task set). See blocking_submit.
  [[nodiscard]] blocking_submit submit(blocking_job& job) noexcept;
  /// Withdraws `job` if it is still queued. Returns whether it was.
  bool cancel(blocking_job& job) noexcept;
  /// Stops taking jobs: withdraws the queued ones, ends idle threads; later
  /// submits answer shutting_down. Does not wait. Idempotent.
  void stop() noexcept;
  /// stop(), then waits for running jobs and joins every thread. Idempotent.
  void shutdown() noexcept;

  [[nodiscard]] blocking_pool_stats stats() const;

 private:
  using thread_list = std::list<std::thread>;

  void run(thread_list::iterator self) noexcept;
  void run_job(std::unique_lock<std::mutex>& lock, blocking_job* job, bool& idle) noexcept;
  bool wait_for_claim(std::unique_lock<std::mutex>& lock) noexcept;
  void retire(std::unique_lock<std::mutex>& lock, thread_list::iterator self) noexcept;
  void start_thread_locked();
  void push_back_locked(blocking_job* job) noexcept;
  blocking_job* pop_front_locked() noexcept;
  void unlink_locked(blocking_job* job) noexcept;

  scheduler& sched_;
  std::size_t const max_threads_;
  std::chrono::milliseconds const keep_alive_;

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  ///< a claim was made, or stopping_
  std::condition_variable exit_cv_;  ///< threads_ became empty
  blocking_job* head_ = nullptr;
  blocking_job* tail_ = nullptr;
  std::size_t queue_depth_ = 0;
  std::size_t idle_ = 0;      ///< threads waiting for a claim, unclaimed
  std::size_t notified_ = 0;  ///< claims not yet taken by a waiting thread
  std::uint64_t completed_ = 0;
  bool stopping_ = false;
  thread_list threads_;  ///< every thread that has not retired
  std::thread exited_;   ///< the last retired thread, joined by the next one or shutdown
};

}  // namespace spindle::detail
