// Helpers shared by the runtime test binaries (test_join, test_block_on,
// test_runtime, test_stress, ...): RAII counters, a task that never resumes,
// waiting for a join handle from a plain thread, a one-waiter event built on
// detail::wake, the stress scale and a no-progress watchdog.
//
// Nothing here measures time for correctness: deadlines only turn a hang
// (a lost wake-up) into a failure with a message.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "spindle/detail/task_header.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace spindle_test {

/// A coroutine type that no runtime runs (starts at once, never suspends at
/// its ends): for awaiting spindle awaitables outside any spindle task.
struct eager {
  struct promise_type {
    eager get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

/// An array of task headers that stand in for tasks in queue tests.
class fake_tasks {
 public:
  explicit fake_tasks(std::size_t n) : items_(new spindle::detail::task_header[n]), n_(n) {}
  spindle::detail::task_header* operator[](std::size_t i) const { return &items_[i]; }
  [[nodiscard]] std::size_t index(spindle::detail::task_header const* t) const {
    return static_cast<std::size_t>(t - items_.get());
  }
  [[nodiscard]] bool owns(spindle::detail::task_header const* t) const {
    return t >= items_.get() && t < items_.get() + n_;
  }
  [[nodiscard]] std::size_t size() const { return n_; }

 private:
  std::unique_ptr<spindle::detail::task_header[]> items_;
  std::size_t n_;
};

using namespace std::chrono_literals;

// ---------------------------------------------------------------------------
// Sanitizers and scale

#if defined(__SANITIZE_THREAD__)
inline constexpr bool under_tsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool under_tsan = true;
#else
inline constexpr bool under_tsan = false;
#endif
#else
inline constexpr bool under_tsan = false;
#endif

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool under_asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool under_asan = true;
#else
inline constexpr bool under_asan = false;
#endif
#else
inline constexpr bool under_asan = false;
#endif

/// Multiplier for iteration counts: SPINDLE_STRESS_SCALE if set (e.g. 0.1),
/// else 0.05 under ThreadSanitizer, 0.25 under AddressSanitizer, 1 otherwise.
inline double stress_scale() {
  static double const scale = [] {
    if (char const* env = std::getenv("SPINDLE_STRESS_SCALE"); env != nullptr && *env != '\0') {
      double v = std::strtod(env, nullptr);
      if (v > 0) return v;
    }
    if (under_tsan) return 0.05;
    if (under_asan) return 0.25;
    return 1.0;
  }();
  return scale;
}

/// `n` scaled by stress_scale(), at least `min`.
inline long scaled(long n, long min = 1) {
  long v = static_cast<long>(static_cast<double>(n) * stress_scale());
  return v < min ? min : v;
}

// ---------------------------------------------------------------------------
// Small tasks

/// A task that yields `v` at once.
SPINDLE_COROUTINE_TEMPLATE inline spindle::task<int> value_of(int v) {
  co_return v;
}

/// A task that awaits `h` (a join handle may only be awaited in a task).
template <class T>
SPINDLE_COROUTINE_TEMPLATE spindle::task<T> await_handle(spindle::join_handle<T> h) {
  co_return co_await h;
}

// ---------------------------------------------------------------------------
// RAII counting

struct counts {
  std::atomic<long> constructed{0};
  std::atomic<long> destroyed{0};
  [[nodiscard]] long alive() const { return constructed.load() - destroyed.load(); }
};

/// Counts its constructions (copies and moves included) and destructions.
class tracked {
 public:
  explicit tracked(counts& c) noexcept : c_(&c) { c_->constructed.fetch_add(1); }
  tracked(tracked const& o) noexcept : c_(o.c_) { c_->constructed.fetch_add(1); }
  tracked(tracked&& o) noexcept : c_(o.c_) { c_->constructed.fetch_add(1); }
  tracked& operator=(tracked const&) = delete;
  ~tracked() { c_->destroyed.fetch_add(1); }

