// Deterministic simulation of the scheduler's decisions (seed 000).
//
// The production decision code (scheduler_core: next_task, schedule_local,
// push_remote, notify_parked, begin_park, transition_from_parked, end_tick,
// with the real run queues, global queue and idle state) is driven from one
// thread by N virtual workers. A seeded RNG interleaves their steps with
// external spawns, external wake-ups, spurious wake-ups of parked workers and
// the runtime closing. Tasks are fake headers with a random script: spawn
// children (sometimes hundreds, to overflow a ring), wake a suspended task,
// then finish, yield or suspend.
//
// After every step the simulator checks:
//  - every task taken from a queue was queued (never run twice per wake),
//    and the number of queued tasks equals what the queues hold (none lost
//    on overflow or steal);
//  - no worker is parked while it holds local work;
//  - when work is queued, some worker is awake or a parked one has a pending
//    unpark (no lost wake-up: nobody parks while work is visible to it and no
//    searcher is awake to find it), and while stealable work waits with a
//    worker asleep, someone searches or has been claimed to (no idle worker
//    beside unseen work);
//  - the idle state's searching/unparked counts match the workers.
// After a drain phase every task has finished, ran exactly once per wake,
// and the owned lists are empty again; at every step each suspended task is
// listed (shutdown reaches a suspended task only through them).
//
// SPINDLE_SIM_SEEDS=n sets the number of seeds (default 3000, scaled under
// sanitizers); SPINDLE_SIM_SEED=s replays one seed with a step trace.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "core.hpp"
#include "owned_tasks.hpp"
#include "rng.hpp"
#include "runtime_test_support.hpp"

namespace {

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

  std::vector<bool> notified;
  std::uint64_t unparks = 0;
  std::uint64_t unnoticed_pushes = 0;
};

enum class task_state : std::uint8_t { unused, queued, running, suspended, done };

struct sim_task {
  task_state state = task_state::unused;
  std::uint32_t wakes = 0;  // times it was queued
  std::uint32_t runs = 0;   // times it was taken and run
};

enum class phase : std::uint8_t { find, decide_park, parked };

struct vworker {
  phase ph = phase::find;
  std::uint32_t polls = 0;  // in this tick
};

struct sim_result {
  std::uint64_t steps = 0, tasks = 0, runs = 0, steals = 0, parks = 0, overflows = 0, unparks = 0;
};

class simulation {
 public:
  simulation(std::uint64_t seed, bool trace)
      : seed_(seed),
        trace_(trace),
        rng_(seed * 0x9e3779b97f4a7c15ULL + 1),
        workers_(1 + rng_.below(6) + (rng_.below(8) == 0 ? 5 : 0)),
        budget_(rng_.below(4) == 0 ? 1 + rng_.below(8) : 128),
        pool_size_(600 + rng_.below(1500)),
        tasks_(pool_size_),
        fakes_(pool_size_),
        platform_(workers_),
        core_(platform_, workers_, budget_, seed),
        vw_(workers_) {}

  sim_result run() {
    std::size_t const steps = 1500 + rng_.below(3000);
    for (step_ = 0; step_ < steps; ++step_) {
      random_step(/*draining=*/false);
      check();
    }
    // Drain: no new external work; wake every suspended task; run until
    // every worker sleeps with nothing pending.
    if (owned_.is_accepting()) owned_.close();
    std::size_t const limit = step_ + 2'000'000;
    while (!quiescent()) {
      if (step_ >= limit) fail("no quiescence: livelock or lost wake-up while draining");
      random_step(/*draining=*/true);
      check();
      ++step_;
    }
    final_check();
    sim_result r;
    r.steps = step_;
    r.tasks = next_unused_;
    r.unparks = platform_.unparks;
    for (auto const& t : tasks_)
      r.runs += t.runs;
    for (auto const& w : core_.workers) {
      r.steals += w->counters.stolen.get();
      r.parks += w->counters.parked.get();
      r.overflows += w->counters.overflows.get();
    }
    return r;
  }

 private:
  // ---- events

