// spindle processes: the pid table, the mailbox word's protocol, shutdown
// and stats (see spindle/process.hpp for the shape).
//
// The pid table: up to 2^16 chunks of 4096 slots, allocated on demand and
// kept for the life of the program (so a slot's address never dangles and
// a pid may outlive its runtime). A slot's 64-bit word is
//
//   generation (32) | references (29) | has_block (1) | state (2)
//
// with state free / alive / zombie. A lookup (send, state_of) takes a
// reference with one CAS when the generation matches and the process is
// alive; the block is freed by whoever leaves the slot zombie with no
// reference and the block still there (the process's own finish, or the
// last sender), who then puts the slot on a free list. The zombie keeps the
// body's outcome (exception_ptr) for late monitors until the slot is reused
// with the next generation. Free lists are sharded (16 mutex-guarded
// vectors); only spawns and frees touch them, never lookups.
#include "spindle/process.hpp"

#include <pthread.h>
#include <sched.h>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "process_registry.hpp"
#include "scheduler.hpp"

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
constexpr std::uint64_t ref_one = 8;
constexpr std::uint64_t refs_mask = 0xFFFF'FFF8ULL;

struct slot {
  std::atomic<std::uint64_t> word{0};
  process_base* block = nullptr;
  std::exception_ptr error;
};

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

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
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

