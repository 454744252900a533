// Per-thread recycling pools for coroutine frames (see detail/frame_pool.hpp).
#include "spindle/detail/frame_pool.hpp"

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "spindle/detail/task_header.hpp"

// Under LeakSanitizer (part of ASan) the slabs are registered as root
// regions: LSan scans malloc's chunks and the roots, not our mappings, and
// a frame in a slab may hold the only pointer to a live malloc'd object.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define SPINDLE_POOL_LSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(SPINDLE_POOL_LSAN)
#define SPINDLE_POOL_LSAN 1
#endif
#if defined(SPINDLE_POOL_LSAN)
#include <sanitizer/lsan_interface.h>
#endif

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

// A thread keeps the free blocks of a class in a magazine: an array of
// pointers, used as a stack (Bonwick's magazines), not a list linked
// through the blocks. A pop then reads the array, which only this thread
// writes, and not the block: with a list, each pop loaded the next
// block's link from the block it took, one load after the other, and a
// block freed on another worker was a line in that worker's cache, so a
// thread spawning tasks that another worker runs and frees (spawn_many_local,
// 2 workers) waited one cross-core transfer per spawn, in sequence (86% of
// task_frame_allocate's samples on that load). From an array the
// addresses are known ahead and the transfers overlap.
//
// The depot: when a thread's magazine of a class is full (it frees more
// than it allocates: a worker that completes tasks another thread spawned),
// it hands its transfer_blocks oldest blocks to the depot in a
// depot_magazine; a thread whose magazine is empty takes one from there
// before it calls operator new (a spawning thread whose tasks complete
// elsewhere). Without it the freeing thread's surplus went to free(), into
// the allocating thread's malloc arena (glibc's arena lock, contended by
// that thread's malloc), and the allocating thread called malloc for every
// spawn. The oldest go: the least likely to be in the freeing thread's
// cache still.
// Design source: Bonwick's magazines and depot (USENIX 2001), tcmalloc's
// transfer cache.
// A thread's magazine of a class holds at most high_water blocks (so a
// thread caches at most 128 blocks per class, 18.7 MB if it had them in
// every class; in practice a few classes).
constexpr std::uint32_t transfer_blocks = 64;
constexpr std::uint32_t high_water = 2 * transfer_blocks;
// The depot holds at most this many bytes in all classes; blocks beyond it
// go back to the system.
constexpr std::size_t depot_capacity_bytes = 64 * 1024 * 1024;

/// transfer_blocks blocks of one class on their way between threads. From
/// malloc, not operator new (which the tests count as the system's).
struct depot_magazine {
  depot_magazine* next;
  void* blocks[transfer_blocks];
};

// Emptied depot magazines a class keeps for the next spill (more go back
// to free()): at most 133 KB a class. With 8, a thread that spawned 10,000
// tasks at a time (bench_icount spawn_many) paid a malloc and a free per 64
// blocks, 6 instructions a spawn.
constexpr std::uint32_t max_empty_magazines = 256;

