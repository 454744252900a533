// spindle::fold_pool's threads and dispatch (hylic's funnel pool).
//
// Pool threads sleep on a futex word (an event count: `epoch`) between
// folds. dispatch, under a mutex (folds take turns):
//   publish  job = {fn, data}; job_ptr = &job; ++epoch; wake all
//   body     the caller walks the root and helps until the root is done
//   seal     job_ptr = nullptr: no thread enters the job any more
//   latch    wait until in_job == 0
// A thread raises in_job BEFORE it reads job_ptr and lowers it after the job
// returns, so once the latch sees zero after the seal no thread holds, or
// can still obtain, a pointer into the caller's stack (the job and the fold
// state). The steps are detail/fold_dispatch.hpp's (simulated step by step
// in tests/test_fold.cpp).
// Thread-safety: see spindle/fold.hpp. Design source: hylic's fold pool.
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "futex.hpp"
#include "spindle/detail/fold_dispatch.hpp"
#include "spindle/fold.hpp"

namespace spindle {

namespace detail {
std::atomic<void (*)(std::size_t, bool)> fold_pool_entry_hook{nullptr};
}  // namespace detail

struct fold_pool::shared {
  struct job {
    job_fn fn;
    void* data;
  };
  std::atomic<bool> shutdown{false};
  detail::fold_dispatch<job> protocol;  // job pointer + in_job counter
  std::atomic<std::uint32_t> epoch{0};
  std::mutex dispatch_lock;
  std::vector<std::thread> threads;

  void thread_main(std::size_t index) noexcept {
    std::uint32_t seen = 0;
    for (;;) {
      for (;;) {
        std::uint32_t e = epoch.load(std::memory_order_acquire);
        if (shutdown.load(std::memory_order_acquire)) return;
        if (e != seen) {
          seen = e;
          break;
        }
        detail::futex_wait(&epoch, e);
      }
      job const* j = protocol.enter();  // counted in before the job pointer is read
      if (j != nullptr) {
        auto hook = detail::fold_pool_entry_hook.load(std::memory_order_relaxed);
        if (hook != nullptr) hook(index, true);
        j->fn(j->data, index);
        if (hook != nullptr) hook(index, false);
      }
      protocol.leave();
    }
  }

  void stop() noexcept {
    shutdown.store(true, std::memory_order_release);
    epoch.fetch_add(1, std::memory_order_acq_rel);
    detail::futex_wake(&epoch);
    for (auto& t : threads)
      t.join();
    threads.clear();
  }
};

fold_pool::fold_pool(std::size_t threads) : threads_(threads), shared_(std::make_unique<shared>()) {
  try {
    shared_->threads.reserve(threads);
    for (std::size_t i = 0; i < threads; ++i) {
      shared_->threads.emplace_back([s = shared_.get(), i] { s->thread_main(i); });
    }
  } catch (std::system_error const&) {
    shared_->stop();
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "spindle::fold_pool: cannot start a thread");
  }
}

fold_pool::~fold_pool() {
  shared_->stop();
}

void fold_pool::dispatch(void* data, job_fn fn, void* arg, body_fn body) {
  std::lock_guard<std::mutex> guard(shared_->dispatch_lock);
  shared::job j{fn, data};
  // publish
  shared_->protocol.publish(&j);
  shared_->epoch.fetch_add(1, std::memory_order_acq_rel);
  if (threads_ != 0) detail::futex_wake(&shared_->epoch);
  // body
  body(arg);
  // seal
  shared_->protocol.seal();
  // latch
  std::uint32_t spins = 0;
  while (!shared_->protocol.latched()) {
    if (++spins < 128) {
      detail::cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace spindle