  void random_step(bool draining) {
    std::uint32_t r = rng_.below(100);
    if (!draining && r < 6) {
      external_spawn();
    } else if (r < 16 && !suspended_.empty()) {
      external_wake();
    } else if (r < 18) {
      spurious_wake();
    } else if (!draining && r < 19 && rng_.below(20) == 0 && owned_.is_accepting()) {
      trace("close");
      owned_.close();
    } else {
      worker_step(draining);
    }
    // While draining, suspended tasks are eventually woken.
    if (draining && !suspended_.empty() && rng_.below(4) == 0) external_wake();
  }

  /// `w`: the spawning worker, or nullptr for a spawn from another thread.
  task_header* new_task(worker* w) {
    if (next_unused_ == pool_size_) return nullptr;
    std::size_t i = next_unused_;
    // The owned lists and the gate, as the scheduler has them: a spawn from
    // another thread is listed at once (refused atomically after close); a
    // worker's spawn reads the gate and is listed when it first suspends.
    bool const refused = w != nullptr ? owned_.closed() : !owned_.insert(fakes_[i], workers_);
    if (refused) {
      ++refused_;
      return nullptr;  // never queued, never lost
    }
    ++next_unused_;
    tasks_[i].state = task_state::queued;
    tasks_[i].wakes = 1;
    return fakes_[i];
  }

  void external_spawn() {
    task_header* t = new_task(nullptr);
    if (t == nullptr) return;
    trace("external spawn " + std::to_string(fakes_.index(t)));
    core_.push_remote(t);
  }

  void external_wake() {
    std::size_t k = rng_.below(static_cast<std::uint32_t>(suspended_.size()));
    std::size_t i = suspended_[k];
    suspended_[k] = suspended_.back();
    suspended_.pop_back();
    tasks_[i].state = task_state::queued;
    ++tasks_[i].wakes;
    trace("external wake " + std::to_string(i));
    core_.push_remote(fakes_[i]);
  }

  void spurious_wake() {
    // A parked worker's futex returns without an unpark.
    std::size_t i = rng_.below(static_cast<std::uint32_t>(workers_));
    if (vw_[i].ph != phase::parked) return;
    trace("spurious wake of worker " + std::to_string(i));
    wake_parked(i);
  }

