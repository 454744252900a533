// Per-thread recycling pools for coroutine frames (see detail/frame_pool.hpp).
#include "spindle/detail/frame_pool.hpp"

#include <array>
#include <atomic>
#include <mutex>
#include <new>
#include <utility>

#include "spindle/detail/task_header.hpp"

namespace spindle::detail {
namespace {

// Size classes: 8-byte steps up to 512 bytes (64 classes: a spawned task's
// block, header and frame, is often 100-200 bytes, and a 64-byte step would
// waste a third of it; malloc returns 16-byte aligned blocks for any size,
// and its chunks are the request + 8 rounded up to 16 bytes, so an 8-byte
// step saves a chunk step), then 64-byte steps up to 4096 (56 classes).
constexpr std::size_t fine_step = 8;
constexpr std::size_t fine_limit = 512;
constexpr std::size_t coarse_step = 64;
constexpr std::size_t max_pooled = 4096;
constexpr std::size_t fine_classes = fine_limit / fine_step;
constexpr std::size_t class_count = fine_classes + (max_pooled - fine_limit) / coarse_step;

struct free_block {
  free_block* next;
  free_block* next_chain;  // in the depot: the chain under this one (blocks of 16 bytes and up)
};

// The depot: when a thread's list of a class grows past high_water blocks
// (it frees more than it allocates: a worker that completes tasks another
// thread spawned), it hands a chain of transfer_blocks blocks to the depot;
// a thread whose list is empty takes a chain from there before it calls
// operator new (a spawning thread whose tasks complete elsewhere). Without
// it the freeing thread's surplus went to free(), into the allocating
// thread's malloc arena (glibc's arena lock, contended by that thread's
// malloc), and the allocating thread called malloc for every spawn.
// Design source: Bonwick's magazines and depot (USENIX 2001), tcmalloc's
// transfer cache.
// A thread's list of a class holds at most high_water blocks (so a thread
// caches at most 128 blocks per class, 18.7 MB if it had them in every
// class; in practice a few classes).
constexpr std::uint32_t transfer_blocks = 64;
constexpr std::uint32_t high_water = 2 * transfer_blocks;
// The depot holds at most this many bytes in all classes; a chain beyond it
// goes back to operator delete.
constexpr std::size_t depot_capacity_bytes = 64 * 1024 * 1024;
// Classes below this size have no room for next_chain: no depot.
constexpr std::size_t min_depot_block = sizeof(free_block);

struct depot_class {
  std::mutex lock;
  free_block* chains = nullptr;  // guarded by lock
};

struct depot {
  std::array<depot_class, class_count> classes;
  std::atomic<std::size_t> bytes{0};  // in all classes; reserved before a push
};

depot& global_depot() noexcept {
  // Never destroyed: threads may free blocks during static destruction.
  static depot* const d = new depot;
  return *d;
}

struct thread_pool {
  std::array<free_block*, class_count> heads{};
  std::array<std::uint32_t, class_count> counts{};  // blocks in each list
  frame_pool_counters counters{};
  bool destroyed = false;  // thread_local destructors of later objects may still free frames