struct depot_class {
  std::mutex lock;
  // Written under `lock`; read there, and once without it (relaxed) by
  // allocate_slow before it calls the refill: most misses find the depot
  // empty (a spawning thread whose tasks are still held by join handles).
  std::atomic<depot_magazine*> full{nullptr};
  depot_magazine* empty = nullptr;  // guarded by lock
  std::uint32_t empty_count = 0;    // guarded by lock
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

// ---------------------------------------------------------------------------
// Slabs: where the misses of the classes whose size is a multiple of 16
// (16, 32, ..., 512) get their blocks. A slab is slab_bytes, aligned to
// slab_bytes, with a small header; the thread that took it carves blocks off
// it one miss at a time (its pages are touched as they are carved), and a
// block that goes "back to the system" (the depot full, a thread's exit, the
// depot released) is counted in its slab's header instead. Once every block
// of a slab is counted (the carver's uncarved rest is counted when it
// abandons the slab, at its thread's exit), its pages go back to the kernel
// (madvise MADV_DONTNEED) and the slab's address range waits for the next
// slab. malloc would put each of those blocks in a chunk of the request + 8
// bytes rounded up to 16: a 112-byte task (64-byte header, 48-byte frame)
// costs 128 bytes there and 112 here. The other classes (8-byte steps that
// are not 16-byte multiples, the coarse ones) keep ::operator new, where
// carving would save nothing: their blocks must stay 16-byte aligned.
// Design source: Bonwick's slab allocator (USENIX 1994), jemalloc's retained
// extents (ranges kept mapped, their pages purged).
constexpr std::size_t slab_bytes = 64 * 1024;
// The header's room at the slab's start (keeps blocks 16-byte aligned).
constexpr std::size_t slab_header_bytes = 16;
// Slabs are cut from mappings of this size (one mmap per 64 slabs).
constexpr std::size_t slab_arena_bytes = 64 * slab_bytes;

struct slab_header {
  std::atomic<std::uint32_t> released;  // blocks back from the pools, or never carved
  std::uint32_t capacity;               // blocks the slab holds
};
static_assert(sizeof(slab_header) <= slab_header_bytes);

/// Whether class `cls`'s misses are carved from slabs.
constexpr bool carved_class(std::size_t cls) noexcept {
  return cls < fine_classes && class_size(cls) % 16 == 0;
}
/// The index of a carved class among the carved ones (odd fine classes).
constexpr std::size_t carve_index(std::size_t cls) noexcept {
  return cls / 2;
}
constexpr std::size_t carved_classes = fine_classes / 2;
static_assert(carved_class(1) && carve_index(1) == 0 && class_size(1) == 16);
static_assert(carved_class(13) && class_size(13) == 112);
static_assert(!carved_class(16) && class_size(16) == 136);
static_assert(carved_class(fine_classes - 1) &&
              carve_index(fine_classes - 1) == carved_classes - 1);

// The slabs' source: address ranges cut from arenas, and the ranges of
// slabs whose blocks all came back (pages purged), reused first.
struct slab_source {
  std::mutex lock;
  std::vector<char*> free_slabs;           // guarded by lock
  char* arena_next = nullptr;              // guarded by lock
  char* arena_end = nullptr;               // guarded by lock
  std::atomic<std::uint64_t> taken{0};     // slabs handed to carvers
  std::atomic<std::uint64_t> returned{0};  // slabs whose blocks all came back
};

slab_source& slabs() noexcept {
  // Never destroyed: threads may free blocks during static destruction.
  static slab_source* const s = new slab_source;
  return *s;
}

/// A fresh slab's range (its pages zero or not yet touched), or nullptr
/// when the system has no address space left.
char* take_slab_range() noexcept {
  slab_source& src = slabs();
  std::lock_guard guard(src.lock);
  if (!src.free_slabs.empty()) {
    char* slab = src.free_slabs.back();
    src.free_slabs.pop_back();
    return slab;
  }
  if (src.arena_next == src.arena_end) {
    // Over-map by one slab, then cut the ends off: an aligned arena.
    std::size_t const want = slab_arena_bytes + slab_bytes;
    void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto const raw = reinterpret_cast<std::uintptr_t>(p);
    std::uintptr_t const start = (raw + slab_bytes - 1) & ~(slab_bytes - 1);
    if (start > raw) ::munmap(p, start - raw);
    std::uintptr_t const end = start + slab_arena_bytes;
    if (raw + want > end) ::munmap(reinterpret_cast<void*>(end), raw + want - end);
    src.arena_next = reinterpret_cast<char*>(start);
    src.arena_end = reinterpret_cast<char*>(end);
#if defined(SPINDLE_POOL_LSAN)
    __lsan_register_root_region(src.arena_next, slab_arena_bytes);
#endif
  }
  char* slab = src.arena_next;
  src.arena_next += slab_bytes;
  return slab;
}

/// Every block of `slab` came back: purge its pages and keep its range.
[[gnu::noinline]] void recycle_slab(char* slab) noexcept {
  ::madvise(slab, slab_bytes, MADV_DONTNEED);
  slab_source& src = slabs();
  src.returned.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard guard(src.lock);
  try {
    src.free_slabs.push_back(slab);
  } catch (...) {
    // No memory for the list: the range stays mapped (and purged) unused.
  }
}

/// Counts `blocks` blocks of `slab` as back; recycles it with the last.
void slab_count_back(char* slab, std::uint32_t blocks) noexcept {
  auto* h = reinterpret_cast<slab_header*>(slab);
  std::uint32_t const capacity = h->capacity;
  // acq_rel: the last one sees every earlier block's writes before it purges.
  if (h->released.fetch_add(blocks, std::memory_order_acq_rel) + blocks == capacity)
    recycle_slab(slab);
}

/// A block of class `cls` leaves the pools for good.
void release_block(void* block, std::size_t cls) noexcept {
  if (carved_class(cls)) {
    auto const addr = reinterpret_cast<std::uintptr_t>(block);
    slab_count_back(reinterpret_cast<char*>(addr & ~(slab_bytes - 1)), 1);
  } else {
    ::operator delete(block);
  }
}

/// The `n` blocks of class `cls` at `blocks` leave the pools for good.
void release_blocks(void* const* blocks, std::size_t n, std::size_t cls) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    release_block(blocks[i], cls);
}

