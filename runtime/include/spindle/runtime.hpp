// spindle::runtime: the work-stealing scheduler and its I/O driver.
//
// Shape: `workers` threads, each with a LIFO slot, a 256-entry lock-free ring
// (run queue) and a 32-entry batch buffer for the global (inject) queue; each
// tick polls at most `budget` (128) tasks, then reaps I/O completions. Idle
// workers search (at most half of them at once), then park on a futex word,
// or inside the io_uring ring when they have I/O in flight. See docs/design.md,
// "Scheduler", for the full protocol.
//
// Errors: the constructor throws std::system_error with
// std::errc::function_not_supported (ENOSYS) or the errno of io_uring setup
// (EPERM, ENOMEM) when `io == io_backend::uring` and io_uring cannot be used;
// with `automatic` it falls back to the thread-pool backend instead.
// std::system_error(std::errc::resource_unavailable_try_again) when a worker
// thread cannot be started; std::system_error(std::errc::invalid_argument)
// for max_blocking_threads == 0, a negative blocking_keep_alive or
// stalled_lifo_threshold, or more than
// max_workers (65,535) workers. block_on called from one of this
// runtime's workers throws std::system_error(std::errc::resource_deadlock_would_occur).
//
// Thread-safety: spawn(), stats(), worker_count() and io_backend_in_use() may
// be called from any thread; block_on() from any thread that is not one of
// this runtime's workers (several at once is fine). The destructor must not
// race with other calls on the same runtime, nor with join_handle::abort()
// of its tasks (join handles may outlive it: awaiting one then throws
// task_cancelled, dropping or aborting one is safe).
// Design source: Volt for the scheduler shape, Tokio's
// multi-threaded scheduler for the idle/park protocol, the scanner executor for the
// lifecycle (accepting flag + in-flight count, kept per worker shard with the
// owned-task lists).
//
// spawn_blocking(fn) runs a callable that blocks (a blocking system call, a
// lock, a long computation) on the runtime's blocking pool instead of a
// worker: threads started on demand up to `max_blocking_threads`, reused,
// and ended after `blocking_keep_alive` without work; jobs beyond the bound
// wait in a FIFO queue. The returned join_handle<R> yields fn's result or
// rethrows its exception. abort() withdraws a job that has not started (fn
// never runs); a job already running cannot be interrupted: it runs to the
// end, and the handle reports task_cancelled. The callable is destroyed on
// the pool thread as soon as it returns. At runtime shutdown queued jobs
// are dropped unrun and the destructor waits for running jobs to return
// (like Tokio: a job that never returns keeps the destructor waiting; the
// workers keep running tasks meanwhile, with new spawns refused, so a job
// that waits for a task can finish); their handles report task_cancelled,
// as do jobs submitted once the shutdown began. Inside a job, spindle::spawn,
// spindle::spawn_blocking and runtime::block_on may be used; the runtime must
// not be destroyed from one of its own jobs (it would wait for itself).
// With GCC 12, name the handle before awaiting it (`auto h =
// spawn_blocking(...); co_await h;`): docs/compilers.md.
// Design source for the pool: Tokio's spawn_blocking / blocking pool.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ranges>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "spindle/awaitable.hpp"
#include "spindle/detail/blocking_job.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/dump.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/stats.hpp"
#include "spindle/task.hpp"
#include "spindle/task_info.hpp"

