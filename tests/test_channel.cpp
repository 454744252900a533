// Tests of spindle::channel<T>: FIFO semantics, try/blocking variants,
// back-pressure, rendezvous, closing while senders and receivers wait,
// abort of waiting senders and receivers (no value lost or duplicated),
// move-only payloads, and MPMC contention from workers and foreign threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/channel.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "spindle/time.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::channel;
using spindle::join_handle;
using spindle::task;
using spindle_test::counts;
using spindle_test::scaled;
using spindle_test::tracked;
using spindle_test::wait_until;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

/// Waits for a task from this (non-runtime) thread; true when it finished
/// normally, false when it was cancelled.
template <class T>
bool finished_normally(join_handle<T>& h) {
  try {
    spindle_test::wait_and_take(h);
    return true;
  } catch (spindle::task_cancelled const&) {
    return false;
  }
}

// --- make_channel: sender/receiver handles (Tokio mpsc closing) ----------------

task<int> produce(spindle::sender<int> tx, int from, int n) {
  for (int i = 0; i < n; ++i)
    co_await tx.send(from + i);
  co_return n;
}  // this copy of the sender goes away here

task<long> consume_all(spindle::receiver<int>* rx) {
  long sum = 0;
  while (std::optional<int> v = co_await rx->recv())
    sum += *v;
  co_return sum;
}

TEST(MakeChannel, TheLastSenderGoneEndsTheReceiverAfterTheDrain) {
  spindle::runtime rt{{.workers = 2}};
  auto [tx, rx] = spindle::make_channel<int>(4);
  join_handle<long> sum = rt.spawn(consume_all(&rx));
  std::vector<join_handle<int>> producers;
  for (int p = 0; p < 4; ++p)
    producers.push_back(rt.spawn(produce(tx, p * 1000, 250)));  // copies of tx
  { auto dropped = std::move(tx); }  // the original goes too: only the producers hold one
  for (auto& h : producers)
    EXPECT_EQ(spindle_test::wait_and_take(h), 250);
  // A finished task's frame, and the sender copy in it, lives until its
  // join handle goes: the channel ends only now.
  producers.clear();
  long expected = 0;
  for (int p = 0; p < 4; ++p)
    for (int i = 0; i < 250; ++i)
      expected += p * 1000 + i;
  EXPECT_EQ(spindle_test::wait_and_take(sum), expected) << "every value, then the end";
}

TEST(MakeChannel, TheReceiverGoneFailsTheSenders) {
  spindle::runtime rt{{.workers = 2}};
  auto [tx, rx] = spindle::make_channel<std::string>(1);
  EXPECT_TRUE(tx.try_send(std::string("buffered")));
  // A sender waits (the buffer is full) when the receiver goes away.
  auto blocked = [](spindle::sender<std::string> tx) -> task<int> {
    try {
      co_await tx.send("waits");
    } catch (spindle::channel_closed const&) {
      co_return 1;
    }
    co_return 0;
  };
  join_handle<int> h = rt.spawn(blocked(tx));
  ASSERT_TRUE(wait_until([&] { return !h.is_finished(); }));
  std::this_thread::sleep_for(5ms);
  { auto gone = std::move(rx); }
  EXPECT_EQ(spindle_test::wait_and_take(h), 1);
  EXPECT_TRUE(tx.is_closed());
  EXPECT_FALSE(tx.try_send(std::string("late")));
  EXPECT_THROW(tx.blocking_send("late"), spindle::channel_closed);
}

