// The dispatch protocol of spindle::fold_pool (hylic's fold pool): publish, body,
// seal, latch, as separate steps, so that fold_pool.cpp runs them in order
// and tests/test_fold.cpp's deterministic simulation interleaves them with
// pool threads' steps one at a time.
//
//   caller  publish(job)  job_ptr = job                (then wakes the threads)
//           ...body...
//           seal()        job_ptr = nullptr
//           latched()     in_job == 0: nothing can still reach the job
//   thread  enter()       in_job += 1, THEN read job_ptr (the job, or nullptr)
//           ...the job, when enter() returned one...
//           leave()       in_job -= 1
//
// Invariant: once seal() ran and latched() returned true, no thread holds
// the job pointer (a thread that read it counted itself first), so the
// caller may destroy the job and the fold state on its stack.
// All four use seq_cst on the two words: the thread's increment and read and
// the caller's seal and latch read fall in one total order.
// Thread-safety: enter/leave from pool threads, the rest from the caller
// holding the pool's dispatch lock. Design source: hylic's fold pool.
#pragma once

#include <atomic>
#include <cstdint>

namespace spindle::detail {

template <class Job>
class fold_dispatch {
 public:
  void publish(Job const* job) noexcept { job_ptr_.store(job, std::memory_order_seq_cst); }
  void seal() noexcept { job_ptr_.store(nullptr, std::memory_order_seq_cst); }
  [[nodiscard]] bool latched() const noexcept {
    return in_job_.load(std::memory_order_seq_cst) == 0;
  }

  /// In this order: count this thread in, then read the job pointer.
  [[nodiscard]] Job const* enter() noexcept {
    count_in();
    return read_job();
  }
  // enter()'s two steps, apart for the simulation.
  void count_in() noexcept { in_job_.fetch_add(1, std::memory_order_seq_cst); }
  [[nodiscard]] Job const* read_job() const noexcept {
    return job_ptr_.load(std::memory_order_seq_cst);
  }
  void leave() noexcept { in_job_.fetch_sub(1, std::memory_order_release); }

 private:
  std::atomic<Job const*> job_ptr_{nullptr};
  std::atomic<std::uint32_t> in_job_{0};
};

}  // namespace spindle::detail
