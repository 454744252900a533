// Deterministic simulation of the scheduler's decisions and of the task
// state machine (the scanner executor).
//
// The production decision code (scheduler_core: next_task, schedule_local,
// push_remote, notify_parked, after_tick's tiered idle, begin_park,
// begin_wakeup/finish_wakeup, end_tick, with the real run queues, global
// queue and idle state) and the production task transitions
// (task_state.hpp: take_entry, claim_for_inline, claim_fresh_for_inline,
// finish_poll, mark_woken, mark_complete, mark_complete_inline_alone, and
// release_if_stale) are driven from one thread by N
// virtual workers, on real task headers whose state word starts as a spawn
// sets it. A seeded RNG interleaves their steps with external spawns,
// external wake-ups (of suspended tasks, of tasks being polled: NOTIFIED
// while RUNNING, and of queued ones), spurious wake-ups of parked workers,
// the workers' own I/O completions and the runtime closing. A poll spans two
// steps (its start and its end), so wakes land in the middle of it. A task's
// body spawns children (sometimes hundreds, to overflow a ring), wakes
// another task, and may await a queued task, polling it inline: the claimed
// task's entry stays behind as a stale one (CLAIMED) that a worker later
// releases, or that a wake turns live again.
//
// One task in 16 carries a real fiber (fiber_context: a real stack, real
// Boost.Context switches): each poll resumes it for one step on the virtual
// worker that polls it, so fibers migrate as the seed decides; the count it
// keeps on its own stack must match the task's polls, and the task's
// completion unwinds it. A replay must put the same fibers on the same
// workers in the same order (a hash of the resumes).
//
// After every step the simulator checks, against each task's real state
// word:
//  - RUNNING exactly while a virtual worker polls it, never SCHEDULED then;
//    NOTIFIED only while RUNNING; never SCHEDULED and CLAIMED at once;
//  - the reference count: the join handle's, the scheduler's until
//    completion, and one per stale entry;
//  - a woken task is queued or NOTIFIED until a poll begins (no lost wake);
//  - the queues hold exactly one entry per SCHEDULED or CLAIMED task (none
//    lost or duplicated on overflow, steal or batch);
//  - a suspended task is listed (shutdown reaches it only through the owned
//    lists);
//  - no worker is parked while it holds local work; when work is queued,
//    some worker is awake or a parked one has a pending unpark; while
//    stealable work waits with a worker asleep, someone searches or has
//    been claimed to; the idle state's counts match the workers.
// After a drain phase every task has finished, every stale entry was
// released (the handle's reference alone remains), and the owned lists and
// queues are empty.
//
// Each seed runs one placement of remote pushes (runtime_config::placement):
// global (the global queue) or p2c (the inbox of the less loaded of two
// workers drawn by the core's placement RNG; searchers take from other
// workers' inboxes). With p2c the simulator also checks that no worker is
// registered as parked while its inbox holds tasks (a push into a parked
// worker's inbox claims it; a worker that parks re-reads its inbox).
//
// Stealing: half the seeds steal in the order of a synthetic topology
// (topology.hpp), the others in the flat random order; two thirds run with a
// stall threshold (a few virtual us, 1 us per step), so searchers and the
// parked watcher (whose deadline wakes it in virtual time) take LIFO tasks
// of workers whose poll spans many steps. Every step also checks that at
// most half the workers (rounded up) search. A second test runs 64 and 256
// workers and prints steals per task and probes per worker queue.
//
// SPINDLE_SIM_SEEDS=n sets the number of seeds (default 3000, scaled under
// sanitizers); SPINDLE_SIM_SEED=s replays one seed with a step trace
// (SPINDLE_SIM_WORKERS=n with it for the scale runs' seeds).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core.hpp"
#include "owned_tasks.hpp"
#include "rng.hpp"
#include "runtime_test_support.hpp"
#include "spindle/errors.hpp"
#include "spindle/fiber.hpp"
#include "task_state.hpp"

namespace {

// Builds a trace line only when tracing (a replay), not on every step.
#define SIM_TRACE(...)              \
  do {                              \
    if (trace_) trace(__VA_ARGS__); \
  } while (0)

using spindle::detail::core_platform;
using spindle::detail::owned_tasks;
using spindle::detail::scheduler_core;
using spindle::detail::task_header;
using spindle::detail::worker;

class sim_failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The world outside the decisions: unpark sets a pending notification that
/// the parked virtual worker consumes on its next step.
class sim_platform final : public core_platform {
 public:
  explicit sim_platform(std::size_t n) : notified(n, false) {}
  void unpark_worker(std::size_t index) noexcept override {
    notified[index] = true;
    ++unparks;
  }
  void remote_push_unnoticed() noexcept override { ++unnoticed_pushes; }
  /// Virtual time: 1 us per simulated step.
  std::uint64_t now_ns() noexcept override { return now; }

  std::uint64_t now = 0;
  std::vector<bool> notified;
  std::uint64_t unparks = 0;
  std::uint64_t unnoticed_pushes = 0;
};

namespace sb = spindle::detail::state_bits;
namespace ts = spindle::detail::task_state;

/// A real fiber (spindle::detail::fiber_context, a real stack and real
/// switches) carried by one simulated task in 16: every poll of the task
/// resumes it for one step, on whichever virtual worker polls it, so fibers
/// migrate between workers as the seeds decide. What it computes lives on
/// its own stack and must survive every switch and migration; the task's
/// completion destroys the context, which unwinds the suspended fiber.
struct sim_fiber {
  explicit sim_fiber(std::size_t i)
      : id(i), ctx(spindle::detail::fiber_stack::allocate(16 * 1024), &sim_fiber::entry, this) {}

  static void entry(void* arg) noexcept {
    auto* f = static_cast<sim_fiber*>(arg);
    std::uint32_t steps = 0;  // on the fiber's stack
    std::size_t last = static_cast<std::size_t>(-1);
    try {
      for (;;) {
        ++steps;
        f->steps_seen = steps;
        std::size_t const w = f->worker;
        if (last != static_cast<std::size_t>(-1) && w != last) ++f->migrations;
        last = w;
        f->trace = (f->trace ^ (f->id * 0x100000001b3ULL + w * 0x9e3779b97f4a7c15ULL + steps)) *
                   0x100000001b3ULL;
        spindle::detail::fiber_await_op op;
        f->ctx.suspend(op);
      }
    } catch (spindle::task_cancelled const&) {
      if (f->unwound != nullptr) ++*f->unwound;
    }
  }

