// Boost.Asio side of bench/compare.py: C++20 coroutines (co_spawn of
// awaitable<T>) on an asio::thread_pool of N threads. Asio has no join
// handle, so "join all" is a counter decremented by each task's completion
// handler whose last decrement signals the measuring thread; one-shot
// messages are a small asynchronous operation written here (Boost 1.74 has
// no channel). No fork-join fib (co_spawn with use_awaitable starts the
// child only when awaited) and no memory_per_task.
//
// spawn_many_local: a coroutine on the pool co_spawns 10,000 coroutines that
//   decrement an atomic; the last signals completion.
// spawn_many_remote_idle / _busy: 10,000 co_spawns from the measuring thread,
//   then wait for all; _busy with 2 x N coroutines looping post + 10 µs stall.
// yield_many: 200 coroutines x 1,000 `co_await asio::post(use_awaitable)`.
// ping_pong: 1,000 rounds of Tokio's ping-pong with two one-shot messages.
// chained_spawn: each coroutine co_spawns the next (detached).
// spawn_await: 100,000 x co_await co_spawn(ex, trivial, use_awaitable).
// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>
// (keep <utility> first)
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <mutex>
#include <optional>

#include "../peer_common.hpp"

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;

namespace {

constexpr int num_spawn = 10'000;
constexpr int spawn_await_pairs = 100'000;

// One value, one waiter: send() stores the value and resumes the waiter (on
// its executor) if it already waits; `co_await rx.receive()` takes it.
template <class T>
class oneshot {
 public:
  void send(T v) {
    std::function<void()> resume;
    {
      std::lock_guard lock(mutex_);
      value_ = std::move(v);
      resume = std::move(waiter_);
    }
    if (resume) resume();
  }

  awaitable<T> receive() {
    co_await asio::async_initiate<decltype(use_awaitable), void()>(
        [this](auto handler) {
          std::unique_lock lock(mutex_);
          if (value_) {
            lock.unlock();
            asio::post(std::move(handler));
            return;
          }
          auto shared = std::make_shared<decltype(handler)>(std::move(handler));
          waiter_ = [shared] { asio::post(std::move(*shared)); };
        },
        use_awaitable);
    co_return std::move(*value_);
  }

 private:
  std::mutex mutex_;
  std::optional<T> value_;
  std::function<void()> waiter_;
};

awaitable<void> count_down(std::atomic<int>* remaining, peer::done_signal* done) {
  if (remaining->fetch_sub(1, std::memory_order_relaxed) == 1) done->set();
  co_return;
}

awaitable<void> spawn_detached(std::atomic<int>* remaining, peer::done_signal* done) {
  auto ex = co_await asio::this_coro::executor;
  for (int i = 0; i < num_spawn; ++i)
    asio::co_spawn(ex, count_down(remaining, done), asio::detached);
}

awaitable<void> nothing() {
  co_return;
}

void spawn_many_remote(asio::thread_pool& pool) {
  std::atomic<int> remaining{num_spawn};
  static peer::done_signal done;
  done.reset();
  for (int i = 0; i < num_spawn; ++i) {
    asio::co_spawn(pool, nothing(), [&](std::exception_ptr) {
      if (remaining.fetch_sub(1, std::memory_order_relaxed) == 1) done.set();
    });
  }
  done.wait();
}

awaitable<void> busy(std::atomic<bool>* keep_going) {
  while (keep_going->load(std::memory_order_relaxed)) {
    co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
    peer::stall();
  }
}

awaitable<void> yielder(std::atomic<int>* remaining, peer::done_signal* done) {
  auto ex = co_await asio::this_coro::executor;
  for (int i = 0; i < 1000; ++i)
    co_await asio::post(ex, use_awaitable);
  if (remaining->fetch_sub(1, std::memory_order_relaxed) == 1) done->set();
}

awaitable<void> pong(std::shared_ptr<oneshot<int>> rx, std::shared_ptr<oneshot<int>> tx) {
  int v = co_await rx->receive();
  tx->send(v + 1);
}

awaitable<void> ping(std::atomic<int>* remaining, peer::done_signal* done) {
  auto one = std::make_shared<oneshot<int>>();
  auto two = std::make_shared<oneshot<int>>();
  asio::co_spawn(co_await asio::this_coro::executor, pong(one, two), asio::detached);
  one->send(1);
  int v = co_await two->receive();
  if (v != 2) std::abort();
  if (remaining->fetch_sub(1, std::memory_order_relaxed) == 1) done->set();
}

awaitable<void> ping_pong_root(std::atomic<int>* remaining, peer::done_signal* done) {
  auto ex = co_await asio::this_coro::executor;
  for (int i = 0; i < 1000; ++i)
    asio::co_spawn(ex, ping(remaining, done), asio::detached);
}

awaitable<void> chain_link(int left, peer::done_signal* done) {
  if (left == 0) {
    done->set();
  } else {
    asio::co_spawn(co_await asio::this_coro::executor, chain_link(left - 1, done), asio::detached);
  }
}

awaitable<int> trivial(int v) {
  co_return v;
}

awaitable<void> spawn_await_loop(long* sum, peer::done_signal* done) {
  auto ex = co_await asio::this_coro::executor;
  long s = 0;
  for (int i = 0; i < spawn_await_pairs; ++i)
    s += co_await asio::co_spawn(ex, trivial(i), use_awaitable);
  *sum = s;
  done->set();
}

}  // namespace

