// Per-thread recycling pools for coroutine frames (see detail/frame_pool.hpp).
#include "spindle/detail/frame_pool.hpp"

#include <array>
#include <new>

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
// A thread keeps at most this many bytes of free blocks (all classes): a
// fork-join tree can have tens of thousands of frames alive at its peak.
constexpr std::size_t cache_bytes_per_thread = 16 * 1024 * 1024;

struct free_block {
  free_block* next;
};

struct thread_pool {
  std::array<free_block*, class_count> heads{};
  std::size_t cached_bytes = 0;
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

// The fast paths, inlined into both the plain and the task-frame entry points.
[[gnu::always_inline]] inline void* pool_allocate(std::size_t bytes) {
  std::size_t cls = class_of(bytes);
  if (cls >= class_count) [[unlikely]]
    return ::operator new(bytes);
  thread_pool& pool = local_pool();
  // A destroyed pool has empty lists: no check needed before the pop.
  if (free_block* block = pool.heads[cls]) [[likely]] {
    pool.heads[cls] = block->next;
    pool.cached_bytes -= class_size(cls);
    ++pool.counters.pool_hits;
    return block;
  }
  if (!pool.destroyed) ++pool.counters.pool_misses;
  return ::operator new(class_size(cls));
}

[[gnu::always_inline]] inline void pool_deallocate(void* block, std::size_t bytes) noexcept {
  std::size_t cls = class_of(bytes);
  if (cls >= class_count) [[unlikely]] {
    ::operator delete(block);
    return;
  }
  thread_pool& pool = local_pool();
  std::size_t block_bytes = class_size(cls);
  if (pool.destroyed || pool.cached_bytes + block_bytes > cache_bytes_per_thread) [[unlikely]] {
    ::operator delete(block);
    return;
  }
  auto* node = static_cast<free_block*>(block);
  node->next = pool.heads[cls];
  pool.heads[cls] = node;
  pool.cached_bytes += block_bytes;
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
  auto* header = ::new (block) task_header;
  header->block_bytes = static_cast<std::uint32_t>(total);
  return static_cast<char*>(block) + task_frame_prefix;
}

void task_frame_deallocate(void* frame, std::size_t bytes) noexcept {
  task_header* header = task_header::of_frame(frame);
  // A spawned frame's block belongs to its header (state != 0 from the spawn
  // until the block is freed): scheduler::free_task frees it.
  if (header->state.load(std::memory_order_acquire) != 0) return;
  header->~task_header();
  pool_deallocate(header, task_frame_prefix + bytes);
}

frame_pool_counters frame_pool_thread_counters() noexcept {
  return local_pool().counters;
}

}  // namespace spindle::detail