  std::size_t id;
  std::size_t worker = 0;  // the virtual worker resuming it (set before each resume)
  std::uint32_t steps_seen = 0;
  std::uint64_t migrations = 0;
  std::uint64_t trace = 0;
  std::uint64_t* unwound = nullptr;    // counts the unwinding
  spindle::detail::fiber_context ctx;  // last: destroyed (and unwound) first
};

/// The simulator's own account of a task, checked against its real state
/// word after every step.
struct sim_task {
  std::unique_ptr<sim_fiber> fiber;  // one task in 16
  bool spawned = false;
  bool done = false;
  bool in_poll = false;  // a virtual worker is polling it now (RUNNING)
  bool waiting = false;  // suspended, in suspended_, waiting for a wake
  /// A wake reached it (mark_woken on it while it waited or ran) and no
  /// poll has begun since: it must be queued or NOTIFIED until one does.
  bool wake_pending = false;
  std::uint32_t polls = 0;
};

enum class phase : std::uint8_t { find, polling, decide_park, parked };

struct vworker {
  phase ph = phase::find;
  /// Parked with a deadline (the watcher of stalled LIFO slots): it wakes
  /// once virtual time passes it.
  std::uint64_t deadline = spindle::detail::no_deadline;
  std::uint32_t polls = 0;         // in this tick
  task_header* current = nullptr;  // polling: the task
};

struct sim_result {
  std::uint64_t steps = 0, tasks = 0, runs = 0, steals = 0, parks = 0, overflows = 0, unparks = 0;
  // State-machine paths the seeds reached.
  std::uint64_t notified_requeues = 0;         // woken while RUNNING, re-queued at the poll's end
  std::uint64_t inline_claims = 0;             // claimed by an awaiting task (stale entry left)
  std::uint64_t fresh_inline_claims = 0;       // out of the LIFO slot, never polled: plain store
  std::uint64_t fresh_inline_completions = 0;  // ... and finished by that poll: plain store
  std::uint64_t stale_released = 0;            // a stale entry popped and released
  std::uint64_t turned_live = 0;               // a wake turned a stale entry live
  std::uint64_t spins = 0;                     // empty ticks that spun or yielded (tiered idle)
  // Stealing: steal operations, victims probed, stolen per level of the
  // victim order, LIFO tasks rescued, the most searchers seen at once.
  std::uint64_t steal_ops = 0, probes = 0, rescues = 0, max_searching = 0;
  std::array<std::uint64_t, spindle::detail::steal_levels> by_level{};
  std::uint64_t workers = 0;
  // Fibers: how many, switches into them, resumes on another worker than
  // the last, and a hash of (fiber, worker, step) in resume order.
  std::uint64_t fibers = 0, fiber_switches = 0, fiber_migrations = 0, fiber_trace = 0;
  // Placement: seeds run with p2c, and tasks that went through an inbox.
  std::uint64_t p2c_seeds = 0, inbox_pushes = 0, inbox_steals = 0;
  // Seeds that stole in the order of the synthetic topology (the others
  // steal flat: every victim counts as "rest").
  std::uint64_t topology_seeds = 0;

  /// Adds another seed's counts (a total over seeds): every count, and the
  /// most searchers of either; fiber_trace (a hash) and workers are kept.
  sim_result& operator+=(sim_result const& r) noexcept {
    for (auto [mine, theirs] : {std::pair{&steps, r.steps},
                                {&tasks, r.tasks},
                                {&runs, r.runs},
                                {&steals, r.steals},
                                {&parks, r.parks},
                                {&overflows, r.overflows},
                                {&unparks, r.unparks},
                                {&notified_requeues, r.notified_requeues},
                                {&inline_claims, r.inline_claims},
                                {&fresh_inline_claims, r.fresh_inline_claims},
                                {&fresh_inline_completions, r.fresh_inline_completions},
                                {&stale_released, r.stale_released},
                                {&turned_live, r.turned_live},
                                {&spins, r.spins},
                                {&steal_ops, r.steal_ops},
                                {&probes, r.probes},
                                {&rescues, r.rescues},
                                {&fibers, r.fibers},
                                {&fiber_switches, r.fiber_switches},
                                {&fiber_migrations, r.fiber_migrations},
                                {&p2c_seeds, r.p2c_seeds},
                                {&inbox_pushes, r.inbox_pushes},
                                {&inbox_steals, r.inbox_steals},
                                {&topology_seeds, r.topology_seeds}})
      *mine += theirs;
    for (std::size_t l = 0; l < by_level.size(); ++l)
      by_level[l] += r.by_level[l];
    max_searching = std::max(max_searching, r.max_searching);
    return *this;
  }
};

class simulation {
 public:
  /// `where`: the placement, or (by default) one drawn from the seed.
  /// `workers`: 0 for a seed-chosen count (1 to 11), else that many (the
  /// scale runs: 64, 256), with a larger task pool and more steps.
  simulation(std::uint64_t seed, bool trace, int where = -1, std::size_t workers = 0)
      : seed_(seed),
        trace_(trace),
        rng_(seed * 0x9e3779b97f4a7c15ULL + 1),
        placement_(where >= 0        ? static_cast<spindle::placement>(where)
                   : (seed & 1) != 0 ? spindle::placement::p2c
                                     : spindle::placement::global),
        workers_(workers != 0 ? workers : 1 + rng_.below(6) + (rng_.below(8) == 0 ? 5 : 0)),
        budget_(rng_.below(4) == 0 ? 1 + rng_.below(8) : 128),
        tiers_(rng_.below(3) == 0 ? spindle::detail::idle_tiers{}
                                  : spindle::detail::idle_tiers{rng_.below(24), rng_.below(6)}),
        // The stall threshold in virtual us (= steps): off for a third of
        // the seeds, else short enough that polls spanning many steps stall.
        stalled_lifo_ns_(rng_.below(3) == 0 ? 0 : 1000 * (2 + rng_.below(40))),
        pool_size_(workers != 0 ? 3000 + rng_.below(2000) : 600 + rng_.below(1500)),
        extra_steps_(workers != 0 ? 6000 : 0),
        tasks_(pool_size_),
        fakes_(pool_size_),
        platform_(workers_),
        core_(platform_, workers_, budget_, seed, tiers_, placement_, stalled_lifo_ns_),
        vw_(workers_) {
    // Half the seeds steal in topology order: a synthetic machine of 2 SMT
    // threads per core, 8 CPUs per last-level cache, 32 per NUMA node, with
    // worker i on CPU i (or on CPU i / 2 when there are half as many CPUs).
    if (rng_.below(2) == 0) {
      spindle::detail::cpu_topology topo;
      for (std::int64_t c = 0; c < static_cast<std::int64_t>(workers_); ++c)
        topo.cpus.push_back(spindle::detail::cpu_place{c / 2, c / 8, c / 32});
      bool const shared = rng_.below(2) == 0;
      std::vector<int> cpus(workers_);
      for (std::size_t i = 0; i < workers_; ++i)
        cpus[i] = static_cast<int>(shared ? i / 2 : i);
      core_.set_victim_orders(spindle::detail::build_victim_orders(topo, cpus, seed));
      topology_ = true;
    }
  }

