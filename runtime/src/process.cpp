// spindle processes: the pid table, the mailbox word's protocol, shutdown
// and stats (see spindle/process.hpp for the shape).
//
// The pid table: up to 2^16 chunks of 4096 slots of 88 bytes, allocated on
// demand and kept for the life of the program (so a slot's address never
// dangles and a pid may outlive its runtime). A slot is a 64-bit word and
// the process itself (process_base, constructed in the slot at spawn: a
// process allocates no block of its own). The word is
//
//   generation (32) | references (28) | has_error (1) | has_block (1) | state (2)
//
// with state free / alive / zombie. A lookup (send, state_of) takes a
// reference with one CAS when the generation matches and the process is
// alive; the process is released (its leftover messages freed, the join
// interest on its task dropped, its extras deleted) by whoever leaves the
// slot zombie with no reference and the block still there (the process's
// own end, or the last sender), who then puts the slot on a free list. The
// zombie keeps the body's outcome (an exception_ptr in the block's bytes,
// has_error) for late monitors until the slot is reused with the next
// generation. Free lists are sharded (16 mutex-guarded vectors); only
// spawns and frees touch them, never lookups.
//
// Stats come from counters (process_registry's shards), never from a scan:
// alive, finished, messages sent and received, parked idle and blocked.
#include "spindle/process.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "process_registry.hpp"
#include "scheduler.hpp"
#include "spindle/detail/cpu_relax.hpp"

