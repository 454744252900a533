// Tracing (runtime_config::trace_path, SPINDLE_TRACE): a known program's
// trace file parses as Chrome trace-event JSON and holds its polls, a
// steal, parks and unparks, I/O submissions and completions and timer
// firings; a small ring keeps the newest events and counts the rest; a
// path that cannot be opened is a clear error.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/io.hpp"
#include "spindle/runtime.hpp"
#include "spindle/time.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using spindle::join_handle;
using spindle::runtime;
using spindle::runtime_config;
using spindle::task;

namespace {

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(SPINDLE_TRACE_SITES) && !SPINDLE_TRACE_SITES
    GTEST_SKIP() << "built with -Dtrace_sites=false (TraceSitesCompiledOut covers it)";
#endif
    dir_ = fs::temp_directory_path() /
           ("spindle_trace_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

nlohmann::json load(fs::path const& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Events by name, and the thread ids they came from.
struct summary {
  std::map<std::string, std::vector<nlohmann::json>> by_name;
  std::set<std::string> thread_names;
};

summary summarize(nlohmann::json const& j, std::size_t workers) {
  summary s;
  for (nlohmann::json const& e : j.at("traceEvents")) {
    std::string const ph = e.at("ph").get<std::string>();
    EXPECT_EQ(e.at("pid").get<int>(), 1);
    if (ph == "M") {
      if (e.at("name") == "thread_name") {
        s.thread_names.insert(e.at("args").at("name").get<std::string>());
      }
      continue;
    }
    EXPECT_TRUE(ph == "X" || ph == "i") << e;
    EXPECT_LE(e.at("tid").get<std::size_t>(), workers) << e;
    EXPECT_GE(e.at("ts").get<double>(), 0.0) << e;
    if (ph == "X") {
      EXPECT_GE(e.at("dur").get<double>(), 0.0) << e;
    }
    s.by_name[e.at("name").get<std::string>()].push_back(e);
  }
  return s;
}

task<std::size_t> read_file(fs::path path) {
  spindle::io::file f = co_await spindle::io::file::open(path);
  std::byte buffer[64];
  co_return co_await f.read_at(buffer, 0);
}

task<void> nap() {
  co_await spindle::sleep_for(2ms);
}

// A child of `fan_out`: the first to start spins until another child ran
// on another worker, which therefore stole it from this worker's ring.
task<void> child(std::atomic<int>* started, std::atomic<std::size_t>* spinner_worker,
                 std::atomic<bool>* elsewhere) {
  std::size_t const here = spindle::detail::current_worker_index();
  if (started->fetch_add(1) == 0) {
    spinner_worker->store(here);
    // Bounded: a lost steal fails the test below instead of hanging it.
    (void)spindle_test::wait_until([&] { return elsewhere->load(); }, 20s);
    co_return;
  }
  std::size_t const spinner = spinner_worker->load();
  if (spinner != static_cast<std::size_t>(-1) && spinner != here) elsewhere->store(true);
}

task<bool> fan_out(int n) {
  std::atomic<int> started{0};
  std::atomic<std::size_t> spinner_worker{static_cast<std::size_t>(-1)};
  std::atomic<bool> elsewhere{false};
  std::vector<join_handle<void>> children;
  for (int i = 0; i < n; ++i)
    children.push_back(spindle::spawn(child(&started, &spinner_worker, &elsewhere)));
  for (auto& c : children)
    co_await c;
  co_return elsewhere.load();
}

}  // namespace

TEST_F(TraceTest, AKnownProgramLeavesItsEvents) {
  fs::path const trace = dir_ / "trace.json";
  fs::path const data = dir_ / "data.txt";
  std::ofstream(data) << "twelve bytes";
  int const timers = 5;
  {
    runtime rt{runtime_config{.workers = 2,
                              .try_cached_reads = false,
                              .trace_path = trace.string(),
                              .trace_buffer_events = 1 << 16}};
    std::vector<join_handle<void>> naps;
    for (int i = 0; i < timers; ++i)
      naps.push_back(rt.spawn(nap()));
    for (auto& h : naps)
      spindle_test::wait_and_take(h);
    auto reader = rt.spawn(read_file(data));
    EXPECT_EQ(spindle_test::wait_and_take(reader), 12u);
    auto fan = rt.spawn(fan_out(16));
    EXPECT_TRUE(spindle_test::wait_and_take(fan)) << "no child ran on the other worker";
    // Idle for a while: both workers park (and are unparked at shutdown).
    std::this_thread::sleep_for(20ms);
    EXPECT_TRUE(fs::exists(trace));  // opened by the constructor
  }
  nlohmann::json const j = load(trace);
  summary const s = summarize(j, 2);
  EXPECT_EQ(s.thread_names, (std::set<std::string>{"worker 0", "worker 1", "other threads"}));

  // Polls: every spawned task at least once (5 naps twice: before and after
  // the timer), with the task's id.
  ASSERT_TRUE(s.by_name.count("poll"));
  std::set<std::uint64_t> polled;
  for (auto const& e : s.by_name.at("poll")) {
    EXPECT_EQ(e.at("ph"), "X");
    polled.insert(e.at("args").at("task").get<std::uint64_t>());
  }
  EXPECT_GE(polled.size(), static_cast<std::size_t>(timers + 1 + 1 + 16));
  EXPECT_GE(s.by_name.at("poll").size(), static_cast<std::size_t>(2 * timers + 1 + 1 + 16));

  // Timer firings: one per nap, each naming a polled task.
  ASSERT_TRUE(s.by_name.count("timer"));
  EXPECT_GE(s.by_name.at("timer").size(), static_cast<std::size_t>(timers));
  for (auto const& e : s.by_name.at("timer"))
    EXPECT_TRUE(polled.count(e.at("args").at("task").get<std::uint64_t>())) << e;

  // I/O: the open and the read, submitted and completed (the read's result
  // is its byte count).
  ASSERT_TRUE(s.by_name.count("io_submit"));
  ASSERT_TRUE(s.by_name.count("io_complete"));
  std::multiset<std::string> submitted;
  for (auto const& e : s.by_name.at("io_submit"))
    submitted.insert(e.at("args").at("op").get<std::string>());
  EXPECT_GE(submitted.count("openat"), 1u);
  EXPECT_GE(submitted.count("read"), 1u);
  bool read_done = false;
  for (auto const& e : s.by_name.at("io_complete")) {
    if (e.at("args").at("op") == "read" && e.at("args").at("result") == 12) read_done = true;
  }
  EXPECT_TRUE(read_done);

  // The steal that fan_out forced, from the other worker.
  ASSERT_TRUE(s.by_name.count("steal"));
  for (auto const& e : s.by_name.at("steal")) {
    EXPECT_NE(e.at("args").at("victim").get<std::size_t>(), e.at("tid").get<std::size_t>());
    EXPECT_GE(e.at("args").at("tasks").get<int>(), 1);
  }

  // Parks (spans) and unparks.
  ASSERT_TRUE(s.by_name.count("park"));
  ASSERT_TRUE(s.by_name.count("unpark"));
  for (auto const& e : s.by_name.at("park"))
    EXPECT_EQ(e.at("ph"), "X");

  ASSERT_EQ(j.at("otherData").at("overwritten_events").size(), 3u);
  for (auto const& n : j.at("otherData").at("overwritten_events"))
    EXPECT_EQ(n.get<std::uint64_t>(), 0u);
}

namespace {

task<void> yielder(int n) {
  for (int i = 0; i < n; ++i)
    co_await spindle::yield_now{};
}

}  // namespace

namespace {

task<void> bump(std::atomic<int>* n) {
  n->fetch_add(1, std::memory_order_relaxed);
  co_return;
}

// One long poll on one worker until `until` bumps ran (or 20 s passed).
task<void> hog(std::atomic<std::size_t>* worker, std::atomic<int>* ran, int until) {
  worker->store(spindle::detail::current_worker_index(), std::memory_order_release);
  auto const give_up = std::chrono::steady_clock::now() + 20s;
  while (ran->load(std::memory_order_acquire) < until &&
         std::chrono::steady_clock::now() < give_up) {
  }
  co_return;
}

}  // namespace

// placement::p2c: tasks placed in the inbox of a worker stuck in a long poll
// are taken by the other worker, and the trace shows those steals (victim:
// the busy worker) as it shows steals from a ring.
TEST_F(TraceTest, StealsFromAnInboxAreTraced) {
  fs::path const trace = dir_ / "inbox.json";
  std::size_t busy = 0;
  {
    runtime rt{runtime_config{
        .workers = 2, .trace_path = trace.string(), .placement = spindle::placement::p2c}};
    if (rt.config().placement != spindle::placement::p2c) {
      GTEST_SKIP() << "SPINDLE_PLACEMENT overrides the placement";
    }
    int const n = 500;
    std::atomic<std::size_t> worker{static_cast<std::size_t>(-1)};
    std::atomic<int> ran{0};
    auto h = rt.spawn(hog(&worker, &ran, n));
    ASSERT_TRUE(spindle_test::wait_until(
        [&] { return worker.load(std::memory_order_acquire) != static_cast<std::size_t>(-1); }));
    busy = worker.load();
    std::vector<join_handle<void>> bumps;
    for (int i = 0; i < n; ++i)
      bumps.push_back(rt.spawn(bump(&ran)));
    spindle_test::wait_and_take(h);
    EXPECT_EQ(ran.load(), n) << "tasks were stranded behind the busy worker";
    for (auto& b : bumps)
      spindle_test::wait_and_take(b);
  }
  summary const s = summarize(load(trace), 2);
  ASSERT_TRUE(s.by_name.count("steal")) << "no steal traced";
  bool from_busy = false;
  for (auto const& e : s.by_name.at("steal")) {
    EXPECT_GE(e.at("args").at("tasks").get<int>(), 1);
    if (e.at("args").at("victim").get<std::size_t>() == busy) from_busy = true;
  }
  EXPECT_TRUE(from_busy) << "no steal from the busy worker's inbox traced";
}

TEST_F(TraceTest, ASmallRingKeepsTheNewestEventsAndCountsTheRest) {
  fs::path const trace = dir_ / "small.json";
  {
    runtime rt{
        runtime_config{.workers = 1, .trace_path = trace.string(), .trace_buffer_events = 8}};
    auto h = rt.spawn(yielder(100));
    spindle_test::wait_and_take(h);
  }
  nlohmann::json const j = load(trace);
  std::size_t events = 0;
  for (nlohmann::json const& e : j.at("traceEvents")) {
    if (e.at("ph") != "M" && e.at("tid") == 0) ++events;
  }
  EXPECT_EQ(events, 8u);
  // At least the 101 polls of the yielder went through a ring of 8.
  EXPECT_GE(j.at("otherData").at("overwritten_events").at(0).get<std::uint64_t>(), 101u - 8u);
}

TEST_F(TraceTest, TheEnvironmentVariableTurnsItOn) {
  fs::path const trace = dir_ / "env.json";
  ASSERT_EQ(::setenv("SPINDLE_TRACE", trace.c_str(), 1), 0);
  {
    runtime rt{runtime_config{.workers = 1}};
    EXPECT_EQ(rt.config().trace_path, trace.string());
    auto h = rt.spawn(yielder(3));
    spindle_test::wait_and_take(h);
  }
  ::unsetenv("SPINDLE_TRACE");
  summary const s = summarize(load(trace), 1);
  ASSERT_TRUE(s.by_name.count("poll"));
  EXPECT_GE(s.by_name.at("poll").size(), 4u);
}

TEST_F(TraceTest, APathThatCannotBeOpenedIsAClearError) {
  fs::path const bad = dir_ / "no" / "such" / "dir" / "trace.json";
  try {
    runtime rt{runtime_config{.workers = 1, .trace_path = bad.string()}};
    FAIL() << "the runtime started";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      (runtime{runtime_config{
          .workers = 1, .trace_path = (dir_ / "x.json").string(), .trace_buffer_events = 0}}),
      std::system_error);
  // Without tracing nothing is written.
  { runtime rt{runtime_config{.workers = 1}}; }
  EXPECT_FALSE(fs::exists(dir_ / "no"));
}

#if defined(SPINDLE_TRACE_SITES) && !SPINDLE_TRACE_SITES
// A build without the event sites refuses a trace path instead of writing
// an empty trace, and ignores the environment variable.
TEST(TraceSitesCompiledOut, ATracePathIsNotSupported) {
  try {
    runtime rt{runtime_config{.workers = 1, .trace_path = "/dev/null"}};
    FAIL() << "the runtime started";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::not_supported);
  }
  ASSERT_EQ(::setenv("SPINDLE_TRACE", "/dev/null", 1), 0);
  {
    runtime rt{runtime_config{.workers = 1}};
    EXPECT_TRUE(rt.config().trace_path.empty());
  }
  ::unsetenv("SPINDLE_TRACE");
}
#endif
