// The scheduler: spawn, schedule, the worker loop, park, shutdown, stats.
#include "scheduler.hpp"

#include "clock.hpp"
#include "env.hpp"
#include "spawn_sites.hpp"
#include "spindle/detail/cpu_relax.hpp"
#include "task_state.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <latch>
#include <mutex>
#include <new>
#include <system_error>
#include <vector>

namespace spindle::detail {

namespace sb = state_bits;

constinit std::atomic<scheduler*> runtime_slots[max_runtimes]{};

namespace {
// Which runtime ids are taken (runtime_slot); guarded by the lock. Slot 0
// stays empty: a state whose id bits are 0 has no runtime. A runtime takes
// the lowest free id (a scan: runtimes come and go far less often than
// anything else here).
struct runtime_ids {
  std::mutex lock;
  std::vector<bool> taken = std::vector<bool>(max_runtimes, false);
};
runtime_ids& ids() noexcept {
  // Never destroyed: a runtime may outlive static destruction's start.
  static runtime_ids* const r = new runtime_ids;
  return *r;
}
}  // namespace

scheduler::runtime_slot::runtime_slot(scheduler* owner) {
  runtime_ids& r = ids();
  std::lock_guard guard(r.lock);
  std::size_t id = 1;
  while (id < max_runtimes && r.taken[id])
    ++id;
  if (id >= max_runtimes) {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "spindle: 65535 runtimes exist already");
  }
  r.taken[id] = true;
  id_ = static_cast<std::uint16_t>(id);
  runtime_slots[id].store(owner, std::memory_order_relaxed);
}

scheduler::runtime_slot::~runtime_slot() {
  runtime_ids& r = ids();
  std::lock_guard guard(r.lock);
  runtime_slots[id_].store(nullptr, std::memory_order_relaxed);
  r.taken[id_] = false;
}

[[gnu::tls_model("initial-exec")]] constinit thread_local thread_context t_thread_context;

[[gnu::noinline]] thread_context& this_thread_context() noexcept {
  return t_thread_context;
}

namespace {

std::size_t resolve_workers(std::size_t requested) {
  // A task header keeps its owned-task shard (one per worker, one more for
  // spawns from elsewhere) in 16 bits.
  if (requested > max_workers) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: runtime_config::workers must be at most 65535");
  }
  if (requested != 0) return requested;
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : hc;
}

// Pins the calling thread to CPU index % ncpu; returns that CPU, or -1
// when it could not (best effort).
int pin_to_cpu(std::size_t index) noexcept {
  long ncpu = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu <= 0) return -1;
  int const cpu = static_cast<int>(index % static_cast<std::size_t>(ncpu));
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set) == 0 ? cpu : -1;
}

// The address below which the calling thread's stack is more than half used
// (stacks grow down), or 0 when the stack's bounds cannot be read.
std::uintptr_t half_stack_mark() noexcept {
  pthread_attr_t attr;
  if (::pthread_getattr_np(::pthread_self(), &attr) != 0) return 0;
  void* low = nullptr;
  std::size_t size = 0;
  int rc = ::pthread_attr_getstack(&attr, &low, &size);
  ::pthread_attr_destroy(&attr);
  if (rc != 0 || low == nullptr || size == 0) return 0;
  return reinterpret_cast<std::uintptr_t>(low) + size / 2;
}

