// Tests of the park word (runtime/src/park.{hpp,cpp}): futex parking, parking
// inside a driver, and that no unpark is ever lost.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>

#include "driver.hpp"
#include "park.hpp"
#include "runtime_test_support.hpp"
#include "spindle/runtime.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::detail::park_word;

/// A driver whose park() blocks until its unpark() (or a simulated
/// completion), counting the calls and the index they carried.
class fake_driver final : public spindle::detail::driver {
 public:
  spindle::io_backend backend() const noexcept override { return spindle::io_backend::threadpool; }
  void on_worker_start(std::size_t) override {}
  std::size_t poll(std::size_t) noexcept override { return 0; }
  bool park_in_driver(std::size_t) const noexcept override { return true; }
  void park(std::size_t index, std::uint64_t deadline_ns) noexcept override {
    std::unique_lock lock(mutex_);
    ++park_calls;
    last_park_index = index;
    last_deadline = deadline_ns;
    in_park = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return tokens_ > 0; });
    --tokens_;
    in_park = false;
  }
  void unpark(std::size_t index) noexcept override {
    std::lock_guard lock(mutex_);
    ++unpark_calls;
    last_unpark_index = index;
    ++tokens_;
    cv_.notify_all();
  }
  /// Simulates an I/O completion: wakes park() without an unpark() call.
  void complete_one() {
    std::lock_guard lock(mutex_);
    ++tokens_;
    cv_.notify_all();
  }
  void on_worker_stop(std::size_t) noexcept override {}
  void shutdown() noexcept override {}
  bool submit(spindle::detail::io_op&) noexcept override { return false; }  // never called here
  bool cancel(spindle::detail::io_op&) noexcept override { return false; }
  std::uint64_t last_deadline = 0;

  bool wait_in_park(std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return in_park; });
  }
  int parks() {
    std::lock_guard lock(mutex_);
    return park_calls;
  }
  int unparks() {
    std::lock_guard lock(mutex_);
    return unpark_calls;
  }

  int park_calls = 0;
  int unpark_calls = 0;
  std::size_t last_park_index = 99;
  std::size_t last_unpark_index = 99;
  bool in_park = false;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int tokens_ = 0;
};

/// Runs `fn` on a thread and reports whether it returned within `limit`
/// (only to turn a hang into a failure; `rescue` releases it afterwards).
template <class Fn, class Rescue>
bool returns_within(Fn fn, std::chrono::milliseconds limit, Rescue rescue) {
  std::atomic<bool> done{false};
  std::thread t([&] {
    fn();
    done.store(true);
  });
  bool ok = spindle_test::wait_until([&] { return done.load(); }, limit);
  if (!ok) rescue();
  t.join();
  return ok;
}

TEST(ParkWord, UnparkBeforeParkReturnsImmediately) {
  park_word pw;
  fake_driver drv;
  pw.unpark(drv, 0);
  EXPECT_TRUE(returns_within([&] { pw.park(); }, 10s, [&] { pw.unpark(drv, 0); }))
      << "a notification that arrived before park() was lost";
  EXPECT_EQ(drv.unparks(), 0) << "futex unpark must not go through the driver";
}