  void worker_step(bool draining) {
    // Any worker that can act: awake ones, and parked ones with an unpark.
    std::vector<std::size_t> able;
    for (std::size_t i = 0; i < workers_; ++i) {
      if (vw_[i].ph != phase::parked || platform_.notified[i]) able.push_back(i);
    }
    if (able.empty()) return;
    std::size_t i = able[rng_.below(static_cast<std::uint32_t>(able.size()))];
    worker* w = core_.workers[i].get();
    vworker& v = vw_[i];
    switch (v.ph) {
      case phase::parked:
        platform_.notified[i] = false;
        wake_parked(i);
        break;
      case phase::find: {
        task_header* t = v.polls < core_.budget() ? core_.next_task(w) : nullptr;
        if (t != nullptr) {
          core_.transition_from_searching(w);
          ++v.polls;
          run_task(w, t, draining);
          break;
        }
        bool idle_tick = v.polls == 0;
        core_.end_tick(w, v.polls, v.polls * (100 + rng_.below(200'000)));
        v.polls = 0;
        // The production loop parks only after a tick that found nothing.
        if (idle_tick && !w->has_local_tasks()) v.ph = phase::decide_park;
        break;
      }
      case phase::decide_park:
        if (core_.begin_park(w)) {
          trace("worker " + std::to_string(i) + " parks");
          v.ph = phase::parked;
        } else {
          v.ph = phase::find;
        }
        break;
    }
  }

  void wake_parked(std::size_t i) {
    worker* w = core_.workers[i].get();
    w->transitioning_to_park.store(false, std::memory_order_relaxed);
    if (core_.transition_from_parked(w)) {
      core_.end_park(w);
      vw_[i].ph = phase::find;
      trace("worker " + std::to_string(i) + " wakes");
    } else {
      w->transitioning_to_park.store(true, std::memory_order_seq_cst);  // sleeps again
    }
  }

  void run_task(worker* w, task_header* t, bool draining) {
    std::size_t i = fakes_.index(t);
    sim_task& st = tasks_[i];
    if (st.state != task_state::queued) {
      fail("worker " + std::to_string(w->index) + " took task " + std::to_string(i) +
           " that was not queued (run twice for one wake, or a stale queue slot)");
    }
    st.state = task_state::running;
    ++st.runs;
    trace("worker " + std::to_string(w->index) + " runs " + std::to_string(i));
    // Children: usually a few, sometimes a burst that overflows the ring.
    std::uint32_t children = rng_.below(10) < 6 ? 0 : rng_.below(4);
    if (!draining && rng_.below(200) == 0) children = 200 + rng_.below(200);
    for (std::uint32_t c = 0; c < children; ++c) {
      task_header* child = new_task(w);
      if (child == nullptr) break;
      core_.schedule_local(w, child, false);
    }
    // Wake another task from inside this one (a cross-worker wake).
    if (!suspended_.empty() && rng_.below(4) == 0) {
      std::size_t k = rng_.below(static_cast<std::uint32_t>(suspended_.size()));
      std::size_t j = suspended_[k];
      suspended_[k] = suspended_.back();
      suspended_.pop_back();
      tasks_[j].state = task_state::queued;
      ++tasks_[j].wakes;
      core_.schedule_local(w, fakes_[j], false);
    }
    std::uint32_t r = rng_.below(10);
    if (r < 4 || (draining && r < 8)) {
      st.state = task_state::done;
      if (t->listed) owned_.remove(t);
    } else if (r < 6 || draining) {
      st.state = task_state::queued;  // yield: back of the ring
      ++st.wakes;
      core_.schedule_local(w, t, true);
    } else {
      st.state = task_state::suspended;
      if (!t->listed) owned_.link(t, w->index);
      suspended_.push_back(i);
    }
  }

  // ---- invariants

  [[nodiscard]] std::size_t queued_in_queues() const {
    std::size_t n = core_.inject.len();
    for (auto const& w : core_.workers) {
      n += w->queue.len();
      n += w->lifo_slot != nullptr ? 1 : 0;
      n += w->batch_len - w->batch_head;
    }
    return n;
  }

  void check() {
    std::size_t queued = 0;
    for (std::size_t i = 0; i < next_unused_; ++i) {
      if (tasks_[i].state == task_state::queued) ++queued;
      if (tasks_[i].state == task_state::running) fail("task left running after its poll");
      if (tasks_[i].runs > tasks_[i].wakes) fail("task ran more often than it was woken");
      // Shutdown reaches a suspended task only through the owned lists.
      if (tasks_[i].state == task_state::suspended && !fakes_[i]->listed) {
        fail("task " + std::to_string(i) + " suspended but not in an owned list");
      }
    }
    std::size_t held = queued_in_queues();
    if (held != queued) {
      fail("queues hold " + std::to_string(held) + " tasks but " + std::to_string(queued) +
           " are queued (lost or duplicated on overflow, steal or batch)");
    }
    bool someone_awake = false;
    std::uint32_t searching = 0, claimed = 0, unparked = 0;
    for (std::size_t i = 0; i < workers_; ++i) {
      worker const& w = *core_.workers[i];
      bool parked = vw_[i].ph == phase::parked;
      if (parked && w.has_local_tasks()) {
        fail("worker " + std::to_string(i) + " parked with local tasks");
      }
      if (!parked || platform_.notified[i]) someone_awake = true;
      if (w.is_searching) ++searching;
      bool registered_parked = core_.idle.is_parked(i);
      if (parked && !registered_parked) ++claimed;  // claimed by a notifier, not yet awake
      if (!registered_parked) ++unparked;
      if (!parked && registered_parked) fail("worker " + std::to_string(i) + " awake but parked");
    }
    if (queued != 0 && !someone_awake) {
      fail("lost wake-up: " + std::to_string(queued) +
           " tasks queued while every worker sleeps without a pending unpark");
    }
    // No worker sleeps while stealable work waits that no searcher will
    // see: a push with nobody searching claims a parked worker, the last
    // searcher to find work or to park hands the search on.
    std::size_t stealable = core_.inject.len();
    for (auto const& w : core_.workers)
      stealable += w->queue.len();
    if (stealable != 0 && unparked < workers_ && core_.idle.num_searching() == 0) {
      fail("idle worker: " + std::to_string(stealable) +
           " stealable tasks wait while a worker sleeps and nobody searches");
    }
    if (core_.idle.num_unparked() != unparked) fail("idle state: unparked count is wrong");
    // A claimed worker is counted as searching before it wakes.
    std::uint32_t in_idle = core_.idle.num_searching();
    if (in_idle < searching || in_idle > searching + claimed) {
      fail("idle state: searching count " + std::to_string(in_idle) + " vs " +
           std::to_string(searching) + " searching workers and " + std::to_string(claimed) +
           " claimed");
    }
  }

  [[nodiscard]] bool quiescent() const {
    if (!suspended_.empty()) return false;
    for (std::size_t i = 0; i < workers_; ++i) {
      if (vw_[i].ph != phase::parked || platform_.notified[i]) return false;
    }
    return true;
  }

  void final_check() {
    for (std::size_t i = 0; i < next_unused_; ++i) {
      sim_task const& t = tasks_[i];
      if (t.state != task_state::done) fail("task " + std::to_string(i) + " never finished");
      if (t.runs != t.wakes) {
        fail("task " + std::to_string(i) + " ran " + std::to_string(t.runs) + " times for " +
             std::to_string(t.wakes) + " wakes");
      }
    }
    if (queued_in_queues() != 0) fail("queues not empty at the end");
    if (owned_.listed() != 0) fail("the owned lists still hold tasks");
  }

  void trace(std::string const& what) {
    if (trace_)
      std::printf("[seed %llu step %zu] %s\n", static_cast<unsigned long long>(seed_), step_,
                  what.c_str());
  }

  [[noreturn]] void fail(std::string const& what) const {
    std::ostringstream os;
    os << "seed " << seed_ << " (" << workers_ << " workers, budget " << budget_ << ") step "
       << step_ << ": " << what << "\n  replay: SPINDLE_SIM_SEED=" << seed_ << " test_sim";
    throw sim_failure(os.str());
  }

  std::uint64_t seed_;
  bool trace_;
  spindle::detail::xorshift64 rng_;
  std::size_t workers_;
  std::uint32_t budget_;
  std::size_t pool_size_;
  std::vector<sim_task> tasks_;
  spindle_test::fake_tasks fakes_;
  sim_platform platform_;
  scheduler_core core_;
  std::vector<vworker> vw_;
  owned_tasks owned_{workers_ + 1};
  std::vector<std::size_t> suspended_;
  std::size_t next_unused_ = 0;
  std::size_t step_ = 0;
  std::uint64_t refused_ = 0;
};

TEST(Simulation, ThousandsOfSeedsKeepEveryInvariant) {
  if (char const* one = std::getenv("SPINDLE_SIM_SEED"); one != nullptr && *one != '\0') {
    std::uint64_t seed = std::strtoull(one, nullptr, 10);
    simulation sim(seed, /*trace=*/true);
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
      sim_result r = sim.run();
      total.steps += r.steps;
      total.tasks += r.tasks;
      total.runs += r.runs;
      total.steals += r.steals;
      total.parks += r.parks;
      total.overflows += r.overflows;
      total.unparks += r.unparks;
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
  EXPECT_GT(total.overflows, 0u) << "the seeds never overflowed a ring";
  EXPECT_GT(total.steals, 0u) << "the seeds never stole";
}

TEST(Simulation, ASeedReplaysExactly) {
  // Two runs of the same seed take the same decisions.
  for (std::uint64_t seed : {7u, 1234u, 99991u}) {
    sim_result a = simulation(seed, false).run();
    sim_result b = simulation(seed, false).run();
    EXPECT_EQ(a.steps, b.steps);
    EXPECT_EQ(a.runs, b.runs);
    EXPECT_EQ(a.steals, b.steals);
    EXPECT_EQ(a.parks, b.parks);
    EXPECT_EQ(a.unparks, b.unparks);
  }
}

}  // namespace