int main(int argc, char** argv) {
  peer::options o = peer::parse(argc, argv, "asio_peer");
  if (o.workloads.empty()) {
    o.workloads = {"spawn_many_local",
                   "spawn_many_remote_idle",
                   "spawn_many_remote_busy",
                   "yield_many",
                   "ping_pong",
                   "chained_spawn",
                   "spawn_await"};
  }
  std::vector<peer::result> results;
  peer::done_signal done;
  for (std::string const& w : o.workloads) {
    asio::thread_pool pool(static_cast<std::size_t>(o.workers));
    if (w == "spawn_many_local") {
      results.push_back({w, "us", peer::measure(o, 1e-3, 1, [&] {
                           std::atomic<int> remaining{num_spawn};
                           done.reset();
                           asio::co_spawn(pool, spawn_detached(&remaining, &done), asio::detached);
                           done.wait();
                         })});
    } else if (w == "spawn_many_remote_idle") {
      results.push_back({w, "us", peer::measure(o, 1e-3, 1, [&] { spawn_many_remote(pool); })});
    } else if (w == "spawn_many_remote_busy") {
      std::atomic<bool> keep_going{true};
      for (int i = 0; i < 2 * o.workers; ++i)
        asio::co_spawn(pool, busy(&keep_going), asio::detached);
      results.push_back({w, "us", peer::measure(o, 1e-3, 1, [&] { spawn_many_remote(pool); })});
      keep_going.store(false, std::memory_order_relaxed);
    } else if (w == "yield_many") {
      results.push_back({w, "ms", peer::measure(o, 1e-6, 1, [&] {
                           std::atomic<int> remaining{200};
                           done.reset();
                           for (int i = 0; i < 200; ++i)
                             asio::co_spawn(pool, yielder(&remaining, &done), asio::detached);
                           done.wait();
                         })});
    } else if (w == "ping_pong") {
      results.push_back({w, "us", peer::measure(o, 1e-3, 1, [&] {
                           std::atomic<int> remaining{1000};
                           done.reset();
                           asio::co_spawn(pool, ping_pong_root(&remaining, &done), asio::detached);
                           done.wait();
                         })});
    } else if (w == "chained_spawn") {
      results.push_back({w, "us", peer::measure(o, 1e-3, 1, [&] {
                           done.reset();
                           asio::co_spawn(pool, chain_link(1000, &done), asio::detached);
                           done.wait();
                         })});
    } else if (w == "spawn_await") {
      results.push_back({w, "ns/pair", peer::measure(o, 1, spawn_await_pairs, [&] {
                           long sum = 0;
                           done.reset();
                           asio::co_spawn(pool, spawn_await_loop(&sum, &done), asio::detached);
                           done.wait();
                           if (sum !=
                               static_cast<long>(spawn_await_pairs) * (spawn_await_pairs - 1) / 2)
                             std::abort();
                         })});
    } else {
      std::fprintf(stderr, "asio_peer: workload %s is not supported\n", w.c_str());
      return 2;
    }
    pool.join();
  }
  peer::print("boost-asio", o, results);
  return 0;
}