namespace spindle {

struct fiber_options;    // spindle/fiber.hpp
struct fold_policy;      // spindle/fold.hpp
struct process_options;  // spindle/process.hpp
template <class Msg>
class pid;  // spindle/process.hpp

/// Which I/O driver completes file operations.
enum class io_backend : std::uint8_t {
  automatic,   ///< io_uring when it can be set up, else the thread pool (SPINDLE_IO overrides)
  uring,       ///< io_uring or an error
  threadpool,  ///< blocking system calls on a pool of threads
};

/// Where a task spawned or woken from a thread that is not one of the
/// runtime's workers (the main thread, a block_on thread, a blocking-pool or
/// foreign thread) is queued (runtime_config::placement). Spawns and wakes
/// on a worker always go to that worker's own queues.
/// Design source: Veloq's executor (seed 003): power of two choices.
enum class placement : std::uint8_t {
  /// One global (inject) queue that every worker takes batches from (Tokio's
  /// and Volt's).
  global,
  /// Power of two choices: the task goes into the inbox of the less loaded
  /// of two workers drawn by the runtime's seeded RNG (load: its ring's
  /// length plus its inbox's, read without synchronisation once every 16
  /// draws; the draws between add the tasks they placed to the value read,
  /// as in Mitzenmacher's "How useful is old information?" (2000): two
  /// choices stay balanced on loads that old, and a stream of spawns does
  /// not miss on two workers' lines at every spawn), which is woken if it
  /// is parked. A worker looks at its inbox before the global
  /// queue, with the global queue's batch and fairness rules; searching
  /// workers take from other workers' inboxes too, so a task never waits
  /// behind a busy or sleeping owner while another worker is idle, and a
  /// busy worker whose own inbox and the global queue are empty takes half
  /// of one other inbox on its global-check interval (backing off while
  /// those looks find nothing), so that a spawn_batch from outside, which
  /// fills one inbox, is shared while every worker is busy. The default:
  /// in bench/compare it is level with `global` or ahead on every runtime
  /// workload (README, "Performance").
  p2c,
};

/// The most worker threads a runtime may have.
inline constexpr std::size_t max_workers = 65535;

/// Runtime settings (an aggregate: use designated initializers).
struct runtime_config {
  std::size_t workers = 0;  ///< worker threads (<= max_workers); 0 = hardware_concurrency()
  std::uint64_t seed = 0x853c49e6748fea9bULL;  ///< victim-selection RNG seed
  std::uint32_t budget = 128;                  ///< polls per tick (>= 1; 8x for nested join polls)
  bool pin_threads = false;                    ///< pin worker i to CPU i % ncpu; the steal order
                                               ///< follows the CPU topology from the pinned CPUs
                                               ///< (unpinned: from the CPU each worker starts on)
  io_backend io = io_backend::automatic;       ///< see io_backend; env SPINDLE_IO=uring|threadpool
                                               ///< applies when this is `automatic`
  std::uint32_t ring_entries = 256;            ///< io_uring submission queue entries per worker
  /// I/O threads of the thread-pool I/O backend (io_backend::threadpool
  /// only): a fixed set, started with the runtime, that runs file system
  /// calls for spindle::io; 0 = max(4, 2 x workers). Unrelated to
  /// spawn_blocking, which has its own pool (max_blocking_threads).
  std::size_t io_pool_threads = 0;
  /// Upper bound on the threads of the spawn_blocking pool (>= 1; 0 throws
  /// std::system_error(std::errc::invalid_argument)). The pool starts empty
  /// and grows on demand; jobs beyond the bound wait in a FIFO queue.
  std::size_t max_blocking_threads = 512;
  /// How long a spawn_blocking pool thread waits for a job before it exits
  /// (ms, >= 0; negative throws std::system_error(std::errc::invalid_argument)).
  std::chrono::milliseconds blocking_keep_alive{10'000};
  /// spindle::io::file::read_at first tries the read at once, without
  /// blocking (preadv2 with RWF_NOWAIT): data in the page cache is then
  /// copied in the awaiting task's poll, with no trip through the I/O driver
  /// and no suspension. A read that would block (or a descriptor that does
  /// not support it) goes to the driver as before. At most 64 reads are done
  /// this way per poll of a task (a coop budget, as Tokio's): the next one
  /// yields (the task goes back to its worker's queue) and is copied on the
  /// task's next poll, so that a loop over cached reads still lets other
  /// tasks, timers and I/O run. false (or the environment variable
  /// SPINDLE_CACHED_READS=0): every read goes through the driver.
  bool try_cached_reads = true;
  /// Tiered idle (the scanner executor: spin, yield, then park). After a tick that found
  /// nothing, a worker looks again `idle_spins` more times, pausing its CPU
  /// for a moment between looks, then `idle_yields` more times, giving its
  /// CPU away (sched_yield) between looks, and only then parks on its
  /// futex. Work that arrives meanwhile (a spawn from another thread, a
  /// wake) is found without a futex wake on either side; the cost is CPU
  /// time burnt by an idle worker (a yielding look takes about 1 us when
  /// nothing else wants the CPU), taken from other threads when the cores
  /// are all busy. 0 and 0: park after the first empty tick (Tokio's
  /// behaviour). The environment variable SPINDLE_IDLE=spins,yields
  /// overrides both.
  std::uint32_t idle_spins = 0;
  /// See idle_spins. Empty (the default): 32 with placement::p2c, 4 with
  /// placement::global; runtime::config() reports the count in force. The
  /// placements differ because an awake idle worker looks at different
  /// queues: under p2c its own inbox, which a spawning thread pushes to
  /// without a lock, under global the one queue every worker and the
  /// spawning thread take the lock of. Measured (docs/tuning.md; 2
  /// workers): 32 yielding looks take chained_spawn from about 50 to 31-39
  /// us with either placement, leave p2c's other workloads level, and cost
  /// global's spawn_many_remote_idle up to 1.6x.
  std::optional<std::uint32_t> idle_yields{};
  /// Stalled-worker rescue (Tokio issue #4941): the task in a worker's LIFO
  /// slot (the one it spawned or woke last, which it runs next) cannot be
  /// stolen like the tasks of its ring, so a task that polls for a long time
  /// without yielding strands it. Once a worker has finished no poll for
  /// this long while its LIFO slot holds a task, a searching worker, or the
  /// parked worker that watches for stalls (it wakes at this period, backing
  /// off to 1 ms while it finds none, and sleeps without a deadline when
  /// every worker is parked), takes that task and runs it. The owner's
  /// cost is one atomic exchange per LIFO pop. Granularity 1 us; 0 turns
  /// the rescue off (Tokio's behaviour); negative throws
  /// std::system_error(std::errc::invalid_argument). Design source: Tokio
  /// issue #4941 and its reverted PR #7431 (docs/design.md, "Stealing").
  std::chrono::microseconds stalled_lifo_threshold{100};
  /// How long the destructor waits for the bodies of cancelled processes
  /// (spindle/process.hpp) to end before it destroys their frames (ms, >= 0).
  std::chrono::milliseconds process_shutdown_timeout{5000};
  /// Tracing: when not empty (or when the environment variable
  /// SPINDLE_TRACE=path is set and this is empty), the runtime records per
  /// worker its polls (task spans), steals, parks and unparks, I/O
  /// submissions and completions and timer firings, and writes them at
  /// shutdown to this file in the Chrome / Perfetto trace-event JSON format
  /// (open it in ui.perfetto.dev or chrome://tracing; tools/trace-plot
  /// draws a PNG timeline). Timestamps are µs since the runtime started
  /// (steady_clock). The file is opened (truncated) by the constructor,
  /// which throws std::system_error with fopen's errno (ENOENT, EACCES,
  /// ...) when it cannot be. Polls on threads inside block_on are not
  /// traced. Off (empty), each event site costs one predictable branch.
  /// SPINDLE_TRACE applies to every runtime the process creates: each one
  /// rewrites the file at its shutdown, so the last one's trace remains.
  /// A spindle built with the meson option trace_sites=false has no event
  /// sites: there a non-empty trace_path makes the constructor throw
  /// std::system_error(not_supported), and SPINDLE_TRACE is ignored with a
  /// warning on stderr.
  std::string trace_path{};
  /// Tracing: events kept per worker (>= 1, else the constructor throws
  /// std::system_error(invalid_argument)): a ring of 48-byte records in
  /// which a new event overwrites the oldest, so the file holds each
  /// worker's last `trace_buffer_events` events (the count overwritten is
  /// in the file's otherData.overwritten_events).
  std::size_t trace_buffer_events = 65536;
  /// Where spawns and wakes from threads that are not workers go (see
  /// placement). The environment variable SPINDLE_PLACEMENT=global|p2c
  /// overrides it (other values are ignored).
  spindle::placement placement = spindle::placement::p2c;
};

namespace detail {
class scheduler;
/// The scheduler of the calling thread (a worker, or a thread inside
/// block_on), or nullptr.
[[nodiscard]] scheduler* current_scheduler() noexcept;
/// Spawns `root` on `sched`, recording `where` for runtime::dump(). Returns
/// a header holding a reference for the join handle. After shutdown the
/// frame is destroyed and the returned task is complete and cancelled.
[[nodiscard]] task_header* spawn_root(scheduler* sched, std::coroutine_handle<> root,
                                      promise_base* promise, spawn_location where = {});
/// spindle::spawn's body, out of line so that the template keeps nothing
/// across a call: spawn_root on current_scheduler(). Throws
/// std::system_error(operation_not_permitted) when the calling thread has no
/// runtime (destroying `root`), then (invalid_argument) when `root` is empty.
[[nodiscard]] task_header* spawn_on_current(std::coroutine_handle<> root, promise_base* promise,
                                            spawn_location where);
/// One root of a spawn_roots batch: its frame and its promise.
struct spawn_root_entry {
  std::coroutine_handle<> frame;
  promise_base* promise;
};
/// Spawns roots[0..n) on `sched` as spawn_root does each, with one queue
/// operation and at most one wake, all recorded as spawned at `where`;
/// out[i] receives the header of roots[i].
void spawn_roots(scheduler* sched, spawn_root_entry const* roots, task_header** out, std::size_t n,
                 spawn_location where);
/// Spawns every task of `range` (moved out) on `sched`: spawn_batch.
template <class R>
auto spawn_range(scheduler* sched, R&& range, spawn_location where);
/// Throws std::system_error(resource_deadlock_would_occur) when the calling
/// thread is one of `sched`'s workers (before anything is spawned).
void check_block_on_allowed(scheduler* sched);
/// Runs tasks inline on the calling (non-worker) thread until `task` completes.
void block_until_complete(scheduler* sched, task_header* task);
}  // namespace detail

/// A work-stealing scheduler with its worker threads and I/O driver:
/// block_on() runs a task to completion from a plain thread, spawn() starts
/// one. Errors, shutdown and thread-safety: the comment of
/// spindle/runtime.hpp.
class runtime {
 public:
  /// Starts the workers and the I/O driver. See the file comment for errors.
  explicit runtime(runtime_config config = {});
  /// Shuts down: drops queued spawn_blocking jobs, refuses new spawns, waits
  /// for running spawn_blocking jobs, stops the workers, cancels in-flight I/O
  /// and waits for its completions, destroys every task frame that did not
  /// finish (their join handles then report task_cancelled), joins threads.
  ~runtime();
  runtime(runtime const&) = delete;
  runtime& operator=(runtime const&) = delete;