// `config` with what the environment and the hardware decide filled in:
// the worker count (0: one per hardware thread), the idle tiers
// (SPINDLE_IDLE=spins,yields overrides) and the cached reads
// (SPINDLE_CACHED_READS=0 turns them off, for comparing the I/O drivers
// themselves with an unchanged program). The budget is resolved by
// scheduler_core.
runtime_config resolve_config(runtime_config config) {
  config.workers = resolve_workers(config.workers);
  if (config.stalled_lifo_threshold.count() < 0) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: runtime_config::stalled_lifo_threshold must not be negative");
  }
  if (char const* env = env_value("SPINDLE_IDLE")) {
    char* end = nullptr;
    unsigned long spins = std::strtoul(env, &end, 10);
    unsigned long yields = *end == ',' ? std::strtoul(end + 1, nullptr, 10) : 0;
    config.idle_spins = static_cast<std::uint32_t>(std::min(spins, 1'000'000UL));
    config.idle_yields = static_cast<std::uint32_t>(std::min(yields, 1'000'000UL));
  }
  if (!env_switch_on("SPINDLE_CACHED_READS")) config.try_cached_reads = false;
  if (char const* env = env_value("SPINDLE_TRACE"); config.trace_path.empty() && env != nullptr) {
    if constexpr (trace_sites) {
      config.trace_path = env;
    } else {
      static std::once_flag warned;
      std::call_once(warned, [] {
        std::fputs(
            "spindle: SPINDLE_TRACE ignored: this build has no trace sites "
            "(meson option trace_sites=false)\n",
            stderr);
      });
    }
  }
  if (char const* env = env_value("SPINDLE_PLACEMENT")) {
    std::string_view const v(env);
    if (v == "global") config.placement = placement::global;
    if (v == "p2c") config.placement = placement::p2c;
  }
  // The yield tier's default depends on the placement (runtime_config::
  // idle_yields; the measurements are in docs/tuning.md).
  if (!config.idle_yields) config.idle_yields = config.placement == placement::p2c ? 32 : 4;
  return config;
}

// The io_host calls, on the scheduler.
constexpr io_host::calls host_calls{
    [](void const* s) noexcept { return static_cast<scheduler const*>(s)->current_worker(); },
    [](void* s, std::size_t index) noexcept { static_cast<scheduler*>(s)->unpark(index); },
    [](void* s, std::size_t index, std::size_t n) noexcept {
      static_cast<scheduler*>(s)->count_completions(index, n);
    },
};

// What spawn() and spawn_batch() fill in a root's header (already in
// front of the frame, task_frame_allocate) before it is listed or queued:
// its resume point, its promise's offset and, for dump(), where it was
// spawned. Its runtime's id and the spawn's time go into the state word.
void init_root(task_header* task, std::coroutine_handle<> root, promise_base* promise,
               std::uint32_t spawn_site) noexcept {
  task->resume_point = root;
  // The promise follows the frame's resume and destroy pointers (16 bytes,
  // or its alignment): far below 256.
  std::ptrdiff_t const promise_offset = reinterpret_cast<char*>(promise) - task->frame_address();
  assert(promise_offset >= 0 && promise_offset < 256);
  task->promise_offset = static_cast<std::uint8_t>(promise_offset);
  task->spawn_site = spawn_site;
}

// The interned id of a spawn's site: a worker's spawn from the site of its
// last spawn reads it from the worker (measured: the thread-local cache's
// load cost a spawn+await 7% more wall time than the 80-byte header's
// plain store of the site, in bench_runtime spawn_await/1).
[[gnu::always_inline]] inline std::uint32_t site_id_for(worker* w, spawn_location where) noexcept {
  if (w == nullptr) return spawn_site_id(where);
  std::uint64_t const key = spawn_site_key(where);
  if (key == w->last_site_key) [[likely]]
    return w->last_site_id;
  std::uint32_t const id = spawn_site_id(where);
  w->last_site_key = key;
  w->last_site_id = id;
  return id;
}

// The fixed fields of a new task's state (its runtime's id, and when it was
// spawned, for dump()): a worker's spawn takes its tick's, made at the
// tick's start (worker::spawn_stamp), instead of reading the clock.
// Elsewhere the coarse monotonic clock (the same clock as steady_clock, read
// at the last scheduler tick of the kernel: a few ms behind at most): a full
// clock read costs a spawn from outside a third more where the clock source
// is slow (measured on spawn_many_remote_idle).
std::uint64_t spawn_stamp(worker const* w, std::uint16_t runtime_id) noexcept {
  if (w != nullptr) return w->spawn_stamp;
  return sb::fixed_fields(runtime_id, spawn_time_of(coarse_now_ns()));
}