TEST(MakeChannel, CapacityZeroIsUnbounded) {
  auto [tx, rx] = spindle::make_channel<int>(0);
  for (int i = 0; i < 100'000; ++i)
    ASSERT_TRUE(tx.try_send(i)) << "an unbounded channel never refuses";
  spindle::sender<int> copy = tx;
  { auto a = std::move(tx); }
  EXPECT_FALSE(rx.try_recv() == std::nullopt);
  { auto b = std::move(copy); }  // the last sender: the rest drains, then ends
  int n = 1;
  while (rx.try_recv())
    ++n;
  EXPECT_EQ(n, 100'000);
  EXPECT_EQ(rx.blocking_recv(), std::nullopt);
}

TEST(Channel, ValuesArriveInSendOrder) {
  spindle::runtime rt{{.workers = 2}};
  auto body = []() -> task<std::vector<int>> {
    auto ch = channel<int>::unbounded();
    for (int i = 0; i < 100; ++i)
      co_await ch.send(i);
    EXPECT_EQ(ch.size(), 100u);
    std::vector<int> got;
    for (int i = 0; i < 100; ++i)
      got.push_back(*co_await ch.recv());
    co_return got;
  };
  std::vector<int> got = rt.block_on(body());
  ASSERT_EQ(got.size(), 100u);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(got[i], i);
}

TEST(Channel, TrySendAndTryRecvRespectTheCapacity) {
  channel<std::unique_ptr<int>> ch{2};
  EXPECT_EQ(ch.capacity(), 2u);
  EXPECT_FALSE(ch.try_recv().has_value());
  EXPECT_TRUE(ch.try_send(std::make_unique<int>(1)));
  EXPECT_TRUE(ch.try_send(std::make_unique<int>(2)));
  auto third = std::make_unique<int>(3);
  EXPECT_FALSE(ch.try_send(std::move(third))) << "a full bounded channel accepted a value";
  ASSERT_NE(third, nullptr) << "a failed try_send moved from its argument";
  EXPECT_EQ(*third, 3);
  EXPECT_EQ(ch.size(), 2u);
  EXPECT_EQ(**ch.try_recv(), 1);
  EXPECT_TRUE(ch.try_send(std::move(third)));
  EXPECT_EQ(**ch.try_recv(), 2);
  EXPECT_EQ(**ch.try_recv(), 3);
  EXPECT_FALSE(ch.try_recv().has_value());

  channel<std::string> copies{1};
  std::string const s = "hello";
  EXPECT_TRUE(copies.try_send(s));
  EXPECT_FALSE(copies.try_send(s));
  EXPECT_EQ(*copies.try_recv(), "hello");
  EXPECT_EQ(s, "hello");
}

TEST(Channel, ABoundedSendSuspendsWhileFull) {
  spindle::runtime rt{{.workers = 2}};
  channel<int> ch{2};
  std::atomic<int> sent{0};
  auto sender = [](channel<int>& c, std::atomic<int>& n) -> task<void> {
    for (int i = 0; i < 5; ++i) {
      co_await c.send(i);
      n.fetch_add(1);
    }
  };
  auto h = rt.spawn(sender(ch, sent));
  ASSERT_TRUE(wait_until([&] { return ch.waiting_senders() == 1; }))
      << "the sender did not suspend on a full channel";
  EXPECT_EQ(ch.size(), 2u);
  EXPECT_EQ(sent.load(), 2);
  EXPECT_FALSE(h.is_finished());
  // Each receive admits the waiting sender's value into the freed slot.
  EXPECT_EQ(ch.try_recv(), 0);
  ASSERT_TRUE(wait_until([&] { return sent.load() == 3 && ch.waiting_senders() == 1; }));
  EXPECT_EQ(ch.size(), 2u);
  for (int i = 1; i < 5; ++i)
    EXPECT_EQ(ch.blocking_recv(), i);
  EXPECT_TRUE(finished_normally(h));
  EXPECT_EQ(sent.load(), 5);
  EXPECT_EQ(ch.size(), 0u);
}

TEST(Channel, CapacityZeroIsARendezvous) {
  spindle::runtime rt{{.workers = 2}};
  channel<int> ch{0};
  EXPECT_FALSE(ch.try_send(1)) << "a rendezvous send completed without a receiver";
  auto sender = [](channel<int>& c) -> task<void> {
    co_await c.send(7);
    co_await c.send(8);
  };
  auto h = rt.spawn(sender(ch));
  ASSERT_TRUE(wait_until([&] { return ch.waiting_senders() == 1; }));
  EXPECT_EQ(ch.size(), 0u) << "a rendezvous channel buffered a value";
  EXPECT_EQ(ch.blocking_recv(), 7);
  EXPECT_EQ(ch.blocking_recv(), 8);
  EXPECT_TRUE(finished_normally(h));
  // A waiting receiver makes try_send succeed.
  auto receiver = [](channel<int>& c) -> task<int> { co_return *co_await c.recv(); };
  auto r = rt.spawn(receiver(ch));
  ASSERT_TRUE(wait_until([&] { return ch.waiting_receivers() == 1; }));
  EXPECT_TRUE(ch.try_send(9));
  EXPECT_EQ(spindle_test::wait_and_take(r), 9);
}

TEST(Channel, ReceiversDrainThenSeeTheEndAfterClose) {
  spindle::runtime rt{{.workers = 2}};
  channel<int> ch{4};
  ASSERT_TRUE(ch.try_send(1));
  ASSERT_TRUE(ch.try_send(2));
  ch.close();
  ch.close();  // idempotent
  EXPECT_TRUE(ch.is_closed());
  EXPECT_FALSE(ch.try_send(3));
  EXPECT_THROW(ch.blocking_send(3), spindle::channel_closed);
  auto body = [](channel<int>& c) -> task<std::vector<int>> {
    bool threw = false;
    try {
      co_await c.send(4);
    } catch (spindle::channel_closed const&) {
      threw = true;
    }
    EXPECT_TRUE(threw) << "send on a closed channel did not throw channel_closed";
    std::vector<int> got;
    while (auto v = co_await c.recv())
      got.push_back(*v);
    EXPECT_FALSE((co_await c.recv()).has_value());
    co_return got;
  };
  EXPECT_EQ(rt.block_on(body(ch)), (std::vector<int>{1, 2}));
  EXPECT_FALSE(ch.try_recv().has_value());
  EXPECT_FALSE(ch.blocking_recv().has_value());
}

TEST(Channel, CloseWakesEveryWaitingReceiver) {
  spindle::runtime rt{{.workers = 2}};
  channel<int> ch{4};
  auto receiver = [](channel<int>& c) -> task<bool> { co_return (co_await c.recv()).has_value(); };
  std::vector<join_handle<bool>> hs;
  for (int i = 0; i < 4; ++i)
    hs.push_back(rt.spawn(receiver(ch)));
  std::optional<int> thread_result = 0;
  std::thread t([&] { thread_result = ch.blocking_recv(); });
  ASSERT_TRUE(wait_until([&] { return ch.waiting_receivers() == 5; }));
  ch.close();
  for (auto& h : hs)
    EXPECT_FALSE(spindle_test::wait_and_take(h)) << "a receiver got a value";
  t.join();
  EXPECT_FALSE(thread_result.has_value());
  EXPECT_EQ(ch.waiting_receivers(), 0u);
}

TEST(Channel, CloseFailsEveryWaitingSender) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  {
    channel<tracked> ch{1};
    ASSERT_TRUE(ch.try_send(tracked{c}));
    auto sender = [](channel<tracked>& ch, counts& c) -> task<bool> {
      try {
        co_await ch.send(tracked{c});
      } catch (spindle::channel_closed const&) {
        co_return false;
      }
      co_return true;
    };
    std::vector<join_handle<bool>> hs;
    for (int i = 0; i < 3; ++i)
      hs.push_back(rt.spawn(sender(ch, c)));
    bool thread_threw = false;
    std::thread t([&] {
      try {
        ch.blocking_send(tracked{c});
      } catch (spindle::channel_closed const&) {
        thread_threw = true;
      }
    });
    ASSERT_TRUE(wait_until([&] { return ch.waiting_senders() == 4; }));
    ch.close();
    for (auto& h : hs)
      EXPECT_FALSE(spindle_test::wait_and_take(h)) << "a send completed";
    t.join();
    EXPECT_TRUE(thread_threw);
    EXPECT_EQ(ch.size(), 1u);
    EXPECT_TRUE(ch.try_recv().has_value()) << "the buffered value was lost at close";
    EXPECT_FALSE(ch.try_recv().has_value());
  }
  EXPECT_EQ(c.alive(), 0) << "values of failed sends leaked";
}

TEST(Channel, MoveOnlyPayloadsThroughEveryPath) {
  spindle::runtime rt{{.workers = 2}};
  channel<std::unique_ptr<int>> ch{1};
  auto producer = [](channel<std::unique_ptr<int>>& c) -> task<void> {
    for (int i = 0; i < 50; ++i)
      co_await c.send(std::make_unique<int>(i));
    c.close();
  };
  auto h = rt.spawn(producer(ch));
  int expected = 0;
  while (auto v = ch.blocking_recv()) {
    ASSERT_NE(*v, nullptr);
    EXPECT_EQ(**v, expected++);
  }
  EXPECT_EQ(expected, 50);
  EXPECT_TRUE(finished_normally(h));

  channel<std::unique_ptr<int>> back{0};
  auto consumer = [](channel<std::unique_ptr<int>>& c) -> task<int> {
    int sum = 0;
    while (auto v = co_await c.recv())
      sum += **v;
    co_return sum;
  };
  auto r = rt.spawn(consumer(back));
  for (int i = 1; i <= 10; ++i)
    back.blocking_send(std::make_unique<int>(i));
  back.close();
  EXPECT_EQ(spindle_test::wait_and_take(r), 55);
}

TEST(Channel, AwaitingOutsideATaskOrBlockingInsideOneIsRefused) {
  channel<int> ch{1};
  std::error_code send_code, recv_code;
  [](channel<int>& c, std::error_code& out) -> spindle_test::eager {
    try {
      co_await c.send(1);
    } catch (std::system_error const& e) {
      out = e.code();
    }
  }(ch, send_code);
  [](channel<int>& c, std::error_code& out) -> spindle_test::eager {
    try {
      (void)co_await c.recv();
    } catch (std::system_error const& e) {
      out = e.code();
    }
  }(ch, recv_code);
  EXPECT_EQ(send_code, std::errc::operation_not_permitted);
  EXPECT_EQ(recv_code, std::errc::operation_not_permitted);
  EXPECT_EQ(ch.size(), 0u) << "a refused send still sent";

  spindle::runtime rt{{.workers = 1}};
  auto inside = [](channel<int>& c) -> task<int> {
    int refused = 0;
    try {
      c.blocking_send(1);
    } catch (std::system_error const& e) {
      if (e.code() == std::errc::operation_not_permitted) ++refused;
    }
    try {
      (void)c.blocking_recv();
    } catch (std::system_error const& e) {
      if (e.code() == std::errc::operation_not_permitted) ++refused;
    }
    co_return refused;
  };
  EXPECT_EQ(rt.block_on(inside(ch)), 2);
}

// --------------------------------------------------------------------------
// Abort of waiting senders and receivers

TEST(Channel, AbortWithdrawsAWaitingReceiver) {
  spindle::runtime rt{{.workers = 2}};
  channel<int> ch{4};
  bool resumed = false;
  auto receiver = [](channel<int>& c, bool& flag) -> task<void> {
    (void)co_await c.recv();
    flag = true;
  };
  auto h = rt.spawn(receiver(ch, resumed));
  ASSERT_TRUE(wait_until([&] { return ch.waiting_receivers() == 1; }));
  h.abort();
  EXPECT_FALSE(finished_normally(h));
  EXPECT_FALSE(resumed);
  EXPECT_EQ(ch.waiting_receivers(), 0u) << "the aborted receiver stayed in the wait list";
  ASSERT_TRUE(ch.try_send(5));
  EXPECT_EQ(ch.try_recv(), 5) << "a value went to the aborted receiver";
}

TEST(Channel, AbortWithdrawsAWaitingSenderAndDropsItsValue) {
  spindle::runtime rt{{.workers = 2}};
  counts c;
  {
    channel<tracked> ch{1};
    ASSERT_TRUE(ch.try_send(tracked{c}));
    auto sender = [](channel<tracked>& ch, counts& c) -> task<void> {
      co_await ch.send(tracked{c});
    };
    auto h = rt.spawn(sender(ch, c));
    ASSERT_TRUE(wait_until([&] { return ch.waiting_senders() == 1; }));
    h.abort();
    EXPECT_FALSE(finished_normally(h));
    EXPECT_EQ(ch.waiting_senders(), 0u);
    EXPECT_TRUE(ch.try_recv().has_value());
    EXPECT_FALSE(ch.try_recv().has_value()) << "the withdrawn send still delivered its value";
    EXPECT_EQ(c.alive(), 0);
  }
}

// A receiver that was handed a value and woken, then aborted before it ran:
// the value must go to the next waiting receiver. One worker, kept busy, so
// that the woken receiver cannot run before the abort.
TEST(Channel, AValueHandedToAnAbortedReceiverGoesToTheNextOne) {
  spindle::runtime rt{{.workers = 1}};
  channel<std::unique_ptr<int>> ch{1};
  auto receiver = [](channel<std::unique_ptr<int>>& c) -> task<int> {
    auto v = co_await c.recv();
    co_return v ? **v : -1;
  };
  auto first = rt.spawn(receiver(ch));
  ASSERT_TRUE(wait_until([&] { return ch.waiting_receivers() == 1; }));
  auto second = rt.spawn(receiver(ch));
  ASSERT_TRUE(wait_until([&] { return ch.waiting_receivers() == 2; }));
  std::atomic<bool> release{false};
  std::atomic<bool> busy{false};
  auto b = rt.spawn(spindle_test::occupy_worker(&busy, &release));
  ASSERT_TRUE(wait_until([&] { return busy.load(); }));
  ASSERT_TRUE(ch.try_send(std::make_unique<int>(42)));  // handed to `first`, which is queued
  EXPECT_EQ(ch.waiting_receivers(), 1u);
  first.abort();
  release.store(true);
  EXPECT_FALSE(finished_normally(first));
  EXPECT_EQ(spindle_test::wait_and_take(second), 42) << "the handed value was lost";
  EXPECT_TRUE(finished_normally(b));
  EXPECT_FALSE(ch.try_recv().has_value()) << "the handed value was duplicated";
}

// The same without a waiting successor: the value goes back to the buffer.
TEST(Channel, AValueHandedToAnAbortedReceiverReturnsToTheBuffer) {
  spindle::runtime rt{{.workers = 1}};
  channel<std::unique_ptr<int>> ch{1};
  auto receiver = [](channel<std::unique_ptr<int>>& c) -> task<void> { (void)co_await c.recv(); };
  auto r = rt.spawn(receiver(ch));
  ASSERT_TRUE(wait_until([&] { return ch.waiting_receivers() == 1; }));
  std::atomic<bool> release{false};
  std::atomic<bool> busy{false};
  auto b = rt.spawn(spindle_test::occupy_worker(&busy, &release));
  ASSERT_TRUE(wait_until([&] { return busy.load(); }));
  ASSERT_TRUE(ch.try_send(std::make_unique<int>(1)));
  // Queued behind: the channel is empty again and accepts the next value.
  ASSERT_TRUE(ch.try_send(std::make_unique<int>(2)));
  r.abort();
  release.store(true);
  EXPECT_FALSE(finished_normally(r));
  EXPECT_TRUE(finished_normally(b));
  // The returned value is in front of the one buffered after it was handed.
  EXPECT_EQ(ch.size(), 2u);
  EXPECT_EQ(**ch.try_recv(), 1);
  EXPECT_EQ(**ch.try_recv(), 2);
}

// close() while a value is handed to a receiver that has not resumed yet:
// the other receivers must not see the end before that value is settled. If
// its receiver is aborted, the value goes to another receiver; if it
// resumes, the others see the end after it.
TEST(Channel, CloseDoesNotEndReceiversWhileAHandedValueMayComeBack) {
  for (bool abort_first : {true, false}) {
    spindle::runtime rt{{.workers = 1}};
    channel<int> ch{1};
    auto receiver = [](channel<int>& c) -> task<int> {
      auto v = co_await c.recv();
      co_return v ? *v : -1;
    };
    auto first = rt.spawn(receiver(ch));
    ASSERT_TRUE(wait_until([&] { return ch.waiting_receivers() == 1; }));
    auto second = rt.spawn(receiver(ch));
    ASSERT_TRUE(wait_until([&] { return ch.waiting_receivers() == 2; }));
    std::atomic<bool> release{false};
    std::atomic<bool> busy{false};
    auto b = rt.spawn(spindle_test::occupy_worker(&busy, &release));
    ASSERT_TRUE(wait_until([&] { return busy.load(); }));
    ASSERT_TRUE(ch.try_send(42));  // handed to `first`, which is queued behind `b`
    ch.close();
    EXPECT_EQ(ch.waiting_receivers(), 1u) << "close() ended a receiver while a value was in flight";
    if (abort_first) first.abort();
    release.store(true);
    EXPECT_TRUE(finished_normally(b));
    if (abort_first) {
      EXPECT_FALSE(finished_normally(first));
      EXPECT_EQ(spindle_test::wait_and_take(second), 42) << "the value handed back was lost";
    } else {
      EXPECT_EQ(spindle_test::wait_and_take(first), 42);
      EXPECT_EQ(spindle_test::wait_and_take(second), -1) << "the end was not reported";
    }
    EXPECT_EQ(ch.waiting_receivers(), 0u);
    EXPECT_FALSE(ch.try_recv().has_value());
  }
}

// Receivers wait, values are sent while some receivers are aborted from
// another thread: every value ends up exactly once in a receiver or the
// channel.
TEST(Channel, AbortRacingWithHandOffNeverLosesOrDuplicatesValues) {
  spindle::runtime rt{{.workers = 2}};
  constexpr int k = 6;
  long const rounds = scaled(3000, 300);
  std::mt19937 rng{12345};
  auto receiver = [](channel<std::unique_ptr<int>>& c,
                     std::vector<std::atomic<int>>& seen) -> task<void> {
    auto v = co_await c.recv();
    if (v) seen[static_cast<std::size_t>(**v)].fetch_add(1);
  };
  for (long round = 0; round < rounds; ++round) {
    channel<std::unique_ptr<int>> ch{k};
    std::vector<std::atomic<int>> seen(k);
    std::vector<join_handle<void>> hs;
    for (int i = 0; i < k; ++i)
      hs.push_back(rt.spawn(receiver(ch, seen)));
    if (round % 2 == 0) {
      ASSERT_TRUE(wait_until([&] { return ch.waiting_receivers() == k; }));
    }
    unsigned mask = rng() % (1u << k);
    std::thread aborter([&] {
      for (int i = 0; i < k; ++i) {
        if ((mask & (1u << i)) != 0) hs[static_cast<std::size_t>(i)].abort();
      }
    });
    for (int v = 0; v < k; ++v)
      ch.blocking_send(std::make_unique<int>(v));
    aborter.join();
    for (auto& h : hs)
      (void)finished_normally(h);
    while (auto v = ch.try_recv())
      seen[static_cast<std::size_t>(**v)].fetch_add(1);
    for (int v = 0; v < k; ++v) {
      ASSERT_EQ(seen[static_cast<std::size_t>(v)].load(), 1)
          << "value " << v << " in round " << round << (seen[v] == 0 ? " lost" : " duplicated");
    }
    EXPECT_EQ(ch.waiting_receivers(), 0u);
    spindle_test::progress();
  }
}

// Looping receivers, values sent then the channel closed, while some
// receivers are aborted: the receivers that survive see the end only after
// every value was received by someone (none left behind, none twice).
TEST(Channel, AbortAndCloseRacingWithLoopingReceiversLeaveNothingBehind) {
  spindle::runtime rt{{.workers = 2}};
  constexpr int k = 4;
  constexpr int values = 64;
  long const rounds = scaled(1000, 100);
  std::mt19937 rng{4242};
  auto receiver = [](channel<int>& c, std::vector<std::atomic<int>>& seen) -> task<void> {
    while (auto v = co_await c.recv())
      seen[static_cast<std::size_t>(*v)].fetch_add(1);
  };
  for (long round = 0; round < rounds; ++round) {
    channel<int> ch{round % 2 == 0 ? 1u : 8u};
    std::vector<std::atomic<int>> seen(values);
    std::vector<join_handle<void>> hs;
    for (int i = 0; i < k; ++i)
      hs.push_back(rt.spawn(receiver(ch, seen)));
    unsigned mask = 1 + rng() % ((1u << k) - 1);  // abort some, never all
    if ((mask & 1u) != 0) mask &= ~(1u << (k - 1));
    std::thread aborter([&] {
      for (int i = 0; i < k; ++i) {
        if ((mask & (1u << i)) != 0) hs[static_cast<std::size_t>(i)].abort();
      }
    });
    for (int v = 0; v < values; ++v)
      ch.blocking_send(v);
    ch.close();
    aborter.join();
    // Wait for the survivors first: they return only at the end.
    for (int i = 0; i < k; ++i) {
      if ((mask & (1u << i)) == 0) {
        ASSERT_TRUE(finished_normally(hs[static_cast<std::size_t>(i)]));
      }
    }
    for (int i = 0; i < k; ++i) {
      if ((mask & (1u << i)) != 0) (void)finished_normally(hs[static_cast<std::size_t>(i)]);
    }
    for (int v = 0; v < values; ++v) {
      ASSERT_EQ(seen[static_cast<std::size_t>(v)].load(), 1)
          << "value " << v << " in round " << round << " (mask " << mask << ")";
    }
    EXPECT_EQ(ch.size(), 0u);
    spindle_test::progress();
  }
}

// Senders wait on a full channel while a consumer receives and some senders
// are aborted: a value arrives at most once, and exactly once when its send
// completed.
TEST(Channel, AbortRacingWithWaitingSendersNeverLosesOrDuplicatesValues) {
  spindle::runtime rt{{.workers = 2}};
  constexpr int k = 6;
  long const rounds = scaled(3000, 300);
  std::mt19937 rng{777};
  auto sender = [](channel<std::unique_ptr<int>>& c, int v,
                   std::vector<std::atomic<int>>& sent) -> task<void> {
    co_await c.send(std::make_unique<int>(v));
    sent[static_cast<std::size_t>(v)].store(1);
  };
  for (long round = 0; round < rounds; ++round) {
    std::size_t const cap = round % 3 == 0 ? 0 : 1;
    channel<std::unique_ptr<int>> ch{cap};
    std::vector<std::atomic<int>> seen(k + 1);
    std::vector<std::atomic<int>> sent(k);
    if (cap == 1) {
      ASSERT_TRUE(ch.try_send(std::make_unique<int>(k)));
    }
    std::vector<join_handle<void>> hs;
    for (int i = 0; i < k; ++i)
      hs.push_back(rt.spawn(sender(ch, i, sent)));
    if (round % 2 == 0) {
      ASSERT_TRUE(wait_until([&] { return ch.waiting_senders() == k; }));
    }
    unsigned mask = rng() % (1u << k);
    std::thread aborter([&] {
      for (int i = 0; i < k; ++i) {
        if ((mask & (1u << i)) != 0) hs[static_cast<std::size_t>(i)].abort();
      }
    });
    auto all_done = [&] {
      for (auto& h : hs) {
        if (!h.is_finished()) return false;
      }
      return true;
    };
    for (;;) {
      if (auto v = ch.try_recv()) {
        seen[static_cast<std::size_t>(**v)].fetch_add(1);
        continue;
      }
      if (all_done()) break;
      std::this_thread::yield();
    }
    aborter.join();
    while (auto v = ch.try_recv())
      seen[static_cast<std::size_t>(**v)].fetch_add(1);
    for (int v = 0; v < k; ++v) {
      auto i = static_cast<std::size_t>(v);
      ASSERT_LE(seen[i].load(), 1) << "value " << v << " duplicated in round " << round;
      if (sent[i].load() == 1) {
        ASSERT_EQ(seen[i].load(), 1) << "a completed send was lost";
      }
      if ((mask & (1u << v)) == 0) {
        ASSERT_EQ(seen[i].load(), 1) << "a send never completed";
      }
    }
    if (cap == 1) {
      ASSERT_EQ(seen[k].load(), 1);
    }
    EXPECT_EQ(ch.waiting_senders(), 0u);
    for (auto& h : hs)
      (void)finished_normally(h);
    spindle_test::progress();
  }
}

// Runtime shutdown destroys tasks still waiting on a channel that outlives
// it: their wait nodes leave the channel's lists.
TEST(Channel, ShutdownWithdrawsWaitingTasks) {
  channel<int> full{1};
  channel<int> empty{1};
  ASSERT_TRUE(full.try_send(0));
  {
    spindle::runtime rt{{.workers = 2}};
    auto sender = [](channel<int>& c) -> task<void> { co_await c.send(1); };
    auto receiver = [](channel<int>& c) -> task<void> { (void)co_await c.recv(); };
    auto s = rt.spawn(sender(full));
    auto r = rt.spawn(receiver(empty));
    ASSERT_TRUE(wait_until([&] { return full.waiting_senders() == 1; }));
    ASSERT_TRUE(wait_until([&] { return empty.waiting_receivers() == 1; }));
  }
  EXPECT_EQ(full.waiting_senders(), 0u);
  EXPECT_EQ(empty.waiting_receivers(), 0u);
  EXPECT_EQ(full.try_recv(), 0);
  EXPECT_FALSE(full.try_recv().has_value());
  EXPECT_TRUE(empty.try_send(3));
  EXPECT_EQ(empty.try_recv(), 3);
}

// --------------------------------------------------------------------------
// MPMC contention

struct mpmc_result {
  std::uint64_t count = 0;
  std::uint64_t sum = 0;
  bool fifo = true;
};

constexpr int producers = 4;

// Values encode (producer, sequence); a consumer checks that each
// producer's values reach it in increasing order.
std::uint64_t encode(int producer, long seq) {
  return (static_cast<std::uint64_t>(producer) << 32) | static_cast<std::uint64_t>(seq);
}

void account(mpmc_result& r, std::vector<long>& last, std::uint64_t v) {
  auto p = static_cast<std::size_t>(v >> 32);
  auto seq = static_cast<long>(v & 0xffffffffu);
  if (seq <= last[p]) r.fifo = false;
  last[p] = seq;
  ++r.count;
  r.sum += v;
}

task<void> produce(channel<std::uint64_t>& ch, int id, long n) {
  for (long i = 0; i < n; ++i)
    co_await ch.send(encode(id, i));
}

task<mpmc_result> consume(channel<std::uint64_t>& ch) {
  mpmc_result r;
  std::vector<long> last(producers, -1);
  while (auto v = co_await ch.recv())
    account(r, last, *v);
  co_return r;
}

class ChannelMpmc : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ChannelMpmc, CountSumAndPerProducerOrderSurviveContention) {
  spindle::runtime rt{{.workers = 2}};
  channel<std::uint64_t> ch{GetParam()};
  long const n = scaled(10000, 2000);
  // Producers 0-1 are tasks, 2-3 foreign threads; consumers likewise.
  std::vector<join_handle<void>> ps;
  for (int p = 0; p < 2; ++p)
    ps.push_back(rt.spawn(produce(ch, p, n)));
  std::vector<std::thread> pthreads;
  for (int p = 2; p < producers; ++p) {
    pthreads.emplace_back([&ch, p, n] {
      for (long i = 0; i < n; ++i)
        ch.blocking_send(encode(p, i));
    });
  }
  std::vector<join_handle<mpmc_result>> cs;
  for (int c = 0; c < 2; ++c)
    cs.push_back(rt.spawn(consume(ch)));
  std::vector<mpmc_result> thread_results(2);
  std::vector<std::thread> cthreads;
  for (std::size_t c = 0; c < 2; ++c) {
    cthreads.emplace_back([&ch, &r = thread_results[c]] {
      std::vector<long> last(producers, -1);
      while (auto v = ch.blocking_recv())
        account(r, last, *v);
    });
  }
  for (auto& h : ps)
    spindle_test::wait_and_take(h, 120s);
  for (auto& t : pthreads)
    t.join();
  ch.close();
  std::uint64_t count = 0, sum = 0;
  for (auto& h : cs) {
    mpmc_result r = spindle_test::wait_and_take(h, 120s);
    EXPECT_TRUE(r.fifo) << "a task consumer saw a producer's values out of order";
    count += r.count;
    sum += r.sum;
  }
  for (auto& t : cthreads)
    t.join();
  for (auto& r : thread_results) {
    EXPECT_TRUE(r.fifo) << "a thread consumer saw a producer's values out of order";
    count += r.count;
    sum += r.sum;
  }
  std::uint64_t expected_sum = 0;
  for (int p = 0; p < producers; ++p) {
    for (long i = 0; i < n; ++i)
      expected_sum += encode(p, i);
  }
  EXPECT_EQ(count, static_cast<std::uint64_t>(producers * n));
  EXPECT_EQ(sum, expected_sum);
  EXPECT_EQ(ch.size(), 0u);
}

