// Tests of the I/O drivers (io/src): backend selection (config.io, SPINDLE_IO,
// fallback when io_uring is refused), the uring driver's park/unpark and
// setup flags, the thread pool's size, the non-worker (block_on) submission
// path, cancellation of single operations (join_handle::abort's hook) on
// hand-driven drivers, and shutdown with operations in flight.
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/eventfd.h>

#include "driver.hpp"
#include "io_test_support.hpp"
#include "make_driver.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/io.hpp"
#include "spindle/runtime.hpp"
#include "threadpool_driver.hpp"
#include "uring_driver.hpp"

namespace {

using spindle::io_backend;
using spindle::runtime;
using spindle::runtime_config;
using spindle::task;
using spindle::io::file;
namespace fs = std::filesystem;

using spindle_test::uring_available;

#define SKIP_WITHOUT_URING() \
  if (!uring_available()) GTEST_SKIP() << "io_uring cannot be set up here"

/// Sets (or unsets, with nullptr) an environment variable for one scope.
class scoped_env {
 public:
  scoped_env(char const* name, char const* value) : name_(name) {
    if (char const* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~scoped_env() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  scoped_env(scoped_env const&) = delete;
  scoped_env& operator=(scoped_env const&) = delete;

 private:
  char const* name_;
  std::optional<std::string> old_;
};

std::size_t open_fd_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] auto const& entry : fs::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

// --- backend selection ------------------------------------------------------

TEST(DriverFactory, ThreadpoolOnRequest) {
  scoped_env env{"SPINDLE_IO", "uring"};  // ignored: config.io is not automatic
  runtime rt{runtime_config{.workers = 2, .io = io_backend::threadpool}};
  EXPECT_EQ(rt.io_backend_in_use(), io_backend::threadpool);
}

TEST(DriverFactory, UringOnRequest) {
  SKIP_WITHOUT_URING();
  scoped_env env{"SPINDLE_IO", "threadpool"};  // ignored: config.io is not automatic
  runtime rt{runtime_config{.workers = 2, .io = io_backend::uring}};
  EXPECT_EQ(rt.io_backend_in_use(), io_backend::uring);
}

TEST(DriverFactory, AutomaticPrefersUring) {
  SKIP_WITHOUT_URING();
  scoped_env env{"SPINDLE_IO", nullptr};
  runtime rt{runtime_config{.workers = 2}};
  EXPECT_EQ(rt.io_backend_in_use(), io_backend::uring);
}

TEST(DriverFactory, EnvironmentOverridesAutomatic) {
  {
    scoped_env env{"SPINDLE_IO", "threadpool"};
    runtime rt{runtime_config{.workers = 2}};
    EXPECT_EQ(rt.io_backend_in_use(), io_backend::threadpool);
  }
  if (uring_available()) {
    scoped_env env{"SPINDLE_IO", "uring"};
    runtime rt{runtime_config{.workers = 2}};
    EXPECT_EQ(rt.io_backend_in_use(), io_backend::uring);
  }
  {
    scoped_env env{"SPINDLE_IO", ""};  // empty counts as unset
    runtime rt{runtime_config{.workers = 1}};
    EXPECT_NE(rt.io_backend_in_use(), io_backend::automatic);
  }
}

TEST(DriverFactory, InvalidEnvironmentValueThrowsEINVAL) {
  scoped_env env{"SPINDLE_IO", "io_uring"};
  try {
    runtime rt{runtime_config{.workers = 1}};
    ADD_FAILURE() << "SPINDLE_IO=io_uring was accepted";
  } catch (std::system_error const& e) {
    EXPECT_EQ(e.code(), std::errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("SPINDLE_IO"), std::string::npos) << e.what();
  }
}

/// In a child process: makes io_uring_setup fail with EPERM (as container
/// seccomp profiles do), then checks that automatic falls back to the thread
/// pool and works, and that an explicit uring request throws EPERM.
int fallback_child() {
  struct sock_filter filter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
#if defined(__x86_64__)
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
#elif defined(__aarch64__)
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_AARCH64, 1, 0),
#else
#error "add this architecture's AUDIT_ARCH"
#endif
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 77;
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return 77;
  ::unsetenv("SPINDLE_IO");