  sim_result run() {
    std::size_t const steps = 1500 + rng_.below(3000) + extra_steps_;
    for (step_ = 0; step_ < steps; ++step_) {
      platform_.now = step_ * 1000;
      random_step(/*draining=*/false);
      check();
    }
    // Drain: no new external work; wake every suspended task; run until
    // every worker sleeps with nothing pending.
    if (owned_.is_accepting()) owned_.close();
    std::size_t const limit = step_ + 2'000'000;
    while (!quiescent()) {
      if (step_ >= limit) fail("no quiescence: livelock or lost wake-up while draining");
      platform_.now = step_ * 1000;
      random_step(/*draining=*/true);
      check();
      ++step_;
    }
    final_check();
    result_.steps = step_;
    result_.tasks = next_unused_;
    result_.unparks = platform_.unparks;
    result_.p2c_seeds = placement_ == spindle::placement::p2c ? 1 : 0;
    result_.topology_seeds = topology_ ? 1 : 0;
    for (auto const& t : tasks_)
      result_.runs += t.polls;
    for (auto const& w : core_.workers) {
      result_.steals += w->counters.stolen.get();
      result_.parks += w->counters.parked.get();
      result_.overflows += w->counters.overflows.get();
      result_.steal_ops += w->counters.steal_operations.get();
      result_.probes += w->steal_probes;
      result_.rescues += w->lifo_rescues;
      for (std::size_t l = 0; l < spindle::detail::steal_levels; ++l)
        result_.by_level[l] += w->steals_by_level[l];
    }
    result_.workers = workers_;
    return result_;
  }

 private:
  // ---- events

  void random_step(bool draining) {
    std::uint32_t r = rng_.below(100);
    if (!draining && r < 6) {
      external_spawn();
    } else if (r < 16) {
      external_wake(draining);
    } else if (r < 18) {
      spurious_wake();
    } else if (!draining && r < 19 && rng_.below(20) == 0 && owned_.is_accepting()) {
      SIM_TRACE("close");
      owned_.close();
    } else {
      worker_step(draining);
    }
    // While draining, suspended tasks are eventually woken.
    if (draining && !suspended_.empty() && rng_.below(4) == 0) external_wake(true);
  }

  /// `w`: the spawning worker, or nullptr for a spawn from another thread.
  /// The state word as scheduler::spawn sets it: SCHEDULED, a join handle
  /// (which the simulation keeps to the end), two references.
  task_header* new_task(worker* w) {
    if (next_unused_ == pool_size_) return nullptr;
    std::size_t i = next_unused_;
    // The owned lists and the gate, as the scheduler has them: a spawn from
    // another thread enters the gate (refused after close) and leaves it
    // once queued (external_spawn); a worker's spawn reads the flag. Either
    // is listed when it first suspends.
    bool const refused = w != nullptr ? owned_.closed() : !owned_.enter(1);
    if (refused) {
      ++refused_;
      return nullptr;  // never queued, never lost
    }
    ++next_unused_;
    fakes_[i]->state.store(sb::scheduled | sb::join_interest | 2 * sb::ref_one,
                           std::memory_order_relaxed);
    tasks_[i].spawned = true;
    if (i % 16 == 0) {
      tasks_[i].fiber = std::make_unique<sim_fiber>(i);
      ++result_.fibers;
    }
    live_.push_back(i);
    return fakes_[i];
  }

  /// scheduler_core::push_remote, counting what went to an inbox.
  void push_remote(task_header* t) {
    std::size_t before = 0;
    for (auto const& w : core_.workers)
      before += w->remote.len();
    core_.push_remote(t);
    std::size_t after = 0;
    for (auto const& w : core_.workers)
      after += w->remote.len();
    result_.inbox_pushes += after - before;
    if (placement_ == spindle::placement::p2c && after != before + 1) {
      fail("a p2c push did not go to an inbox");
    }
  }

  void external_spawn() {
    task_header* t = new_task(nullptr);
    if (t == nullptr) return;
    SIM_TRACE("external spawn " + std::to_string(fakes_.index(t)));
    push_remote(t);
    owned_.leave(1);
  }

  /// A wake through the real transition; `w`: from that worker's thread
  /// (queued locally, as scheduler::schedule does), or from outside.
  void wake(std::size_t i, worker* w, char const* who) {
    sim_task& st = tasks_[i];
    if (st.done) return;
    std::uint64_t const before = fakes_[i]->state.load(std::memory_order_relaxed);
    bool const push = ts::mark_woken(fakes_[i]);
    if (st.waiting || st.in_poll) st.wake_pending = true;
    if (st.waiting) {
      // A suspended task with a stale entry: that entry is now the live one.
      if (!push && (before & sb::claimed) != 0) ++result_.turned_live;
      st.waiting = false;
      std::erase(suspended_, i);
    }
    SIM_TRACE(std::string(who) + " wakes " + std::to_string(i) +
              (push ? " (queued)" : " (no push)"));
    if (!push) return;
    if (w != nullptr) {
      core_.schedule_local(w, fakes_[i], false);
    } else {
      push_remote(fakes_[i]);
    }
  }