  /// Runs `t` to completion from a non-worker thread; the calling thread runs
  /// queued tasks inline while it waits (block-on-complete). Returns the
  /// task's value or rethrows its exception.
  template <class T>
  T block_on(task<T> t, spawn_location where = spawn_location::current()) {
    if (!t.valid()) {
      throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                              "spindle: block_on of an empty task");
    }
    detail::check_block_on_allowed(sched_.get());
    auto frame = t.release();
    join_handle<T> handle{detail::spawn_root(sched_.get(), frame, &frame.promise(), where)};
    detail::block_until_complete(sched_.get(), handle.header());
    return handle.take();
  }

  /// Runs any other awaitable to completion (a sleep_for, a join_handle, a
  /// when_any, a user's awaiter): block_on of a task that co_awaits it
  /// (spindle/awaitable.hpp). `a` is used by reference: it lives until this
  /// returns. A non-awaitable argument fails to compile with a message.
  template <class A>
  requires(!detail::is_task_v<std::remove_cvref_t<A>>) decltype(auto)
      block_on(A&& a, spawn_location where = spawn_location::current()) {
    static_assert(awaitable<A>,
                  "spindle::runtime::block_on: the argument is not awaitable (no "
                  "await_ready/await_suspend/await_resume and no operator co_await)");
    return block_on(detail::await_as_task<A&&>(std::forward<A>(a)), where);
  }