/// A new slab for class `cls`'s blocks (header written). Throws
/// std::bad_alloc when the system has no address space left.
char* new_slab(std::size_t cls) {
  char* slab = take_slab_range();
  if (slab == nullptr) throw std::bad_alloc();
  slabs().taken.fetch_add(1, std::memory_order_relaxed);
  auto* h = ::new (slab) slab_header;
  h->released.store(0, std::memory_order_relaxed);
  h->capacity = static_cast<std::uint32_t>((slab_bytes - slab_header_bytes) / class_size(cls));
  return slab;
}

/// The calling thread's carving state of one class.
struct carve_state {
  char* next;  // the next block to carve (nullptr: no slab)
  char* end;   // past the slab's last block
};

/// A block of carved class `cls` for a pool that may still carve.
void* carve(carve_state& c, std::size_t cls) {
  std::size_t const size = class_size(cls);
  if (c.next == c.end) {
    // The slab's blocks are all carved (or there was none): the next one.
    char* slab = new_slab(cls);
    c.next = slab + slab_header_bytes;
    c.end = c.next + reinterpret_cast<slab_header*>(slab)->capacity * size;
  }
  void* block = c.next;
  c.next += size;
  return block;
}

/// Stops carving: the slab's uncarved blocks count as back.
void abandon(carve_state& c, std::size_t cls) noexcept {
  if (c.next != nullptr && c.next != c.end) {
    auto const rest = static_cast<std::uint32_t>((c.end - c.next) / class_size(cls));
    auto const addr = reinterpret_cast<std::uintptr_t>(c.next);
    slab_count_back(reinterpret_cast<char*>(addr & ~(slab_bytes - 1)), rest);
  }
  c.next = c.end = nullptr;
}

/// A carved class's block for a pool that is destroyed (a frame allocated
/// by a thread_local destructor after the pool's own ran): a slab of its
/// own whose other blocks count as back at once, so that the block's return
/// recycles it.
void* carve_alone(std::size_t cls) {
  char* slab = new_slab(cls);
  auto* h = reinterpret_cast<slab_header*>(slab);
  h->released.store(h->capacity - 1, std::memory_order_relaxed);
  return slab + slab_header_bytes;
}

