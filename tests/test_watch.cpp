// Tests of spindle::watch<T>: latest value only, changed() waits for a newer
// version, coalescing, several receivers, closing, receiver copies, modify,
// blocking_changed, abort of a waiting receiver, and a monotonic stress.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "spindle/watch.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::task;
using spindle::watch;
using spindle_test::scaled;
using spindle_test::wait_until;

auto* const watchdog_env = ::testing::AddGlobalTestEnvironment(
    new spindle_test::watchdog_environment(spindle_test::stall_limit(30)));

using int_rx = watch<int>::receiver;

task<int> next_value(int_rx& rx) {
  // Not `if (!co_await ...)`: g++ 12.2 miscompiles a coroutine whose body
  // has no local at its top level and a co_await in an if/while condition
  // (its body never starts; GCC PR 106188, fixed in 12.3).
  bool const changed = co_await rx.changed();
  if (!changed) co_return -1;
  co_return rx.get();
}

TEST(Watch, ChangedWaitsForANewerValue) {
  spindle::runtime rt{{.workers = 2}};
  watch<int> w{1};
  auto rx = w.subscribe();
  EXPECT_EQ(rx.get(), 1);
  EXPECT_FALSE(rx.has_changed()) << "the value at subscription counted as new";
  std::atomic<bool> started{false};
  auto waiter = [](int_rx& r, std::atomic<bool>& s) -> task<int> {
    s.store(true);
    co_return co_await next_value(r);
  };
  auto h = rt.spawn(waiter(rx, started));
  ASSERT_TRUE(wait_until([&] { return started.load(); }));
  std::this_thread::sleep_for(2ms);
  EXPECT_FALSE(h.is_finished()) << "changed() completed without a new value";
  w.send(2);
  EXPECT_EQ(spindle_test::wait_and_take(h), 2);
  EXPECT_EQ(w.get(), 2);
}

TEST(Watch, SendsCoalesceIntoOneChange) {
  spindle::runtime rt{{.workers = 2}};
  watch<std::string> w{"a"};
  auto rx = w.subscribe();
  w.send("b");
  w.send("c");
  w.send("d");
  EXPECT_TRUE(rx.has_changed());
  EXPECT_EQ(rx.peek(), "d");
  EXPECT_TRUE(rx.has_changed()) << "peek() marked the value seen";
  auto once = [](watch<std::string>::receiver& r) -> task<std::string> {
    bool changed = co_await r.changed();
    EXPECT_TRUE(changed);
    co_return r.get();
  };
  EXPECT_EQ(rt.block_on(once(rx)), "d");
  EXPECT_FALSE(rx.has_changed()) << "three sends produced more than one change";
  // get() marks the value seen as well.
  w.send("e");
  EXPECT_EQ(rx.get(), "e");
  EXPECT_FALSE(rx.has_changed());
}

TEST(Watch, EveryWaitingReceiverIsWoken) {
  spindle::runtime rt{{.workers = 2}};
  watch<int> w{0};
  std::vector<int_rx> rxs;
  for (int i = 0; i < 5; ++i)
    rxs.push_back(w.subscribe());
  EXPECT_EQ(w.receiver_count(), 5u);
  std::vector<join_handle<int>> hs;
  for (auto& rx : rxs)
    hs.push_back(rt.spawn(next_value(rx)));
  auto thread_rx = w.subscribe();
  int from_thread = 0;
  std::thread t([&] {
    if (thread_rx.blocking_changed()) from_thread = thread_rx.get();
  });
  std::this_thread::sleep_for(2ms);
  w.send(9);
  for (auto& h : hs)
    EXPECT_EQ(spindle_test::wait_and_take(h), 9);
  t.join();
  EXPECT_EQ(from_thread, 9);
}

TEST(Watch, CloseReportsTheLastUnseenValueThenTheEnd) {
  spindle::runtime rt{{.workers = 2}};
  std::optional<int_rx> rx;
  std::optional<int_rx> waiting;
  join_handle<int> h;
  {
    watch<int> w{0};
    rx.emplace(w.subscribe());
    waiting.emplace(w.subscribe());
    h = rt.spawn(next_value(*waiting));
    std::this_thread::sleep_for(1ms);
    w.send(4);
    EXPECT_EQ(spindle_test::wait_and_take(h), 4);
    h = rt.spawn(next_value(*waiting));
    std::this_thread::sleep_for(1ms);
    w.close();
    EXPECT_THROW(w.send(5), spindle::channel_closed);
  }
  EXPECT_EQ(spindle_test::wait_and_take(h), -1) << "a waiter was not told about the close";
  EXPECT_TRUE(rx->is_closed());
  EXPECT_TRUE(rx->blocking_changed()) << "the value sent before close was not reported";
  EXPECT_EQ(rx->get(), 4);
  EXPECT_FALSE(rx->blocking_changed());
  EXPECT_EQ(rt.block_on(next_value(*rx)), -1);
  EXPECT_EQ(rx->get(), 4) << "the last value is kept after the watch is gone";
}

