// Helpers shared by the synchronization-primitive tests (test_mutex,
// test_semaphore, test_event, test_notify, test_latch, test_barrier,
// test_rwlock): racing two actions from two threads, misuse error codes,
// waiting for aborted tasks, and which worker a task runs on.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <system_error>
#include <thread>
#include <utility>

#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace sync_test {

using namespace std::chrono_literals;

/// Errno-style code of the std::system_error thrown by `fn`, or a default
/// error_code when it throws nothing.
template <class Fn>
std::error_code system_error_of(Fn&& fn) {
  try {
    fn();
  } catch (std::system_error const& e) {
    return e.code();
  }
  return {};
}

inline void spin(int n) {
  for (int i = 0; i < n; ++i) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
}

/// The skew for round `r` of a race loop: spread over [-50000, 150000] spins
/// (tens of microseconds each way), so that the loop covers `a` well before
/// `b`, both at once, and `b` well after `a` (after a woken task resumed).
inline int skew_for(long r) {
  return static_cast<int>((r * 7919) % 200001) - 50000;
}

/// Runs `a` on a helper thread and `b` on the calling thread at nearly the
/// same moment. `skew` (may be negative) delays `b` (or `a`) by that many
/// spins, so that a loop over skews covers both orders and the overlap.
template <class A, class B>
void race(A&& a, B&& b, int skew) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::thread helper([&] {
    ready.fetch_add(1);
    while (!go.load(std::memory_order_acquire)) {
    }
    if (skew < 0) spin(-skew);
    a();
  });
  while (ready.load() == 0) {
  }
  go.store(true, std::memory_order_release);
  if (skew > 0) spin(skew);
  b();
  helper.join();
}

/// Waits (bounded) for a task to finish; true when it was cancelled, false
/// when it completed normally. A task that does not finish fails the test.
template <class T>
bool ended_cancelled(spindle::join_handle<T>& h) {
  bool finished = spindle_test::wait_until([&] { return h.is_finished(); }, 30s);
  EXPECT_TRUE(finished) << "task did not finish (lost wake-up?)";
  if (!finished) return false;
  try {
    (void)h.take();
  } catch (spindle::task_cancelled const&) {
    return true;
  }
  return false;
}

/// Index of the worker running the caller, or not_a_worker.
inline std::size_t worker_index() {
  return spindle::detail::current_worker_index();
}

/// Spins (bounded) until `prim.waiter_count() == n`.
template <class Primitive>
bool wait_for_waiters(Primitive const& prim, std::size_t n) {
  return spindle_test::wait_until([&] { return prim.waiter_count() == n; });
}

inline constexpr std::size_t no_worker = spindle::detail::not_a_worker;

/// Where a waiter task suspended and resumed (written by the waiter).
struct waiter_trace {
  std::atomic<std::size_t> suspended_on{no_worker};
  std::atomic<std::size_t> resumed_on{no_worker};
  /// Call just before the co_await of the primitive.
  void before() { suspended_on.store(worker_index()); }
  /// Call just after it.
  void after() { resumed_on.store(worker_index()); }
};

using spindle_test::occupy_worker;

/// Waits on `prim` (its wait()), then counts the wake in `*woken`; `local`
/// counts the frame's life. Shared by the event, latch and notify tests.
/// static, not inline: see spindle_test::occupy_worker.
template <class Primitive>
[[maybe_unused]] static spindle::task<void> wait_then_count(
    Primitive* prim, [[maybe_unused]] spindle_test::tracked local, std::atomic<int>* woken) {
  co_await prim->wait();
  woken->fetch_add(1);
}

/// Waits on `prim` (its wait()), recording where it suspended and resumed.
/// static, not inline: see spindle_test::occupy_worker.
template <class Primitive>
[[maybe_unused]] static spindle::task<void> wait_traced(Primitive* prim, waiter_trace* trace) {
  trace->before();
  co_await prim->wait();
  trace->after();
}