  /// Spawns `t` from any thread; it runs on the workers. An empty task
  /// throws std::system_error(std::errc::invalid_argument). `where` (the
  /// caller's file and line by default) is what runtime::dump() reports.
  template <class T>
  join_handle<T> spawn(task<T> t, spawn_location where = spawn_location::current()) {
    auto frame = t.release();
    if (!frame) {
      throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                              "spindle: spawn of an empty task");
    }
    return join_handle<T>{detail::spawn_root(sched_.get(), frame, &frame.promise(), where)};
  }

  /// Spawns every task of `tasks` (a range of task<T>, each moved out of
  /// it) from any thread, as spawn() would one by one, and returns their
  /// join handles in the range's order (a std::vector<join_handle<T>>).
  /// The whole batch is queued with one
  /// queue operation and at most one wake-up: from a worker, its run queue
  /// (what does not fit goes to the global queue in one batch); from
  /// another thread, the global queue or, under placement::p2c, one
  /// worker's inbox (seed 000's spawn_batch). After shutdown every handle
  /// reports task_cancelled. An empty task in the range throws
  /// std::system_error(std::errc::invalid_argument) before anything is
  /// spawned (the tasks taken from the range so far are destroyed unrun).
  template <std::ranges::input_range R>
  requires detail::is_task_v<std::remove_cvref_t<std::ranges::range_reference_t<R>>>
  auto spawn_batch(R&& tasks, spawn_location where = spawn_location::current()) {
    return detail::spawn_range(sched_.get(), std::forward<R>(tasks), where);
  }