namespace spindle::detail {

namespace {

constexpr unsigned chunk_bits = 12;
constexpr std::uint32_t chunk_size = 1u << chunk_bits;
constexpr std::size_t max_chunks = 1u << 16;

constexpr std::uint64_t st_mask = 3;
constexpr std::uint64_t st_free = 0;
constexpr std::uint64_t st_alive = 1;
constexpr std::uint64_t st_zombie = 2;
constexpr std::uint64_t has_block = 4;
constexpr std::uint64_t has_error = 8;
constexpr std::uint64_t ref_one = 16;
constexpr std::uint64_t refs_mask = 0xFFFF'FFF0ULL;

struct slot {
  std::atomic<std::uint64_t> word{0};
  alignas(process_base) unsigned char storage[sizeof(process_base)];
  [[nodiscard]] process_base* block() noexcept {
    return std::launder(reinterpret_cast<process_base*>(storage));
  }
};
static_assert(sizeof(slot) == 88, "a pid table slot is the process: keep it at 88 bytes");
static_assert(sizeof(std::exception_ptr) <= sizeof(std::uint64_t));

std::exception_ptr* error_of(process_base* b) noexcept {
  return std::launder(reinterpret_cast<std::exception_ptr*>(b->error_bytes));
}

std::array<std::atomic<slot*>, max_chunks> chunks{};
std::mutex grow_mutex;
std::atomic<std::uint32_t> next_index{0};

struct alignas(64) free_shard {
  std::mutex mutex;
  std::vector<std::uint32_t> indices;
  std::atomic<std::size_t> size{0};
};
constexpr std::size_t shard_count = 16;
std::array<free_shard, shard_count> free_shards;

std::size_t my_shard() noexcept {
  thread_local std::size_t const s = std::hash<std::thread::id>{}(std::this_thread::get_id());
  return s % shard_count;
}

constexpr std::uint32_t index_of(std::uint64_t v) noexcept {
  return static_cast<std::uint32_t>(v);
}
constexpr std::uint32_t gen_of(std::uint64_t v) noexcept {
  return static_cast<std::uint32_t>(v >> 32);
}

slot* find(std::uint32_t index) noexcept {
  slot* c = chunks[index >> chunk_bits].load(std::memory_order_acquire);
  return c == nullptr ? nullptr : &c[index & (chunk_size - 1)];
}

slot* grow(std::uint32_t index) {
  std::size_t const ci = index >> chunk_bits;
  if (ci >= max_chunks) {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "spindle: too many processes");
  }
  std::lock_guard lock(grow_mutex);
  slot* c = chunks[ci].load(std::memory_order_relaxed);
  if (c == nullptr) {
    c = new slot[chunk_size];
    chunks[ci].store(c, std::memory_order_release);
  }
  return &c[index & (chunk_size - 1)];
}

bool pop_free(std::uint32_t& index) noexcept {
  std::size_t const first = my_shard();
  for (std::size_t i = 0; i < shard_count; ++i) {
    free_shard& sh = free_shards[(first + i) % shard_count];
    if (sh.size.load(std::memory_order_relaxed) == 0) continue;
    std::lock_guard lock(sh.mutex);
    if (sh.indices.empty()) continue;
    index = sh.indices.back();
    sh.indices.pop_back();
    sh.size.store(sh.indices.size(), std::memory_order_relaxed);
    return true;
  }
  return false;
}

void push_free(std::uint32_t index) noexcept {
  free_shard& sh = free_shards[my_shard()];
  std::lock_guard lock(sh.mutex);
  try {
    sh.indices.push_back(index);
  } catch (...) {
    return;  // out of memory: the slot is not reused
  }
  sh.size.store(sh.indices.size(), std::memory_order_relaxed);
}

/// Takes a reference on `s` when `accept(word)`; returns the word seen.
template <class Pred>
bool take_ref(slot* s, std::uint64_t& w, Pred accept) noexcept {
  w = s->word.load(std::memory_order_acquire);
  for (;;) {
    if (!accept(w)) return false;
    if (s->word.compare_exchange_weak(w, w + ref_one, std::memory_order_acquire,
                                      std::memory_order_acquire)) {
      return true;
    }
  }
}

/// The last reference of a zombie went: frees what the process still holds.
void free_process(slot* s, std::uint32_t index) noexcept {
  process_base* const b = s->block();
  b->drain();
  task_header* const t = b->task;
  process_extras* const e = b->extras.load(std::memory_order_acquire);
  if (t != nullptr) join_detach(t);  // may free the body's header and frame
  delete e;                          // the body callable, the room, the monitors' event
  push_free(index);
}

void release_slot(slot* s, std::uint32_t index) noexcept {
  std::uint64_t w = s->word.load(std::memory_order_relaxed);
  bool free_it = false;
  std::uint64_t nw = 0;
  do {
    nw = w - ref_one;
    free_it = (nw & refs_mask) == 0 && (nw & st_mask) == st_zombie && (nw & has_block) != 0;
    if (free_it) nw &= ~has_block;
  } while (
      !s->word.compare_exchange_weak(w, nw, std::memory_order_acq_rel, std::memory_order_relaxed));
  if (free_it) free_process(s, index);
}

/// Shutdown: a pending or later receive throws task_cancelled.
void cancel_process(process_base* b) noexcept {
  if (b->cancelled.exchange(true, std::memory_order_acq_rel)) return;
  // Counted like a message: wakes a parked receiver, fails a park's CAS.
  if (b->word.fetch_add(2, std::memory_order_acq_rel) == 0) wake(b->task);
}

/// Calls fn(block) for every live process, holding a reference.
template <class Fn>
void for_each_live(Fn fn) noexcept {
  std::uint32_t const n = next_index.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < n; ++i) {
    slot* s = find(i);
    if (s == nullptr) continue;
    std::uint64_t w = 0;
    if (!take_ref(s, w, [](std::uint64_t x) { return (x & st_mask) == st_alive; })) continue;
    fn(s->block());
    release_slot(s, i);
  }
}

}  // namespace

process_registry::shard& process_registry::mine() noexcept {
  return shards[my_shard() % shard_count];
}

// ---------------------------------------------------------------------------
// The mailbox word

void spin_pause() noexcept {
  cpu_relax();
}

void yield_thread() noexcept {
  ::sched_yield();
}

process_extras::~process_extras() {
  delete monitors.load(std::memory_order_relaxed);
}