// A thread's magazines. Constant-initialized with a trivial destructor, so
// that the fast paths reach it with one %fs-relative access and no guard (a
// thread_local with a destructor is checked, and its destructor registered,
// at every access). The magazines are given back at the thread's exit by
// pool_reaper, a second thread_local that the slow paths register.
// `counts` holds each magazine's blocks + 1 once the slow paths have made
// it (after registering the reaper), and 0 before that and once the pool is
// destroyed: an allocation or a free finds a count of 0 or 1 (or a full
// magazine) and takes the slow path, which registers the reaper and makes
// the magazine (or, destroyed, goes to the system), so no magazine gets a
// block before its thread's reaper exists, and the fast paths need no
// separate check for either.
struct thread_pool {
  std::array<void**, class_count> magazines;        // high_water entries each, from malloc
  std::array<std::uint32_t, class_count> counts;    // blocks + 1 (0: see above)
  std::array<carve_state, carved_classes> carving;  // by carve_index
  frame_pool_counters counters;
  // frame_pool_fail_next_allocation's class + 1 (0: none): allocate_slow's
  // next allocation of that class throws std::bad_alloc.
  std::size_t fail_class_plus_one;
  bool reaper_registered;
  bool destroyed;  // thread_local destructors of later objects may still free frames

  void release_all() noexcept {
    destroyed = true;
    for (std::size_t cls = 0; cls < class_count; ++cls) {
      std::uint32_t const count = counts[cls];
      void** magazine = magazines[cls];
      counts[cls] = 0;  // every allocation and free takes the slow path from now on
      magazines[cls] = nullptr;
      if (magazine != nullptr) {
        release_blocks(magazine, count - 1, cls);
        std::free(magazine);
      }
      if (carved_class(cls)) abandon(carving[carve_index(cls)], cls);
    }
  }
};
static_assert(std::is_trivially_destructible_v<thread_pool>);

// initial-exec: see t_thread_context (scheduler.hpp).
[[gnu::tls_model("initial-exec")]] constinit thread_local thread_pool t_pool{};

thread_pool& local_pool() noexcept {
  return t_pool;
}

struct pool_reaper {
  ~pool_reaper() { t_pool.release_all(); }
};

/// Registers the calling thread's reaper (once): its destructor gives the
/// magazines back when the thread exits.
[[gnu::noinline]] void register_reaper(thread_pool& pool) noexcept {
  [[gnu::tls_model("initial-exec")]] thread_local pool_reaper reaper;
  // Passing its declaration constructs it and registers its destructor.
  static_cast<void>(&reaper);
  pool.reaper_registered = true;
}

/// Makes the calling thread's magazine of class `cls` (its reaper
/// registered, the pool not destroyed) unless it has one. Returns false
/// when malloc has no memory for it: the caller then goes to the system.
bool ensure_magazine(thread_pool& pool, std::size_t cls) noexcept {
  if (pool.counts[cls] != 0) return true;
  auto* magazine = static_cast<void**>(std::malloc(high_water * sizeof(void*)));
  if (magazine == nullptr) return false;
  pool.magazines[cls] = magazine;
  pool.counts[cls] = 1;
  return true;
}

/// Keeps an emptied depot magazine for the next spill of class `d`, or
/// frees it.
void keep_empty_magazine(depot_class& d, depot_magazine* m) noexcept {
  {
    std::lock_guard guard(d.lock);
    if (d.empty_count < max_empty_magazines) {
      m->next = d.empty;
      d.empty = m;
      ++d.empty_count;
      return;
    }
  }
  std::free(m);
}

/// The calling thread's magazine of class `cls` is empty (and its pool not
/// destroyed: allocate_slow, the only caller, checks): take a depot
/// magazine's blocks into it. Returns false when the depot has none (or
/// the thread has no magazine and malloc no memory for one).
[[gnu::noinline]] bool refill_from_depot(thread_pool& pool, std::size_t cls) noexcept {
  if (!ensure_magazine(pool, cls)) return false;
  depot& dep = global_depot();
  depot_class& d = dep.classes[cls];
  depot_magazine* m;
  {
    std::lock_guard guard(d.lock);
    m = d.full.load(std::memory_order_relaxed);
    if (m == nullptr) return false;
    d.full.store(m->next, std::memory_order_relaxed);
  }
  dep.bytes.fetch_sub(transfer_blocks * class_size(cls), std::memory_order_relaxed);
  std::memcpy(pool.magazines[cls], m->blocks, sizeof(m->blocks));
  pool.counts[cls] = transfer_blocks + 1;
  ++pool.counters.depot_refills;
  keep_empty_magazine(d, m);
  return true;
}