 private:
  counts* c_;
};

// ---------------------------------------------------------------------------
// Awaitables

/// Suspends the current spindle task and never wakes it (a task "parked"
/// forever). Outside a spindle task it does not suspend. Nothing will wake
/// it, so abort() withdraws it at once (its hook always detaches).
struct suspend_forever {
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) const noexcept {
    spindle::detail::task_header* self = spindle::detail::suspend_current(h);
    if (self == nullptr) return false;
    static spindle::detail::cancel_hook always_detached{
        +[](spindle::detail::cancel_hook*) noexcept { return true; }};
    spindle::detail::set_cancel_hook(self, &always_detached);
    return true;
  }
  void await_resume() const noexcept {}
};

/// A gate one task at a time waits at; open() (any thread) waits until a
/// task is waiting and lets it through. Aborting the waiting task withdraws
/// it (cancel hook), so a task waiting here is destroyed at once by abort().
class gate : spindle::detail::cancel_hook {
 public:
  /// Waits (bounded) for a waiter and wakes it; false on timeout.
  bool open(std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (waiter_ != nullptr) {
          spindle::detail::task_header* t = std::exchange(waiter_, nullptr);
          ++opened_;
          spindle::detail::wake(t);
          return true;
        }
      }
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
  }
  [[nodiscard]] bool has_waiter() {
    std::lock_guard lock(mutex_);
    return waiter_ != nullptr;
  }
  [[nodiscard]] long opened() {
    std::lock_guard lock(mutex_);
    return opened_;
  }

  struct awaiter {
    gate* g;
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) const {
      spindle::detail::task_header* self = spindle::detail::suspend_current(h);
      if (self == nullptr) throw std::logic_error("gate awaited outside a spindle task");
      std::lock_guard lock(g->mutex_);
      if (g->waiter_ != nullptr) throw std::logic_error("gate: two waiters");
      g->waiter_ = self;
      spindle::detail::set_cancel_hook(self, g, &gate::withdraw);
      return true;
    }
    void await_resume() const noexcept {}
  };
  awaiter operator co_await() noexcept { return awaiter{this}; }

 private:
  static bool withdraw(spindle::detail::cancel_hook* hook) noexcept {
    auto* g = static_cast<gate*>(hook);
    std::lock_guard lock(g->mutex_);
    return std::exchange(g->waiter_, nullptr) != nullptr;
  }
  std::mutex mutex_;
  spindle::detail::task_header* waiter_ = nullptr;
  long opened_ = 0;
};

/// A reusable single-waiter event built on detail::wake: set() wakes the task
/// waiting in `co_await ev` (from any thread). The waiter calls reset() after
/// it resumed and before it lets the setter set again.
class test_event {
 public:
  void set() noexcept {
    std::uintptr_t prev = state_.exchange(set_value, std::memory_order_acq_rel);
    if (prev > set_value)
      spindle::detail::wake(reinterpret_cast<spindle::detail::task_header*>(prev));
  }
  void reset() noexcept { state_.store(0, std::memory_order_release); }
  [[nodiscard]] bool is_set() const noexcept {
    return state_.load(std::memory_order_acquire) == set_value;
  }
  /// True while a task is registered as waiting (suspended or suspending).
  [[nodiscard]] bool has_waiter() const noexcept {
    return state_.load(std::memory_order_acquire) > set_value;
  }

  struct awaiter {
    test_event* ev;
    bool await_ready() const noexcept { return ev->is_set(); }
    bool await_suspend(std::coroutine_handle<> h) const {
      spindle::detail::task_header* self = spindle::detail::suspend_current(h);
      if (self == nullptr) throw std::logic_error("test_event awaited outside a spindle task");
      std::uintptr_t expected = 0;
      return ev->state_.compare_exchange_strong(expected, reinterpret_cast<std::uintptr_t>(self),
                                                std::memory_order_acq_rel,
                                                std::memory_order_acquire);
    }
    void await_resume() const noexcept {}
  };
  awaiter operator co_await() noexcept { return awaiter{this}; }

 private:
  static constexpr std::uintptr_t set_value = 1;
  std::atomic<std::uintptr_t> state_{0};
};

// ---------------------------------------------------------------------------
// Waiting from plain threads (no block_on: the waiting thread runs no task)

