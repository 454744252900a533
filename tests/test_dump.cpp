// runtime::dump(): tasks suspended on a timer, a channel and a file read
// show what they wait on and where they were spawned; queued tasks (listed
// at a remote spawn, or only in a worker's queues) are reported; a dump
// taken from inside a task; a worker stuck in a poll is named, not waited
// for; processes are named by the line that spawned them; dumps taken while
// the workers are busy; the JSON parses.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime_test_support.hpp"
#include "spindle/channel.hpp"
#include "spindle/io.hpp"
#include "spindle/process.hpp"
#include "spindle/runtime.hpp"
#include "spindle/time.hpp"

using namespace std::chrono_literals;
using spindle::join_handle;
using spindle::runtime;
using spindle::runtime_config;
using spindle::runtime_dump;
using spindle::task;
using spindle::task_run_state;
using spindle::task_snapshot;
using spindle::wait_kind;

namespace {

bool ends_with(std::string const& s, std::string const& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

task_snapshot const* find_line(runtime_dump const& d, std::uint32_t line) {
  for (task_snapshot const& t : d.tasks) {
    if (t.spawned_at.line == line && ends_with(t.spawned_at.file, "test_dump.cpp")) return &t;
  }
  return nullptr;
}

// The JSON form parses and says what the value says.
void check_json(runtime_dump const& d) {
  nlohmann::json const j = nlohmann::json::parse(d.to_json());
  ASSERT_EQ(j.at("workers").get<std::size_t>(), d.workers);
  ASSERT_EQ(j.at("tasks").size(), d.tasks.size());
  for (std::size_t i = 0; i < d.tasks.size(); ++i) {
    nlohmann::json const& t = j["tasks"][i];
    EXPECT_EQ(t.at("id").get<std::uint64_t>(), d.tasks[i].id);
    EXPECT_EQ(t.at("state").get<std::string>(), spindle::to_string(d.tasks[i].state));
    EXPECT_EQ(t.at("waits_on").get<std::string>(), spindle::to_string(d.tasks[i].waits_on));
    EXPECT_EQ(t.at("file").get<std::string>(), d.tasks[i].spawned_at.file);
    EXPECT_EQ(t.at("line").get<std::uint32_t>(), d.tasks[i].spawned_at.line);
    EXPECT_EQ(t.at("age_us").get<std::uint64_t>(),
              static_cast<std::uint64_t>(d.tasks[i].age.count()) / 1000);
  }
}

void check_unique_ids(runtime_dump const& d) {
  std::set<std::uint64_t> ids;
  for (task_snapshot const& t : d.tasks)
    EXPECT_TRUE(ids.insert(t.id).second) << "id " << t.id << " twice";
}

task<void> sleep_long() {
  co_await spindle::sleep_for(1h);
}

task<void> recv_forever(spindle::channel<int>* ch) {
  (void)co_await ch->recv();
}

task<std::size_t> read_pipe(int fd) {
  spindle::io::file f = spindle::io::file::from_fd(fd);
  std::byte buffer[16];
  std::size_t n = co_await f.read_at(buffer, 0);
  (void)f.release();
  co_return n;
}

}  // namespace

TEST(Dump, SuspendedTasksSayWhatTheyWaitOnAndWhereTheyWereSpawned) {
  // Either placement: spawns from outside are listed in the other threads'
  // owned list, or under p2c in their target worker's.
  for (spindle::placement where : {spindle::placement::global, spindle::placement::p2c}) {
    SCOPED_TRACE(where == spindle::placement::p2c ? "p2c" : "global");
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    {
      runtime rt{runtime_config{.workers = 2, .placement = where}};
      spindle::channel<int> ch(1);
      auto timer = rt.spawn(sleep_long());
      std::uint32_t const timer_line = __LINE__ - 1;
      auto receiver = rt.spawn(recv_forever(&ch));
      std::uint32_t const channel_line = __LINE__ - 1;
      auto reader = rt.spawn(read_pipe(fds[0]));
      std::uint32_t const read_line = __LINE__ - 1;

      runtime_dump d;
      auto settled = [&] {
        d = rt.dump(10s);
        task_snapshot const* t = find_line(d, timer_line);
        task_snapshot const* c = find_line(d, channel_line);
        task_snapshot const* r = find_line(d, read_line);
        return t != nullptr && c != nullptr && r != nullptr &&
               t->state == task_run_state::suspended && c->state == task_run_state::suspended &&
               r->state == task_run_state::blocked_in_driver;
      };
      ASSERT_TRUE(spindle_test::wait_until(settled, 20s)) << d;
      EXPECT_EQ(d.tasks.size(), 3u) << d;
      EXPECT_TRUE(d.unanswered_workers.empty()) << d;
      EXPECT_EQ(d.workers, 2u);
      EXPECT_EQ(find_line(d, timer_line)->waits_on, wait_kind::timer);
      EXPECT_EQ(find_line(d, channel_line)->waits_on, wait_kind::channel);
      EXPECT_EQ(find_line(d, read_line)->waits_on, wait_kind::io);
      EXPECT_EQ(d.count(task_run_state::blocked_in_driver), 1u);
      check_unique_ids(d);
      check_json(d);

      // Ages grow from one dump to the next.
      runtime_dump const later = rt.dump(10s);
      ASSERT_NE(find_line(later, timer_line), nullptr) << later;
      EXPECT_GE(find_line(later, timer_line)->age, find_line(d, timer_line)->age);

      std::ostringstream text;
      text << d;
      EXPECT_NE(text.str().find("test_dump.cpp:" + std::to_string(channel_line)), std::string::npos)
          << text.str();
      EXPECT_NE(text.str().find("blocked_in_driver"), std::string::npos) << text.str();

      // Let the reader and the receiver finish; the sleeper is destroyed at shutdown.
      ASSERT_EQ(::write(fds[1], "x", 1), 1);
      ch.close();
      EXPECT_EQ(spindle_test::wait_and_take(reader), 1u);
      spindle_test::wait_and_take(receiver);
      runtime_dump const after = rt.dump(10s);
      EXPECT_EQ(find_line(after, read_line), nullptr) << after;
      EXPECT_EQ(find_line(after, channel_line), nullptr) << after;
      EXPECT_NE(find_line(after, timer_line), nullptr) << after;
    }
    ::close(fds[0]);
    ::close(fds[1]);
  }
}

namespace {

task<void> nothing() {
  co_return;
}

// Spawns `n` children (queued on this worker: its LIFO slot and ring, never
// polled yet, listed nowhere) and dumps from inside the task.
task<runtime_dump> spawn_then_dump(runtime* rt, int n, std::uint32_t* line) {
  std::vector<join_handle<void>> children;
  for (int i = 0; i < n; ++i) {
    children.push_back(spindle::spawn(nothing()));
    *line = __LINE__ - 1;
  }
  runtime_dump d = rt->dump(10s);
  for (auto& c : children)
    co_await c;
  co_return d;
}

}  // namespace

TEST(Dump, TasksQueuedOnAWorkerAndTheCallerFromInsideATask) {
  runtime rt{runtime_config{.workers = 1}};
  std::uint32_t child_line = 0;
  auto h = rt.spawn(spawn_then_dump(&rt, 20, &child_line));
  std::uint32_t const parent_line = __LINE__ - 1;
  runtime_dump const d = spindle_test::wait_and_take(h);
  EXPECT_TRUE(d.unanswered_workers.empty()) << d;
  std::size_t queued_children = 0;
  for (task_snapshot const& t : d.tasks) {
    if (t.spawned_at.line == child_line) {
      EXPECT_EQ(t.state, task_run_state::queued) << d;
      ++queued_children;
    }
  }
  EXPECT_EQ(queued_children, 20u) << d;
  task_snapshot const* parent = find_line(d, parent_line);
  ASSERT_NE(parent, nullptr) << d;
  EXPECT_EQ(parent->state, task_run_state::running) << d;
  check_unique_ids(d);
  check_json(d);
}

namespace {

task<void> spin_until(std::atomic<bool>* release, std::atomic<bool>* started) {
  started->store(true);
  while (!release->load())
    std::this_thread::yield();
  co_return;
}

}  // namespace

TEST(Dump, AWorkerStuckInAPollIsNamedAndItsRemoteSpawnsAreQueued) {
  runtime rt{runtime_config{.workers = 1}};
  std::atomic<bool> release{false};
  std::atomic<bool> started{false};
  auto blocker = rt.spawn(spin_until(&release, &started));
  std::uint32_t const blocker_line = __LINE__ - 1;
  ASSERT_TRUE(spindle_test::wait_until([&] { return started.load(); }));
  std::vector<join_handle<void>> waiting;
  for (int i = 0; i < 5; ++i) {
    waiting.push_back(rt.spawn(nothing()));
  }
  std::uint32_t const waiting_line = __LINE__ - 2;
  // The worker cannot answer while the blocker runs: dump() gives up after
  // its timeout and says so, with the task it is polling. Spawns from this
  // thread wait in a queue that dump() walks itself (the inbox under p2c,
  // the global queue under global).
  runtime_dump const d = rt.dump(20ms);
  ASSERT_EQ(d.unanswered_workers, std::vector<std::size_t>{0}) << d;
  std::size_t queued = 0;
  for (task_snapshot const& t : d.tasks) {
    if (t.spawned_at.line == waiting_line) {
      EXPECT_EQ(t.state, task_run_state::queued) << d;
      ++queued;
    }
  }
  EXPECT_EQ(queued, 5u) << d;
  ASSERT_NE(find_line(d, blocker_line), nullptr) << d;
  EXPECT_EQ(find_line(d, blocker_line)->state, task_run_state::running) << d;
  release.store(true);
  spindle_test::wait_and_take(blocker);
  for (auto& h : waiting)
    spindle_test::wait_and_take(h);
  // Free again: the next dump gets its answer.
  runtime_dump const after = rt.dump(10s);
  EXPECT_TRUE(after.unanswered_workers.empty()) << after;
}

namespace {

// A process that waits for one message.
task<void> receive_one(spindle::process_context<int>& ctx) {
  (void)co_await ctx.receive();
}

auto const receive_one_body = [](spindle::process_context<int>& ctx) { return receive_one(ctx); };

// spindle::spawn_process from inside a task (on the block_on thread).
task<spindle::pid<int>> spawn_process_inside(std::uint32_t* line) {
  spindle::pid<int> p = spindle::spawn_process<int>(receive_one_body);
  *line = __LINE__ - 1;
  co_return p;
}

}  // namespace

TEST(Dump, ProcessesAreNamedByTheLineThatSpawnedThem) {
  runtime rt{runtime_config{.workers = 2}};
  spindle::process_options const bounded_mailbox{.mailbox_capacity = 4};
  spindle::pid<int> const plain = rt.spawn_process<int>(receive_one_body);
  std::uint32_t const plain_line = __LINE__ - 1;
  spindle::pid<int> const bounded = rt.spawn_process<int>(receive_one_body, bounded_mailbox);
  std::uint32_t const bounded_line = __LINE__ - 1;
  std::uint32_t inside_line = 0;
  spindle::pid<int> const inside = rt.block_on(spawn_process_inside(&inside_line));

  runtime_dump d;
  auto settled = [&] {
    d = rt.dump(10s);
    for (std::uint32_t const line : {plain_line, bounded_line, inside_line}) {
      task_snapshot const* t = find_line(d, line);
      if (t == nullptr || t->state != task_run_state::suspended) return false;
    }
    return true;
  };
  ASSERT_TRUE(spindle_test::wait_until(settled, 20s)) << d;
  EXPECT_EQ(d.tasks.size(), 3u) << d;
  check_unique_ids(d);
  check_json(d);
  std::ostringstream text;
  text << d;
  for (std::uint32_t const line : {plain_line, bounded_line, inside_line}) {
    EXPECT_NE(text.str().find("test_dump.cpp:" + std::to_string(line)), std::string::npos)
        << text.str();
  }

  // One message each ends them.
  for (spindle::pid<int> const p : {plain, bounded, inside}) {
    ASSERT_TRUE(spindle::send(p, 1));
    rt.block_on(spindle::monitor(p));
  }
  runtime_dump const after = rt.dump(10s);
  EXPECT_TRUE(after.tasks.empty()) << after;
}

namespace {

task<void> churn(int depth, int yields) {
  for (int i = 0; i < yields; ++i)
    co_await spindle::yield_now{};
  if (depth > 0) {
    auto a = spindle::spawn(churn(depth - 1, yields));
    auto b = spindle::spawn(churn(depth - 1, yields));
    co_await a;
    co_await b;
  }
}

}  // namespace

TEST(Dump, WhileTheWorkersAreBusy) {
  runtime rt{runtime_config{.workers = 2}};
  int const rounds = static_cast<int>(spindle_test::scaled(20, 3));
  auto sleeper = rt.spawn(sleep_long());
  std::uint32_t const sleeper_line = __LINE__ - 1;
  // Once it has suspended it is listed (owned_tasks.hpp), and a listed task
  // is in every dump. Before that a task may be missed while it moves from
  // a queue into a worker's hands (dump.hpp: the snapshot is not atomic);
  // a spawn from this thread is no longer listed at once.
  ASSERT_TRUE(spindle_test::wait_until([&] {
    runtime_dump const d = rt.dump(10s);
    task_snapshot const* s = find_line(d, sleeper_line);
    return s != nullptr && s->state == task_run_state::suspended;
  }));
  std::vector<join_handle<void>> load;
  for (int i = 0; i < 4; ++i)
    load.push_back(rt.spawn(churn(8, 4)));
  for (int r = 0; r < rounds; ++r) {
    runtime_dump const d = rt.dump(10s);
    EXPECT_TRUE(d.unanswered_workers.empty()) << d;
    check_unique_ids(d);
    check_json(d);
    for (task_snapshot const& t : d.tasks) {
      EXPECT_NE(*t.spawned_at.file, '\0');
      EXPECT_GE(t.age.count(), 0);
    }
    // Listed since it suspended: in every dump, whatever the load does.
    EXPECT_NE(find_line(d, sleeper_line), nullptr) << d;
    if (r % 4 == 3) {
      for (auto& h : load)
        spindle_test::wait_and_take(h);
      load.clear();
      for (int i = 0; i < 4; ++i)
        load.push_back(rt.spawn(churn(8, 4)));
    }
  }
  for (auto& h : load)
    spindle_test::wait_and_take(h);
  sleeper.abort();
  ASSERT_TRUE(spindle_test::wait_until([&] { return sleeper.is_finished(); }));
  runtime_dump const last = rt.dump(10s);
  EXPECT_TRUE(last.tasks.empty()) << last;
}
