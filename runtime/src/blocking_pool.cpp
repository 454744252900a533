// The blocking pool (see blocking_pool.hpp for the protocol).
#include "blocking_pool.hpp"

#include <pthread.h>

#include <system_error>
#include <utility>

#include "scheduler.hpp"

namespace spindle::detail {

blocking_pool::blocking_pool(scheduler& sched, std::size_t max_threads,
                             std::chrono::milliseconds keep_alive)
    : sched_(sched), max_threads_(max_threads), keep_alive_(keep_alive) {
  if (max_threads == 0) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: runtime_config::max_blocking_threads must be at least 1");
  }
  if (keep_alive.count() < 0) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: runtime_config::blocking_keep_alive must not be negative");
  }
}

blocking_pool::~blocking_pool() {
  shutdown();
}

blocking_submit blocking_pool::submit(blocking_job& job) noexcept {
  std::lock_guard lock(mutex_);
  if (stopping_) return blocking_submit::shutting_down;
  job.pool = this;
  push_back_locked(&job);
  if (idle_ > 0) {
    --idle_;
    ++notified_;
    work_cv_.notify_one();
    return blocking_submit::queued;
  }
  if (threads_.size() < max_threads_) {
    try {
      start_thread_locked();
    } catch (...) {
      // With other threads alive the job waits for one of them; with none
      // nothing would ever run it.
      if (threads_.empty()) {
        unlink_locked(&job);
        return blocking_submit::no_thread;
      }
    }
  }
  return blocking_submit::queued;
}

bool blocking_pool::cancel(blocking_job& job) noexcept {
  std::lock_guard lock(mutex_);
  if (!job.queued) return false;  // running, or finished and waking its task
  unlink_locked(&job);
  return true;
}

void blocking_pool::stop() noexcept {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  // Withdrawn: never run, never woken. Their tasks stay suspended and the
  // runtime destroys their frames with the other unfinished tasks.
  while (pop_front_locked() != nullptr) {
  }
  work_cv_.notify_all();
}

void blocking_pool::shutdown() noexcept {
  stop();
  std::unique_lock lock(mutex_);
  exit_cv_.wait(lock, [this] { return threads_.empty(); });
  std::thread last = std::move(exited_);
  lock.unlock();
  if (last.joinable()) last.join();
}

blocking_pool_stats blocking_pool::stats() const {
  std::lock_guard lock(mutex_);
  return blocking_pool_stats{
      .threads = threads_.size(),
      .idle = idle_,
      .queue_depth = queue_depth_,
      .completed = completed_,
  };
}

void blocking_pool::start_thread_locked() {
  auto it = threads_.emplace(threads_.end());
  try {
    // The thread takes the mutex first thing, so it cannot retire (and move
    // its std::thread out of the list) before this assignment is done.
    *it = std::thread([this, it] { run(it); });
  } catch (...) {
    threads_.erase(it);
    throw;
  }
}

void blocking_pool::run(thread_list::iterator self) noexcept {
  ::pthread_setname_np(::pthread_self(), "spindle-block");
  this_thread_context() = thread_context{&sched_, nullptr, nullptr};
  std::unique_lock lock(mutex_);
  bool idle = false;  // counted in idle_ (or claimed through notified_)
  for (;;) {
    if (!idle) {
      if (blocking_job* job = pop_front_locked()) {
        run_job(lock, job, idle);
        continue;
      }
      if (stopping_) break;
      ++idle_;
      idle = true;
    }
    if (!wait_for_claim(lock)) break;
    idle = false;
  }
  retire(lock, self);
}

void blocking_pool::run_job(std::unique_lock<std::mutex>& lock, blocking_job* job,
                            bool& idle) noexcept {
  lock.unlock();
  task_header* task = job->task;
  job->run(job);  // `job` is not touched again: its frame may go at the wake
  lock.lock();
  ++completed_;
  // Shutdown: the task is not resumed; the runtime destroys its frame (and
  // the outcome in it) once this thread has retired.
  if (stopping_) return;
  if (head_ == nullptr) {
    // Idle before the wake: the task may submit its next job the moment it
    // resumes, and should find this thread rather than start another.
    ++idle_;
    idle = true;
  }
  lock.unlock();
  wake(task);  // before retiring: shutdown waits for this thread
  lock.lock();
}

bool blocking_pool::wait_for_claim(std::unique_lock<std::mutex>& lock) noexcept {
  auto const deadline = std::chrono::steady_clock::now() + keep_alive_;
  for (;;) {
    if (notified_ > 0) {
      --notified_;
      return true;
    }
    if (stopping_) break;
    if (work_cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (notified_ > 0) {
        --notified_;
        return true;
      }
      break;  // idle for keep_alive: exit
    }
  }
  --idle_;
  return false;
}

void blocking_pool::retire(std::unique_lock<std::mutex>& lock,
                           thread_list::iterator self) noexcept {
  // This thread becomes the one the next retiring thread (or shutdown)
  // joins; it joins its predecessor, which has left the pool already.
  std::thread previous = std::move(exited_);
  exited_ = std::move(*self);
  threads_.erase(self);
  if (threads_.empty()) exit_cv_.notify_all();
  lock.unlock();
  if (previous.joinable()) previous.join();
}

void blocking_pool::push_back_locked(blocking_job* job) noexcept {
  job->next = nullptr;
  job->prev = tail_;
  (tail_ != nullptr ? tail_->next : head_) = job;
  tail_ = job;
  job->queued = true;
  ++queue_depth_;
}

blocking_job* blocking_pool::pop_front_locked() noexcept {
  blocking_job* job = head_;
  if (job != nullptr) unlink_locked(job);
  return job;
}

void blocking_pool::unlink_locked(blocking_job* job) noexcept {
  (job->prev != nullptr ? job->prev->next : head_) = job->next;
  (job->next != nullptr ? job->next->prev : tail_) = job->prev;
  job->next = job->prev = nullptr;
  job->queued = false;
  --queue_depth_;
}

// ---------------------------------------------------------------------------
// The entry points of detail/blocking_job.hpp

blocking_submit submit_blocking(scheduler* sched, blocking_job& job) noexcept {
  return sched->blocking().submit(job);
}

bool cancel_blocking(blocking_job& job) noexcept {
  // Never taken (the pool had shut down): nothing will wake the task.
  if (job.pool == nullptr) return true;
  return job.pool->cancel(job);
}

}  // namespace spindle::detail