/// A depot magazine for a spill of `bytes` bytes into class `d`, the room
/// reserved; nullptr when the depot is full or malloc has no memory (the
/// blocks then go to the system).
depot_magazine* reserve_depot_magazine(depot& dep, depot_class& d, std::size_t bytes) noexcept {
  // Reserve the room first: the capacity holds with any number of spillers.
  if (dep.bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes <= depot_capacity_bytes) {
    depot_magazine* m;
    {
      std::lock_guard guard(d.lock);
      m = d.empty;
      if (m != nullptr) {
        d.empty = m->next;
        --d.empty_count;
      }
    }
    if (m == nullptr) m = static_cast<depot_magazine*>(std::malloc(sizeof(depot_magazine)));
    if (m != nullptr) return m;
  }
  dep.bytes.fetch_sub(bytes, std::memory_order_relaxed);
  return nullptr;
}

/// The calling thread's magazine of class `cls` is full: hand its
/// transfer_blocks oldest blocks to the depot (or to the system when the
/// depot is full, or malloc has no memory for a depot magazine).
[[gnu::noinline]] void spill_to_depot(thread_pool& pool, std::size_t cls) noexcept {
  void** magazine = pool.magazines[cls];
  depot& dep = global_depot();
  depot_class& d = dep.classes[cls];
  depot_magazine* m = reserve_depot_magazine(dep, d, transfer_blocks * class_size(cls));
  if (m != nullptr) {
    std::memcpy(m->blocks, magazine, sizeof(m->blocks));
  } else {
    release_blocks(magazine, transfer_blocks, cls);
  }
  // The newer half moves down: the oldest blocks are at the bottom.
  std::memmove(magazine, magazine + transfer_blocks,
               (pool.counts[cls] - 1 - transfer_blocks) * sizeof(void*));
  pool.counts[cls] -= transfer_blocks;
  if (m == nullptr) return;
  ++pool.counters.depot_spills;
  std::lock_guard guard(d.lock);
  m->next = d.full.load(std::memory_order_relaxed);
  d.full.store(m, std::memory_order_relaxed);
}

// The slow paths, out of line: the fast ones then keep no register and set
// up no frame (their calls are tail calls).

/// An allocation the fast path did not serve: size 0, a coarse class or
/// an unpooled size, or an empty list.
[[gnu::noinline]] void* allocate_slow(std::size_t bytes) {
  std::size_t const cls = class_of(bytes);
  if (cls >= class_count) return ::operator new(bytes);
  thread_pool& pool = local_pool();
  if (pool.fail_class_plus_one == cls + 1) [[unlikely]] {
    pool.fail_class_plus_one = 0;
    throw std::bad_alloc();
  }
  if (pool.counts[cls] <= 1) {
    if (pool.destroyed)
      return carved_class(cls) ? carve_alone(cls) : ::operator new(class_size(cls));
    // The magazine may get blocks now: they must go back when the thread
    // exits.
    if (!pool.reaper_registered) register_reaper(pool);
    // A look at the depot's class without its lock (or a call) first: an
    // empty class is the common case of a miss, and the lock and unlock
    // cost the miss about 100 instructions. A magazine pushed meanwhile is
    // found by the next miss.
    if (global_depot().classes[cls].full.load(std::memory_order_relaxed) == nullptr ||
        !refill_from_depot(pool, cls)) {
      ++pool.counters.pool_misses;
      if (carved_class(cls)) return carve(pool.carving[carve_index(cls)], cls);
      return ::operator new(class_size(cls));
    }
  }
  std::uint32_t const count = pool.counts[cls];
  void* block = pool.magazines[cls][count - 2];
  pool.counts[cls] = count - 1;
  ++pool.counters.pool_hits;
  return block;
}