  /// A random task to wake: mostly a suspended one, sometimes one being
  /// polled (NOTIFIED while RUNNING) or any spawned one (queued: no-op;
  /// done: nothing).
  std::size_t pick_wake_target() {
    if (!suspended_.empty() && rng_.below(4) != 0) {
      return suspended_[rng_.below(static_cast<std::uint32_t>(suspended_.size()))];
    }
    if (rng_.below(2) == 0) {
      for (auto const& v : vw_) {
        if (v.ph == phase::polling && rng_.below(2) == 0) return fakes_.index(v.current);
      }
    }
    return next_unused_ == 0 ? 0 : rng_.below(static_cast<std::uint32_t>(next_unused_));
  }

  void external_wake(bool draining) {
    if (next_unused_ == 0) return;
    std::size_t i = draining && !suspended_.empty() ? suspended_.front() : pick_wake_target();
    wake(i, nullptr, "outside");
  }

  void spurious_wake() {
    // A parked worker's futex returns without an unpark.
    std::size_t i = rng_.below(static_cast<std::uint32_t>(workers_));
    if (vw_[i].ph != phase::parked) return;
    SIM_TRACE("spurious wake of worker " + std::to_string(i));
    wake_parked(i);
  }

  void worker_step(bool draining) {
    // Any worker that can act: awake ones, and parked ones with an unpark.
    std::vector<std::size_t> able;
    for (std::size_t i = 0; i < workers_; ++i) {
      if (vw_[i].ph != phase::parked || platform_.notified[i] || vw_[i].deadline <= platform_.now)
        able.push_back(i);
    }
    if (able.empty()) return;
    std::size_t i = able[rng_.below(static_cast<std::uint32_t>(able.size()))];
    worker* w = core_.workers[i].get();
    vworker& v = vw_[i];
    switch (v.ph) {
      case phase::parked:
        platform_.notified[i] = false;  // an unpark, or the watch's deadline
        wake_parked(i);
        break;
      case phase::find: {
        // Tasks taken from other workers' inboxes (a searcher's steal).
        std::size_t others_before = 0;
        for (auto const& o : core_.workers)
          others_before += o.get() != w ? o->remote.len() : 0;
        find(w, v, draining);
        std::size_t others_after = 0;
        for (auto const& o : core_.workers)
          others_after += o.get() != w ? o->remote.len() : 0;
        if (others_after < others_before) result_.inbox_steals += others_before - others_after;
        break;
      }
      case phase::polling:
        end_poll(w, v.current, draining);
        v.current = nullptr;
        v.ph = phase::find;
        break;
      case phase::decide_park:
        if (core_.begin_park(w)) {
          SIM_TRACE("worker " + std::to_string(i) + " parks");
          v.ph = phase::parked;
          v.deadline = core_.watch_deadline_ns(w);
        } else {
          v.ph = phase::find;
        }
        break;
    }
  }