// Every party a task, spread over the workers, with more tasks than workers.
TEST_P(ChannelMpmc, TasksOnlyAcrossAllWorkers) {
  spindle::runtime rt{{.workers = 2}};
  channel<std::uint64_t> ch{GetParam()};
  long const n = scaled(10000, 2000);
  auto body = [](channel<std::uint64_t>& c, long count) -> task<mpmc_result> {
    std::vector<join_handle<mpmc_result>> cs;
    for (int i = 0; i < 4; ++i)
      cs.push_back(spindle::spawn(consume(c)));
    std::vector<join_handle<void>> ps;
    for (int p = 0; p < producers; ++p)
      ps.push_back(spindle::spawn(produce(c, p, count)));
    for (auto& h : ps)
      co_await h;
    c.close();
    mpmc_result total;
    for (auto& h : cs) {
      mpmc_result r = co_await h;
      total.fifo = total.fifo && r.fifo;
      total.count += r.count;
      total.sum += r.sum;
    }
    co_return total;
  };
  mpmc_result r = rt.block_on(body(ch, n));
  std::uint64_t expected_sum = 0;
  for (int p = 0; p < producers; ++p) {
    for (long i = 0; i < n; ++i)
      expected_sum += encode(p, i);
  }
  EXPECT_TRUE(r.fifo);
  EXPECT_EQ(r.count, static_cast<std::uint64_t>(producers * n));
  EXPECT_EQ(r.sum, expected_sum);
}

INSTANTIATE_TEST_SUITE_P(Capacities, ChannelMpmc,
                         ::testing::Values(std::size_t{1}, std::size_t{16},
                                           channel<std::uint64_t>::unbounded_capacity),
                         [](auto const& info) {
                           return info.param == channel<std::uint64_t>::unbounded_capacity
                                      ? std::string("unbounded")
                                      : "capacity_" + std::to_string(info.param);
                         });

}  // namespace