namespace {

/// The counters of the process's runtime, the calling thread's shard
/// (nullptr for a block without a runtime: the simulation in test_process).
process_registry::shard* counters_of(process_base const* b) noexcept {
  scheduler* s = b->task != nullptr ? scheduler_of(b->task) : nullptr;
  return s != nullptr ? &s->processes().mine() : nullptr;
}

void count(process_base const* b, std::atomic<std::int64_t> process_registry::shard::*field,
           std::int64_t by) noexcept {
  if (process_registry::shard* sh = counters_of(b))
    (sh->*field).fetch_add(by, std::memory_order_relaxed);
}

/// Parked in receive: 1 idle, 2 blocked (a step process waiting for its
/// commands' results).
std::atomic<std::int64_t> process_registry::shard::*parked_counter(std::uint8_t kind) noexcept {
  return kind == 2 ? &process_registry::shard::blocked : &process_registry::shard::idle;
}

/// The park ended without an unpark (the frame is destroyed): uncount it.
void park_withdrawn(process_base* b) noexcept {
  std::uint8_t const kind = b->parked.exchange(0, std::memory_order_relaxed);
  if (kind != 0) count(b, parked_counter(kind), -1);
}

}  // namespace

void process_base::took() noexcept {
  std::uint32_t t = taken.load(std::memory_order_relaxed) + 1;
  ++received;
  if (t >= (1u << 20)) {
    // A receiver that never parks: settle the count so the word cannot
    // overflow (and count what it took in the stats, as a park does).
    word.fetch_sub(t << 1, std::memory_order_acq_rel);
    count(this, &process_registry::shard::received, t);
    t = 0;
  }
  taken.store(t, std::memory_order_relaxed);
}

bool process_base::try_park() noexcept {
  std::uint32_t const expected_taken = taken.load(std::memory_order_relaxed);
  std::uint32_t expected = (expected_taken << 1) | 1u;
  std::uint8_t const kind = awaiting_yields.load(std::memory_order_relaxed) ? 2 : 1;
  parked.store(kind, std::memory_order_relaxed);
  if (word.compare_exchange_strong(expected, 0, std::memory_order_acq_rel,
                                   std::memory_order_acquire)) {
    taken.store(0, std::memory_order_relaxed);
    // Still this task's poll: a wake meanwhile only marks it NOTIFIED, so
    // the unpark's decrement cannot come before this. The messages taken
    // since the last park go into the stats here (one add per park, not
    // one per message).
    if (process_registry::shard* sh = counters_of(this)) {
      (sh->*parked_counter(kind)).fetch_add(1, std::memory_order_relaxed);
      if (expected_taken != 0) sh->received.fetch_add(expected_taken, std::memory_order_relaxed);
    }
    return true;
  }
  parked.store(0, std::memory_order_relaxed);
  return false;
}

void process_base::unpark(bool bit_already_set) noexcept {
  std::uint8_t const kind = parked.exchange(0, std::memory_order_relaxed);
  if (kind != 0) count(this, parked_counter(kind), -1);
  if (!bit_already_set) word.fetch_add(1, std::memory_order_acq_rel);
}

void process_base::count_and_wake() noexcept {
  // Not counted in the stats here: a sender on another thread may still be
  // here while the process's runtime is being destroyed. The receiver
  // counts what it takes, its end what was left (process_task_done).
  if (word.fetch_add(2, std::memory_order_acq_rel) == 0) wake(task);
}

void process_base::drain() noexcept {
  // The head is the dummy (its value gone); every node after it holds one.
  mailbox_link* h = head;
  bool with_value = false;
  for (;;) {
    mailbox_link* const next = h->next.load(std::memory_order_acquire);
    if (h != &stub) {
      auto* m = static_cast<mailbox_message*>(h);
      m->release(m, with_value);
    }
    if (next == nullptr) break;
    h = next;
    with_value = true;
  }
  head = &stub;
  stub.next.store(nullptr, std::memory_order_relaxed);
  tail.store(&stub, std::memory_order_relaxed);
}

