// Per-thread recycling pools for coroutine frames (see detail/frame_pool.hpp).
#include "spindle/detail/frame_pool.hpp"

#include <array>
#include <new>

namespace spindle::detail {
namespace {

constexpr std::size_t class_bytes = 64;
constexpr std::size_t class_count = 64;  // up to 4096 bytes
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

constexpr std::size_t class_of(std::size_t bytes) noexcept {
  return (bytes + class_bytes - 1) / class_bytes - (bytes == 0 ? 0 : 1);
}

}  // namespace

void* frame_allocate(std::size_t bytes) {
  std::size_t cls = class_of(bytes);
  if (cls >= class_count) return ::operator new(bytes);
  thread_pool& pool = local_pool();
  if (pool.destroyed) return ::operator new(bytes);
  if (free_block* block = pool.heads[cls]) {
    pool.heads[cls] = block->next;
    pool.cached_bytes -= (cls + 1) * class_bytes;
    ++pool.counters.pool_hits;
    return block;
  }
  ++pool.counters.pool_misses;
  return ::operator new((cls + 1) * class_bytes);
}

void frame_deallocate(void* block, std::size_t bytes) noexcept {
  std::size_t cls = class_of(bytes);
  if (cls >= class_count) {
    ::operator delete(block);
    return;
  }
  thread_pool& pool = local_pool();
  std::size_t block_bytes = (cls + 1) * class_bytes;
  if (pool.destroyed || pool.cached_bytes + block_bytes > cache_bytes_per_thread) {
    ::operator delete(block);
    return;
  }
  auto* node = static_cast<free_block*>(block);
  node->next = pool.heads[cls];
  pool.heads[cls] = node;
  pool.cached_bytes += block_bytes;
}

frame_pool_counters frame_pool_thread_counters() noexcept {
  return local_pool().counters;
}

}  // namespace spindle::detail