  void find(worker* w, vworker& v, bool draining) {
    task_header* t = v.polls < core_.budget() ? core_.next_task(w) : nullptr;
    if (t != nullptr) {
      core_.transition_from_searching(w);
      // scheduler::run_task: a stale entry is released (and, if a wake
      // turned it live meanwhile, run after all); a live one is polled.
      for (;;) {
        std::uint64_t s = 0;
        ts::entry_action const a = ts::take_entry(t, s);
        if (a == ts::entry_action::poll) break;
        if (a == ts::entry_action::handed_back) fail("entry handed back with no abort_here");
        if (spindle::detail::release_if_stale(t)) {
          ++result_.stale_released;
          SIM_TRACE("worker " + std::to_string(w->index) + " releases stale entry of " +
                    std::to_string(fakes_.index(t)));
          return;
        }
      }
      ++v.polls;
      begin_poll(w, t, draining);
      v.current = t;
      v.ph = phase::polling;
      return;
    }
    core_.end_tick(w, v.polls, v.polls * (100 + rng_.below(200'000)));
    bool progressed = v.polls != 0;
    v.polls = 0;
    // Tick end: the worker's own I/O completions wake tasks locally.
    if (!suspended_.empty() && rng_.below(8) == 0) {
      wake(suspended_[rng_.below(static_cast<std::uint32_t>(suspended_.size()))], w, "reap");
      progressed = true;
    }
    switch (core_.after_tick(w, progressed)) {
      case scheduler_core::idle_step::run:
        break;
      case scheduler_core::idle_step::spin:
      case scheduler_core::idle_step::yield:
        ++result_.spins;
        break;
      case scheduler_core::idle_step::park:
        v.ph = phase::decide_park;
        break;
    }
  }

  /// The start of a poll whose RUNNING bit the worker holds: checks that the
  /// task was not being polled, then runs its body (spawns, wakes, an inline
  /// poll of a queued task it awaits).
  void begin_poll(worker* w, task_header* t, bool draining) {
    std::size_t i = fakes_.index(t);
    sim_task& st = tasks_[i];
    if (st.in_poll || st.done || st.waiting) {
      fail("worker " + std::to_string(w->index) + " polls task " + std::to_string(i) + " that is " +
           (st.in_poll ? "being polled"
            : st.done  ? "done"
                       : "suspended unwoken"));
    }
    st.in_poll = true;
    st.wake_pending = false;
    ++st.polls;
    t->polled = true;  // as scheduler::poll_held sets it
    SIM_TRACE("worker " + std::to_string(w->index) + " polls " + std::to_string(i));
    run_fiber(w, i);
    body(w, draining, /*nested=*/false);
  }

  /// A poll of a task that carries a fiber runs the fiber one step.
  void run_fiber(worker* w, std::size_t i) {
    sim_fiber* f = tasks_[i].fiber.get();
    if (f == nullptr) return;
    f->worker = w->index;
    if (f->ctx.resume() == nullptr) fail("fiber " + std::to_string(i) + " ended by itself");
    ++result_.fiber_switches;
    if (f->steps_seen != tasks_[i].polls) {
      fail("fiber " + std::to_string(i) + " counted " + std::to_string(f->steps_seen) +
           " steps on its stack for " + std::to_string(tasks_[i].polls) + " polls");
    }
    result_.fiber_trace =
        (result_.fiber_trace ^ f->trace) * 0x100000001b3ULL + static_cast<std::uint64_t>(i);
  }

  /// The task completed: its frame (here, the fiber) is destroyed, which
  /// unwinds the suspended fiber.
  void end_fiber(std::size_t i) {
    auto& f = tasks_[i].fiber;
    if (!f) return;
    result_.fiber_migrations += f->migrations;
    std::uint64_t const before = unwound_;
    f->unwound = &unwound_;
    f.reset();
    if (unwound_ != before + 1) fail("fiber " + std::to_string(i) + " was not unwound");
  }

  void body(worker* w, bool draining, bool nested) {
    // Children: usually a few, sometimes a burst that overflows the ring.
    std::uint32_t children = rng_.below(10) < 6 ? 0 : rng_.below(4);
    if (!draining && !nested && rng_.below(200) == 0) children = 200 + rng_.below(200);
    for (std::uint32_t c = 0; c < children; ++c) {
      task_header* child = new_task(w);
      if (child == nullptr) break;
      core_.schedule_local(w, child, false);
    }
    // Wake another task from inside this one (a cross-worker wake).
    if (next_unused_ != 0 && rng_.below(4) == 0) wake(pick_wake_target(), w, "a task");
    // Await a queued task: poll it inline (scheduler::poll_inline).
    if (!nested && next_unused_ != 0 && rng_.below(5) == 0) {
      std::size_t j = rng_.below(static_cast<std::uint32_t>(next_unused_));
      task_header* c = fakes_[j];
      // As scheduler::poll_inline: out of the LIFO slot first; a spawn
      // there that was never polled is claimed with a plain store.
      bool const idle = !tasks_[j].in_poll;
      bool const from_lifo = idle && w->lifo.peek() == c && w->lifo.take_if(c);
      std::uint64_t next = 0;
      bool const fresh = from_lifo && ts::claim_fresh_for_inline(c, next);
      if (idle && (fresh || ts::claim_for_inline(c, from_lifo, next))) {
        if (!from_lifo) ++result_.inline_claims;
        if (fresh) ++result_.fresh_inline_claims;
        SIM_TRACE("inline poll of " + std::to_string(j) +
                  (fresh       ? " (LIFO slot, fresh)"
                   : from_lifo ? " (LIFO slot)"
                               : " (claimed)"));
        sim_task& sc = tasks_[j];
        sc.in_poll = true;
        sc.wake_pending = false;
        ++sc.polls;
        c->polled = true;
        run_fiber(w, j);
        body(w, draining, /*nested=*/true);
        end_poll(w, c, draining, fresh);
      } else if (from_lifo) {
        w->lifo.put(c);
      }
    }
  }

  /// The end of a poll: the task finishes, yields or suspends, through the
  /// real transitions (scheduler::complete, poll_held).
  /// `fresh`: an inline poll that claim_fresh_for_inline claimed (its
  /// completion is mark_complete_inline_alone's, as scheduler's).
  void end_poll(worker* w, task_header* t, bool draining, bool fresh = false) {
    w->counters.polled.add();  // as scheduler::poll_held counts it
    std::size_t i = fakes_.index(t);
    sim_task& st = tasks_[i];
    std::uint32_t r = rng_.below(10);
    if (r < 4 || (draining && r < 8)) {
      if (t->listed) owned_.remove(t);
      if (fresh) {
        // Never listed, no stale entry: the plain store must apply.
        if (!ts::mark_complete_inline_alone(t)) {
          fail("fresh inline completion of " + std::to_string(i) + " refused");
        }
        ++result_.fresh_inline_completions;
      } else {
        ts::completion const c = ts::mark_complete(t);
        // The join handle (kept by the simulation) holds a reference and
        // no waiter: the scheduler's reference goes in the same transition.
        if (!c.dropped || c.last) {
          fail("completion of " + std::to_string(i) + " kept its reference");
        }
      }
      st.done = true;
      st.in_poll = false;
      end_fiber(i);
      std::uint64_t const s = t->state.load(std::memory_order_relaxed);
      if ((s & (sb::complete | sb::scheduled | sb::running | sb::notified)) != sb::complete) {
        fail("task " + std::to_string(i) + " done but its state is not COMPLETE alone");
      }
      if (sb::refs(s) != 1u + ((s & sb::claimed) != 0 ? 1u : 0u)) {
        fail("task " + std::to_string(i) + " completes with the wrong reference count");
      }
      if ((s & sb::claimed) != 0) done_with_stale_.push_back(i);
      SIM_TRACE("task " + std::to_string(i) + " completes");
      return;
    }
    bool const yielded = r < 6 || draining;
    auto list_it = [&] {
      if (!t->listed) owned_.link(t, w->index);
    };
    st.in_poll = false;
    switch (ts::finish_poll(t, yielded, list_it)) {
      case ts::poll_end::requeue:
        if (!yielded) ++result_.notified_requeues;
        SIM_TRACE("task " + std::to_string(i) + (yielded ? " yields" : " re-queued (notified)"));
        core_.schedule_yield(w, t);
        break;
      case ts::poll_end::turned_live:
        ++result_.turned_live;
        SIM_TRACE("task " + std::to_string(i) + " re-queued through its stale entry");
        break;
      case ts::poll_end::suspended:
        SIM_TRACE("task " + std::to_string(i) + " suspends");
        st.waiting = true;
        suspended_.push_back(i);
        break;
      case ts::poll_end::cancelled:
        fail("task " + std::to_string(i) + " cancelled with no abort");
    }
  }

  void wake_parked(std::size_t i) {
    // scheduler::park_worker after its sleep: begin_wakeup, reap the
    // worker's own completions (queued locally), finish_wakeup.
    worker* w = core_.workers[i].get();
    core_.begin_wakeup(w);
    if (!suspended_.empty() && rng_.below(4) == 0) {
      wake(suspended_[rng_.below(static_cast<std::uint32_t>(suspended_.size()))], w, "reap");
    }
    if (core_.finish_wakeup(w)) {
      vw_[i].ph = phase::find;
      vw_[i].deadline = spindle::detail::no_deadline;
      SIM_TRACE("worker " + std::to_string(i) + " wakes");
    } else {
      // Sleeps again: scheduler::park_worker asks for the deadline anew.
      vw_[i].deadline = core_.watch_deadline_ns(w);
    }
  }

  // ---- invariants

  /// Stale entries whose tasks have finished (a done task keeps CLAIMED
  /// until its entry is popped or carried off).
  [[nodiscard]] std::size_t stale_entries_of_done() const {
    std::size_t n = 0;
    for (std::size_t i : done_with_stale_)
      n += (fakes_[i]->state.load(std::memory_order_relaxed) & sb::claimed) != 0 ? 1 : 0;
    return n;
  }

  [[nodiscard]] std::size_t entries_in_queues() const {
    std::size_t n = core_.inject.len();
    for (auto const& w : core_.workers) {
      n += w->queue.len();
      n += w->lifo.peek() != nullptr ? 1 : 0;
      n += w->batch_len - w->batch_head;
      n += w->remote.len();
    }
    return n;
  }

  void check() {
    // Finished tasks are checked when they finish and at the end; only
    // their stale entries remain, counted in stale_of_done_.
    std::erase_if(live_, [this](std::size_t i) { return tasks_[i].done; });
    std::size_t entries = stale_entries_of_done();
    for (std::size_t i : live_) {
      sim_task const& st = tasks_[i];
      std::uint64_t const s = fakes_[i]->state.load(std::memory_order_relaxed);
      auto who = [i] { return "task " + std::to_string(i); };
      bool const scheduled = (s & sb::scheduled) != 0;
      bool const running = (s & sb::running) != 0;
      bool const claimed = (s & sb::claimed) != 0;
      if (scheduled || claimed) ++entries;  // a live or a stale entry
      if (scheduled && claimed) fail(who() + " is SCHEDULED and CLAIMED (two entries)");
      // References: the join handle's, the scheduler's until completion, a
      // stale entry's.
      std::uint64_t const refs = 1 + (st.done ? 0 : 1) + (claimed ? 1 : 0);
      if (sb::refs(s) != refs) {
        fail(who() + " has " + std::to_string(sb::refs(s)) + " references, expected " +
             std::to_string(refs));
      }
      if ((s & sb::join_interest) == 0) fail(who() + " lost its join interest");
      if (st.done) {
        if ((s & sb::complete) == 0 || scheduled || running) fail(who() + " done but not COMPLETE");
        continue;
      }
      if ((s & sb::complete) != 0) fail(who() + " COMPLETE but not done");
      if (running != st.in_poll)
        fail(who() + (running ? " RUNNING outside a poll" : " polled without RUNNING"));
      if (st.in_poll && scheduled) fail(who() + " SCHEDULED while polled");
      if ((s & sb::notified) != 0 && !running) fail(who() + " NOTIFIED while not running");
      if (st.wake_pending && !scheduled && (s & sb::notified) == 0) {
        fail("lost wake-up: " + who() +
             " was woken, is neither queued nor NOTIFIED, and no poll began");
      }
      // Suspended (neither queued nor polled): only its waker and the owned
      // lists reach it, so shutdown finds it there.
      if (!scheduled && !running) {
        if (!st.waiting) fail(who() + " idle but not waiting for a wake");
        if (!fakes_[i]->listed) fail(who() + " suspended but not in an owned list");
      }
    }
    std::size_t held = entries_in_queues();
    if (held != entries) {
      fail("queues hold " + std::to_string(held) + " entries but " + std::to_string(entries) +
           " tasks are SCHEDULED or CLAIMED (lost or duplicated on overflow, steal or batch)");
    }
    bool someone_awake = false;
    std::uint32_t searching = 0, claimed_workers = 0, unparked = 0;
    for (std::size_t i = 0; i < workers_; ++i) {
      worker const& w = *core_.workers[i];
      bool parked = vw_[i].ph == phase::parked;
      if (parked && w.has_local_tasks()) {
        fail("worker " + std::to_string(i) + " parked with local tasks");
      }
      if (!parked || platform_.notified[i]) someone_awake = true;
      if (w.is_searching) ++searching;
      bool registered_parked = core_.idle.is_parked(i);
      if (parked && !registered_parked) ++claimed_workers;  // claimed by a notifier, not yet awake
      if (!registered_parked) ++unparked;
      if (!parked && registered_parked) fail("worker " + std::to_string(i) + " awake but parked");
      if (registered_parked && w.remote.len() != 0) {
        fail("worker " + std::to_string(i) + " registered as parked while its inbox holds " +
             std::to_string(w.remote.len()) + " tasks");
      }
    }
    if (held != 0 && !someone_awake) {
      fail("lost wake-up: " + std::to_string(held) +
           " entries queued while every worker sleeps without a pending unpark");
    }
    // No worker sleeps while stealable work waits that no searcher will
    // see: a push with nobody searching claims a parked worker, the last
    // searcher to find work or to park hands the search on.
    std::size_t stealable = core_.inject.len();
    for (auto const& w : core_.workers)
      stealable += w->queue.len() + w->remote.len();
    if (stealable != 0 && unparked < workers_ && core_.idle.num_searching() == 0) {
      fail("idle worker: " + std::to_string(stealable) +
           " stealable entries wait while a worker sleeps and nobody searches");
    }
    if (core_.idle.num_unparked() != unparked) fail("idle state: unparked count is wrong");
    // At most half of the workers (rounded up) search, claimed ones included.
    std::uint64_t const now_searching = core_.idle.num_searching();
    result_.max_searching = std::max(result_.max_searching, now_searching);
    if (2 * now_searching > workers_ + 1) {
      fail(std::to_string(now_searching) + " searchers among " + std::to_string(workers_) +
           " workers");
    }
    // A claimed worker is counted as searching before it wakes.
    std::uint32_t in_idle = core_.idle.num_searching();
    if (in_idle < searching || in_idle > searching + claimed_workers) {
      fail("idle state: searching count " + std::to_string(in_idle) + " vs " +
           std::to_string(searching) + " searching workers and " + std::to_string(claimed_workers) +
           " claimed");
    }
  }

  [[nodiscard]] bool quiescent() const {
    if (!suspended_.empty()) return false;
    for (std::size_t i = 0; i < workers_; ++i) {
      if (vw_[i].ph != phase::parked || platform_.notified[i]) return false;
      if (vw_[i].deadline != spindle::detail::no_deadline) return false;  // a watcher will wake
    }
    return true;
  }

  void final_check() {
    for (std::size_t i = 0; i < next_unused_; ++i) {
      if (!tasks_[i].done) fail("task " + std::to_string(i) + " never finished");
      std::uint64_t const s = fakes_[i]->state.load(std::memory_order_relaxed);
      // Every stale entry was released: the join handle's reference alone.
      if (sb::refs(s) != 1 || (s & sb::claimed) != 0) {
        fail("task " + std::to_string(i) + " ends with " + std::to_string(sb::refs(s)) +
             " references");
      }
    }
    if (entries_in_queues() != 0) fail("queues not empty at the end");
    if (owned_.listed() != 0) fail("the owned lists still hold tasks");
  }

  void trace(std::string const& what) {
    if (trace_)
      std::printf("[seed %llu step %zu] %s\n", static_cast<unsigned long long>(seed_), step_,
                  what.c_str());
  }

  [[noreturn]] void fail(std::string const& what) const {
    std::ostringstream os;
    os << "seed " << seed_ << " (" << (placement_ == spindle::placement::p2c ? "p2c" : "global")
       << ", " << workers_ << " workers, budget " << budget_ << ", idle tiers " << tiers_.spins
       << "/" << tiers_.yields << ", stall threshold " << stalled_lifo_ns_ / 1000 << " us) step "
       << step_ << ": " << what << "\n  replay: SPINDLE_SIM_SEED=" << seed_
       << (workers_ > 11 ? " SPINDLE_SIM_WORKERS=" + std::to_string(workers_) : std::string())
       << " test_sim";
    throw sim_failure(os.str());
  }

  std::uint64_t seed_;
  bool trace_;
  spindle::detail::xorshift64 rng_;
  spindle::placement placement_;
  bool topology_ = false;  // stealing in the synthetic topology's order
  std::size_t workers_;
  std::uint32_t budget_;
  spindle::detail::idle_tiers tiers_;
  std::uint64_t stalled_lifo_ns_;
  std::size_t pool_size_;
  std::size_t extra_steps_;
  std::vector<sim_task> tasks_;
  spindle_test::fake_tasks fakes_;
  sim_platform platform_;
  scheduler_core core_;
  std::vector<vworker> vw_;
  owned_tasks owned_{workers_ + 1};
  std::vector<std::size_t> suspended_;
  std::vector<std::size_t> live_;             // spawned and not done
  std::vector<std::size_t> done_with_stale_;  // done while CLAIMED (a stale entry left)
  std::size_t next_unused_ = 0;
  std::size_t step_ = 0;
  std::uint64_t refused_ = 0;
  std::uint64_t unwound_ = 0;  // fibers unwound by their task's completion
  sim_result result_;
};

TEST(Simulation, ThousandsOfSeedsKeepEveryInvariant) {
  if (char const* one = std::getenv("SPINDLE_SIM_SEED"); one != nullptr && *one != '\0') {
    std::uint64_t seed = std::strtoull(one, nullptr, 10);
    char const* n = std::getenv("SPINDLE_SIM_WORKERS");
    simulation sim(seed, /*trace=*/true, -1, n != nullptr ? std::strtoull(n, nullptr, 10) : 0);
    try {
      sim.run();
    } catch (sim_failure const& e) {
      FAIL() << e.what();
    }
    return;
  }
  long seeds = spindle_test::scaled(3000, 100);
  if (char const* n = std::getenv("SPINDLE_SIM_SEEDS"); n != nullptr && *n != '\0') {
    seeds = std::strtol(n, nullptr, 10);
  }
  sim_result total;
  for (long s = 1; s <= seeds; ++s) {
    simulation sim(static_cast<std::uint64_t>(s), /*trace=*/false);
    try {
      total += sim.run();
    } catch (sim_failure const& e) {
      FAIL() << e.what();
    }
  }
  std::printf(
      "simulated %ld seeds: %llu steps, %llu tasks, %llu polls, %llu stolen, %llu parks, "
      "%llu unparks, %llu ring overflows\n",
      seeds, static_cast<unsigned long long>(total.steps),
      static_cast<unsigned long long>(total.tasks), static_cast<unsigned long long>(total.runs),
      static_cast<unsigned long long>(total.steals), static_cast<unsigned long long>(total.parks),
      static_cast<unsigned long long>(total.unparks),
      static_cast<unsigned long long>(total.overflows));
  std::printf(
      "state machine: %llu re-queued after a wake while running, %llu inline claims (and %llu "
      "fresh ones from the LIFO slot, %llu finished by that poll), %llu stale entries released, "
      "%llu turned live; %llu idle spins or yields\n",
      static_cast<unsigned long long>(total.notified_requeues),
      static_cast<unsigned long long>(total.inline_claims),
      static_cast<unsigned long long>(total.fresh_inline_claims),
      static_cast<unsigned long long>(total.fresh_inline_completions),
      static_cast<unsigned long long>(total.stale_released),
      static_cast<unsigned long long>(total.turned_live),
      static_cast<unsigned long long>(total.spins));
  EXPECT_GT(total.overflows, 0u) << "the seeds never overflowed a ring";
  EXPECT_GT(total.notified_requeues, 0u) << "no task was woken while running";
  EXPECT_GT(total.inline_claims, 0u) << "no task was claimed for an inline poll";
  EXPECT_GT(total.fresh_inline_completions, 0u)
      << "no fresh spawn was claimed from the LIFO slot and finished inline";
  EXPECT_GT(total.stale_released, 0u) << "no stale entry was released";
  EXPECT_GT(total.turned_live, 0u) << "no wake turned a stale entry live";
  EXPECT_GT(total.steals, 0u) << "the seeds never stole";
  std::printf("stealing: %llu steal operations, %llu LIFO tasks rescued from stalled workers\n",
              static_cast<unsigned long long>(total.steal_ops),
              static_cast<unsigned long long>(total.rescues));
  EXPECT_GT(total.rescues, 0u) << "no LIFO task was rescued from a stalled worker";
  std::printf("fibers: %llu, %llu switches into them, %llu resumed on another worker\n",
              static_cast<unsigned long long>(total.fibers),
              static_cast<unsigned long long>(total.fiber_switches),
              static_cast<unsigned long long>(total.fiber_migrations));
  EXPECT_GT(total.fibers, 0u);
  std::printf(
      "placement: %llu of %ld seeds p2c, %llu pushes into inboxes, %llu tasks taken from "
      "another worker's inbox\n",
      static_cast<unsigned long long>(total.p2c_seeds), seeds,
      static_cast<unsigned long long>(total.inbox_pushes),
      static_cast<unsigned long long>(total.inbox_steals));
  EXPECT_GT(total.p2c_seeds, 0u) << "no seed ran placement::p2c";
  EXPECT_LT(total.p2c_seeds, static_cast<std::uint64_t>(seeds)) << "no seed ran placement::global";
  EXPECT_GT(total.inbox_pushes, 0u) << "no task went through an inbox";
  EXPECT_GT(total.inbox_steals, 0u) << "no searcher took from another worker's inbox";
  EXPECT_GT(total.fiber_migrations, 0u) << "no fiber migrated between workers";
}

TEST(Simulation, SixtyFourAndTwoHundredFiftySixWorkers) {
  // Beyond 64 workers (16 for comparison): the parked set spans several bitmap words and the
  // searcher count stays within half the workers (checked after every
  // step); every spawned task runs (final_check). The figures are the
  // README's (docs/design.md, "Stealing at scale").
  long const seeds = spindle_test::scaled(8, 2);
  for (std::size_t n : {std::size_t{16}, std::size_t{64}, std::size_t{256}}) {
    sim_result total;
    sim_result topology;  // the seeds that drew the synthetic topology
    sim_result flat;      // the others (their steals all count as "rest")
    for (long s = 1; s <= seeds; ++s) {
      simulation sim(static_cast<std::uint64_t>(s) * 7919 + n, /*trace=*/false, -1, n);
      try {
        sim_result const r = sim.run();
        total += r;
        (r.topology_seeds != 0 ? topology : flat) += r;
      } catch (sim_failure const& e) {
        FAIL() << e.what();
      }
    }
    EXPECT_LE(2 * total.max_searching, n);
    EXPECT_GT(total.steals, 0u);
    // Rescues at the sizes this test is for; the 16-worker row is there for
    // comparison, and the sanitizers' 2 seeds of it may draw no stall (the
    // first test checks rescues over its thousands of seeds).
    if (n >= 64) {
      EXPECT_GT(total.rescues, 0u);
    }
    auto per = [](std::uint64_t a, std::uint64_t b) {
      return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b);
    };
    std::printf(
        "%zu workers, %ld seeds: %llu tasks, %.3f tasks stolen per task, %.3f steal operations "
        "per task, %.1f victims probed per task, %.2f probes of each worker's queue "
        "per 1000 steps, %llu LIFO rescues, %.2f parks per task, at most %llu searching\n",
        n, seeds, static_cast<unsigned long long>(total.tasks), per(total.steals, total.tasks),
        per(total.steal_ops, total.tasks), per(total.probes, total.tasks),
        1000.0 * per(total.probes, total.steps * n), static_cast<unsigned long long>(total.rescues),
        per(total.parks, total.tasks), static_cast<unsigned long long>(total.max_searching));
    std::printf(
        "  steal operations by level of the %llu seed(s) with a topology: SMT %llu, LLC %llu, "
        "node %llu, rest %llu; %llu of the flat seeds\n",
        static_cast<unsigned long long>(topology.topology_seeds),
        static_cast<unsigned long long>(topology.by_level[0]),
        static_cast<unsigned long long>(topology.by_level[1]),
        static_cast<unsigned long long>(topology.by_level[2]),
        static_cast<unsigned long long>(topology.by_level[3]),
        static_cast<unsigned long long>(flat.steal_ops));
  }
}

TEST(Simulation, ASeedReplaysExactly) {
  // Two runs of the same seed take the same decisions, with either placement.
  for (std::uint64_t seed : {7u, 1234u, 99991u}) {
    for (int where : {0, 1}) {
      sim_result a = simulation(seed, false, where).run();
      sim_result b = simulation(seed, false, where).run();
      EXPECT_EQ(a.inbox_pushes, b.inbox_pushes);
      EXPECT_EQ(a.inbox_steals, b.inbox_steals);
      if (where == 1) {
        EXPECT_GT(a.inbox_pushes, 0u);
      }
      EXPECT_EQ(a.steps, b.steps);
      EXPECT_EQ(a.runs, b.runs);
      EXPECT_EQ(a.steals, b.steals);
      EXPECT_EQ(a.parks, b.parks);
      EXPECT_EQ(a.unparks, b.unparks);
      EXPECT_EQ(a.inline_claims, b.inline_claims);
      EXPECT_EQ(a.fresh_inline_claims, b.fresh_inline_claims);
      EXPECT_EQ(a.stale_released, b.stale_released);
      EXPECT_EQ(a.fibers, b.fibers);
      EXPECT_EQ(a.fiber_switches, b.fiber_switches);
      EXPECT_EQ(a.fiber_migrations, b.fiber_migrations);
      EXPECT_EQ(a.fiber_trace, b.fiber_trace);  // same fibers on the same workers, in order
      EXPECT_EQ(a.rescues, b.rescues);
      EXPECT_EQ(a.probes, b.probes);
    }
  }
}

}  // namespace