bool receive_cancel_hook(cancel_hook* hook) noexcept {
  auto* b = static_cast<process_base*>(hook);
  // Won from 0: nobody will wake it. Otherwise a sender's wake is coming.
  if (b->word.fetch_add(1, std::memory_order_acq_rel) != 0) return false;
  park_withdrawn(b);
  return true;
}

bool timed_receive_cancel_hook(cancel_hook* awaiter) noexcept {
  auto* a = static_cast<timed_receive_base*>(awaiter);
  if (a->armed) {
    if (!timer_disarm(a->entry)) return false;  // fired: it set the bit and woke (or lost)
    a->armed = false;
  }
  if (a->bit_set) return false;  // lost to a sender after the deadline passed
  if (a->block->word.fetch_add(1, std::memory_order_acq_rel) != 0) return false;
  park_withdrawn(a->block);
  return true;
}

bool timed_receive_base::suspend(task_header* self,
                                 std::chrono::steady_clock::time_point deadline) {
  set_cancel_hook(self, this, &timed_receive_cancel_hook);
  if (!block->try_park()) {
    clear_cancel_hook(self);
    return false;
  }
  parked = true;
  entry.task = self;
  entry.claim = &block->word;  // the timer wins only from 0, as a sender
  if (timer_arm(entry, deadline)) {
    armed = true;
    return true;
  }
  // Already due: take the park back, unless a sender won meanwhile.
  bit_set = true;
  if (block->word.fetch_add(1, std::memory_order_acq_rel) == 0) {
    clear_cancel_hook(self);
    return false;
  }
  return true;
}

void timed_receive_base::resume() noexcept {
  if (!parked) return;
  parked = false;
  bool set = bit_set;
  if (armed) {
    armed = false;
    if (!timer_disarm(entry)) set = true;  // fired: it added the bit under its lock
  }
  block->unpark(set);
}

// ---------------------------------------------------------------------------
// The pid table

void* pid_reserve(std::uint64_t& value) {
  std::uint32_t index = 0;
  slot* s = nullptr;
  std::uint32_t gen = 1;
  if (pop_free(index)) {
    s = find(index);
    std::uint64_t w = s->word.load(std::memory_order_acquire);
    for (;;) {
      if ((w & refs_mask) != 0) {  // a late monitor reading the old outcome
        cpu_relax();
        w = s->word.load(std::memory_order_acquire);
        continue;
      }
      gen = gen_of(w) + 1;
      if (gen == 0) gen = 1;
      if (s->word.compare_exchange_weak(w, static_cast<std::uint64_t>(gen) << 32 | st_free,
                                        std::memory_order_acquire, std::memory_order_acquire)) {
        break;
      }
    }
    // The old process's outcome goes with its generation.
    if ((w & has_error) != 0) std::destroy_at(error_of(s->block()));
  } else {
    index = next_index.fetch_add(1, std::memory_order_acq_rel);
    s = find(index);
    // Throws past 2^28 slots or without memory: the index is then lost.
    if (s == nullptr) s = grow(index);
    s->word.store(static_cast<std::uint64_t>(gen) << 32 | st_free, std::memory_order_relaxed);
  }
  value = static_cast<std::uint64_t>(gen) << 32 | index;
  return s->storage;
}

void pid_unreserve(std::uint64_t value) noexcept {
  push_free(index_of(value));
}

void pid_publish(std::uint64_t value, process_base* block, scheduler* sched) noexcept {
  slot* s = find(index_of(value));
  process_registry& reg = sched->processes();
  reg.mine().alive.fetch_add(1, std::memory_order_relaxed);
  // Two references: the process's own (dropped at its end) and the caller's.
  s->word.store(
      static_cast<std::uint64_t>(gen_of(value)) << 32 | 2 * ref_one | has_block | st_alive,
      std::memory_order_seq_cst);
  if (reg.closing.load(std::memory_order_seq_cst)) cancel_process(block);
}

