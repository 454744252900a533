// Tests of spindle::make_oneshot<T>: send before and after the receiver
// waits, dropped sender (channel_closed), dropped receiver, misuse of used
// handles, try_recv, blocking_recv, abort of a waiting receiver (the value
// is never lost) and many oneshots across workers and threads.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/oneshot.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::make_oneshot;
using spindle::oneshot_receiver;
using spindle::oneshot_sender;
using spindle::task;
using spindle_test::counts;
using spindle_test::scaled;
using spindle_test::tracked;
using spindle_test::wait_until;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

template <class T>
task<T> receive(oneshot_receiver<T> rx) {
  co_return co_await rx;
}

template <class Fn>
std::error_code system_error_of(Fn fn) {
  try {
    fn();
  } catch (std::system_error const& e) {
    return e.code();
  }
  return {};
}

TEST(Oneshot, ValueSentBeforeTheWait) {
  spindle::runtime rt{{.workers = 2}};
  auto [tx, rx] = make_oneshot<std::unique_ptr<int>>();
  EXPECT_FALSE(tx.is_closed());
  EXPECT_TRUE(tx.send(std::make_unique<int>(5)));
  EXPECT_FALSE(tx.valid()) << "send did not consume the sender";
  std::unique_ptr<int> v = rt.block_on(receive(std::move(rx)));
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(*v, 5);
}

TEST(Oneshot, ValueSentWhileTheReceiverWaitsOnAnotherWorker) {
  spindle::runtime rt{{.workers = 2}};
  for (int i = 0; i < 20; ++i) {
    auto [tx, rx] = make_oneshot<std::string>();
    std::atomic<bool> started{false};
    auto waiter = [](oneshot_receiver<std::string> r, std::atomic<bool>& s) -> task<std::string> {
      s.store(true);
      co_return co_await r;
    };
    auto h = rt.spawn(waiter(std::move(rx), started));
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    if (i % 2 == 0) std::this_thread::sleep_for(1ms);  // usually suspended by now
    EXPECT_TRUE(tx.send("value " + std::to_string(i)));
    EXPECT_EQ(spindle_test::wait_and_take(h), "value " + std::to_string(i));
  }
}

TEST(Oneshot, DroppingTheSenderClosesTheReceiver) {
  spindle::runtime rt{{.workers = 2}};
  {
    auto [tx, rx] = make_oneshot<int>();
    { auto gone = std::move(tx); }
    EXPECT_THROW(rt.block_on(receive(std::move(rx))), spindle::channel_closed);
  }
  {
    auto [tx, rx] = make_oneshot<int>();
    std::atomic<bool> started{false};
    auto waiter = [](oneshot_receiver<int> r, std::atomic<bool>& s) -> task<int> {
      s.store(true);
      co_return co_await r;
    };
    auto h = rt.spawn(waiter(std::move(rx), started));
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    std::this_thread::sleep_for(1ms);
    tx = oneshot_sender<int>{};  // drops the live sender
    EXPECT_THROW(spindle_test::wait_and_take(h), spindle::channel_closed);
  }
}

TEST(Oneshot, DroppingTheReceiverFailsTheSend) {
  counts c;
  {
    auto [tx, rx] = make_oneshot<tracked>();
    rx = oneshot_receiver<tracked>{};
    EXPECT_TRUE(tx.is_closed());
    EXPECT_FALSE(tx.send(tracked{c}));
  }
  EXPECT_EQ(c.alive(), 0);
  {
    auto [tx, rx] = make_oneshot<tracked>();
    EXPECT_TRUE(tx.send(tracked{c}));
    EXPECT_EQ(c.alive(), 1);
    // The receiver drops an unreceived value.
  }
  EXPECT_EQ(c.alive(), 0);
}

TEST(Oneshot, UsedOrEmptyHandlesThrowInvalidArgument) {
  spindle::runtime rt{{.workers = 1}};
  auto [tx, rx] = make_oneshot<int>();
  EXPECT_TRUE(tx.send(1));
  EXPECT_EQ(system_error_of([&s = tx] { (void)s.send(2); }), std::errc::invalid_argument);
  auto twice = [](oneshot_receiver<int>& r) -> task<int> {
    int first = co_await r;
    EXPECT_FALSE(r.valid());
    try {
      (void)co_await r;
    } catch (std::system_error const& e) {
      if (e.code() == std::errc::invalid_argument) co_return first;
    }
    co_return -1;
  };
  EXPECT_EQ(rt.block_on(twice(rx)), 1);
  oneshot_receiver<int> empty;
  EXPECT_EQ(system_error_of([&] { (void)empty.try_recv(); }), std::errc::invalid_argument);
  EXPECT_EQ(system_error_of([&] { (void)empty.blocking_recv(); }), std::errc::invalid_argument);
  oneshot_sender<int> no_sender;
  EXPECT_TRUE(no_sender.is_closed());
}