/// A free the fast path did not take: size 0, a coarse class or an
/// unpooled size, a pool without its reaper yet or destroyed, a class
/// without its magazine yet, or a full magazine.
[[gnu::noinline]] void deallocate_slow(void* block, std::size_t bytes) noexcept {
  std::size_t const cls = class_of(bytes);
  if (cls >= class_count) {
    ::operator delete(block);
    return;
  }
  thread_pool& pool = local_pool();
  if (pool.destroyed) {
    release_block(block, cls);
    return;
  }
  if (!pool.reaper_registered) register_reaper(pool);
  if (!ensure_magazine(pool, cls)) {
    release_block(block, cls);
    return;
  }
  if (pool.counts[cls] - 1 == high_water) spill_to_depot(pool, cls);
  std::uint32_t const count = pool.counts[cls];
  pool.magazines[cls][count - 1] = block;
  pool.counts[cls] = count + 1;
}

/// The fine class of `bytes`, or class_count when the fast paths do not
/// serve it (0, or above fine_limit): one subtraction and one shift.
[[gnu::always_inline]] inline std::size_t fine_class_of(std::size_t bytes) noexcept {
  std::size_t const cls = (bytes - 1) / fine_step;  // 0 wraps to a huge class
  return cls < fine_classes ? cls : class_count;
}

/// Whether the calling thread's magazine of fine class `cls` (or
/// class_count) has a block for the fast path; `count` receives its
/// count. count = blocks + 1: 1 is an empty magazine, 0 none yet (or
/// destroyed).
[[gnu::always_inline]] inline bool can_pop(std::size_t cls, std::uint32_t& count) noexcept {
  if (cls >= class_count) [[unlikely]]
    return false;
  count = local_pool().counts[cls];
  return count > 1;
}

/// Pops the top block of fine class `cls`, whose magazine's count is
/// `count` (can_pop said so).
[[gnu::always_inline]] inline void* pop_fine(std::size_t cls, std::uint32_t count) noexcept {
  thread_pool& pool = local_pool();
  void* block = pool.magazines[cls][count - 2];
  pool.counts[cls] = count - 1;
  ++pool.counters.pool_hits;
  return block;
}

// The fast paths, inlined into both the plain and the task-frame entry points.
[[gnu::always_inline]] inline void* pool_allocate(std::size_t bytes) {
  std::size_t const cls = fine_class_of(bytes);
  std::uint32_t count;
  if (!can_pop(cls, count)) [[unlikely]]
    return allocate_slow(bytes);
  return pop_fine(cls, count);
}

[[gnu::always_inline]] inline void pool_deallocate(void* block, std::size_t bytes) noexcept {
  std::size_t const cls = fine_class_of(bytes);
  if (cls >= class_count) [[unlikely]] {
    deallocate_slow(block, bytes);
    return;
  }
  thread_pool& pool = local_pool();
  std::uint32_t const count = pool.counts[cls];
  // A magazine with fewer than high_water blocks (count = blocks + 1) takes
  // one more here. A full one, or a count of 0 (no magazine yet, or
  // destroyed), takes the slow path.
  if (count - 1 >= high_water) [[unlikely]] {
    deallocate_slow(block, bytes);
    return;
  }
  pool.magazines[cls][count - 1] = block;
  pool.counts[cls] = count + 1;
}

}  // namespace

void* frame_allocate(std::size_t bytes) {
  return pool_allocate(bytes);
}

void frame_deallocate(void* block, std::size_t bytes) noexcept {
  pool_deallocate(block, bytes);
}

