// Tests of spindle::broadcast<T>: every subscriber sees every later value in
// order, lag (broadcast_lagged with the missed count), closing and draining,
// value lifetime, abort of a waiting receiver, and contention from workers
// and threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/broadcast.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::broadcast;
using spindle::join_handle;
using spindle::task;
using spindle_test::counts;
using spindle_test::scaled;
using spindle_test::tracked;
using spindle_test::wait_until;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

using int_rx = broadcast<int>::receiver;

/// Receives until the end; a lag is recorded as -missed.
task<std::vector<long>> collect(int_rx rx) {
  std::vector<long> got;
  for (;;) {
    try {
      auto v = co_await rx.recv();
      if (!v) break;
      got.push_back(*v);
    } catch (spindle::broadcast_lagged const& e) {
      got.push_back(-static_cast<long>(e.missed()));
    }
  }
  co_return got;
}

TEST(Broadcast, EverySubscriberSeesEveryLaterValueInOrder) {
  spindle::runtime rt{{.workers = 2}};
  broadcast<int> b{16};
  EXPECT_EQ(b.send(-1), 0u) << "a value without subscribers was counted";
  std::vector<join_handle<std::vector<long>>> hs;
  for (int i = 0; i < 3; ++i)
    hs.push_back(rt.spawn(collect(b.subscribe())));
  EXPECT_EQ(b.receiver_count(), 3u);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(b.send(i), 3u);
  auto late = b.subscribe();
  EXPECT_EQ(b.send(10), 4u);
  b.close();
  std::vector<long> expected{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  for (auto& h : hs)
    EXPECT_EQ(spindle_test::wait_and_take(h), expected);
  EXPECT_EQ(late.try_recv(), 10) << "a late subscriber saw values sent before it subscribed";
  EXPECT_FALSE(late.try_recv().has_value());
  EXPECT_TRUE(late.is_closed());
}

TEST(Broadcast, ALaggingReceiverLearnsHowManyItMissed) {
  broadcast<int> b{4};
  auto rx = b.subscribe();
  for (int i = 0; i < 10; ++i)
    b.send(i);
  EXPECT_EQ(rx.pending(), 10u);
  try {
    (void)rx.try_recv();
    ADD_FAILURE() << "no broadcast_lagged";
  } catch (spindle::broadcast_lagged const& e) {
    EXPECT_EQ(e.missed(), 6u);
  }
  for (int i = 6; i < 10; ++i)
    EXPECT_EQ(rx.try_recv(), i);
  EXPECT_FALSE(rx.try_recv().has_value());

  spindle::runtime rt{{.workers = 2}};
  auto rx2 = b.subscribe();
  for (int i = 0; i < 7; ++i)
    b.send(100 + i);
  b.close();
  EXPECT_EQ(rt.block_on(collect(std::move(rx2))), (std::vector<long>{-3, 103, 104, 105, 106}));
}

TEST(Broadcast, CloseDrainsAndOutlivesTheSender) {
  spindle::runtime rt{{.workers = 2}};
  std::optional<int_rx> rx;
  {
    broadcast<int> b{8};
    rx.emplace(b.subscribe());
    b.send(1);
    b.send(2);
  }  // destroying the broadcast closes it
  EXPECT_TRUE(rx->is_closed());
  EXPECT_EQ(rt.block_on(collect(std::move(*rx))), (std::vector<long>{1, 2}));

  broadcast<int> b{2};
  b.close();
  EXPECT_TRUE(b.is_closed());
  EXPECT_THROW(b.send(1), spindle::channel_closed);
  auto after = b.subscribe();
  EXPECT_FALSE(after.try_recv().has_value());
  EXPECT_FALSE(after.blocking_recv().has_value());
}

TEST(Broadcast, CloseWakesWaitingReceivers) {
  spindle::runtime rt{{.workers = 2}};
  broadcast<int> b{4};
  std::vector<join_handle<std::vector<long>>> hs;
  for (int i = 0; i < 3; ++i)
    hs.push_back(rt.spawn(collect(b.subscribe())));
  auto rx = b.subscribe();
  std::optional<int> from_thread = 0;
  std::thread t([&] { from_thread = rx.blocking_recv(); });
  std::this_thread::sleep_for(2ms);
  b.close();
  for (auto& h : hs)
    EXPECT_TRUE(spindle_test::wait_and_take(h).empty());
  t.join();
  EXPECT_FALSE(from_thread.has_value());
}

TEST(Broadcast, ValuesAreDestroyedOnceEveryReceiverHasThem) {
  counts c;
  {
    broadcast<tracked> b{4};
    auto r1 = b.subscribe();
    auto r2 = b.subscribe();
    b.send(tracked{c});
    EXPECT_EQ(c.alive(), 1);
    { auto v = r1.try_recv(); }
    EXPECT_EQ(c.alive(), 1) << "destroyed before the second receiver read it";
    { auto v = r2.try_recv(); }
    EXPECT_EQ(c.alive(), 0) << "kept after every receiver read it";
    b.send(tracked{c});
    { auto v = r1.try_recv(); }
    r2 = broadcast<tracked>::receiver{};  // drops its unread value
    EXPECT_EQ(c.alive(), 0) << "an unsubscribed receiver kept a value alive";
    EXPECT_EQ(b.receiver_count(), 1u);
    // Overwritten values die too.
    for (int i = 0; i < 10; ++i)
      b.send(tracked{c});
    EXPECT_EQ(c.alive(), 4);
  }
  EXPECT_EQ(c.alive(), 0);
}

TEST(Broadcast, MisuseErrors) {
  EXPECT_THROW(broadcast<int>{0}, std::invalid_argument);
  int_rx empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW((void)empty.try_recv(), std::system_error);
  broadcast<int> b{1};
  auto rx = b.subscribe();
  spindle::runtime rt{{.workers = 1}};
  auto inside = [](int_rx& r) -> task<bool> {
    try {
      (void)r.blocking_recv();
    } catch (std::system_error const& e) {
      co_return e.code() == std::errc::operation_not_permitted;
    }
    co_return false;
  };
  EXPECT_TRUE(rt.block_on(inside(rx)));
}

TEST(Broadcast, AbortOfAWaitingReceiverLeavesTheOthersIntact) {
  spindle::runtime rt{{.workers = 2}};
  broadcast<int> b{4};
  auto waiter = [](int_rx& r) -> task<int> { co_return *co_await r.recv(); };
  auto rx1 = b.subscribe();
  auto rx2 = b.subscribe();
  auto h1 = rt.spawn(waiter(rx1));
  auto h2 = rt.spawn(waiter(rx2));
  std::this_thread::sleep_for(2ms);
  h1.abort();
  EXPECT_THROW(spindle_test::wait_and_take(h1), spindle::task_cancelled);
  b.send(7);
  EXPECT_EQ(spindle_test::wait_and_take(h2), 7);
  EXPECT_EQ(rx1.try_recv(), 7) << "the aborted wait consumed a value";

  // Racing with the send, many times: the value is received or still there.
  long const rounds = scaled(3000, 300);
  for (long round = 0; round < rounds; ++round) {
    auto h = rt.spawn(waiter(rx1));
    if (round % 2 == 0) std::this_thread::yield();
    std::thread aborter([&h] { h.abort(); });
    b.send(static_cast<int>(round));
    aborter.join();
    int got = -1;
    try {
      got = spindle_test::wait_and_take(h);
    } catch (spindle::task_cancelled const&) {
      auto v = rx1.try_recv();
      ASSERT_TRUE(v.has_value()) << "round " << round << ": a value vanished";
      got = *v;
    }
    ASSERT_EQ(got, round);
    ASSERT_FALSE(rx1.try_recv().has_value()) << "a value was duplicated";
    spindle_test::progress();
  }
}

// Two senders (a task and a thread) and five receivers (four tasks and a
// thread); with a capacity that cannot lag, each receiver sees each sender's
// values in order, all of them; with a small one, in order with the gaps
// reported exactly.
void contention(std::size_t capacity) {
  spindle::runtime rt{{.workers = 2}};
  broadcast<std::uint64_t> b{capacity};
  long const n = scaled(5000, 1000);
  struct tally {
    std::uint64_t received = 0;
    std::uint64_t missed = 0;
    bool ordered = true;
  };
  using rx_t = broadcast<std::uint64_t>::receiver;
  auto account = [](tally& t, std::vector<long>& last, std::uint64_t v) {
    auto s = static_cast<std::size_t>(v >> 32);
    auto seq = static_cast<long>(v & 0xffffffffu);
    if (seq <= last[s]) t.ordered = false;
    last[s] = seq;
    ++t.received;
  };
  auto receiver_task = [account](rx_t rx) -> task<tally> {
    tally t;
    std::vector<long> last(2, -1);
    for (;;) {
      try {
        auto v = co_await rx.recv();
        if (!v) break;
        account(t, last, *v);
      } catch (spindle::broadcast_lagged const& e) {
        t.missed += e.missed();
      }
    }
    co_return t;
  };
  std::vector<join_handle<tally>> hs;
  for (int i = 0; i < 4; ++i)
    hs.push_back(rt.spawn(receiver_task(b.subscribe())));
  tally thread_tally;
  std::thread rthread([&, rx = b.subscribe()]() mutable {
    std::vector<long> last(2, -1);
    for (;;) {
      try {
        auto v = rx.blocking_recv();
        if (!v) break;
        account(thread_tally, last, *v);
      } catch (spindle::broadcast_lagged const& e) {
        thread_tally.missed += e.missed();
      }
    }
  });
  auto sender_task = [](broadcast<std::uint64_t>& bc, long count) -> task<void> {
    for (long i = 0; i < count; ++i) {
      bc.send((std::uint64_t{0} << 32) | static_cast<std::uint64_t>(i));
      if (i % 16 == 0) co_await spindle::yield_now{};
    }
  };
  auto s = rt.spawn(sender_task(b, n));
  std::thread sthread([&] {
    for (long i = 0; i < n; ++i)
      b.send((std::uint64_t{1} << 32) | static_cast<std::uint64_t>(i));
  });
  spindle_test::wait_and_take(s, 120s);
  sthread.join();
  b.close();
  std::vector<tally> all;
  for (auto& h : hs)
    all.push_back(spindle_test::wait_and_take(h, 120s));
  rthread.join();
  all.push_back(thread_tally);
  for (auto const& t : all) {
    EXPECT_TRUE(t.ordered);
    EXPECT_EQ(t.received + t.missed, static_cast<std::uint64_t>(2 * n));
    if (capacity >= static_cast<std::size_t>(2 * n)) {
      EXPECT_EQ(t.missed, 0u);
    }
  }
}

TEST(Broadcast, ContentionWithoutLag) {
  contention(static_cast<std::size_t>(2 * scaled(5000, 1000)));
}

TEST(Broadcast, ContentionWithLag) {
  contention(8);
}

}  // namespace
