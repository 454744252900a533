// spindle processes (spindle/process.hpp): pids, mailboxes, receive and
// receive_for, monitor, state_of, bounded mailboxes, shutdown, stats, and a
// stress of the park/wake protocol (no lost wake-up).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/spindle.hpp"

namespace {

using namespace std::chrono_literals;
using spindle::pid;
using spindle::process_context;
using spindle::process_state;
using spindle::task;

// A process that adds what it receives until it gets a negative number,
// then reports the sum to `out`.
task<void> summer(process_context<long>& ctx, std::atomic<long>* out) {
  long sum = 0;
  for (;;) {
    long v = co_await ctx.receive();
    if (v < 0) break;
    sum += v;
  }
  out->store(sum);
}

auto make_summer(std::atomic<long>* out) {
  return [out](process_context<long>& ctx) { return summer(ctx, out); };
}

task<void> wait_until_complete(pid<long> p) {
  co_await spindle::monitor(p);
}

TEST(Process, PidIsAValue) {
  pid<int> none;
  EXPECT_EQ(none.value(), 0u);
  EXPECT_FALSE(spindle::send(none, 1));
  EXPECT_EQ(spindle::state_of(none), process_state::complete);
  spindle::runtime rt{{.workers = 2}};
  std::atomic<long> out{0};
  pid<long> p = rt.spawn_process<long>(make_summer(&out));
  pid<long> copy = p;
  EXPECT_EQ(copy, p);
  EXPECT_NE(p.value(), 0u);
  EXPECT_EQ(std::hash<pid<long>>{}(p), std::hash<std::uint64_t>{}(p.value()));
  EXPECT_TRUE(spindle::send(p, 2));  // converts to the pid's Msg (long)
  EXPECT_TRUE(spindle::send(p, 3L));
  EXPECT_TRUE(spindle::send(p, -1L));
  rt.block_on(wait_until_complete(p));
  EXPECT_EQ(out.load(), 5);
}

TEST(Process, SendToACompletedPidFails) {
  spindle::runtime rt{{.workers = 2}};
  std::atomic<long> out{0};
  pid<long> p = rt.spawn_process<long>(make_summer(&out));
  ASSERT_TRUE(spindle::send(p, -1L));
  rt.block_on(wait_until_complete(p));
  EXPECT_FALSE(spindle::send(p, 1L));
  EXPECT_EQ(spindle::state_of(p), process_state::complete);
}

TEST(Process, StalePidNeverReachesTheSlotsNextProcess) {
  spindle::runtime rt{{.workers = 2}};
  std::atomic<long> out1{0};
  pid<long> first = rt.spawn_process<long>(make_summer(&out1));
  ASSERT_TRUE(spindle::send(first, -1L));
  rt.block_on(wait_until_complete(first));
  // Spawn until the slot comes back (free lists are LIFO per thread shard:
  // the first spawn from this thread reuses it).
  std::uint32_t const slot = static_cast<std::uint32_t>(first.value());
  std::vector<pid<long>> others;
  std::vector<std::unique_ptr<std::atomic<long>>> outs;
  pid<long> reuse;
  for (int i = 0; i < 10000 && reuse == pid<long>{}; ++i) {
    outs.push_back(std::make_unique<std::atomic<long>>(0));
    pid<long> p = rt.spawn_process<long>(make_summer(outs.back().get()));
    if (static_cast<std::uint32_t>(p.value()) == slot) reuse = p;
    others.push_back(p);
  }
  ASSERT_NE(reuse, pid<long>{}) << "the slot was never reused";
  EXPECT_NE(reuse, first);
  EXPECT_FALSE(spindle::send(first, 100L));  // stale: must not reach `reuse`
  EXPECT_EQ(spindle::state_of(first), process_state::complete);
  EXPECT_NE(spindle::state_of(reuse), process_state::complete);
  for (auto& p : others)
    ASSERT_TRUE(spindle::send(p, 1L));
  for (auto& p : others)
    ASSERT_TRUE(spindle::send(p, -1L));
  for (auto& p : others)
    rt.block_on(wait_until_complete(p));
  for (auto& o : outs)
    EXPECT_EQ(o->load(), 1);
}

task<void> send_from_task(pid<long> to, long n) {
  for (long i = 0; i < n; ++i) {
    EXPECT_TRUE(spindle::send(to, 1L));
    if (i % 64 == 0) co_await spindle::yield_now();
  }
}

task<void> sending_process(process_context<int>& ctx, pid<long> to, long n) {
  (void)co_await ctx.receive();  // go
  for (long i = 0; i < n; ++i)
    EXPECT_TRUE(spindle::send(to, 1L));
}

TEST(Process, MessagesFromThreadsTasksAndProcessesAtOnce) {
  spindle::runtime rt{{.workers = 2}};
  long const per = spindle_test::scaled(20000, 500);
  std::atomic<long> out{0};
  pid<long> sink = rt.spawn_process<long>(make_summer(&out));
  std::vector<pid<int>> senders;
  for (int i = 0; i < 4; ++i) {
    senders.push_back(rt.spawn_process<int>(
        [sink, per](process_context<int>& ctx) { return sending_process(ctx, sink, per); }));
  }
  std::vector<spindle::join_handle<void>> tasks;
  for (int i = 0; i < 4; ++i)
    tasks.push_back(rt.spawn(send_from_task(sink, per)));
  for (auto& s : senders)
    ASSERT_TRUE(spindle::send(s, 0));
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([sink, per] {
      for (long k = 0; k < per; ++k)
        EXPECT_TRUE(spindle::send(sink, 1L));
    });
  }
  for (auto& t : threads)
    t.join();
  for (auto& h : tasks)
    rt.block_on(std::move(h));
  for (auto& s : senders)
    rt.block_on(spindle::monitor(s));
  ASSERT_TRUE(spindle::send(sink, -1L));
  rt.block_on(wait_until_complete(sink));
  EXPECT_EQ(out.load(), per * 11);
  auto st = rt.stats();
  EXPECT_GE(st.messages_sent, static_cast<std::uint64_t>(per * 11 + 1));
  EXPECT_GE(st.messages_received, static_cast<std::uint64_t>(per * 11 + 1));
  EXPECT_GE(st.processes_completed, 5u);
}