/// Awaits `start()` on the calling thread, outside any spindle task, and
/// stores the code of the std::system_error it throws in `*code`; sets
/// `*completed` (if given) when the await completed instead. A result (a
/// guard, a permit) is dropped at once. static, not inline: see
/// spindle_test::occupy_worker.
template <class Start>
[[maybe_unused]] static spindle_test::eager await_outside_a_task(Start start, std::error_code* code,
                                                                 bool* completed = nullptr) {
  try {
    (void)co_await start();
    if (completed != nullptr) *completed = true;
  } catch (std::system_error const& e) {
    *code = e.code();
  }
}

namespace detail_ {
struct pins {
  std::atomic<int> running{0};
  std::atomic<std::size_t> worker[2] = {no_worker, no_worker};
  std::atomic<int> command[2] = {0, 0};  // 0 spin, 1 run `action` then end, 2 end
  std::function<void()> action;
  std::function<spindle::task<void>()> async_action;  ///< instead of `action`
};

// static, not inline: clang 14 with -fsanitize=address cannot emit an inline
// (comdat) coroutine ("Cannot represent a difference across sections").
[[maybe_unused]] static spindle::task<void> pin(pins* p, int i) {
  p->worker[i].store(worker_index());
  p->running.fetch_add(1);
  for (;;) {
    int cmd = p->command[i].load();
    if (cmd == 1) {
      if (p->async_action) {
        co_await p->async_action();  // must complete without suspending
      } else {
        p->action();
      }
    }
    if (cmd != 0) co_return;
    std::this_thread::yield();  // keeps this worker busy
  }
}
}  // namespace detail_

/// Cross-worker wake, made deterministic on a runtime of exactly 2 workers:
/// the waiter traced by `trace` has suspended (on worker X). Two spinning
/// tasks then occupy both workers; the one that is not on X runs the wake (so
/// the wake comes from the other worker), while the one on X keeps X busy
/// until the waiter resumed, so it can only resume on the other worker.
/// Returns the worker the wake ran on.
inline std::size_t wake_from_the_other_worker_with(spindle::runtime& rt, waiter_trace& trace,
                                                   detail_::pins& p) {
  std::size_t x = trace.suspended_on.load();
  EXPECT_NE(x, no_worker) << "the waiter did not record its worker";
  // One at a time: a worker fetching both from the global queue would keep
  // the second in its private batch buffer while it spins on the first.
  auto h0 = rt.spawn(detail_::pin(&p, 0));
  EXPECT_TRUE(spindle_test::wait_until([&] { return p.running.load() == 1; }));
  auto h1 = rt.spawn(detail_::pin(&p, 1));
  bool both = spindle_test::wait_until([&] { return p.running.load() == 2; });
  EXPECT_TRUE(both) << "the two pinning tasks never ran at the same time";
  int other = p.worker[0].load() == x ? 1 : 0;
  std::size_t waker = p.worker[other].load();
  p.command[other].store(1);
  bool resumed = spindle_test::wait_until([&] { return trace.resumed_on.load() != no_worker; });
  EXPECT_TRUE(resumed) << "a waiter woken from another worker did not resume";
  p.command[1 - other].store(2);
  spindle_test::wait_and_take(h0);
  spindle_test::wait_and_take(h1);
  EXPECT_NE(waker, x) << "the wake did not come from another worker";
  EXPECT_NE(trace.resumed_on.load(), x) << "resumed on the worker that was kept busy";
  return waker;
}

/// Runs `wake` (a plain callable) as described above.
template <class Wake>
std::size_t wake_from_the_other_worker(spindle::runtime& rt, waiter_trace& trace, Wake wake) {
  detail_::pins p;
  p.action = wake;
  return wake_from_the_other_worker_with(rt, trace, p);
}

/// The same, with a wake that is a task (it must complete without
/// suspending, e.g. the arrival that completes a barrier phase).
inline std::size_t wake_from_the_other_worker_async(spindle::runtime& rt, waiter_trace& trace,
                                                    std::function<spindle::task<void>()> wake) {
  detail_::pins p;
  p.async_action = std::move(wake);
  return wake_from_the_other_worker_with(rt, trace, p);
}

}  // namespace sync_test