std::uint64_t pid_value_of(process_base const* block) noexcept {
  slot* s = find(block->index);
  return static_cast<std::uint64_t>(gen_of(s->word.load(std::memory_order_relaxed))) << 32 |
         block->index;
}

process_base* pid_acquire(std::uint64_t value) noexcept {
  std::uint32_t const gen = gen_of(value);
  if (gen == 0) return nullptr;
  slot* s = find(index_of(value));
  if (s == nullptr) return nullptr;
  std::uint64_t w = 0;
  if (!take_ref(s, w,
                [gen](std::uint64_t x) { return gen_of(x) == gen && (x & st_mask) == st_alive; })) {
    return nullptr;
  }
  return s->block();
}

void pid_release(std::uint64_t value) noexcept {
  release_slot(find(index_of(value)), index_of(value));
}

int pid_observe(std::uint64_t value, process_base*& block) noexcept {
  std::uint32_t const gen = gen_of(value);
  if (gen == 0) return 0;
  slot* s = find(index_of(value));
  if (s == nullptr) return 0;
  std::uint64_t w = 0;
  if (!take_ref(s, w,
                [gen](std::uint64_t x) { return gen_of(x) == gen && (x & st_mask) != st_free; })) {
    return 0;
  }
  if ((w & st_mask) == st_alive) {
    block = s->block();
    return 1;
  }
  return 2;
}

std::exception_ptr pid_outcome(std::uint64_t value) noexcept {
  slot* s = find(index_of(value));
  if ((s->word.load(std::memory_order_acquire) & has_error) == 0) return nullptr;
  return *error_of(s->block());
}