task<void> timed(process_context<int>& ctx, std::atomic<int>* timeouts, std::atomic<int>* got) {
  // Nothing sent yet: times out.
  std::optional<int> a = co_await ctx.receive_for(5ms);
  if (!a) timeouts->fetch_add(1);
  // d <= 0 only looks.
  std::optional<int> b = co_await ctx.receive_for(0ns);
  if (!b) timeouts->fetch_add(1);
  // Now a message is sent after we reported (got == 0 -> we wait long).
  got->store(-1);
  std::optional<int> c = co_await ctx.receive_for(std::chrono::hours(1));
  if (c) got->store(*c);
  // Messages already waiting come before any timeout.
  std::optional<int> d = co_await ctx.receive_for(1ms);
  if (d) got->fetch_add(*d);
}

TEST(Process, ReceiveForTimesOutAndYieldsMessages) {
  spindle::runtime rt{{.workers = 2}};
  std::atomic<int> timeouts{0};
  std::atomic<int> got{0};
  pid<int> p =
      rt.spawn_process<int>([&](process_context<int>& ctx) { return timed(ctx, &timeouts, &got); });
  while (got.load() != -1)
    std::this_thread::yield();
  ASSERT_TRUE(spindle::send(p, 40));
  ASSERT_TRUE(spindle::send(p, 2));
  rt.block_on(spindle::monitor(p));
  EXPECT_EQ(timeouts.load(), 2);
  EXPECT_EQ(got.load(), 42);
}

task<void> many_timeouts(process_context<int>& ctx, std::atomic<long>* seen, long rounds) {
  long messages = 0;
  for (long i = 0; i < rounds; ++i) {
    std::optional<int> m = co_await ctx.receive_for(1ms);
    if (m) ++messages;
  }
  // Whatever the timers did, every message sent is still there or was seen.
  for (;;) {
    std::optional<int> m = co_await ctx.receive_for(0ns);
    if (!m) break;
    ++messages;
  }
  seen->store(messages);
}