// A root spawned by worker `w` on its thread: its header filled in and its
// state stamped with the tick's fixed fields (spawn_stamp), not yet queued.
[[gnu::always_inline]] inline task_header* init_worker_root(worker const* w,
                                                            std::coroutine_handle<> root,
                                                            promise_base* promise,
                                                            std::uint32_t spawn_site) noexcept {
  task_header* task = task_header::of_frame(root.address());
  init_root(task, root, promise, spawn_site);
  task->state.store(w->spawn_stamp | sb::scheduled | sb::join_interest | 2 * sb::ref_one,
                    std::memory_order_relaxed);
  return task;
}

// A root the closed gate refused: the caller's handle gets a cancelled task.
// The state goes first: it makes the block the header's, so destroying the
// frame leaves the block to the handle.
void refuse_root(task_header* task, std::coroutine_handle<> root) noexcept {
  std::uint64_t const fixed =
      task->state.load(std::memory_order_relaxed) & ~(sb::ref_mask | (sb::ref_one - 1));
  task->state.store(fixed | sb::complete | sb::cancelled | sb::join_interest | sb::ref_one,
                    std::memory_order_release);
  task->cancelled_before_finish = true;
  root.destroy();
}

}  // namespace

// ---------------------------------------------------------------------------
// Construction and shutdown

scheduler::scheduler(runtime_config const& config, driver_factory make_driver)
    : slot_(this),
      config_(resolve_config(config)),
      host_(this, host_calls),
      epoch_(std::chrono::steady_clock::now()),
      core_(*this, config_.workers, config_.budget, config_.seed,
            idle_tiers{config_.idle_spins, *config_.idle_yields}, config_.placement,
            static_cast<std::uint64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(config_.stalled_lifo_threshold)
                    .count())),
      owned_(config_.workers + 1),
      blocking_(*this, config_.max_blocking_threads, config_.blocking_keep_alive) {
  config_.budget = core_.budget();
  sync_io_per_poll_ = config_.try_cached_reads ? sync_io_per_poll + 1 : 0;
  std::size_t n = config_.workers;
  driver_ = make_driver(host_, config_);
  if (!config_.trace_path.empty()) {
    if constexpr (!trace_sites) {
      throw std::system_error(std::make_error_code(std::errc::not_supported),
                              "spindle: cannot trace to " + config_.trace_path +
                                  ": this build has no trace sites (meson option "
                                  "trace_sites=false)");
    }
    tracer_ = std::make_unique<tracer>(config_.trace_path, n, config_.trace_buffer_events,
                                       steady_ns(epoch_));
    for (std::size_t i = 0; i < n; ++i)
      core_.workers[i]->trace = tracer_->ring(i);
  }

  std::latch started(static_cast<std::ptrdiff_t>(n));
  std::vector<std::exception_ptr> errors(n);
  std::size_t launched = 0;
  std::exception_ptr launch_error;
  try {
    for (; launched < n; ++launched) {
      worker* w = core_.workers[launched].get();
      w->thread = std::thread([this, w, &started, &errors] {
        // Where the worker runs, for its victim order (topology.hpp).
        int const pinned = config_.pin_threads ? pin_to_cpu(w->index) : -1;
        w->cpu = pinned >= 0 ? pinned : ::sched_getcpu();
        try {
          driver_->on_worker_start(w->index);
        } catch (...) {
          errors[w->index] = std::current_exception();
        }
        bool ok = errors[w->index] == nullptr;
        started.count_down();
        if (ok) run_worker(w);
      });
    }
  } catch (std::system_error const&) {
    launch_error = std::current_exception();
    for (std::size_t i = launched; i < n; ++i)
      started.count_down();
  }
  started.wait();
  if (n > 1 && launch_error == nullptr) {
    // Every worker has recorded its CPU (before count_down): the victim
    // orders, published to workers that may already search.
    std::vector<int> cpus(n);
    for (std::size_t i = 0; i < n; ++i)
      cpus[i] = core_.workers[i]->cpu;
    core_.set_victim_orders(build_victim_orders(cached_topology(), cpus, config_.seed));
  }
  std::exception_ptr first = launch_error;
  for (auto& e : errors) {
    if (first == nullptr && e != nullptr) first = e;
  }
  if (first != nullptr) {
    shutdown_.store(true, std::memory_order_release);
    for (std::size_t i = 0; i < launched; ++i)
      core_.workers[i]->park.unpark(*driver_, i);
    for (std::size_t i = 0; i < launched; ++i)
      core_.workers[i]->thread.join();
    driver_->shutdown();
    if (launch_error != nullptr) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "spindle: cannot start worker threads");
    }
    std::rethrow_exception(first);
  }
}