  /// Spawns any other awaitable as a task that co_awaits it; `a` is moved
  /// (or copied) into the task. A non-awaitable or immovable argument fails
  /// to compile with a message.
  template <class A>
  requires(!detail::is_task_v<std::remove_cvref_t<A>>) auto spawn(
      A&& a, spawn_location where = spawn_location::current()) {
    static_assert(awaitable<A>,
                  "spindle::runtime::spawn: the argument is not awaitable (no "
                  "await_ready/await_suspend/await_resume and no operator co_await)");
    static_assert(std::is_constructible_v<std::decay_t<A>, A&&>,
                  "spindle::runtime::spawn: the awaitable must be movable into the task");
    return spawn(detail::await_as_task<std::decay_t<A>>(std::forward<A>(a)), where);
  }

  /// Runs `fn()` on the blocking pool (see the file comment) from any
  /// thread; `fn` is moved into the returned task and invoked once as an
  /// rvalue. The handle yields its result or rethrows its exception; a pool
  /// that has no thread and cannot start one makes the handle throw
  /// std::system_error(std::errc::resource_unavailable_try_again).
  template <class F>
  requires detail::blocking_callable<F> join_handle<detail::blocking_result_t<F>> spawn_blocking(
      F&& fn, spawn_location where = spawn_location::current()) {
    return spawn(detail::make_blocking_task(std::forward<F>(fn)), where);
  }