TEST(Process, ReceiveForRacesWithSenders) {
  spindle::runtime rt{{.workers = 2}};
  long const rounds = spindle_test::scaled(400, 40);
  std::atomic<long> seen{-1};
  std::atomic<bool> stop{false};
  pid<int> p = rt.spawn_process<int>(
      [&](process_context<int>& ctx) { return many_timeouts(ctx, &seen, rounds); });
  std::atomic<long> sent{0};
  std::thread t([&] {
    while (!stop.load()) {
      if (spindle::send(p, 1)) sent.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  rt.block_on(spindle::monitor(p));
  stop.store(true);
  t.join();
  EXPECT_EQ(seen.load(), sent.load());
}

task<void> thrower(process_context<int>& ctx) {
  int v = co_await ctx.receive();
  throw std::runtime_error("boom " + std::to_string(v));
}

task<void> expect_boom(pid<int> p, std::string* what) {
  try {
    co_await spindle::monitor(p);
  } catch (std::runtime_error const& e) {
    *what = e.what();
  }
}

TEST(Process, MonitorRethrowsTheBodysException) {
  spindle::runtime rt{{.workers = 2}};
  pid<int> p = rt.spawn_process<int>([](process_context<int>& ctx) { return thrower(ctx); });
  std::string what;
  auto h = rt.spawn(expect_boom(p, &what));
  ASSERT_TRUE(spindle::send(p, 7));
  rt.block_on(std::move(h));
  EXPECT_EQ(what, "boom 7");
  // A monitor that starts after the end sees the outcome too.
  std::string late;
  rt.block_on(expect_boom(p, &late));
  EXPECT_EQ(late, "boom 7");
  EXPECT_EQ(rt.stats().detached_exceptions, 0u);
}

task<void> idle_forever(process_context<int>& ctx, std::atomic<int>* cancelled) {
  try {
    for (;;)
      (void)co_await ctx.receive();
  } catch (spindle::task_cancelled const&) {
    cancelled->fetch_add(1);
    throw;
  }
}

TEST(Process, StateOfFollowsTheProcess) {
  std::atomic<int> cancelled{0};  // outlives the runtime, whose shutdown cancels the process
  spindle::runtime rt{{.workers = 2}};
  pid<int> p = rt.spawn_process<int>(
      [&](process_context<int>& ctx) { return idle_forever(ctx, &cancelled); });
  while (spindle::state_of(p) != process_state::idle)
    std::this_thread::yield();
  auto st = rt.stats();
  EXPECT_EQ(st.processes_idle, 1u);
  EXPECT_EQ(st.processes_running + st.processes_ready + st.processes_blocked, 0u);
}

TEST(Process, ShutdownCancelsTenThousandIdleProcesses) {
  long const n = spindle_test::scaled(10000, 1000);
  std::atomic<int> cancelled{0};
  std::vector<pid<int>> pids;
  {
    spindle::runtime rt{{.workers = 2}};
    for (long i = 0; i < n; ++i) {
      pids.push_back(rt.spawn_process<int>(
          [&](process_context<int>& ctx) { return idle_forever(ctx, &cancelled); }));
    }
    // Some have a message waiting, some are parked, some never ran.
    for (long i = 0; i < n; i += 3)
      ASSERT_TRUE(spindle::send(pids[static_cast<std::size_t>(i)], 1));
  }
  EXPECT_EQ(cancelled.load(), n);
  for (auto& p : pids) {
    EXPECT_FALSE(spindle::send(p, 1));
    EXPECT_EQ(spindle::state_of(p), process_state::complete);
  }
}

task<void> ignores_cancel(process_context<int>& ctx, std::atomic<bool>* gate) {
  try {
    (void)co_await ctx.receive();
  } catch (spindle::task_cancelled const&) {
  }
  // Does not end in time: blocked on something that never comes.
  spindle::event never;
  gate->store(true);
  co_await never.wait();
}

TEST(Process, ShutdownDestroysBodiesThatOutliveTheTimeout) {
  std::atomic<bool> gate{false};
  pid<int> p;
  std::string what;
  {
    spindle::runtime rt{{.workers = 2, .process_shutdown_timeout = 20ms}};
    p = rt.spawn_process<int>(
        [&](process_context<int>& ctx) { return ignores_cancel(ctx, &gate); });
  }
  EXPECT_TRUE(gate.load());
  EXPECT_EQ(spindle::state_of(p), process_state::complete);
}

task<void> echo_once(process_context<pid<int>>& ctx) {
  pid<int> reply_to = co_await ctx.receive();
  spindle::send(reply_to, 5);
}

task<void> asker(process_context<int>& ctx, pid<pid<int>> server, std::atomic<int>* out) {
  spindle::send(server, ctx.self());
  out->store(co_await ctx.receive());
}

TEST(Process, SpawnFromInsideAndReplyToSelf) {
  spindle::runtime rt{{.workers = 2}};
  std::atomic<int> out{0};
  auto outer = [&out]() -> task<void> {
    pid<pid<int>> server =
        spindle::spawn_process<pid<int>>([](process_context<pid<int>>& c) { return echo_once(c); });
    pid<int> a = spindle::spawn_process<int>(
        [server, &out](process_context<int>& c) { return asker(c, server, &out); });
    co_await spindle::monitor(a);
  };
  rt.block_on(outer());
  EXPECT_EQ(out.load(), 5);
}

TEST(Process, SpawnOutsideARuntimeThrows) {
  std::atomic<int> cancelled{0};
  auto body = [&cancelled](process_context<int>& c) { return idle_forever(c, &cancelled); };
  EXPECT_THROW((void)spindle::spawn_process<int>(body), std::system_error);
}

task<void> slow_taker(process_context<int>& ctx, spindle::event* go, std::atomic<long>* sum) {
  co_await go->wait();
  for (;;) {
    int v = co_await ctx.receive();
    if (v < 0) break;
    sum->fetch_add(v);
  }
}

task<void> send_all_async(pid<int> to, int n, std::atomic<int>* accepted) {
  for (int i = 0; i < n; ++i) {
    bool ok = co_await spindle::send_async(to, 1);
    if (ok) accepted->fetch_add(1);
  }
  bool ok = co_await spindle::send_async(to, -1);
  EXPECT_TRUE(ok);
}

TEST(Process, BoundedMailboxRefusesWhenFullAndSendAsyncWaits) {
  spindle::runtime rt{{.workers = 2}};
  spindle::event go;
  std::atomic<long> sum{0};
  pid<int> p =
      rt.spawn_process<int>([&](process_context<int>& ctx) { return slow_taker(ctx, &go, &sum); },
                            spindle::process_options{.mailbox_capacity = 4});
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(spindle::send(p, 1));
  EXPECT_FALSE(spindle::send(p, 1));  // full
  std::atomic<int> accepted{0};
  auto h = rt.spawn(send_all_async(p, 100, &accepted));
  go.set();
  rt.block_on(std::move(h));
  rt.block_on(spindle::monitor(p));
  EXPECT_EQ(accepted.load(), 100);
  EXPECT_EQ(sum.load(), 104);
}

// The park/wake protocol under load: a ring of processes passing tokens
// (every hop finds its receiver parked or about to park), with threads
// sending into the ring meanwhile. A lost wake-up hangs (caught by the
// watchdog's deadline); a spurious or double one breaks the counts.
struct ring_shared {
  std::vector<pid<long>> members;
  std::atomic<long> finished{0};
  std::atomic<long> extra{0};
};

task<void> ring_member(process_context<long>& ctx, ring_shared* ring, std::size_t me) {
  pid<long> next = ring->members[(me + 1) % ring->members.size()];
  for (;;) {
    long v = co_await ctx.receive();
    if (v == 0) break;  // stop
    if (v < 0) {
      ring->extra.fetch_add(1);
      continue;
    }  // from a thread
    if (v == 1) {
      ring->finished.fetch_add(1);
      continue;
    }
    EXPECT_TRUE(spindle::send(next, v - 1));
  }
}

TEST(Process, StressNoLostWakeUp) {
  spindle::runtime rt{{.workers = 2}};
  long const total = spindle_test::scaled(10'000'000, 100'000);
  std::size_t const members = 64;
  long const tokens = 16;
  ring_shared ring;
  // The pids first (a member needs its successor's), then the bodies: each
  // member waits for a go message carrying nothing but the ring is built.
  std::vector<std::shared_ptr<spindle::event>> unused;
  ring.members.resize(members);
  spindle::event built;
  auto wait_then_run = [&ring, &built](std::size_t me) {
    return [&ring, &built, me](process_context<long>& ctx) -> task<void> {
      co_await built.wait();
      co_await ring_member(ctx, &ring, me);
    };
  };
  for (std::size_t i = 0; i < members; ++i)
    ring.members[i] = rt.spawn_process<long>(wait_then_run(i));
  built.set();
  long const hops = total / tokens;
  for (long t = 0; t < tokens; ++t)
    ASSERT_TRUE(spindle::send(ring.members[static_cast<std::size_t>(t) % members], hops));
  long const per_thread = spindle_test::scaled(200'000, 5'000);
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back([&, k] {
      for (long i = 0; i < per_thread; ++i)
        EXPECT_TRUE(spindle::send(ring.members[static_cast<std::size_t>(i + k) % members], -1L));
    });
  }
  for (auto& t : threads)
    t.join();
  auto deadline = std::chrono::steady_clock::now() + 300s;
  while ((ring.finished.load() != tokens || ring.extra.load() != 2 * per_thread) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(ring.finished.load(), tokens) << "a wake-up was lost";
  ASSERT_EQ(ring.extra.load(), 2 * per_thread);
  for (auto& p : ring.members)
    ASSERT_TRUE(spindle::send(p, 0L));
  for (auto& p : ring.members)
    rt.block_on(spindle::monitor(p));
  auto st = rt.stats();
  EXPECT_GE(st.messages_received, static_cast<std::uint64_t>(tokens * hops + 2 * per_thread));
}

}  // namespace

// ---------------------------------------------------------------------------
// Step processes

namespace {

struct step_log {
  std::mutex mutex;
  std::vector<std::uint64_t> completed_tags;  // in the order the steps saw them
  std::vector<int> results;
  std::vector<std::string> errors;
  std::vector<std::string> messages;
  std::atomic<int> closes{0};
  std::atomic<int> steps{0};
  std::atomic<std::size_t> seen{0};
};

struct gated_machine {
  explicit gated_machine(step_log* log) : log_(log) {}
  void init(std::string_view method, spindle::payload input) {
    if (method != "gather") throw std::invalid_argument("unknown method " + std::string(method));
    want_ = std::any_cast<int>(input);
  }
  void step(std::span<spindle::step_event const> events, spindle::step_output& out) {
    log_->steps.fetch_add(1);
    if (first_) {
      first_ = false;
      for (int i = 0; i < want_; ++i)
        out.yield("wait", spindle::payload{i});
      out.yield("no-such-command", spindle::payload{});
    }
    std::lock_guard lock(log_->mutex);
    for (auto const& e : events) {
      if (e.type == spindle::step_event::kind::message) {
        log_->messages.push_back(std::any_cast<std::string>(e.data));
        continue;
      }
      ++done_;
      if (e.error) {
        try {
          std::rethrow_exception(e.error);
        } catch (std::system_error const& x) {
          log_->errors.push_back(x.what());
          EXPECT_EQ(x.code(), std::make_error_code(std::errc::function_not_supported));
        }
      } else {
        log_->completed_tags.push_back(e.tag);
        log_->results.push_back(std::any_cast<int>(e.data));
      }
    }
    log_->seen.store(log_->completed_tags.size());
    if (done_ == want_ + 1 && !log_->messages.empty()) out.complete();
  }
  void close() { log_->closes.fetch_add(1); }

 private:
  step_log* log_;
  int want_ = 0;
  int done_ = 0;
  bool first_ = true;
};

static_assert(spindle::step_process<gated_machine>);

}  // namespace

TEST(StepProcess, CommandsCompleteOutOfOrderUnknownCommandIsAnErrorEvent) {
  spindle::runtime rt{{.workers = 2}};
  std::vector<std::unique_ptr<spindle::event>> gates;
  for (int i = 0; i < 3; ++i)
    gates.push_back(std::make_unique<spindle::event>());
  spindle::step_handlers handlers;
  handlers.add("wait", [&gates](spindle::payload args) -> task<spindle::payload> {
    int i = std::any_cast<int>(args);
    co_await gates[static_cast<std::size_t>(i)]->wait();
    co_return spindle::payload{i * 10};
  });
  step_log log;
  pid<spindle::payload> p =
      spindle::spawn_step_process<gated_machine>(rt, handlers, "gather", spindle::payload{3}, &log);
  // Release the commands in the order 2, 0, 1, each after the last was seen.
  int const order[] = {2, 0, 1};
  for (std::size_t k = 0; k < 3; ++k) {
    gates[static_cast<std::size_t>(order[k])]->set();
    while (log.seen.load() != k + 1)
      std::this_thread::yield();
  }
  EXPECT_TRUE(spindle::send(p, spindle::payload{std::string("hello")}));
  rt.block_on(spindle::monitor(p));
  EXPECT_EQ(log.completed_tags, (std::vector<std::uint64_t>{3, 1, 2}));
  EXPECT_EQ(log.results, (std::vector<int>{20, 0, 10}));
  ASSERT_EQ(log.errors.size(), 1u);
  EXPECT_NE(log.errors[0].find("no-such-command"), std::string::npos);
  EXPECT_EQ(log.messages, (std::vector<std::string>{"hello"}));
  EXPECT_EQ(log.closes.load(), 1);
}

TEST(StepProcess, UnknownMethodEndsTheProcessWithItsError) {
  spindle::runtime rt{{.workers = 2}};
  step_log log;
  spindle::step_handlers handlers;
  auto p =
      spindle::spawn_step_process<gated_machine>(rt, handlers, "nope", spindle::payload{1}, &log);
  std::string what;
  try {
    rt.block_on(spindle::monitor(p));
  } catch (std::invalid_argument const& e) {
    what = e.what();
  }
  EXPECT_EQ(what, "unknown method nope");
  EXPECT_EQ(log.closes.load(), 0);  // init did not return
  EXPECT_FALSE(spindle::send(p, spindle::payload{1}));
}

TEST(StepProcess, ShutdownClosesAWaitingMachine) {
  step_log log;
  {
    spindle::runtime rt{{.workers = 2}};
    spindle::step_handlers handlers;  // "wait" unknown: the machine waits for a message
    auto p = spindle::spawn_step_process<gated_machine>(rt, handlers, "gather", spindle::payload{0},
                                                        &log);
    while (spindle::state_of(p) != process_state::idle)
      std::this_thread::yield();
  }
  EXPECT_EQ(log.closes.load(), 1);
}

// ---------------------------------------------------------------------------
// Deterministic simulation of the mailbox protocol
//
// One thread, a seeded RNG: S virtual senders and the receiver take turns,
// step by step, on a real process_block (the production push steps:
// push_exchange, push_link, count_and_wake; the receiver's available, pop,
// try_park and unpark). The block's task is a real task header held RUNNING,
// so a wake goes through detail::wake and task_state::mark_woken and shows
// as the NOTIFIED bit, which the simulator takes after every step. Checked
// after every step: a wake only while the receiver is parked (its CAS done),
// at most one per park; no message counted after a park without a wake; per
// sender FIFO order; at the end every message received exactly once. Each
// seed is run twice and its trace hash must match (exact replay).

namespace {

namespace sb = spindle::detail::state_bits;

struct sim_result {
  std::uint64_t hash = 1469598103934665603ULL;
  long parks = 0;
  long wakes = 0;
  long received = 0;
  std::string failure;
  void mix(std::uint64_t v) {
    hash ^= v;
    hash *= 1099511628211ULL;
  }
};

sim_result simulate_mailbox(std::uint64_t seed, int senders, int per_sender) {
  sim_result r;
  std::uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + 1;
  auto next = [&rng](std::uint64_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
  };
  using block_t = spindle::detail::process_block<std::uint64_t>;
  using node_t = spindle::detail::mailbox_node<std::uint64_t>;
  auto block = std::make_unique<block_t>();
  spindle::detail::task_header header;
  header.state.store(sb::running | sb::ref_one, std::memory_order_relaxed);
  block->task = &header;

  struct sender {
    int sent = 0;
    int step = 0;  // 0: next message, 1: exchanged, 2: linked
    node_t* node = nullptr;
    spindle::detail::mailbox_link* prev = nullptr;
  };
  std::vector<sender> ss(static_cast<std::size_t>(senders));
  std::vector<int> last_seen(static_cast<std::size_t>(senders), -1);
  enum class rx { running, parked } state = rx::running;
  bool woken_this_park = false;
  bool about_to_park = false;
  long const total = static_cast<long>(senders) * per_sender;

  auto take_wake = [&]() -> bool {
    std::uint64_t s = header.state.load(std::memory_order_relaxed);
    if ((s & sb::notified) == 0) return true;
    header.state.store(s & ~sb::notified, std::memory_order_relaxed);
    ++r.wakes;
    r.mix(0xAAAA);
    if (state != rx::parked) {
      r.failure = "a wake while the receiver was not parked (spurious)";
      return false;
    }
    if (woken_this_park) {
      r.failure = "two wakes for one park";
      return false;
    }
    woken_this_park = true;
    return true;
  };

  long guard = 0;
  while (r.received < total) {
    if (++guard > 100'000'000) {
      r.failure = "no progress";
      return r;
    }
    // Who moves: a sender with work left, or the receiver.
    std::size_t const pick = next(static_cast<std::uint64_t>(senders) + 1);
    if (pick < ss.size()) {
      sender& s = ss[pick];
      if (s.step == 0) {
        if (s.sent == per_sender) continue;
        std::uint64_t const msg = pick << 32 | static_cast<std::uint64_t>(s.sent);
        s.node = new node_t(std::in_place, msg);
        s.prev = block->push_exchange(s.node);
        s.step = 1;
      } else if (s.step == 1) {
        block_t::push_link(s.prev, s.node);
        s.step = 2;
      } else {
        block->count_and_wake();
        ++s.sent;
        s.step = 0;
      }
      r.mix(pick << 8 | static_cast<std::uint64_t>(s.step));
      if (!take_wake()) return r;
      continue;
    }
    // The receiver.
    if (state == rx::parked) {
      if (!woken_this_park) {
        // Parked and not woken: every message counted so far must have
        // been counted before the park (the word is still 0).
        if (block->word.load(std::memory_order_relaxed) != 0) {
          r.failure = "a message was counted after the park without a wake (lost wake-up)";
          return r;
        }
        continue;
      }
      block->unpark(false);
      state = rx::running;
      woken_this_park = false;
      r.mix(0xBBBB);
      continue;
    }
    if (about_to_park) {
      // await_suspend, a step after await_ready found nothing: senders may
      // have counted meanwhile, and the CAS must see it.
      about_to_park = false;
      if (block->try_park()) {
        state = rx::parked;
        ++r.parks;
        r.mix(0xCCCC);
      }
      if (!take_wake()) return r;
      continue;
    }
    if (block->available() != 0) {
      if (!block->head_linked()) continue;  // production spins here; the sim lets the sender run
      std::uint64_t const m = block->pop();
      std::size_t const from = static_cast<std::size_t>(m >> 32);
      int const seq = static_cast<int>(m & 0xffffffffU);
      if (seq != last_seen[from] + 1) {
        r.failure = "sender " + std::to_string(from) + " out of order";
        return r;
      }
      last_seen[from] = seq;
      ++r.received;
      r.mix(m);
    } else {
      about_to_park = true;  // await_ready said no
      r.mix(0xDDDD);
    }
    if (!take_wake()) return r;
  }
  // Everything sent was received; nothing is left counted.
  for (auto const& s : ss) {
    if (s.sent != per_sender || s.step != 0) r.failure = "a sender did not finish";
  }
  if (block->word.load() >> 1 != block->taken.load()) r.failure = "counted messages left over";
  block->task = nullptr;
  block->drain();
  return r;
}

}  // namespace

TEST(ProcessSimulation, ManySeedsNoLostOrSpuriousWakeAndExactReplay) {
  long const seeds = spindle_test::scaled(2000, 100);
  long parks = 0;
  long wakes = 0;
  for (long seed = 1; seed <= seeds; ++seed) {
    int const senders = 1 + static_cast<int>(seed % 5);
    sim_result a = simulate_mailbox(static_cast<std::uint64_t>(seed), senders, 60);
    ASSERT_EQ(a.failure, "") << "seed " << seed;
    ASSERT_EQ(a.received, senders * 60L);
    sim_result b = simulate_mailbox(static_cast<std::uint64_t>(seed), senders, 60);
    ASSERT_EQ(a.hash, b.hash) << "seed " << seed << " did not replay exactly";
    parks += a.parks;
    wakes += a.wakes;
  }
  // The interleavings did exercise the park/wake path, often.
  EXPECT_GT(parks, seeds);
  EXPECT_EQ(parks, wakes);
}

namespace {

task<void> collect_strings(process_context<std::string>& ctx, std::string* out) {
  for (;;) {
    std::string s = co_await ctx.receive();
    if (s.empty()) break;
    *out += s;
  }
}

}  // namespace

TEST(Process, MessagesConvertToThePidsType) {
  spindle::runtime rt{{.workers = 2}};
  std::string out;
  pid<std::string> p = rt.spawn_process<std::string>(
      [&out](process_context<std::string>& ctx) { return collect_strings(ctx, &out); });
  std::unordered_set<pid<std::string>> set{p, p};
  EXPECT_EQ(set.size(), 1u);
  EXPECT_TRUE(spindle::send(p, "ab"));
  EXPECT_TRUE(spindle::send(p, std::string("cd")));
  EXPECT_TRUE(spindle::send(p, ""));
  rt.block_on(spindle::monitor(p));
  EXPECT_EQ(out, "abcd");
}

namespace {

// Waits (bounded) until `done()`; false after 60 s (a hang is a failure,
// not a timing assertion: nothing here depends on how fast it happens).
template <class F>
bool eventually(F done) {
  auto const limit = std::chrono::steady_clock::now() + 60s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > limit) return false;
    std::this_thread::yield();
  }
  return true;
}

task<void> take_one(process_context<int>& ctx) {
  (void)co_await ctx.receive();
}

}  // namespace

TEST(Process, StatsComeFromCountersIdleReceivedAndLeftOver) {
  std::atomic<int> cancelled{0};  // outlives the runtime, whose shutdown cancels them
  spindle::runtime rt{{.workers = 2}};
  long const n = spindle_test::scaled(2000, 200);
  std::vector<pid<int>> ps;
  for (long i = 0; i < n; ++i) {
    ps.push_back(rt.spawn_process<int>(
        [&](process_context<int>& ctx) { return idle_forever(ctx, &cancelled); }));
  }
  for (auto const& p : ps)
    ASSERT_TRUE(eventually([&] { return spindle::state_of(p) == process_state::idle; }));
  auto st = rt.stats();
  EXPECT_EQ(st.processes_idle, static_cast<std::uint64_t>(n));
  EXPECT_EQ(st.processes_running + st.processes_ready + st.processes_blocked, 0u);
  EXPECT_EQ(st.messages_received, 0u);
  // One message each: taken, and every process parks again.
  for (auto const& p : ps)
    ASSERT_TRUE(spindle::send(p, 1));
  ASSERT_TRUE(eventually([&] {
    auto s = rt.stats();
    return s.messages_received == static_cast<std::uint64_t>(n) &&
           s.processes_idle == static_cast<std::uint64_t>(n);
  }));
  // A process that ends with two messages left: sent counts them, received
  // does not.
  pid<int> q = rt.spawn_process<int>([](process_context<int>& ctx) { return take_one(ctx); });
  auto const before = rt.stats();
  ASSERT_TRUE(spindle::send(q, 1));
  (void)spindle::send(q, 2);  // may find it ended already
  (void)spindle::send(q, 3);
  rt.block_on(spindle::monitor(q));
  ASSERT_TRUE(
      eventually([&] { return rt.stats().processes_completed == before.processes_completed + 1; }));
  auto const after = rt.stats();
  EXPECT_EQ(after.messages_received, before.messages_received + 1);
  EXPECT_GE(after.messages_sent, before.messages_sent + 1);
  EXPECT_LE(after.messages_sent, before.messages_sent + 3);
  EXPECT_EQ(after.processes_idle, static_cast<std::uint64_t>(n));
}

TEST(Process, ABodysStateIsDestroyedWhenTheProcessEnds) {
  spindle::runtime rt{{.workers = 2}};
  auto token = std::make_shared<int>(5);
  std::atomic<int> seen{0};
  pid<int> p = rt.spawn_process<int>([token, &seen](process_context<int>& ctx) -> task<void> {
    int v = co_await ctx.receive();
    seen.store(v + *token);  // the capture is read after a suspension
  });
  EXPECT_EQ(token.use_count(), 2);
  ASSERT_TRUE(spindle::send(p, 1));
  rt.block_on(spindle::monitor(p));
  EXPECT_EQ(seen.load(), 6);
  // The process's own hold goes just after the monitor wakes.
  EXPECT_TRUE(eventually([&] { return token.use_count() == 1; }));
}

TEST(Process, ABodyReturningAnEmptyTaskIsRefused) {
  spindle::runtime rt{{.workers = 2}};
  try {
    (void)rt.spawn_process<int>([](process_context<int>&) { return task<void>{}; });
    ADD_FAILURE() << "no exception";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::invalid_argument);
  }
  // The slot went back: the next process works.
  pid<int> p = rt.spawn_process<int>([](process_context<int>& ctx) { return take_one(ctx); });
  ASSERT_TRUE(spindle::send(p, 1));
  rt.block_on(spindle::monitor(p));
  EXPECT_EQ(spindle::state_of(p), process_state::complete);
}