  try {
    runtime rt{runtime_config{.workers = 2}};
    if (rt.io_backend_in_use() != io_backend::threadpool) return 10;
    auto data = rt.block_on(spindle::io::read_file("/proc/self/status"));
    if (data.empty()) return 11;
  } catch (...) {
    return 12;
  }
  try {
    runtime rt{runtime_config{.workers = 2, .io = io_backend::uring}};
    return 13;
  } catch (std::system_error const& e) {
    if (e.code() != std::errc::operation_not_permitted) return 14;
    if (std::string(e.what()).find("io_uring unavailable") == std::string::npos) return 15;
  }
  {
    ::setenv("SPINDLE_IO", "uring", 1);
    try {
      runtime rt{runtime_config{.workers = 1}};
      return 16;
    } catch (std::system_error const& e) {
      if (e.code() != std::errc::operation_not_permitted) return 17;
    }
  }
  return 0;
}

TEST(DriverFactory, FallsBackToThreadpoolWhenUringIsRefused) {
  pid_t const child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(fallback_child());
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "seccomp not available";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see fallback_child for the meaning";
}

// --- the uring driver on its own ------------------------------------------

/// The io_host of drivers driven by hand, without a runtime: a thread that
/// called start_worker(drv, i) counts as worker i; completions wake their
/// tasks (finished_task below: the wake does nothing).
class hand_host {
 public:
  static thread_local std::size_t self;
  hand_host();
  spindle::detail::io_host& host() noexcept { return host_; }
  std::atomic<std::size_t> unparked{0};
  std::atomic<std::size_t> completions{0};

 private:
  spindle::detail::io_host host_;
};
thread_local std::size_t hand_host::self = spindle::detail::not_a_worker;

constexpr spindle::detail::io_host::calls hand_calls{
    [](void const*) noexcept { return hand_host::self; },
    [](void* h, std::size_t index) noexcept {
      static_cast<hand_host*>(h)->unparked.fetch_add(index + 1);
    },
    [](void* h, std::size_t, std::size_t n) noexcept {
      static_cast<hand_host*>(h)->completions.fetch_add(n);
    },
};

hand_host::hand_host() : host_(this, hand_calls) {}

/// Worker `index` of `drv` starts on the calling thread.
void start_worker(spindle::detail::driver& drv, std::size_t index) {
  drv.on_worker_start(index);
  hand_host::self = index;
}

class UringDriver : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_URING(); }
  std::unique_ptr<spindle::detail::driver> make(std::size_t workers) {
    return spindle::io::detail::make_driver(
        host_.host(), runtime_config{.workers = workers, .io = io_backend::uring});
  }
  hand_host host_;
};

TEST_F(UringDriver, BackendAndSetupFlags) {
  auto drv = make(2);
  EXPECT_EQ(drv->backend(), io_backend::uring);
  auto* uring = dynamic_cast<spindle::io::detail::uring_driver*>(drv.get());
  ASSERT_NE(uring, nullptr);
  // The ring starts disabled (so the worker becomes its single issuer).
  EXPECT_NE(uring->setup_flags() & IORING_SETUP_R_DISABLED, 0u);
  std::printf("io_uring setup flags: %#x\n", uring->setup_flags());
}

TEST_F(UringDriver, UnusedDriverReleasesEverything) {
  std::size_t const before = open_fd_count();
  {
    auto drv = make(4);
    EXPECT_GT(open_fd_count(), before);  // 4 rings and 4 eventfds
    drv->shutdown();
  }
  EXPECT_EQ(open_fd_count(), before);
}

TEST_F(UringDriver, ParkReturnsAtItsDeadline) {
  auto drv = make(1);
  std::thread worker([&] {
    start_worker(*drv, 0);
    auto now_ns = [] {
      return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now().time_since_epoch())
                                            .count());
    };
    auto start = std::chrono::steady_clock::now();
    drv->park(0, now_ns() + 20'000'000);  // nothing completes, nobody unparks
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(20));
    drv->park(0, now_ns() - 1);  // a passed deadline returns at once
    drv->poll(0);
    drv->on_worker_stop(0);
  });
  worker.join();
  drv->shutdown();
}