TEST(Watch, ACopiedReceiverStartsFromTheSameSeenVersion) {
  watch<int> w{0};
  auto a = w.subscribe();
  w.send(1);
  int_rx b = a;
  EXPECT_EQ(w.receiver_count(), 2u);
  EXPECT_TRUE(b.has_changed());
  EXPECT_EQ(b.get(), 1);
  EXPECT_FALSE(b.has_changed());
  EXPECT_TRUE(a.has_changed()) << "copies share their seen version";
  { int_rx gone = std::move(b); }
  EXPECT_EQ(w.receiver_count(), 1u);
  EXPECT_FALSE(b.valid());
  EXPECT_THROW((void)b.has_changed(), std::system_error);
}

TEST(Watch, ModifyChangesInPlaceAndNotifies) {
  watch<std::vector<int>> w{{}};
  auto rx = w.subscribe();
  w.modify([](std::vector<int>& v) { v.push_back(3); });
  w.modify([](std::vector<int>& v) { v.push_back(4); });
  EXPECT_TRUE(rx.blocking_changed());
  EXPECT_EQ(rx.get(), (std::vector<int>{3, 4}));
}

TEST(Watch, MisuseErrors) {
  int_rx empty;
  EXPECT_THROW((void)empty.get(), std::system_error);
  watch<int> w{0};
  auto rx = w.subscribe();
  spindle::runtime rt{{.workers = 1}};
  auto inside = [](int_rx& r) -> task<bool> {
    try {
      (void)r.blocking_changed();
    } catch (std::system_error const& e) {
      co_return e.code() == std::errc::operation_not_permitted;
    }
    co_return false;
  };
  EXPECT_TRUE(rt.block_on(inside(rx)));
}

TEST(Watch, AbortOfAWaitingReceiverMissesNothingForOthers) {
  spindle::runtime rt{{.workers = 2}};
  watch<int> w{0};
  auto rx = w.subscribe();
  long const rounds = scaled(3000, 300);
  for (long round = 1; round <= rounds; ++round) {
    auto h = rt.spawn(next_value(rx));
    if (round % 2 == 0) std::this_thread::yield();
    std::thread aborter([&h] { h.abort(); });
    w.send(static_cast<int>(round));
    aborter.join();
    int got = -1;
    try {
      got = spindle_test::wait_and_take(h);
    } catch (spindle::task_cancelled const&) {
      // The aborted wait marked nothing seen unless it completed.
      ASSERT_TRUE(rx.has_changed() || rx.peek() == round);
      got = rx.get();
    }
    ASSERT_EQ(got, round);
    ASSERT_FALSE(rx.has_changed());
    spindle_test::progress();
  }
}

// One sender counts up; receivers on tasks and a thread see a non-decreasing
// sequence that ends at the last value.
TEST(Watch, ReceiversSeeMonotonicValuesEndingAtTheLast) {
  spindle::runtime rt{{.workers = 2}};
  watch<long> w{0};
  long const n = scaled(50000, 5000);
  auto follower = [](watch<long>::receiver rx) -> task<long> {
    long last = 0;
    while (co_await rx.changed()) {
      long v = rx.get();
      if (v < last) co_return -1;
      last = v;
    }
    co_return last;
  };
  std::vector<join_handle<long>> hs;
  for (int i = 0; i < 4; ++i)
    hs.push_back(rt.spawn(follower(w.subscribe())));
  long thread_last = 0;
  bool thread_ordered = true;
  std::thread t([&, rx = w.subscribe()]() mutable {
    while (rx.blocking_changed()) {
      long v = rx.get();
      if (v < thread_last) thread_ordered = false;
      thread_last = v;
    }
  });
  auto sender = [](watch<long>& wt, long count) -> task<void> {
    for (long i = 1; i <= count; ++i) {
      wt.send(i);
      if (i % 32 == 0) co_await spindle::yield_now{};
    }
  };
  rt.block_on(sender(w, n));
  w.close();
  for (auto& h : hs)
    EXPECT_EQ(spindle_test::wait_and_take(h, 120s), n);
  t.join();
  EXPECT_TRUE(thread_ordered);
  EXPECT_EQ(thread_last, n);
}

}  // namespace