void process_task_done(join_waiter* self) noexcept {
  auto* block = static_cast<process_base*>(self);
  task_header* const t = block->task;
  std::exception_ptr error;
  if (t->cancelled_before_finish) {
    error = std::make_exception_ptr(task_cancelled{});
  } else {
    // Taken out of the promise, so that dropping the join interest later
    // does not report it as an exception nobody observed.
    try {
      static_cast<promise<void>*>(t->root_promise())->take_result();
    } catch (...) {
      error = std::current_exception();
    }
  }
  std::uint64_t const value = pid_value_of(block);
  slot* s = find(index_of(value));
  process_registry& reg = scheduler_of(t)->processes();
  process_registry::shard& mine = reg.mine();
  // A park the frame's destruction ended (shutdown) is no longer counted.
  park_withdrawn(block);
  // Messages counted into the mailbox and never taken (the shutdown's
  // cancel is counted like one, not a message).
  std::uint32_t const counted = block->word.load(std::memory_order_acquire) >> 1;
  std::uint32_t const pending = counted - block->taken.load(std::memory_order_relaxed);
  bool const cancel_counted = block->cancelled.load(std::memory_order_relaxed) && pending > 0;
  mine.unreceived.fetch_add(pending - (cancel_counted ? 1 : 0), std::memory_order_relaxed);
  // Taken since the last park (a park counts what came before it).
  mine.received.fetch_add(block->taken.load(std::memory_order_relaxed), std::memory_order_relaxed);
  std::uint64_t extra = 0;
  if (error) {
    // `received` is dead from here: its bytes keep the outcome.
    std::construct_at(error_of(block), std::move(error));
    extra = has_error;
  }
  std::uint64_t w = s->word.load(std::memory_order_relaxed);
  while (!s->word.compare_exchange_weak(w, (w & ~st_mask) | st_zombie | extra,
                                        std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
  process_extras* const e = block->extras.load(std::memory_order_acquire);
  if (e != nullptr && e->room)
    e->room->release(std::size_t{1} << 30);  // send_async waiters see done
  block->finished.store(true, std::memory_order_seq_cst);
  process_extras* const m = block->extras.load(std::memory_order_seq_cst);
  if (m != nullptr) {
    if (event* ev = m->monitors.load(std::memory_order_seq_cst)) ev->set();
  }
  mine.finished.fetch_add(1, std::memory_order_relaxed);
  mine.alive.fetch_sub(1, std::memory_order_release);
  release_slot(s, index_of(value));  // the process's own reference
}

process_state pid_state(std::uint64_t value) noexcept {
  process_base* b = pid_acquire(value);
  if (b == nullptr) return process_state::complete;
  std::uint64_t const st = b->task->state.load(std::memory_order_acquire);
  process_state out = process_state::blocked;
  if ((st & state_bits::complete) != 0) {
    out = process_state::complete;
  } else if ((st & state_bits::running) != 0) {
    out = process_state::running;
  } else if ((st & state_bits::scheduled) != 0) {
    out = process_state::ready;
  } else if (b->parked.load(std::memory_order_relaxed) == 1) {
    out = process_state::idle;
  }
  pid_release(value);
  return out;
}

task<void> monitor_value(std::uint64_t value) {
  process_base* b = nullptr;
  int const seen = pid_observe(value, b);
  if (seen == 0) co_return;
  struct release_guard {
    std::uint64_t v;
    ~release_guard() { pid_release(v); }
  } guard{value};
  if (seen == 1) {
    process_extras* x = b->extras.load(std::memory_order_acquire);
    if (x == nullptr) {
      auto fresh = std::make_unique<process_extras>();
      if (b->extras.compare_exchange_strong(x, fresh.get(), std::memory_order_seq_cst)) {
        x = fresh.release();
      }
    }
    event* e = x->monitors.load(std::memory_order_acquire);
    if (e == nullptr) {
      auto fresh = std::make_unique<event>();
      if (x->monitors.compare_exchange_strong(e, fresh.get(), std::memory_order_seq_cst)) {
        e = fresh.release();
      }
    }
    // finish sets `finished` then reads `monitors`: it saw our event, or we
    // see `finished` here.
    if (!b->finished.load(std::memory_order_seq_cst)) co_await e->wait();
  }
  if (std::exception_ptr e = pid_outcome(value)) std::rethrow_exception(e);
}

// ---------------------------------------------------------------------------
// Shutdown and stats

void shutdown_processes(scheduler& sched) noexcept {
  process_registry& reg = sched.processes();
  reg.closing.store(true, std::memory_order_seq_cst);
  if (reg.alive() == 0) return;
  for_each_live([&](process_base* b) {
    if (scheduler_of(b->task) == &sched) cancel_process(b);
  });
  auto const deadline = std::chrono::steady_clock::now() + sched.config().process_shutdown_timeout;
  while (reg.alive() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void collect_process_stats(scheduler const& sched, runtime_stats& out) noexcept {
  // Counters only (each thread's shard, summed): no scan of the pid table.
  process_registry const& reg = sched.processes();
  std::int64_t alive = 0;
  std::int64_t idle = 0;
  std::int64_t blocked = 0;
  std::int64_t sent = 0;
  std::int64_t received = 0;
  for (auto const& s : reg.shards) {
    out.processes_completed += s.finished.load(std::memory_order_relaxed);
    alive += s.alive.load(std::memory_order_relaxed);
    idle += s.idle.load(std::memory_order_relaxed);
    blocked += s.blocked.load(std::memory_order_relaxed);
    received += s.received.load(std::memory_order_relaxed);
    sent += s.unreceived.load(std::memory_order_relaxed);
  }
  auto clamp = [](std::int64_t v) { return static_cast<std::uint64_t>(v < 0 ? 0 : v); };
  // Sent: taken, or left in a mailbox whose process ended (a message still
  // waiting in a live mailbox is counted once it is taken).
  out.messages_sent += clamp(sent) + clamp(received);
  out.messages_received += clamp(received);
  // Shards are read one after another while processes move: keep the
  // parts within the whole.
  std::uint64_t const all = clamp(alive);
  std::uint64_t const idle_n = std::min(clamp(idle), all);
  std::uint64_t const blocked_n = std::min(clamp(blocked), all - idle_n);
  out.processes_idle += idle_n;
  out.processes_blocked += blocked_n;
  out.processes_running += all - idle_n - blocked_n;
}

}  // namespace spindle::detail