TEST_F(UringDriver, ParkReturnsOnUnpark) {
  auto drv = make(1);
  std::atomic<int> phase{0};
  std::thread worker([&] {
    start_worker(*drv, 0);
    EXPECT_FALSE(drv->park_in_driver(0));
    EXPECT_EQ(drv->poll(0), 0u);
    phase = 1;
    drv->park(0, spindle::detail::no_deadline);  // until the unpark below
    phase = 2;
    drv->poll(0);  // re-arms the eventfd read
    drv->unpark(0);
    drv->park(0, spindle::detail::no_deadline);  // an unpark that came first ends it at once
    drv->poll(0);
    phase = 3;
    drv->on_worker_stop(0);
  });
  while (phase.load() != 1)
    std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(phase.load(), 1);  // still parked
  drv->unpark(0);
  worker.join();
  EXPECT_EQ(phase.load(), 3);
  drv->shutdown();
}

// Descriptors this process has open (the driver's rings and eventfds).
long open_descriptors() {
  long n = 0;
  for ([[maybe_unused]] auto const& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

TEST_F(UringDriver, StopWithoutStartAndTwice) {
  // Worker 0 starts and stops twice, worker 1 never starts; shutdown runs
  // twice, and the destructor after it. Each ring and eventfd is closed
  // exactly once: the descriptors come back to their count before the
  // driver, and no descriptor the driver no longer owns is closed (a second
  // close would take one opened meanwhile: `canary` must survive).
  long const before = open_descriptors();
  auto drv = make(2);
  EXPECT_GT(open_descriptors(), before) << "the driver holds no ring";
  std::thread worker([&] {
    start_worker(*drv, 0);
    drv->on_worker_stop(0);
    drv->on_worker_stop(0);  // idempotent
  });
  worker.join();
  drv->unpark(1);  // never started: harmless
  drv->shutdown();
  int const canary = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(canary, 0);
  drv->shutdown();  // idempotent
  drv.reset();
  EXPECT_EQ(::fcntl(canary, F_GETFD), FD_CLOEXEC) << "a descriptor was closed twice";
  ::close(canary);
  EXPECT_EQ(open_descriptors(), before) << "a ring or eventfd leaked";
}

// --- the thread pool on its own ----------------------------------------------

TEST(ThreadpoolDriver, ThreadCount) {
  hand_host host;
  using spindle::io::detail::threadpool_driver;
  EXPECT_EQ(threadpool_driver(host.host(), 1, 0).thread_count(), 4u);
  EXPECT_EQ(threadpool_driver(host.host(), 3, 0).thread_count(), 6u);
  EXPECT_EQ(threadpool_driver(host.host(), 3, 2).thread_count(), 2u);
  threadpool_driver drv(host.host(), 1, 1);
  EXPECT_EQ(drv.backend(), io_backend::threadpool);
  EXPECT_FALSE(drv.park_in_driver(0));
  EXPECT_EQ(drv.poll(0), 0u);
  drv.on_worker_stop(0);
  drv.shutdown();
}

// --- operations from a thread that is not a worker ---------------------------

task<void> spin_until(std::atomic<int>* started, std::atomic<bool>* release) {
  started->fetch_add(1);
  while (!release->load()) {
    // busy: keeps this worker from picking up anything else
  }
  co_return;
}

task<std::size_t> read_from_caller_thread(fs::path path, std::atomic<bool>* release,
                                          bool* ran_off_worker) {
  *ran_off_worker = spindle::detail::current_worker_index() == spindle::detail::not_a_worker;
  release->store(true);
  file f = co_await file::open(path);  // from block_on's thread: through a worker's remote list
  std::vector<std::byte> buffer(100);
  std::size_t const n = co_await f.read_at(buffer, 0);
  co_await f.close();
  co_return n;
}

class RemoteSubmission : public ::testing::TestWithParam<io_backend> {};

TEST_P(RemoteSubmission, BlockOnTaskDoesIoOffTheWorkers) {
  if (GetParam() == io_backend::uring && !uring_available()) GTEST_SKIP();
  char tmpl[] = "/tmp/spindle-test-driver-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path const dir = tmpl;
  {
    FILE* f = std::fopen((dir / "data").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("0123456789", f);
    std::fclose(f);
  }
  // One worker: one spinner keeps it busy, so that block_on's thread runs the
  // task inline (it only helps while every worker is busy).
  constexpr std::size_t workers = 1;
  runtime rt{runtime_config{.workers = workers, .io = GetParam()}};
  for (int round = 0; round < 5; ++round) {
    std::atomic<int> started{0};
    std::atomic<bool> release{false};
    // Occupy every worker, so that block_on's own thread runs the task. The
    // spinners are joined before the round ends: their atomics live in this
    // round's scope, and a spinner still running into the next round would
    // read (and spin on) the next round's `release`.
    std::vector<spindle::join_handle<void>> spinners;
    for (std::size_t i = 0; i < workers; ++i)
      spinners.push_back(rt.spawn(spin_until(&started, &release)));
    while (started.load() != static_cast<int>(workers))
      std::this_thread::yield();
    bool ran_off_worker = false;
    std::thread unstick([&] {
      // If a worker did pick the task up, the spinners still get released.
      auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!release.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      release.store(true);
    });
    EXPECT_EQ(rt.block_on(read_from_caller_thread(dir / "data", &release, &ran_off_worker)), 10u);
    unstick.join();
    for (auto& h : spinners) {
      while (!h.is_finished())
        std::this_thread::yield();
    }
    EXPECT_TRUE(ran_off_worker) << "round " << round;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, RemoteSubmission,
                         ::testing::Values(io_backend::uring, io_backend::threadpool),
                         [](auto const& info) {
                           return info.param == io_backend::uring ? "uring" : "threadpool";
                         });

// --- a ring much smaller than the number of operations in flight ----------------

task<bool> read_and_check(file* f, std::uint64_t offset) {
  std::byte b[16];
  std::size_t const n = co_await f->read_at(b, offset);
  if (n != sizeof b) co_return false;
  for (std::size_t i = 0; i < sizeof b; ++i) {
    if (b[i] != static_cast<std::byte>((offset + i) % 251)) co_return false;
  }
  co_return true;
}

task<std::size_t> many_small_reads(fs::path path, std::size_t count) {
  file f = co_await file::open(path);
  std::vector<spindle::join_handle<bool>> handles;
  for (std::size_t i = 0; i < count; ++i) {
    handles.push_back(spindle::spawn(read_and_check(&f, (i * 7919) % 60'000)));
  }
  std::size_t ok = 0;
  for (auto& h : handles)
    ok += (co_await h) ? 1 : 0;
  co_return ok;
}

TEST(UringRing, MoreOperationsThanRingEntries) {
  SKIP_WITHOUT_URING();
  char tmpl[] = "/tmp/spindle-test-ring-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path const dir = tmpl;
  {
    FILE* f = std::fopen((dir / "data").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    for (int i = 0; i < 60'016; ++i)
      std::fputc(i % 251, f);
    std::fclose(f);
  }
  // 8 SQ entries (32 CQ entries) against 3000 reads: the submission queue
  // fills within a tick and the completion queue overflows.
  for (std::size_t workers : {std::size_t{1}, std::size_t{2}}) {
    runtime rt{runtime_config{.workers = workers, .io = io_backend::uring, .ring_entries = 8}};
    EXPECT_EQ(rt.block_on(many_small_reads(dir / "data", 3000)), 3000u) << workers;
  }
  fs::remove_all(dir);
}

// --- cancellation (join_handle::abort) on hand-driven drivers -----------------

using spindle::io::detail::cancel_state;
using spindle::io::detail::io_op;
using spindle::io::detail::op_code;

/// A task that is already complete: wake() on it does nothing, so drivers
/// driven by hand can complete ops without a scheduler task behind them.
struct finished_task {
  spindle::detail::task_header header;
  finished_task() { header.state.store(spindle::detail::state_bits::complete); }
};

bool op_done(io_op const& op) {
  return op.cancel.load(std::memory_order_acquire) == cancel_state::done;
}

/// Waits (bounded) for `op` to complete while `drive` runs a step of the
/// driver (polling by hand: the scheduler behind these drivers is not theirs).
template <class Step>
bool drive_until_done(io_op const& op, Step step) {
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!op_done(op)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    step();
    std::this_thread::yield();
  }
  return true;
}

TEST_F(UringDriver, CancelWithdrawsOpsStillOnTheRemoteList) {
  auto drv = make(1);  // worker 0 never starts: this thread's ops wait on its remote list
  spindle::detail::driver* io = drv.get();
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  finished_task t;
  std::byte buffer[8];
  auto read_op = [&](io_op& op) {
    op.code = op_code::read;
    op.fd = p[0];
    op.buffer = buffer;
    op.length = sizeof buffer;
    op.task = &t.header;
    op.owner = io;
  };
  io_op a, b, c, d;
  for (io_op* op : {&a, &b, &c})
    read_op(*op);
  ASSERT_TRUE(io->submit(a));
  ASSERT_TRUE(io->submit(b));
  ASSERT_TRUE(io->submit(c));
  // Middle, tail, then head; then the list must still take and give back ops.
  EXPECT_TRUE(io->cancel(b));
  EXPECT_TRUE(io->cancel(c));
  EXPECT_TRUE(io->cancel(a));
  for (io_op* op : {&a, &b, &c})
    EXPECT_EQ(op->result, -ECANCELED);
  read_op(d);
  ASSERT_TRUE(io->submit(d));
  EXPECT_TRUE(io->cancel(d));
  EXPECT_EQ(d.result, -ECANCELED);

  // A withdrawn close still closes the descriptor the file gave up.
  io_op close_op;
  close_op.code = op_code::close;
  close_op.fd = p[1];
  close_op.task = &t.header;
  close_op.owner = io;
  ASSERT_TRUE(io->submit(close_op));
  EXPECT_TRUE(io->cancel(close_op));
  EXPECT_EQ(::read(p[0], buffer, sizeof buffer), 0) << "the write end is still open";
  ::close(p[0]);
  drv->shutdown();
}

// How the cancel reaches ring 0: prepared on the worker's own thread, queued
// by another thread and issued by the worker's next poll, or queued and then
// overtaken by the worker stopping.
enum class cancel_from { worker_itself, other_thread, other_thread_then_stop };

class UringCancel : public UringDriver, public ::testing::WithParamInterface<cancel_from> {};

TEST_P(UringCancel, InterruptsAPipeReadInTheRing) {
  auto drv = make(1);
  spindle::detail::driver* io = drv.get();
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  finished_task t;
  std::byte buffer[8];
  io_op op;
  op.code = op_code::read;
  op.fd = p[0];
  op.buffer = buffer;
  op.length = sizeof buffer;
  op.task = &t.header;
  op.owner = io;
  std::atomic<int> phase{0};
  bool completed = false;
  std::thread worker([&] {
    start_worker(*drv, 0);
    EXPECT_TRUE(io->submit(op));  // this thread is worker 0: straight into its ring
    drv->poll(0);                 // submitted: waits on the empty pipe in the kernel
    if (GetParam() == cancel_from::worker_itself) {
      EXPECT_FALSE(io->cancel(op));  // prepared here, submitted by the next poll
    }
    phase.store(1);
    while (phase.load() != 2)
      std::this_thread::yield();
    if (GetParam() != cancel_from::other_thread_then_stop) {
      completed = drive_until_done(op, [&] { drv->poll(0); });
    }
    drv->on_worker_stop(0);  // (then_stop: drops the request, cancels and reaps)
    completed = completed || op_done(op);
  });
  while (phase.load() != 1)
    std::this_thread::yield();
  if (GetParam() != cancel_from::worker_itself) {
    EXPECT_FALSE(io->cancel(op));  // in flight: the completion will come
  }
  phase.store(2);
  worker.join();
  EXPECT_TRUE(completed);
  EXPECT_EQ(op.result, -ECANCELED);
  ::close(p[0]);
  ::close(p[1]);
  drv->shutdown();
}

INSTANTIATE_TEST_SUITE_P(From, UringCancel,
                         ::testing::Values(cancel_from::worker_itself, cancel_from::other_thread,
                                           cancel_from::other_thread_then_stop),
                         [](auto const& info) {
                           switch (info.param) {
                             case cancel_from::worker_itself:
                               return "WorkerItself";
                             case cancel_from::other_thread:
                               return "OtherThread";
                             default:
                               return "OtherThreadThenStop";
                           }
                         });

TEST(ThreadpoolDriver, CancelWithdrawsQueuedOpsAndInterruptsARunningPipeRead) {
  hand_host host;
  using spindle::io::detail::threadpool_driver;
  threadpool_driver drv(host.host(), 1, 1);  // a single pool thread
  finished_task t;
  int a[2];
  int b[2];
  ASSERT_EQ(::pipe2(a, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(b, O_CLOEXEC), 0);
  std::byte buffer_a[8];
  std::byte buffer_b[8];
  auto read_op = [&](io_op& op, int fd, std::byte* buffer) {
    op.code = op_code::read;
    op.fd = fd;
    op.buffer = buffer;
    op.length = 8;
    op.task = &t.header;
    op.owner = &drv;
  };
  bool interrupted = false;
  // `running` is withdrawn instead when cancel() comes before the pool
  // thread took it: retry until it found it running.
  for (int attempt = 0; attempt < 100 && !interrupted; ++attempt) {
    io_op running;
    io_op queued;
    read_op(running, a[0], buffer_a);
    read_op(queued, b[0], buffer_b);
    ASSERT_TRUE(drv.submit(running));
    ASSERT_TRUE(drv.submit(queued));  // behind `running`, which never completes by itself
    EXPECT_TRUE(drv.cancel(queued));
    EXPECT_EQ(queued.result, -ECANCELED);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (drv.cancel(running)) {
      EXPECT_EQ(running.result, -ECANCELED);
      continue;
    }
    ASSERT_TRUE(drive_until_done(running, [] {})) << "the pipe wait was not interrupted";
    EXPECT_EQ(running.result, -ECANCELED);
    interrupted = true;
  }
  EXPECT_TRUE(interrupted);
  // The pool thread is free again and its next pipe read is not disturbed.
  ASSERT_EQ(::write(b[1], "ok", 2), 2);
  io_op next;
  read_op(next, b[0], buffer_b);
  ASSERT_TRUE(drv.submit(next));
  ASSERT_TRUE(drive_until_done(next, [] {}));
  EXPECT_EQ(next.result, 2);
  drv.on_worker_stop(0);
  drv.shutdown();
  for (int fd : {a[0], a[1], b[0], b[1]})
    ::close(fd);
}

// --- shutdown -----------------------------------------------------------------

task<void> read_forever(int fd, std::atomic<int>* started) {
  file f = file::from_fd(fd);
  std::byte b[8];
  started->fetch_add(1);
  co_await f.read_at(b, 0);
}

TEST(DriverShutdown, ManyPipeReadsInFlightOnUring) {
  SKIP_WITHOUT_URING();
  // More reads in flight than the ring has entries: cancellation has to
  // submit in several batches.
  constexpr int n = 300;
  std::vector<int> write_ends;
  std::size_t const fds_before = open_fd_count();
  {
    std::optional<runtime> rt;
    rt.emplace(runtime_config{.workers = 2, .io = io_backend::uring, .ring_entries = 32});
    std::atomic<int> started{0};
    for (int i = 0; i < n; ++i) {
      int p[2];
      ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
      write_ends.push_back(p[1]);
      (void)rt->spawn(read_forever(p[0], &started));
    }
    while (started.load() != n)
      std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto const t0 = std::chrono::steady_clock::now();
    rt.reset();  // cancels the reads, destroys the frames (closing the read ends)
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  }
  for (int fd : write_ends)
    ::close(fd);
  EXPECT_EQ(open_fd_count(), fds_before);
}

}  // namespace