scheduler::~scheduler() {
  // Processes first, while everything still runs: their receives throw
  // task_cancelled and their bodies get process_shutdown_timeout to end.
  shutdown_processes(*this);
  // Blocking jobs: the queued ones are dropped before the gate closes (a job
  // that sees spawns refused knows that nothing queued behind it will run),
  // the running ones are waited for while the workers still run the tasks
  // they may wait for. Tasks suspended on them are destroyed below.
  blocking_.stop();
  owned_.close();
  blocking_.shutdown();
  shutdown_.store(true, std::memory_order_seq_cst);
  for (auto& w : core_.workers)
    w->park.unpark(*driver_, w->index);
  for (auto& w : core_.workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  // Every worker cancelled and reaped its I/O; the driver now waits for any
  // operation still running elsewhere (thread pool) before frames go away.
  driver_->shutdown();
  drain_queues();
  destroy_unfinished_tasks();
  detach_unobserved();
  if (tracer_ != nullptr) tracer_->write();
}

void scheduler::drain_queues() noexcept {
  // The workers have stopped: empty every queue. A task that was claimed by
  // poll_inline has one stale entry holding a reference, which nobody pops
  // any more; a completed task's header would leak with it. A live entry's
  // task is linked into an owned list if it is not listed yet (spawned on a
  // worker and never suspended), so that the caller destroys it with the rest.
  std::size_t const shard = core_.workers.size();
  auto consume = [this, shard](task_header* task) {
    if (!release_if_stale(task) && !task->listed) owned_.link(task, shard);
  };
  for (auto& w : core_.workers) {
    if (task_header* t = w->lifo.drain()) consume(t);
    while (w->batch_head != w->batch_len)
      consume(w->batch[w->batch_head++]);
    while (task_header* t = w->queue.pop())
      consume(t);
    task_header* t = nullptr;
    while (w->remote.try_take(&t, 1) == 1)
      consume(t);
  }
  while (task_header* t = core_.inject.pop())
    consume(t);
}

// ---------------------------------------------------------------------------
// Spawning and scheduling

task_header* scheduler::spawn(std::coroutine_handle<> root, promise_base* promise,
                              spawn_location where) {
  thread_context& ctx = this_thread_context_here();
  return spawn_on(ctx.sched == this ? ctx.self : nullptr, root, promise, where);
}

// A worker's spawn from its own thread (spindle::spawn in a task): the
// common case (the site of the worker's last spawn, the gate open, an empty
// LIFO slot) without a call or a saved register, the rest in
// spawn_from_worker_slow, which comes back here once the site is cached.
// A worker's spawn lists nothing (owned_tasks.hpp: the task is reached
// through its queue until it first suspends).
[[gnu::always_inline]] inline task_header* scheduler::spawn_from_worker(
    worker* w, std::coroutine_handle<> root, promise_base* promise, spawn_location where) {
  if (spawn_site_key(where) != w->last_site_key || owned_.closed()) [[unlikely]]
    return spawn_from_worker_slow(w, root, promise, where);
  task_header* task = init_worker_root(w, root, promise, w->last_site_id);
  w->counters.spawned.add();
  if (core_.schedule_into_empty_slot(w, task)) return task;
  return schedule_spawned(w, task);
}

[[gnu::noinline]] task_header* scheduler::spawn_from_worker_slow(worker* w,
                                                                 std::coroutine_handle<> root,
                                                                 promise_base* promise,
                                                                 spawn_location where) {
  // The worker's site cache holds this spawn's site from here on.
  std::uint32_t const site = site_id_for(w, where);
  if (owned_.closed()) {
    task_header* task = init_worker_root(w, root, promise, site);
    refuse_root(task, root);  // refused atomically
    return task;
  }
  return spawn_from_worker(w, root, promise, where);
}

[[gnu::noinline]] task_header* scheduler::schedule_spawned(worker* w, task_header* task) noexcept {
  core_.schedule_local(w, task, false);
  return task;
}

// Inlined into spawn(): a spawn makes one call into the library and reads
// the thread's context once.
[[gnu::always_inline]] inline task_header* scheduler::spawn_on(worker* w,
                                                               std::coroutine_handle<> root,
                                                               promise_base* promise,
                                                               spawn_location where) {
  if (w != nullptr) return spawn_from_worker(w, root, promise, where);
  return spawn_from_outside(root, promise, where);
}

task_header* scheduler::spawn_from_outside(std::coroutine_handle<> root, promise_base* promise,
                                           spawn_location where) {
  task_header* task = task_header::of_frame(root.address());
  init_root(task, root, promise, spawn_site_id(where));

  // Stamped before it is queued: once queued, a worker may run and free it
  // at once.
  task->state.store(
      spawn_stamp(nullptr, slot_.id()) | sb::scheduled | sb::join_interest | 2 * sb::ref_one,
      std::memory_order_relaxed);
  // From elsewhere: through the gate, which close() waits on until the task
  // is queued. Listed only if it suspends, as a worker's spawn
  // (owned_tasks.hpp): neither this thread nor the worker that completes
  // it takes a list's lock (each did, on the same line, at every spawn).
  if (!owned_.enter(1)) {
    refuse_root(task, root);
    return task;
  }
  core_.push_remote(task);
  owned_.leave(1);
  return task;
}

void scheduler::spawn_batch(spawn_root_entry const* roots, task_header** out, std::size_t n,
                            spawn_location where) {
  if (n == 0) return;
  thread_context& ctx = this_thread_context_here();
  worker* w = ctx.sched == this ? ctx.self : nullptr;
  // As spawn() does for each, with one site and one time for the batch.
  std::uint32_t const site = site_id_for(w, where);
  std::uint64_t const fixed = spawn_stamp(w, slot_.id());
  for (std::size_t i = 0; i < n; ++i) {
    task_header* task = task_header::of_frame(roots[i].frame.address());
    init_root(task, roots[i].frame, roots[i].promise, site);
    // Stamped before it is listed (as in spawn()).
    task->state.store(fixed | sb::scheduled | sb::join_interest | 2 * sb::ref_one,
                      std::memory_order_relaxed);
    out[i] = task;
  }
  // One look at the gate for the batch: a worker's reads the flag, one from
  // elsewhere enters it for the whole batch (as spawn_from_outside).
  if (w != nullptr ? owned_.closed() : !owned_.enter(n)) {
    for (std::size_t i = 0; i < n; ++i)
      refuse_root(out[i], roots[i].frame);
    return;
  }
  if (w != nullptr) {
    w->counters.spawned.add(n);
    core_.schedule_local_batch(w, out, n);
    return;
  }
  // In chunks (task_chain): the worker that takes the batch reads the
  // pointers, not one link per task from this thread's cache. The queue is
  // chosen at the push, so the batch's first chunk_backlog tasks go into
  // chunks whatever it holds already.
  task_chain chain;
  for (std::size_t i = 0; i < n; ++i)
    chain.append(out[i]);
  core_.push_remote_batch(chain.first(), chain.last(), chain.count());
  owned_.leave(n);
}

void scheduler::schedule(task_header* task) noexcept {
  // Shutting down: every unfinished task is about to be destroyed from the
  // owned lists, and frame destructors wake others (a dropped oneshot sender
  // wakes its receiver). Queueing them would leave queue links into headers
  // that are freed next (found by the stress test that shuts down in the
  // middle of random trees: a later push wrote through a freed header).
  if (shutdown_.load(std::memory_order_acquire)) return;
  thread_context& ctx = this_thread_context();
  if (ctx.self != nullptr && ctx.sched == this) {
    core_.schedule_local(ctx.self, task, false);
  } else {
    core_.push_remote(task);
  }
}

void scheduler::unpark(std::size_t index) noexcept {
  core_.workers[index]->park.unpark(*driver_, index);
}

std::size_t scheduler::current_worker() const noexcept {
  thread_context const& ctx = this_thread_context();
  return ctx.sched == this && ctx.self != nullptr ? ctx.self->index : not_a_worker;
}

driver* current_driver() noexcept {
  scheduler* sched = this_thread_context().sched;
  return sched != nullptr ? &sched->io_driver() : nullptr;
}

void scheduler::unpark_worker(std::size_t index) noexcept {
  unpark(index);
}

// ---------------------------------------------------------------------------
// The worker loop

void scheduler::run_worker(worker* w) {
  thread_context& ctx = this_thread_context();
  ctx.sched = this;
  ctx.self = w;
  ctx.trace = w->trace;
  w->inline_stack_limit = half_stack_mark();
  // Stamped before anything can run here (each tick restamps it).
  stamp_tick(w, steady_now_ns());

  while (!shutdown_.load(std::memory_order_acquire)) {
    std::uint64_t start = steady_now_ns();
    stamp_tick(w, start);
    // run_task counts each poll in tick_polls, and so do the polls that
    // tasks run inline while awaiting a join handle (poll_inline).
    w->tick_polls = 0;
    while (w->tick_polls < config_.budget) {
      task_header* task = core_.next_task(w);
      if (task == nullptr) break;
      core_.transition_from_searching(w);
      run_task(w, task);
      if (shutdown_.load(std::memory_order_relaxed)) break;
    }
    std::uint32_t polls = w->tick_polls;
    core_.end_tick(w, polls, polls != 0 ? steady_now_ns() - start : 0);
    // Tick end: submit this tick's I/O and reap completions (their tasks go
    // to this worker's LIFO slot and ring).
    std::size_t reaped = driver_->poll(w->index);
    if (reaped != 0) w->counters.io_completions.add(reaped);
    // Then the timers that came due (their tasks go to this worker's queues).
    std::size_t fired = fire_timers(w);
    // runtime::dump() asks each worker for its queues at a tick's end.
    if (dump_requested(w)) [[unlikely]]
      answer_dump(w);
    switch (core_.after_tick(w, polls != 0 || reaped != 0 || fired != 0)) {
      case scheduler_core::idle_step::run:
        break;
      case scheduler_core::idle_step::spin: {
        for (std::uint32_t i = 0; i < worker::idle_spin_pauses; ++i)
          cpu_relax();
        // A searcher whose steal rounds keep failing waits longer between
        // them (exponential, bounded: scheduler_core::backoff_ns).
        if (std::uint64_t backoff = core_.backoff_ns(w); backoff != 0) {
          std::uint64_t const until = steady_now_ns() + backoff;
          do {
            for (std::uint32_t i = 0; i < worker::idle_spin_pauses; ++i)
              cpu_relax();
          } while (steady_now_ns() < until);
        }
        break;
      }
      case scheduler_core::idle_step::yield:
        ::sched_yield();
        break;
      case scheduler_core::idle_step::park:
        park_worker(w);
        break;
    }
  }
  if (w->is_searching) {
    w->is_searching = false;
    core_.idle.transition_worker_from_searching();
  }
  driver_->on_worker_stop(w->index);
  ctx = thread_context{};
}

// ---------------------------------------------------------------------------
// Parking

void scheduler::park_worker(worker* w) noexcept {
  if (!core_.begin_park(w)) return;
  trace_ring* const trace = tracing(w->trace);
  while (!shutdown_.load(std::memory_order_acquire)) {
    // Sleep until the next timer of this worker's wheel at the latest; a
    // timer armed from another thread meanwhile unparks us to re-read it.
    // The watcher of stalled LIFO slots (if this worker is it) wakes on
    // its period too.
    std::uint64_t deadline = std::min(timer_deadline_ns(w), core_.watch_deadline_ns(w));
    std::uint64_t const slept = trace != nullptr ? steady_now_ns() : 0;
    if (driver_->park_in_driver(w->index)) {
      w->park.park_in_driver(*driver_, w->index, deadline);
    } else {
      w->park.park(deadline);
    }
    if (trace != nullptr) {
      std::uint64_t const woke = steady_now_ns();
      trace->push({slept, woke - slept, 0, 0, nullptr, trace_kind::park});
    }
    core_.begin_wakeup(w);
    std::size_t reaped = driver_->poll(w->index);
    if (reaped != 0) w->counters.io_completions.add(reaped);
    fire_timers(w);
    if (dump_requested(w)) answer_dump(w);  // dump() unparked us to ask
    bool const leaves = core_.finish_wakeup(w);
    if (trace != nullptr) {
      trace->push({steady_now_ns(), 0, 0, leaves ? 1 : 0, nullptr, trace_kind::unpark});
    }
    if (leaves) return;
  }
  core_.end_park(w);  // shutting down
}

// ---------------------------------------------------------------------------
// Stats

runtime_stats scheduler::stats() const {
  runtime_stats out;
  out.workers.reserve(core_.workers.size());
  for (auto const& w : core_.workers) {
    worker_stats s = w->counters.snapshot();
    out.total_spawned += s.spawned;
    out.total_polled += s.polled;
    out.total_stolen += s.stolen;
    out.total_parked += s.parked;
    out.lifo_hits += s.lifo_hits;
    out.global_batch_fetches += s.global_batch_fetches;
    out.timers_fired += s.timers_fired;
    out.inline_polls += s.inline_polls;
    out.io_completions += s.io_completions;
    out.workers.push_back(s);
  }
  out.io_completions += offworker_io_completions_.load(std::memory_order_relaxed);
  out.detached_exceptions = detached_exceptions_.load(std::memory_order_relaxed);
  // Completions first (acquire): a completion seen implies its spawn seen,
  // so the difference never goes below the truth.
  std::uint64_t completed = remote_completed_.load(std::memory_order_acquire);
  for (auto const& w : core_.workers)
    completed += w->counters.completed.get();
  // The spawns off the workers (counted by the gate).
  std::uint64_t const remote_spawned = owned_.spawned_from_outside();
  out.total_spawned += remote_spawned;
  std::uint64_t spawned = remote_spawned;
  for (auto const& w : core_.workers)
    spawned += w->counters.spawned.get();
  out.tasks_alive = spawned > completed ? spawned - completed : 0;
  blocking_pool_stats const b = blocking_.stats();
  out.blocking_threads = b.threads;
  out.blocking_idle_threads = b.idle;
  out.blocking_queue_depth = b.queue_depth;
  out.blocking_jobs = b.completed;
  collect_process_stats(*this, out);
  return out;
}

// ---------------------------------------------------------------------------
// The calls the public templates make (runtime.hpp)

task_header* spawn_root(scheduler* sched, std::coroutine_handle<> root, promise_base* promise,
                        spawn_location where) {
  return sched->spawn(root, promise, where);
}

namespace {
[[gnu::noinline]] task_header* spawn_on_other_thread(std::coroutine_handle<> root,
                                                     promise_base* promise, spawn_location where) {
  thread_context const& ctx = this_thread_context_here();
  scheduler* sched = ctx.sched;
  if (sched == nullptr) [[unlikely]] {
    if (root) root.destroy();
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle::spawn called outside a spindle runtime");
  }
  if (!root) [[unlikely]] {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: spawn of an empty task");
  }
  // Not a worker's thread (spawn_on_current took those with a task).
  return sched->spawn_from_outside(root, promise, where);
}
}  // namespace

task_header* spawn_on_current(std::coroutine_handle<> root, promise_base* promise,
                              spawn_location where) {
  // A spawn from a task on a worker: the thread's worker is one of its
  // scheduler's.
  thread_context const& ctx = this_thread_context_here();
  if (worker* w = ctx.self; w != nullptr && root) [[likely]]
    return ctx.sched->spawn_from_worker(w, root, promise, where);
  return spawn_on_other_thread(root, promise, where);
}

void spawn_roots(scheduler* sched, spawn_root_entry const* roots, task_header** out, std::size_t n,
                 spawn_location where) {
  sched->spawn_batch(roots, out, n, where);
}

}  // namespace spindle::detail