  ~thread_pool() {
    destroyed = true;
    for (auto& head : heads) {
      while (head != nullptr) {
        free_block* next = head->next;
        ::operator delete(static_cast<void*>(head));
        head = next;
      }
    }
  }
};

thread_pool& local_pool() noexcept {
  // initial-exec: see this_thread_context (scheduler.cpp).
  [[gnu::tls_model("initial-exec")]] thread_local thread_pool pool;
  return pool;
}

/// The class of a request of `bytes` (class_count and above: not pooled).
constexpr std::size_t class_of(std::size_t bytes) noexcept {
  if (bytes <= fine_limit) return bytes == 0 ? 0 : (bytes - 1) / fine_step;
  return fine_classes + (bytes - fine_limit - 1) / coarse_step;
}

/// The bytes of every block of class `cls`.
constexpr std::size_t class_size(std::size_t cls) noexcept {
  return cls < fine_classes ? (cls + 1) * fine_step
                            : fine_limit + (cls - fine_classes + 1) * coarse_step;
}

static_assert(class_of(1) == 0 && class_size(0) == 8);
static_assert(class_of(512) == fine_classes - 1 && class_size(fine_classes - 1) == 512);
static_assert(class_of(513) == fine_classes && class_size(fine_classes) == 576);
static_assert(class_of(max_pooled) == class_count - 1 && class_size(class_count - 1) == max_pooled);
static_assert(class_of(max_pooled + 1) == class_count);

/// The calling thread's list of class `cls` is empty: take a chain from the
/// depot into it. Returns false when the depot has none.
[[gnu::noinline]] bool refill_from_depot(thread_pool& pool, std::size_t cls) noexcept {
  if (class_size(cls) < min_depot_block || pool.destroyed) return false;
  depot& dep = global_depot();
  depot_class& d = dep.classes[cls];
  free_block* chain;
  {
    std::lock_guard guard(d.lock);
    chain = d.chains;
    if (chain == nullptr) return false;
    d.chains = chain->next_chain;
  }
  dep.bytes.fetch_sub(transfer_blocks * class_size(cls), std::memory_order_relaxed);
  pool.heads[cls] = chain;
  pool.counts[cls] = transfer_blocks;
  ++pool.counters.depot_refills;
  return true;
}

/// The calling thread's list of class `cls` is past high_water: hand its
/// first transfer_blocks blocks to the depot (or to operator delete when the
/// depot's class is full).
[[gnu::noinline]] void spill_to_depot(thread_pool& pool, std::size_t cls) noexcept {
  free_block* chain = pool.heads[cls];
  free_block* last = chain;
  for (std::uint32_t i = 1; i < transfer_blocks; ++i)
    last = last->next;
  pool.heads[cls] = last->next;
  last->next = nullptr;
  pool.counts[cls] -= transfer_blocks;
  depot& dep = global_depot();
  std::size_t const chain_bytes = transfer_blocks * class_size(cls);
  // Reserve the room first: the capacity holds with any number of spillers.
  if (dep.bytes.fetch_add(chain_bytes, std::memory_order_relaxed) + chain_bytes <=
      depot_capacity_bytes) {
    ++pool.counters.depot_spills;
    depot_class& d = dep.classes[cls];
    std::lock_guard guard(d.lock);
    chain->next_chain = d.chains;
    d.chains = chain;
    return;
  }
  dep.bytes.fetch_sub(chain_bytes, std::memory_order_relaxed);
  while (chain != nullptr) {
    free_block* next = chain->next;
    ::operator delete(static_cast<void*>(chain));
    chain = next;
  }
}

// The fast paths, inlined into both the plain and the task-frame entry points.
[[gnu::always_inline]] inline void* pool_allocate(std::size_t bytes) {
  std::size_t cls = class_of(bytes);
  if (cls >= class_count) [[unlikely]]
    return ::operator new(bytes);
  thread_pool& pool = local_pool();
  // A destroyed pool has empty lists: no check needed before the pop.
  free_block* block = pool.heads[cls];
  if (block == nullptr) [[unlikely]] {
    if (!refill_from_depot(pool, cls)) {
      if (!pool.destroyed) ++pool.counters.pool_misses;
      return ::operator new(class_size(cls));
    }
    block = pool.heads[cls];
  }
  pool.heads[cls] = block->next;
  --pool.counts[cls];
  ++pool.counters.pool_hits;
  return block;
}

[[gnu::always_inline]] inline void pool_deallocate(void* block, std::size_t bytes) noexcept {
  std::size_t cls = class_of(bytes);
  if (cls >= class_count) [[unlikely]] {
    ::operator delete(block);
    return;
  }
  thread_pool& pool = local_pool();
  if (pool.destroyed) [[unlikely]] {
    ::operator delete(block);
    return;
  }
  auto* node = static_cast<free_block*>(block);
  node->next = pool.heads[cls];
  pool.heads[cls] = node;
  if (++pool.counts[cls] > high_water) [[unlikely]] {
    if (class_size(cls) >= min_depot_block) {
      spill_to_depot(pool, cls);
    } else {
      // Too small to chain in the depot: back to the system.
      pool.heads[cls] = node->next;
      --pool.counts[cls];
      ::operator delete(block);
    }
  }
}

}  // namespace

void* frame_allocate(std::size_t bytes) {
  return pool_allocate(bytes);
}

void frame_deallocate(void* block, std::size_t bytes) noexcept {
  pool_deallocate(block, bytes);
}

void* task_frame_allocate(std::size_t bytes) {
  std::size_t total = task_frame_prefix + bytes;
  void* block = pool_allocate(total);
  // An empty header: state 0 says "never spawned" to task_frame_deallocate.
  ::new (block) task_header;
  return static_cast<char*>(block) + task_frame_prefix;
}

namespace {
// Out of line, so that the spawned frame's path (the common one) saves no
// registers.
[[gnu::noinline]] void free_unspawned_block(task_header* header, std::size_t block) noexcept {
  header->~task_header();
  pool_deallocate(header, block);
}
}  // namespace

void task_frame_deallocate(void* frame, std::size_t bytes) noexcept {
  task_header* header = task_header::of_frame(frame);
  // A spawned frame's block belongs to its header (state != 0 from the spawn
  // until the block is freed): scheduler::free_task frees it, and finds the
  // block's size where the frame was (the header has no field for it).
  if (header->state.load(std::memory_order_acquire) != 0) [[likely]] {
    ::new (frame) std::size_t(task_frame_prefix + bytes);
    return;
  }
  free_unspawned_block(header, task_frame_prefix + bytes);
}

frame_pool_counters frame_pool_thread_counters() noexcept {
  return local_pool().counters;
}

std::size_t frame_pool_depot_bytes() noexcept {
  return global_depot().bytes.load(std::memory_order_relaxed);
}

std::size_t frame_pool_depot_capacity() noexcept {
  return depot_capacity_bytes;
}

void frame_pool_release_depot() noexcept {
  depot& dep = global_depot();
  for (std::size_t cls = 0; cls < class_count; ++cls) {
    free_block* chains;
    {
      std::lock_guard guard(dep.classes[cls].lock);
      chains = std::exchange(dep.classes[cls].chains, nullptr);
    }
    while (chains != nullptr) {
      free_block* next_chain = chains->next_chain;
      while (chains != nullptr) {
        free_block* next = chains->next;
        ::operator delete(static_cast<void*>(chains));
        chains = next;
      }
      dep.bytes.fetch_sub(transfer_blocks * class_size(cls), std::memory_order_relaxed);
      chains = next_chain;
    }
  }
}

}  // namespace spindle::detail