  /// Spawns `fn` as a fiber (a stackful task) from any thread; see
  /// spindle/fiber.hpp, which defines it (include it, or spindle.hpp).
  /// Throws std::system_error(invalid_argument) for a stack below 16 KiB.
  template <class F>
  requires std::invocable<std::decay_t<F>> join_handle<std::invoke_result_t<std::decay_t<F>>>
  spawn_fiber(F&& fn, fiber_options opts);
  /// spawn_fiber(fn, fiber_options{}): the default stack (see fiber_options).
  template <class F>
  requires std::invocable<std::decay_t<F>> join_handle<std::invoke_result_t<std::decay_t<F>>>
  spawn_fiber(F&& fn);

  /// Folds the tree below `root` on the workers and blocks the calling
  /// thread (not a worker) until done: block_on(spindle::fold(graph, fold,
  /// root)). Returns the root's result or rethrows the fold's exception; see
  /// spindle/fold.hpp, which defines it (include it, or spindle.hpp). From a
  /// worker throws std::system_error(std::errc::resource_deadlock_would_occur).
  template <class G, class F, class N>
  auto fold(G const& graph, F const& fold, N root);
  /// fold(graph, fold, root) with the scheduling choices of `policy` (see
  /// fold_policy).
  template <class G, class F, class N>
  auto fold(G const& graph, F const& fold, N root, fold_policy policy);
  /// Spawns a process taking messages of type Msg from any thread; see
  /// spindle/process.hpp, which defines it (include it, or spindle.hpp).
  /// runtime::dump() shows the process's task as spawned at `where`.
  template <class Msg, class F>
  pid<Msg> spawn_process(F&& body, process_options opts,
                         spawn_location where = spawn_location::current());
  /// As above, with the default process_options (unbounded mailbox).
  template <class Msg, class F>
  pid<Msg> spawn_process(F&& body, spawn_location where = spawn_location::current());

  /// A snapshot of the counters (any thread).
  [[nodiscard]] runtime_stats stats() const;
  /// A snapshot of the live tasks (any thread, also from inside a task):
  /// id, state, what each waits on, where it was spawned, its age. Waits at
  /// most `timeout` for the workers to report their queues; never stops a
  /// worker for more than one copy of its queues. See spindle/dump.hpp.
  /// Throws std::bad_alloc.
  [[nodiscard]] runtime_dump dump(std::chrono::milliseconds timeout = std::chrono::milliseconds{
                                      100}) const;
  /// Number of worker threads.
  [[nodiscard]] std::size_t worker_count() const noexcept;
  /// The I/O backend chosen at construction; never `automatic`.
  [[nodiscard]] spindle::io_backend io_backend_in_use() const noexcept;
  /// The configuration in force (any thread): what was given, with `workers`
  /// resolved (0 becomes the core count), `budget` at least 1, the
  /// environment's overrides applied (SPINDLE_CACHED_READS, SPINDLE_IDLE,
  /// SPINDLE_PLACEMENT) and `idle_yields` filled in from the placement
  /// when it was empty.
  [[nodiscard]] runtime_config const& config() const noexcept;

  /// The scheduler (for spindle's own tests, which reach its private headers).
  [[nodiscard]] detail::scheduler* scheduler_handle() const noexcept { return sched_.get(); }

 private:
  std::unique_ptr<detail::scheduler> sched_;
};

/// Spawns `t` on the runtime of the calling thread: a worker or a thread
/// inside block_on. Elsewhere throws
/// std::system_error(std::errc::operation_not_permitted).
template <class T>
join_handle<T> spawn(task<T> t, spawn_location where = spawn_location::current()) {
  auto frame = t.release();
  return join_handle<T>{detail::spawn_on_current(frame, frame ? &frame.promise() : nullptr, where)};
}