namespace {
[[gnu::noinline]] void* task_frame_allocate_slow(std::size_t total) {
  void* block = allocate_slow(total);
  ::new (block) task_header;
  return static_cast<char*>(block) + task_frame_prefix;
}
}  // namespace

namespace {
/// Asks for the cache line at `p` in a state that a store may write
/// (PREFETCHW on x86-64: executed as a no-op by CPUs without it).
[[gnu::always_inline]] inline void prefetch_for_write(void const* p) noexcept {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<char const*>(p)));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}
}  // namespace

void* task_frame_allocate(std::size_t bytes) {
  std::size_t const total = task_frame_prefix + bytes;
  std::size_t const cls = fine_class_of(total);
  std::uint32_t count;
  if (!can_pop(cls, count)) [[unlikely]]
    return task_frame_allocate_slow(total);
  void* block = pop_fine(cls, count);
  // The next block this magazine gives out: its header and the frame's
  // first line, which the next spawn writes at once. A block a task
  // completed on another worker is a line in that worker's cache, and the
  // spawn that writes it waits for the transfer at its first atomic RMW
  // (perf on spawn_many_remote_idle: 70% of spawn_from_outside's samples on
  // the gate's fetch_add, right after the header's stores); asked for here,
  // the transfer can overlap the rest of this spawn. Measured:
  // spawn_many_remote_idle 1,581-2,007 -> 1,265-1,399 us (p2c, alternating
  // rounds), though the gate's RMW still takes most of that function's
  // samples.
  if (count > 2) {
    auto const* next = static_cast<char const*>(local_pool().magazines[cls][count - 3]);
    prefetch_for_write(next);
    prefetch_for_write(next + task_frame_prefix);
  }
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

namespace {
// Made when the library is loaded, so that a task that fails with no
// memory left still has an exception to report.
std::exception_ptr const lost_exception = std::make_exception_ptr(std::bad_alloc());
}  // namespace

std::exception_ptr const& lost_task_exception() noexcept {
  return lost_exception;
}

frame_pool_counters frame_pool_thread_counters() noexcept {
  return local_pool().counters;
}

std::size_t frame_pool_depot_bytes() noexcept {
  return global_depot().bytes.load(std::memory_order_relaxed);
}

frame_pool_slab_counters frame_pool_slabs() noexcept {
  slab_source& src = slabs();
  return {src.taken.load(std::memory_order_relaxed), src.returned.load(std::memory_order_relaxed)};
}

std::size_t frame_pool_depot_capacity() noexcept {
  return depot_capacity_bytes;
}

void frame_pool_fail_next_allocation(std::size_t bytes) noexcept {
  std::size_t const cls = class_of(bytes);
  if (bytes == 0 || cls >= class_count) return;
  thread_pool& pool = local_pool();
  // counts is blocks + 1, or 0 without a magazine or once destroyed (kept).
  if (pool.counts[cls] > 1) {
    release_blocks(pool.magazines[cls], pool.counts[cls] - 1, cls);
    pool.counts[cls] = 1;
  }
  pool.fail_class_plus_one = cls + 1;
}

void frame_pool_release_depot() noexcept {
  depot& dep = global_depot();
  for (std::size_t cls = 0; cls < class_count; ++cls) {
    depot_class& d = dep.classes[cls];
    depot_magazine* full;
    depot_magazine* empty;
    {
      std::lock_guard guard(d.lock);
      full = d.full.exchange(nullptr, std::memory_order_relaxed);
      empty = d.empty;
      d.empty = nullptr;
      d.empty_count = 0;
    }
    while (full != nullptr) {
      depot_magazine* next = full->next;
      release_blocks(full->blocks, transfer_blocks, cls);
      dep.bytes.fetch_sub(transfer_blocks * class_size(cls), std::memory_order_relaxed);
      std::free(full);
      full = next;
    }
    while (empty != nullptr) {
      depot_magazine* next = empty->next;
      std::free(empty);
      empty = next;
    }
  }
}

}  // namespace spindle::detail