/// Waits (polling, bounded) until `pred()`; returns false on timeout.
template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds limit = 30s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (int spins = 0; !pred(); ++spins) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (spins < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(100us);
    }
  }
  return true;
}

/// Waits from a non-runtime thread until the task finished, then takes its
/// result (rethrowing). A task that does not finish within `limit` throws
/// std::runtime_error (a hang becomes a failure).
template <class T>
T wait_and_take(spindle::join_handle<T>& h, std::chrono::milliseconds limit = 30s) {
  if (!wait_until([&] { return h.is_finished(); }, limit)) {
    throw std::runtime_error("wait_and_take: task did not finish in time (lost wake-up?)");
  }
  return h.take();
}

/// Spawns `t` from the calling (non-runtime) thread, so that it runs on a
/// worker, and waits for it without running tasks on this thread.
template <class T>
T run_on_worker(spindle::runtime& rt, spindle::task<T> t) {
  auto h = rt.spawn(std::move(t));
  return wait_and_take(h);
}

/// Keeps the worker that runs it busy (no suspension) until `*stop`; sets
/// `*running` first. With a 1-worker runtime this holds woken tasks in the
/// queue, so that they can be aborted after their wake and before they run.
/// static, not inline: clang 14 with -fsanitize=address cannot emit an inline
/// (comdat) coroutine ("Cannot represent a difference across sections").
[[maybe_unused]] static spindle::task<void> occupy_worker(std::atomic<bool>* running,
                                                          std::atomic<bool>* stop) {
  running->store(true);
  while (!stop->load())
    std::this_thread::yield();
  co_return;
}

// ---------------------------------------------------------------------------
// Watchdog

/// Progress counter that long tests bump; the watchdog aborts the process
/// with a message when it does not move for the stall limit.
inline std::atomic<std::uint64_t> g_progress{0};
inline void progress() noexcept {
  g_progress.fetch_add(1, std::memory_order_relaxed);
}

class watchdog {
 public:
  explicit watchdog(std::chrono::seconds stall) : stall_(stall), thread_([this] { run(); }) {}
  watchdog(watchdog const&) = delete;
  watchdog& operator=(watchdog const&) = delete;
  ~watchdog() {
    stop_.store(true);
    thread_.join();
  }

 private:
  void run() {
    std::uint64_t last = g_progress.load();
    auto last_change = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      std::this_thread::sleep_for(50ms);
      std::uint64_t now_value = g_progress.load();
      auto now = std::chrono::steady_clock::now();
      if (now_value != last) {
        last = now_value;
        last_change = now;
        continue;
      }
      if (now - last_change > stall_) {
        std::string name = "?";
        if (auto const* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
          name = std::string(info->test_suite_name()) + "." + info->name();
        }
        std::fprintf(stderr,
                     "\n[watchdog] FAILED: no progress for %lld s in %s: lost wake-up or "
                     "deadlock\n",
                     static_cast<long long>(stall_.count()), name.c_str());
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
  }

  std::chrono::seconds stall_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// Installs a process-wide watchdog for a test binary: progress is bumped at
/// every test start and end, and by tests through progress().
class watchdog_environment : public ::testing::Environment {
 public:
  explicit watchdog_environment(std::chrono::seconds stall) : stall_(stall) {}
  void SetUp() override {
    dog_ = new watchdog(stall_);
    ::testing::UnitTest::GetInstance()->listeners().Append(new forwarder);
  }
  void TearDown() override {
    delete dog_;
    dog_ = nullptr;
  }

 private:
  struct forwarder : ::testing::EmptyTestEventListener {
    void OnTestStart(::testing::TestInfo const&) override { progress(); }
    void OnTestEnd(::testing::TestInfo const&) override { progress(); }
  };
  std::chrono::seconds stall_;
  watchdog* dog_ = nullptr;
};

/// Stall limit: `base` seconds, tripled under sanitizers.
inline std::chrono::seconds stall_limit(int base) {
  return std::chrono::seconds(under_tsan || under_asan ? 3 * base : base);
}

}  // namespace spindle_test
