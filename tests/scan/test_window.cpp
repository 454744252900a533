// scan::window: the bound on files in flight, draining, shrinking on
// EMFILE and waking the producer for retries (on a spindle runtime).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <spindle/spindle.hpp>
#include <thread>
#include <vector>

#include "window.hpp"

namespace {

// Takes a place per item (try_acquire, else acquire) and hands it over,
// then waits until all places are back.
spindle::task<void> produce(scan::window* w, int items, std::function<void(int)> const* submit) {
  for (int k = 0; k < items; ++k) {
    if (!w->try_acquire()) {
      bool const got = co_await w->acquire();
      EXPECT_TRUE(got);
    }
    (*submit)(k);
  }
  bool const all = co_await w->wait_all();
  EXPECT_TRUE(all);
}

// The retry-aware producer of Window.ShrinksAndWakesTheProducerForRetries:
// resubmits retries first, stops waiting for a place when retries appear.
struct retry_producer {
  scan::window* w;
  int items;
  std::function<bool()> has_retries;
  std::function<bool()> pop_retry;  // submits one retry if any; false: none
  std::function<void(int)> submit;

  spindle::task<void> drain() {
    for (;;) {
      if (!has_retries()) co_return;
      bool const got = co_await w->acquire();
      EXPECT_TRUE(got);
      if (!pop_retry()) w->release();  // taken meanwhile: give the place back
    }
  }
  spindle::task<void> run() {
    for (int k = 1; k <= items; ++k) {
      co_await drain();
      for (;;) {
        bool const got = co_await w->acquire(has_retries);
        if (got) break;
        co_await drain();
      }
      submit(k);
    }
    for (;;) {
      co_await drain();
      bool const all = co_await w->wait_all(has_retries);
      if (all && !has_retries()) break;
    }
    bool const released = co_await w->wait_release();
    EXPECT_FALSE(released);  // nothing held: returns at once
  }
};

TEST(Window, BoundsItemsInFlightAndDrains) {
  constexpr std::uint32_t size = 8;
  constexpr int items = 20000;
  scan::window w(size);
  std::atomic<int> in_flight{0};
  std::atomic<int> max_seen{0};
  std::atomic<int> done{0};
  std::mutex m;
  std::vector<int> queue;  // items handed to the consumers
  std::atomic<bool> stop{false};
  std::vector<std::thread> consumers;
  for (int t = 0; t < 3; ++t) {
    consumers.emplace_back([&] {
      while (!stop.load()) {
        bool got = false;
        {
          std::lock_guard lock(m);
          if (!queue.empty()) {
            queue.pop_back();
            got = true;
          }
        }
        if (!got) {
          std::this_thread::yield();
          continue;
        }
        in_flight.fetch_sub(1);
        done.fetch_add(1);
        w.release();
      }
    });
  }
  // The producer is a task (the window suspends it); the consumers are
  // plain threads (release() from any thread).
  auto submit = [&](int k) {
    int const now = in_flight.fetch_add(1) + 1;
    int seen = max_seen.load();
    while (now > seen && !max_seen.compare_exchange_weak(seen, now)) {
    }
    std::lock_guard lock(m);
    queue.push_back(k);
  };
  std::function<void(int)> submit_fn = submit;
  spindle::runtime rt(spindle::runtime_config{.workers = 2});
  rt.block_on(produce(&w, items, &submit_fn));
  EXPECT_EQ(done.load(), items);
  EXPECT_EQ(w.free_places(), size);
  EXPECT_LE(max_seen.load(), static_cast<int>(size));
  stop.store(true);
  for (auto& t : consumers)
    t.join();
}

TEST(Window, ShrinksAndWakesTheProducerForRetries) {
  // Consumers give up their place for good on every 7th item while others
  // are in flight (as a scan out of descriptors does) and queue it again;
  // the producer resubmits queued items first, and drains everything.
  constexpr std::uint32_t size = 16;
  constexpr int items = 5000;
  scan::window w(size);
  std::mutex m;
  std::vector<int> queue, retries;
  std::atomic<int> active{0};
  std::atomic<int> done{0};
  std::atomic<int> shrinks{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> consumers;
  for (int t = 0; t < 3; ++t) {
    consumers.emplace_back([&] {
      while (!stop.load()) {
        int item = -1;
        {
          std::lock_guard lock(m);
          if (!queue.empty()) {
            item = queue.back();
            queue.pop_back();
          }
        }
        if (item < 0) {
          std::this_thread::yield();
          continue;
        }
        if (item % 7 == 0 && active.fetch_sub(1) > 1) {
          {
            std::lock_guard lock(m);
            retries.push_back(item + 1);  // comes back as an item that is done
          }
          shrinks.fetch_add(1);
          w.shrink();
          continue;
        }
        if (item % 7 == 0) active.fetch_add(1);  // alone: finish it after all
        active.fetch_sub(1);
        done.fetch_add(1);
        w.release();
      }
    });
  }
  auto has_retries = [&] {
    std::lock_guard lock(m);
    return !retries.empty();
  };
  auto submit = [&](int item) {
    active.fetch_add(1);
    std::lock_guard lock(m);
    queue.push_back(item);
  };
  auto pop_retry = [&] {
    int item = -1;
    {
      std::lock_guard lock(m);
      if (retries.empty()) return false;
      item = retries.back();
      retries.pop_back();
    }
    submit(item);
    return true;
  };
  retry_producer producer{&w, items, has_retries, pop_retry, submit};
  spindle::runtime rt(spindle::runtime_config{.workers = 2});
  rt.block_on(producer.run());
  EXPECT_EQ(done.load(), items);
  EXPECT_GE(w.size(), 1u);
  EXPECT_EQ(w.size(), size - static_cast<std::uint32_t>(shrinks.load()));
  EXPECT_EQ(w.free_places(), w.size());
  stop.store(true);
  for (auto& t : consumers)
    t.join();
}

}  // namespace
