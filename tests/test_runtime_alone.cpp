// The runtime layer on its own: linked against libspindle_runtime only (no
// io/, no liburing; tests/meson.build), with a driver of the test's own that
// does no I/O and parks on a futex word (driver.hpp's contract). Tasks spawn,
// join, sleep, use channels and shut down as in the full library, which shows
// that the dependency between runtime and io runs one way only.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "driver.hpp"
#include "futex.hpp"
#include "scheduler.hpp"
#include "spindle/channel.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "spindle/time.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::detail::driver;
using spindle::detail::io_host;
using spindle::detail::io_op;
using spindle::detail::scheduler;

/// A driver without I/O: a worker parks in it only while park_in_driver
/// says so (never), and submit refuses every operation.
class no_io_driver final : public driver {
 public:
  static std::atomic<int> made;
  static std::atomic<int> submitted;
  explicit no_io_driver(std::size_t workers) : workers_(workers) {}
  spindle::io_backend backend() const noexcept override { return spindle::io_backend::threadpool; }
  void on_worker_start(std::size_t index) override { ASSERT_LT(index, workers_); }
  std::size_t poll(std::size_t) noexcept override { return 0; }
  bool park_in_driver(std::size_t) const noexcept override { return false; }
  void park(std::size_t, std::uint64_t) noexcept override {}
  void unpark(std::size_t) noexcept override {}
  void on_worker_stop(std::size_t) noexcept override {}
  void shutdown() noexcept override {}
  bool submit(io_op&) noexcept override {
    submitted.fetch_add(1);
    return false;
  }
  bool cancel(io_op&) noexcept override { return false; }

 private:
  std::size_t workers_;
};
std::atomic<int> no_io_driver::made{0};
std::atomic<int> no_io_driver::submitted{0};

std::unique_ptr<driver> make_no_io_driver(io_host& host, spindle::runtime_config const& config) {
  EXPECT_EQ(host.current_worker(), spindle::detail::not_a_worker) << "made off the workers";
  no_io_driver::made.fetch_add(1);
  return std::make_unique<no_io_driver>(config.workers);
}

/// runtime::block_on, spelled with the runtime layer's own calls.
template <class T>
T block_on(scheduler& sched, spindle::task<T> t) {
  auto frame = t.release();
  spindle::join_handle<T> handle{spindle::detail::spawn_root(&sched, frame, &frame.promise())};
  spindle::detail::block_until_complete(&sched, handle.header());
  return handle.take();
}

spindle::task<long> fib(int n) {
  if (n < 2) co_return n;
  auto a = spindle::spawn(fib(n - 1));
  long b = co_await fib(n - 2);
  co_return co_await a + b;
}

spindle::task<int> sleepers(int n) {
  std::vector<spindle::join_handle<int>> handles;
  for (int i = 0; i < n; ++i) {
    handles.push_back(spindle::spawn([](int i) -> spindle::task<int> {
      co_await spindle::sleep_for(std::chrono::milliseconds(1 + i % 5));
      co_return i;
    }(i)));
  }
  int sum = 0;
  for (auto& h : handles)
    sum += co_await h;
  co_return sum;
}

spindle::task<void> produce(spindle::channel<int>& ch, int n) {
  for (int i = 1; i <= n; ++i)
    co_await ch.send(i);
  ch.close();
}

spindle::task<long> pipeline(int n) {
  spindle::channel<int> ch{16};
  auto producer = spindle::spawn(produce(ch, n));
  long sum = 0;
  while (auto v = co_await ch.recv())
    sum += *v;
  co_await producer;
  co_return sum;
}

TEST(RuntimeAlone, SpawnsJoinsSleepsAndSendsWithoutAnIoDriver) {
  spindle::runtime_config config{.workers = 2};
  scheduler sched(config, &make_no_io_driver);
  EXPECT_EQ(no_io_driver::made.load(), 1);
  EXPECT_EQ(sched.worker_count(), 2u);
  EXPECT_EQ(block_on(sched, fib(20)), 6765);
  EXPECT_EQ(block_on(sched, sleepers(100)), 99 * 100 / 2);
  EXPECT_EQ(block_on(sched, pipeline(10'000)), 10'000L * 10'001 / 2);
  EXPECT_EQ(no_io_driver::submitted.load(), 0);
  auto const stats = sched.stats();
  EXPECT_EQ(stats.tasks_alive, 0u);
  EXPECT_GT(stats.total_spawned, 6765u);
  EXPECT_GT(stats.timers_fired, 0u);
}

spindle::task<spindle::join_handle<void>> start_sleeper() {
  co_return spindle::spawn([]() -> spindle::task<void> { co_await spindle::sleep_for(1h); }());
}

TEST(RuntimeAlone, ShutdownDestroysSuspendedTasks) {
  spindle::runtime_config config{.workers = 1};
  auto sched = std::make_unique<scheduler>(config, &make_no_io_driver);
  spindle::join_handle<void> sleeper = block_on(*sched, start_sleeper());
  EXPECT_FALSE(sleeper.is_finished());
  sched.reset();  // the hour-long sleep's frame is destroyed, the handle survives
  EXPECT_TRUE(sleeper.is_finished());
  EXPECT_THROW(sleeper.take(), spindle::task_cancelled);
}

}  // namespace