/// runtime::spawn_batch on the runtime of the calling thread (a worker or a
/// thread inside block_on): the tasks of `tasks`, queued with one queue
/// operation and at most one wake, and their join handles in order.
/// Elsewhere throws std::system_error(std::errc::operation_not_permitted).
template <std::ranges::input_range R>
requires detail::is_task_v<std::remove_cvref_t<std::ranges::range_reference_t<R>>>
auto spawn_batch(R&& tasks, spawn_location where = spawn_location::current()) {
  detail::scheduler* sched = detail::current_scheduler();
  if (sched == nullptr) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle::spawn_batch called outside a spindle runtime");
  }
  return detail::spawn_range(sched, std::forward<R>(tasks), where);
}

/// spawn of any other awaitable on the runtime of the calling thread, as
/// runtime::spawn(a) does.
template <class A>
requires(!detail::is_task_v<std::remove_cvref_t<A>>) auto spawn(
    A&& a, spawn_location where = spawn_location::current()) {
  static_assert(awaitable<A>,
                "spindle::spawn: the argument is not awaitable (no "
                "await_ready/await_suspend/await_resume and no operator co_await)");
  static_assert(std::is_constructible_v<std::decay_t<A>, A&&>,
                "spindle::spawn: the awaitable must be movable into the task");
  return spawn(detail::await_as_task<std::decay_t<A>>(std::forward<A>(a)), where);
}

/// runtime::spawn_blocking on the runtime of the calling thread: a worker, a
/// thread inside block_on, or a blocking-pool thread. Elsewhere throws
/// std::system_error(std::errc::operation_not_permitted).
template <class F>
requires detail::blocking_callable<F> join_handle<detail::blocking_result_t<F>> spawn_blocking(
    F&& fn, spawn_location where = spawn_location::current()) {
  detail::scheduler* sched = detail::current_scheduler();
  if (sched == nullptr) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle::spawn_blocking called outside a spindle runtime");
  }
  auto frame = detail::make_blocking_task(std::forward<F>(fn)).release();
  return join_handle<detail::blocking_result_t<F>>{
      detail::spawn_root(sched, frame, &frame.promise(), where)};
}

namespace detail {
template <class R>
auto spawn_range(scheduler* sched, R&& range, spawn_location where) {
  using task_type = std::remove_cvref_t<std::ranges::range_reference_t<R>>;
  using value_type = typename task_type::value_type;
  std::vector<task_type> owned;
  if constexpr (std::ranges::sized_range<R>) owned.reserve(std::ranges::size(range));
  for (auto&& t : range) {
    if (!t.valid()) {
      throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                              "spindle: spawn_batch of an empty task");
    }
    owned.push_back(std::move(t));
  }
  // Every allocation before the first frame leaves its task: nothing can
  // throw once the frames are released.
  std::vector<spawn_root_entry> roots;
  roots.reserve(owned.size());
  std::vector<task_header*> headers(owned.size());
  std::vector<join_handle<value_type>> handles;
  handles.reserve(owned.size());
  for (auto& t : owned) {
    auto frame = t.release();
    roots.push_back({frame, &frame.promise()});
  }
  spawn_roots(sched, roots.data(), headers.data(), roots.size(), where);
  for (task_header* h : headers)
    handles.push_back(join_handle<value_type>{h});
  return handles;
}
}  // namespace detail

/// Awaitable that re-queues the current task at the back of its worker's run
/// queue so that other tasks run first. Outside a spindle task it completes
/// at once.
struct yield_now {
  /// Awaiter protocol: always suspends.
  bool await_ready() const noexcept { return false; }
  /// Awaiter protocol: re-queues the calling task (false, no suspension,
  /// outside a spindle task).
  bool await_suspend(std::coroutine_handle<> caller) const noexcept {
    detail::task_header* self = detail::suspend_current(caller, wait_kind::yield);
    if (self == nullptr) return false;
    detail::yield_current();  // re-queued when this poll returns
    return true;
  }
  /// Awaiter protocol: nothing to yield.
  void await_resume() const noexcept {}
};

}  // namespace spindle