TEST(Oneshot, TryRecvAndBlockingRecv) {
  auto [tx, rx] = make_oneshot<int>();
  EXPECT_FALSE(rx.try_recv().has_value());
  EXPECT_TRUE(rx.valid());
  EXPECT_TRUE(tx.send(3));
  EXPECT_EQ(rx.try_recv(), 3);
  EXPECT_FALSE(rx.valid());

  auto [tx2, rx2] = make_oneshot<int>();
  tx2 = oneshot_sender<int>{};
  EXPECT_THROW((void)rx2.try_recv(), spindle::channel_closed);

  // The value (or the close) is already there: blocking_recv does not block.
  auto [tx6, rx6] = make_oneshot<int>();
  EXPECT_TRUE(tx6.send(6));
  EXPECT_EQ(rx6.blocking_recv(), 6);
  auto [tx7, rx7] = make_oneshot<int>();
  tx7 = oneshot_sender<int>{};
  EXPECT_THROW((void)rx7.blocking_recv(), spindle::channel_closed);

  spindle::runtime rt{{.workers = 2}};
  auto [tx3, rx3] = make_oneshot<int>();
  auto sender = [](oneshot_sender<int> s) -> task<void> {
    co_await spindle::yield_now{};
    s.send(11);
  };
  auto h = rt.spawn(sender(std::move(tx3)));
  EXPECT_EQ(rx3.blocking_recv(), 11);
  spindle_test::wait_and_take(h);

  auto [tx4, rx4] = make_oneshot<int>();
  std::thread t([s = std::move(tx4)]() mutable {
    std::this_thread::sleep_for(1ms);
    s = oneshot_sender<int>{};
  });
  EXPECT_THROW((void)rx4.blocking_recv(), spindle::channel_closed);
  t.join();

  auto inside = [](oneshot_receiver<int>& r) -> task<bool> {
    try {
      (void)r.blocking_recv();
    } catch (std::system_error const& e) {
      co_return e.code() == std::errc::operation_not_permitted;
    }
    co_return false;
  };
  auto [tx5, rx5] = make_oneshot<int>();
  EXPECT_TRUE(rt.block_on(inside(rx5)));
}

// A task waiting on a receiver it does not own is aborted while the value is
// sent: the value is either received by the task or still in the receiver.
TEST(Oneshot, AbortOfAWaitingReceiverNeverLosesTheValue) {
  spindle::runtime rt{{.workers = 2}};
  long const rounds = scaled(5000, 500);
  auto waiter = [](oneshot_receiver<std::unique_ptr<int>>& r) -> task<int> {
    auto v = co_await r;
    co_return *v;
  };
  for (long round = 0; round < rounds; ++round) {
    auto [tx, rx] = make_oneshot<std::unique_ptr<int>>();
    auto h = rt.spawn(waiter(rx));
    if (round % 3 == 0) std::this_thread::yield();
    std::thread aborter([&h] { h.abort(); });
    EXPECT_TRUE(tx.send(std::make_unique<int>(static_cast<int>(round))));
    aborter.join();
    int got = -1;
    try {
      got = spindle_test::wait_and_take(h);
    } catch (spindle::task_cancelled const&) {
      auto v = rx.try_recv();
      ASSERT_TRUE(v.has_value()) << "the value was lost with the aborted waiter";
      got = **v;
    }
    ASSERT_EQ(got, round);
    spindle_test::progress();
  }
}

TEST(Oneshot, AbortingTheOwnerOfTheReceiverClosesTheSender) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  auto [tx, rx] = make_oneshot<tracked>();
  auto h = rt.spawn(receive(std::move(rx)));
  std::this_thread::sleep_for(1ms);
  h.abort();
  EXPECT_THROW(spindle_test::wait_and_take(h), spindle::task_cancelled);
  EXPECT_TRUE(tx.is_closed());
  EXPECT_FALSE(tx.send(tracked{c}));
  EXPECT_EQ(c.alive(), 0);
}

TEST(Oneshot, ManyOneshotsAcrossWorkersAndThreads) {
  spindle::runtime rt{{.workers = 2}};
  int const n = static_cast<int>(scaled(5000, 1000));
  std::vector<oneshot_sender<int>> senders;
  std::vector<join_handle<int>> hs;
  for (int i = 0; i < n; ++i) {
    auto [tx, rx] = make_oneshot<int>();
    senders.push_back(std::move(tx));
    hs.push_back(rt.spawn(receive(std::move(rx))));
  }
  // Half sent from a foreign thread, half from tasks.
  std::thread t([&] {
    for (int i = 0; i < n; i += 2)
      senders[static_cast<std::size_t>(i)].send(i);
  });
  auto send_odd = [](std::vector<oneshot_sender<int>>& s, int count) -> task<void> {
    for (int i = 1; i < count; i += 2) {
      s[static_cast<std::size_t>(i)].send(i);
      if (i % 64 == 1) co_await spindle::yield_now{};
    }
  };
  rt.block_on(send_odd(senders, n));
  t.join();
  long sum = 0;
  for (auto& h : hs)
    sum += spindle_test::wait_and_take(h);
  EXPECT_EQ(sum, static_cast<long>(n) * (n - 1) / 2);
}

}  // namespace