TEST(ParkWord, ParkConsumesTheNotification) {
  park_word pw;
  fake_driver drv;
  pw.unpark(drv, 0);
  pw.unpark(drv, 0);  // several unparks coalesce into one notification
  pw.unpark(drv, 0);
  pw.park();  // returns at once
  // The next park must sleep until another unpark. It may only be observed
  // not returning: a buggy park that returns at once is caught, a correct
  // one passes whatever the timing.
  std::atomic<bool> returned{false};
  std::thread t([&] {
    pw.park();
    returned.store(true);
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned.load()) << "park returned without a new unpark";
  pw.unpark(drv, 0);
  t.join();
  EXPECT_TRUE(returned.load());
}

TEST(ParkWord, UnparkFromAnotherThreadWakesParkedThread) {
  for (int round = 0; round < 50; ++round) {
    park_word pw;
    fake_driver drv;
    std::atomic<bool> parked_returned{false};
    std::thread sleeper([&] {
      pw.park();
      parked_returned.store(true);
    });
    if (round % 2 == 0) std::this_thread::sleep_for(1ms);  // usually really asleep by now
    pw.unpark(drv, 0);
    ASSERT_TRUE(spindle_test::wait_until([&] { return parked_returned.load(); }, 10s))
        << "unpark did not wake the parked thread (round " << round << ")";
    sleeper.join();
  }
}

TEST(ParkWord, ParkInDriverCallsDriverParkAndUnpark) {
  park_word pw;
  fake_driver drv;
  std::atomic<bool> returned{false};
  std::thread worker([&] {
    pw.park_in_driver(drv, 7);
    returned.store(true);
  });
  ASSERT_TRUE(drv.wait_in_park()) << "park_in_driver did not call driver::park";
  EXPECT_EQ(drv.last_park_index, 7u);
  EXPECT_FALSE(returned.load());
  // Parked inside the driver: unpark must go through driver::unpark(index).
  pw.unpark(drv, 7);
  worker.join();
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(drv.parks(), 1);
  EXPECT_EQ(drv.unparks(), 1);
  EXPECT_EQ(drv.last_unpark_index, 7u);

  // Back to UNPARKED: a later unpark only notifies the word, and the next
  // park_in_driver returns without entering the driver.
  pw.unpark(drv, 7);
  EXPECT_EQ(drv.unparks(), 1) << "unpark of an awake worker called driver::unpark";
  pw.park_in_driver(drv, 7);
  EXPECT_EQ(drv.parks(), 1) << "park_in_driver entered the driver despite a pending notification";
}

TEST(ParkWord, ParkInDriverReturnsOnCompletionAndIsReusable) {
  park_word pw;
  fake_driver drv;
  std::thread worker([&] { pw.park_in_driver(drv, 3); });
  ASSERT_TRUE(drv.wait_in_park());
  drv.complete_one();  // an I/O completion, not an unpark
  worker.join();
  EXPECT_EQ(drv.unparks(), 0);

  // The word is UNPARKED again: a futex park now sleeps until unpark, and
  // that unpark does not touch the driver.
  std::thread sleeper([&] { pw.park(); });
  std::this_thread::sleep_for(5ms);
  pw.unpark(drv, 3);
  sleeper.join();
  EXPECT_EQ(drv.unparks(), 0);
}

// Two threads hand a turn back and forth through their park words 100k
// times. A lost wake-up hangs (caught by the deadline); an early return is
// caught by the turn check.
TEST(ParkWord, PingPongLosesNoWakeUp) {
  long const rounds = spindle_test::scaled(100'000, 10'000);
  park_word a;
  park_word b;
  fake_driver drv;
  std::atomic<long> turn{0};
  std::atomic<long> errors{0};
  std::atomic<long> progress{0};
  std::atomic<bool> abandon{false};

  std::thread pong([&] {
    for (long i = 0; i < rounds && !abandon.load(); ++i) {
      b.park();
      if (turn.load() != 2 * i + 1) errors.fetch_add(1);
      turn.store(2 * i + 2);
      a.unpark(drv, 0);
    }
  });
  std::thread ping([&] {
    for (long i = 0; i < rounds && !abandon.load(); ++i) {
      turn.store(2 * i + 1);
      b.unpark(drv, 1);
      a.park();
      if (turn.load() != 2 * i + 2) errors.fetch_add(1);
      progress.store(i + 1);
    }
  });
  // Deadline only against hangs: progress must keep moving.
  long last = -1;
  auto last_change = std::chrono::steady_clock::now();
  while (progress.load() < rounds) {
    long p = progress.load();
    if (p != last) {
      last = p;
      last_change = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - last_change > spindle_test::stall_limit(10)) {
      abandon.store(true);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  bool hung = abandon.load();
  if (hung) {
    // Release both so the threads can be joined.
    for (int i = 0; i < 4; ++i) {
      a.unpark(drv, 0);
      b.unpark(drv, 1);
      std::this_thread::sleep_for(10ms);
    }
  }
  ping.join();
  pong.join();
  EXPECT_FALSE(hung) << "lost wake-up after " << progress.load() << " rounds";
  EXPECT_EQ(errors.load(), 0) << "park returned before its partner's unpark";
  EXPECT_EQ(drv.unparks(), 0);
}

std::uint64_t steady_now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

TEST(ParkWord, ParkWithADeadlineReturnsWhenItPasses) {
  park_word w;
  auto start = std::chrono::steady_clock::now();
  w.park(steady_now_ns() + 20'000'000);  // 20 ms, nobody unparks
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
  // A deadline in the past returns at once.
  w.park(steady_now_ns() - 1);
}

TEST(ParkWord, UnparkEndsAParkWithADeadlineEarly) {
  park_word w;
  fake_driver drv;
  std::thread t([&] {
    std::this_thread::sleep_for(5ms);
    w.unpark(drv, 0);
  });
  auto start = std::chrono::steady_clock::now();
  w.park(steady_now_ns() + 60'000'000'000);  // 60 s
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  t.join();
}

TEST(ParkWord, ParkInDriverPassesTheDeadline) {
  park_word w;
  fake_driver drv;
  drv.complete_one();
  w.park_in_driver(drv, 2, 12345);
  EXPECT_EQ(drv.last_deadline, 12345u);
  drv.complete_one();
  w.park_in_driver(drv, 2);
  EXPECT_EQ(drv.last_deadline, spindle::detail::no_deadline);
}

}  // namespace