void release_slot(slot* s, std::uint32_t index) noexcept {
  process_base* const block = s->block;
  std::uint64_t w = s->word.load(std::memory_order_relaxed);
  bool free_it = false;
  std::uint64_t nw = 0;
  do {
    nw = w - ref_one;
    free_it = (nw & refs_mask) == 0 && (nw & st_mask) == st_zombie && (nw & has_block) != 0;
    if (free_it) nw &= ~has_block;
  } while (
      !s->word.compare_exchange_weak(w, nw, std::memory_order_acq_rel, std::memory_order_relaxed));
  if (free_it) {
    delete block;
    push_free(index);
  }
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
    fn(s->block);
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

void process_base::took() noexcept {
  --avail;
  std::uint32_t t = taken.load(std::memory_order_relaxed) + 1;
  received.store(received.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (t >= (1u << 20)) {
    // A receiver that never parks: settle the count so the word cannot
    // overflow.
    word.fetch_sub(t << 1, std::memory_order_acq_rel);
    t = 0;
  }
  taken.store(t, std::memory_order_relaxed);
}

bool process_base::try_park() noexcept {
  std::uint32_t expected = (taken.load(std::memory_order_relaxed) << 1) | 1u;
  in_receive.store(true, std::memory_order_relaxed);
  if (word.compare_exchange_strong(expected, 0, std::memory_order_acq_rel,
                                   std::memory_order_acquire)) {
    taken.store(0, std::memory_order_relaxed);
    return true;
  }
  in_receive.store(false, std::memory_order_relaxed);
  refresh(expected);
  return false;
}

void process_base::unpark(bool bit_already_set) noexcept {
  in_receive.store(false, std::memory_order_relaxed);
  std::uint32_t w = bit_already_set ? word.load(std::memory_order_acquire)
                                    : word.fetch_add(1, std::memory_order_acq_rel) + 1;
  refresh(w);
}

void process_base::count_and_wake() noexcept {
  if (word.fetch_add(2, std::memory_order_acq_rel) == 0) wake(task);
}

bool receive_cancel_hook(void* block) noexcept {
  auto* b = static_cast<process_base*>(block);
  // Won from 0: nobody will wake it. Otherwise a sender's wake is coming.
  return b->word.fetch_add(1, std::memory_order_acq_rel) == 0;
}

bool timed_receive_cancel_hook(void* awaiter) noexcept {
  auto* a = static_cast<timed_receive_base*>(awaiter);
  if (a->armed) {
    if (!timer_disarm(a->entry)) return false;  // fired: it set the bit and woke (or lost)
    a->armed = false;
  }
  if (a->bit_set) return false;  // lost to a sender after the deadline passed
  return a->block->word.fetch_add(1, std::memory_order_acq_rel) == 0;
}

bool timed_receive_base::suspend(task_header* self,
                                 std::chrono::steady_clock::time_point deadline) {
  set_cancel_hook(self, &timed_receive_cancel_hook, this);
  if (!block->try_park()) {
    set_cancel_hook(self, nullptr, nullptr);
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
    set_cancel_hook(self, nullptr, nullptr);
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

std::uint64_t pid_issue(process_base* block, scheduler* sched) {
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
  } else {
    index = next_index.fetch_add(1, std::memory_order_acq_rel);
    s = find(index);
    if (s == nullptr) s = grow(index);
  }
  std::uint64_t const value = static_cast<std::uint64_t>(gen) << 32 | index;
  s->block = block;
  s->error = nullptr;
  block->pid_value = value;
  block->sched = sched;
  process_registry& reg = sched->processes();
  reg.mine().alive.fetch_add(1, std::memory_order_relaxed);
  s->word.store(static_cast<std::uint64_t>(gen) << 32 | ref_one | has_block | st_alive,
                std::memory_order_seq_cst);
  if (reg.closing.load(std::memory_order_seq_cst)) cancel_process(block);
  return value;
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
  return s->block;
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
    block = s->block;
    return 1;
  }
  return 2;
}

std::exception_ptr pid_outcome(std::uint64_t value) noexcept {
  return find(index_of(value))->error;
}

void pid_finish(process_base* block, std::exception_ptr error) noexcept {
  std::uint64_t const value = block->pid_value;
  if (value == 0) return;  // never issued
  slot* s = find(index_of(value));
  s->word.fetch_add(ref_one, std::memory_order_acquire);  // ours while we finish
  s->error = std::move(error);
  std::uint64_t w = s->word.load(std::memory_order_relaxed);
  while (!s->word.compare_exchange_weak(w, (w & ~st_mask) | st_zombie, std::memory_order_acq_rel,
                                        std::memory_order_relaxed)) {
  }
  process_registry& reg = block->sched->processes();
  std::uint64_t const got = block->received.load(std::memory_order_relaxed);
  std::uint32_t const counted = block->word.load(std::memory_order_acquire) >> 1;
  std::uint64_t const pending = counted - block->taken.load(std::memory_order_relaxed);
  process_registry::shard& mine = reg.mine();
  mine.finished_received.fetch_add(got, std::memory_order_relaxed);
  mine.finished_sent.fetch_add(
      got + pending - (block->cancelled.load(std::memory_order_relaxed) && pending > 0 ? 1 : 0),
      std::memory_order_relaxed);
  mine.finished.fetch_add(1, std::memory_order_relaxed);
  if (block->room) block->room->release(std::size_t{1} << 30);  // send_async waiters see done
  block->finished.store(true, std::memory_order_seq_cst);
  if (event* e = block->monitors.load(std::memory_order_seq_cst)) e->set();
  mine.alive.fetch_sub(1, std::memory_order_release);
  release_slot(s, index_of(value));
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
  } else if (b->in_receive.load(std::memory_order_relaxed)) {
    out = b->awaiting_yields.load(std::memory_order_relaxed) ? process_state::blocked
                                                             : process_state::idle;
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
    event* e = b->monitors.load(std::memory_order_acquire);
    if (e == nullptr) {
      auto fresh = std::make_unique<event>();
      if (b->monitors.compare_exchange_strong(e, fresh.get(), std::memory_order_seq_cst)) {
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
    if (b->sched == &sched) cancel_process(b);
  });
  auto const deadline = std::chrono::steady_clock::now() + sched.config().process_shutdown_timeout;
  while (reg.alive() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void collect_process_stats(scheduler const& sched, runtime_stats& out) noexcept {
  process_registry const& reg = sched.processes();
  for (auto const& s : reg.shards) {
    out.processes_completed += s.finished.load(std::memory_order_relaxed);
    out.messages_received += s.finished_received.load(std::memory_order_relaxed);
    out.messages_sent += s.finished_sent.load(std::memory_order_relaxed);
  }
  if (reg.alive() <= 0) return;
  for_each_live([&](process_base* b) {
    if (b->sched != &sched) return;
    std::uint64_t const got = b->received.load(std::memory_order_relaxed);
    std::uint32_t const counted = b->word.load(std::memory_order_acquire) >> 1;
    std::uint32_t const taken = b->taken.load(std::memory_order_relaxed);
    out.messages_received += got;
    out.messages_sent += got + (counted >= taken ? counted - taken : 0);
    switch (pid_state(b->pid_value)) {
      case process_state::ready:
        ++out.processes_ready;
        break;
      case process_state::running:
        ++out.processes_running;
        break;
      case process_state::idle:
        ++out.processes_idle;
        break;
      case process_state::blocked:
        ++out.processes_blocked;
        break;
      case process_state::complete:
        break;
    }
  });
}

}  // namespace spindle::detail
