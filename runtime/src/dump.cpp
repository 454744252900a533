// runtime::dump(): the snapshot of live tasks (spindle/dump.hpp), and its
// printing. How it is taken and what it costs the workers: dump.hpp.
#include <algorithm>
#include <array>
#include <cstdio>
#include <new>
#include <ostream>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "clock.hpp"
#include "scheduler.hpp"
#include "spawn_sites.hpp"
#include "spindle/dump.hpp"

namespace spindle {

char const* to_string(task_run_state s) noexcept {
  switch (s) {
    case task_run_state::queued:
      return "queued";
    case task_run_state::running:
      return "running";
    case task_run_state::suspended:
      return "suspended";
    case task_run_state::blocked_in_driver:
      return "blocked_in_driver";
  }
  return "queued";
}

std::size_t runtime_dump::count(task_run_state state) const noexcept {
  return static_cast<std::size_t>(std::count_if(
      tasks.begin(), tasks.end(), [state](task_snapshot const& t) { return t.state == state; }));
}

namespace {

void append_json_string(std::string& out, char const* s) {
  out += '"';
  for (; *s != '\0'; ++s) {
    auto const c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

std::uint64_t micros(std::chrono::nanoseconds ns) noexcept {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(ns.count(), 0)) / 1000;
}

}  // namespace

std::string runtime_dump::to_json() const {
  std::string out = "{\"workers\":" + std::to_string(workers) +
                    ",\"took_us\":" + std::to_string(micros(took)) + ",\"unanswered_workers\":[";
  for (std::size_t i = 0; i < unanswered_workers.size(); ++i) {
    if (i != 0) out += ',';
    out += std::to_string(unanswered_workers[i]);
  }
  out += "],\"tasks\":[";
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    task_snapshot const& t = tasks[i];
    if (i != 0) out += ',';
    out += "{\"id\":" + std::to_string(t.id) + ",\"state\":\"" + to_string(t.state) +
           "\",\"waits_on\":\"" + to_string(t.waits_on) + "\",\"file\":";
    append_json_string(out, t.spawned_at.file);
    out += ",\"line\":" + std::to_string(t.spawned_at.line) +
           ",\"age_us\":" + std::to_string(micros(t.age)) + '}';
  }
  out += "]}";
  return out;
}

std::ostream& operator<<(std::ostream& os, runtime_dump const& d) {
  os << "spindle runtime dump: " << d.tasks.size() << " live tasks ("
     << d.count(task_run_state::queued) << " queued, " << d.count(task_run_state::running)
     << " running, " << d.count(task_run_state::suspended) << " suspended, "
     << d.count(task_run_state::blocked_in_driver) << " blocked in the driver), " << d.workers
     << " workers, taken in " << micros(d.took) << " us";
  if (!d.unanswered_workers.empty()) {
    os << "; workers that did not answer (their queued tasks are missing):";
    for (std::size_t w : d.unanswered_workers)
      os << ' ' << w;
  }
  os << '\n';
  for (task_snapshot const& t : d.tasks) {
    char line[128];
    std::snprintf(line, sizeof line, "  task %-8llu %-17s %-8s age %10.3f ms  spawned at ",
                  static_cast<unsigned long long>(t.id), to_string(t.state), to_string(t.waits_on),
                  static_cast<double>(t.age.count()) / 1e6);
    os << line << (*t.spawned_at.file != '\0' ? t.spawned_at.file : "?") << ':' << t.spawned_at.line
       << '\n';
  }
  return os;
}

namespace detail {

namespace {

namespace sb = state_bits;

worker::dump_entry entry_of(task_header* t) noexcept {
  return worker::dump_entry{t, t->state.load(std::memory_order_acquire), t->spawn_site,
                            t->waits_on.load(std::memory_order_relaxed)};
}

// A queue entry's task, unless the entry is stale (CLAIMED: the task was
// taken out of the queue's hands and is reported where it is now).
bool is_live_entry(worker::dump_entry const& e) noexcept {
  return (e.state & (sb::claimed | sb::complete)) == 0;
}

}  // namespace

void scheduler::answer_dump(worker* w) noexcept {
  std::uint64_t const gen = dump_gen_.load(std::memory_order_acquire);
  w->dump_seen = gen;
  std::vector<worker::dump_entry>& out = w->dump_found;
  out.clear();
  try {
    out.reserve(1 + worker::batch_capacity + run_queue::capacity);
  } catch (std::bad_alloc const&) {
    w->dump_ack.store(gen, std::memory_order_release);  // answers with nothing
    return;
  }
  auto note = [&out](task_header* t) noexcept {
    worker::dump_entry e = entry_of(t);
    if (is_live_entry(e)) out.push_back(e);  // within the reserve
  };
  // The LIFO slot, too, may be emptied by another worker (a stalled
  // worker's rescue, scheduler_core::rescue_lifo), which may then run and
  // free the task: take it out while we read it. Only the owner fills the
  // slot, so it is still empty when the task goes back.
  if (w->lifo.peek() != nullptr) {
    if (task_header* t = w->lifo.take()) {
      note(t);
      w->lifo.put(t);
    }
  }
  for (std::uint32_t i = w->batch_head; i != w->batch_len; ++i)
    note(w->batch[i]);
  // The ring is stealable: only the owner's pops keep an entry's task in
  // our hands while we read it. Pop everything, read, push back in order.
  std::array<task_header*, run_queue::capacity> popped;
  std::size_t n = 0;
  while (n < popped.size()) {
    task_header* t = w->queue.pop();
    if (t == nullptr) break;
    popped[n++] = t;
  }
  for (std::size_t i = 0; i < n; ++i)
    note(popped[i]);
  for (std::size_t i = 0; i < n; ++i) {
    if (w->queue.push_back(popped[i], core_.inject)) w->counters.overflows.add();
  }
  w->dump_ack.store(gen, std::memory_order_release);
}

runtime_dump scheduler::dump(std::chrono::milliseconds timeout) {
  std::lock_guard lock(dump_mutex_);
  std::uint64_t const start = steady_now_ns();
  std::size_t const n = core_.workers.size();
  std::vector<worker::dump_entry> found;
  auto note_queued = [&found](task_header* t) {
    worker::dump_entry e = entry_of(t);
    if (is_live_entry(e)) found.push_back(e);
  };

  // Ask the workers first, so that they answer while we walk the lists.
  std::uint64_t const gen = dump_gen_.fetch_add(1, std::memory_order_acq_rel) + 1;
  thread_context& ctx = this_thread_context();
  worker* const self = ctx.sched == this ? ctx.self : nullptr;
  for (std::size_t i = 0; i < n; ++i) {
    if (core_.workers[i].get() != self) unpark(i);
  }
  if (self != nullptr) answer_dump(self);  // a task of ours called us
  if (ctx.sched == this && ctx.current != nullptr) found.push_back(entry_of(ctx.current));

  owned_.for_each([&found](task_header* t) {
    worker::dump_entry e = entry_of(t);
    if ((e.state & sb::complete) == 0) found.push_back(e);
  });
  core_.inject.for_each(note_queued);
  // The inboxes (placement::p2c): a spawn from outside is listed only once
  // it suspends. Each is walked under its consumer flag, which a consumer
  // holds for one take.
  for (auto& w : core_.workers) {
    inbox& in = w->remote;
    while (!in.try_lock_consumer())
      std::this_thread::yield();
    // Released on every way out, note_queued's throw (bad_alloc) included.
    struct consumer_guard {
      inbox& held;
      ~consumer_guard() { held.unlock_consumer(); }
    } const guard{in};
    in.for_each(note_queued);
  }

  std::vector<bool> answered(n, false);
  std::size_t pending = n;
  std::uint64_t const deadline =
      start + static_cast<std::uint64_t>(std::max<std::int64_t>(
                  std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count(), 0));
  for (;;) {
    for (std::size_t i = 0; i < n; ++i) {
      if (answered[i]) continue;
      worker& w = *core_.workers[i];
      if (w.dump_ack.load(std::memory_order_acquire) != gen) continue;
      found.insert(found.end(), w.dump_found.begin(), w.dump_found.end());
      answered[i] = true;
      --pending;
    }
    if (pending == 0 || steady_now_ns() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  runtime_dump d;
  d.workers = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (answered[i]) continue;
    d.unanswered_workers.push_back(i);
    // What it is polling (worker::running): read, not the task, which may
    // end meanwhile; kept only if the same task is still published after.
    worker::running_task const& r = core_.workers[i]->running;
    task_header const* t = r.task.load(std::memory_order_acquire);
    if (t == nullptr) continue;
    worker::dump_entry e{const_cast<task_header*>(t), r.state.load(std::memory_order_relaxed),
                         r.spawn_site.load(std::memory_order_relaxed), wait_kind::none};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (r.task.load(std::memory_order_relaxed) == t) found.push_back(e);
  }
  // One entry per task: a task may be both listed and queued (woken after a
  // suspension), or seen twice while it moved (the first report is kept).
  std::unordered_set<task_header const*> seen;
  seen.reserve(found.size());
  std::uint32_t const now = spawn_time_of(steady_now_ns());
  d.tasks.reserve(found.size());
  // Each site's location once (the table's lookup takes its lock).
  std::unordered_map<std::uint32_t, spawn_location> sites;
  for (worker::dump_entry const& e : found) {
    if (!seen.insert(e.task).second) continue;
    task_snapshot t;
    t.id = task_id(e.task);
    t.waits_on = e.waits_on;
    if ((e.state & sb::running) != 0) {
      t.state = task_run_state::running;
    } else if ((e.state & sb::scheduled) != 0) {
      t.state = task_run_state::queued;
    } else {
      t.state = e.waits_on == wait_kind::io ? task_run_state::blocked_in_driver
                                            : task_run_state::suspended;
    }
    auto site = sites.find(e.spawn_site);
    if (site == sites.end())
      site = sites.emplace(e.spawn_site, spawn_site_location(e.spawn_site)).first;
    t.spawned_at = site->second;
    // Modulo 2^32 units: right for ages below about 52 days.
    std::uint32_t const age = now - spawn_time_in(e.state);
    t.age = std::chrono::nanoseconds(static_cast<std::uint64_t>(age < 0x80000000U ? age : 0)
                                     << spawn_time_shift);
    d.tasks.push_back(t);
  }
  // Oldest first: the ones a hang has kept waiting longest.
  std::sort(d.tasks.begin(), d.tasks.end(), [](task_snapshot const& a, task_snapshot const& b) {
    return a.age != b.age ? a.age > b.age : a.id < b.id;
  });
  d.took = std::chrono::nanoseconds(steady_now_ns() - start);
  return d;
}

}  // namespace detail

}  // namespace spindle
