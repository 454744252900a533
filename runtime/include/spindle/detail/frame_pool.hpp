// Per-thread recycling pools for coroutine frames and task headers.
//
// Shape: size classes of 8 bytes up to 512 bytes and of 64 bytes up to 4096; each thread (in
// practice each worker) keeps a free list per class, so steady-state spawn/await does not call
// malloc. A block may be freed on another thread than the one that allocated it: it then joins
// the freeing thread's list (the pools are caches, not owners). A list that grows past 128
// blocks hands a chain of 64 to a shared depot (at most 64 MiB in all classes; beyond that the
// chain goes to ::operator delete), and an empty list takes a chain from there before calling
// ::operator new: tasks spawned on one thread and completed on another recycle their blocks
// without malloc. Larger requests go to ::operator new.
//
// Thread-safety: each function touches the calling thread's lists, and the depot under a lock
// per class once per 64 blocks at most.
// Design source: Volt and docs/design.md "Coroutine frames are allocated
// from per-worker recycling pools"; the layout follows tcmalloc's per-thread
// caches and transfer cache in miniature (Bonwick's magazines and depot).
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <new>

namespace spindle::detail {

/// Allocates `bytes` bytes (aligned to alignof(std::max_align_t)).
/// Throws std::bad_alloc when the system allocator does.
[[nodiscard]] void* frame_allocate(std::size_t bytes);

/// Returns a block obtained from frame_allocate with the same `bytes`.
void frame_deallocate(void* block, std::size_t bytes) noexcept;

/// Bytes in front of every spindle::task coroutine frame, where the task's
/// header goes if the frame is spawned (sizeof(detail::task_header)).
inline constexpr std::size_t task_frame_prefix = 64;

/// Where in its prefix a frame that was never spawned (its header's state,
/// the first word, is 0) keeps its continuation: the header's resume_point
/// slot, unused until a spawn (task_header.hpp checks the offset). A root
/// needs no continuation (its end goes back to the worker), and a frame
/// that is awaited is never spawned, so the slot serves both and the
/// promise carries no continuation of its own (8 bytes less per frame).
inline constexpr std::size_t task_prefix_continuation_offset = 16;

/// The continuation slot of a task<T> frame (see above).
[[nodiscard]] inline std::coroutine_handle<>& frame_continuation(void* frame) noexcept {
  return *std::launder(reinterpret_cast<std::coroutine_handle<>*>(
      static_cast<char*>(frame) - task_frame_prefix + task_prefix_continuation_offset));
}

/// What a task<T> frame transfers to at its final suspension: its
/// continuation when it was awaited, nothing (a no-op coroutine: back to the
/// worker or block_on that resumed it) when it was spawned or never awaited.
/// The state is read relaxed: a spawned root's stays non-zero until its block
/// is freed, and an awaited frame's is 0 from its allocation on.
[[nodiscard]] inline std::coroutine_handle<> frame_final_transfer(void* frame) noexcept {
  auto const* state = std::launder(reinterpret_cast<std::atomic<std::uint64_t> const*>(
      static_cast<char*>(frame) - task_frame_prefix));
  if (state->load(std::memory_order_relaxed) == 0) {
    if (std::coroutine_handle<> next = frame_continuation(frame)) return next;
  }
  return std::noop_coroutine();
}

/// operator new of task<T> frames: a block of task_frame_prefix + `bytes`
/// bytes from the pool, with an empty task header in front; returns the
/// frame's address (aligned to alignof(std::max_align_t)). Throws
/// std::bad_alloc when the system allocator does.
[[nodiscard]] void* task_frame_allocate(std::size_t bytes);

/// operator delete of task<T> frames: frees the block, unless the frame was
/// spawned and its header is still referenced (then the header frees the
/// block when its last reference goes).
void task_frame_deallocate(void* frame, std::size_t bytes) noexcept;

/// A standard allocator over the frame pools, for small runtime objects
/// that come and go as fast as tasks (a oneshot's shared state, with
/// std::allocate_shared). Types aligned beyond alignof(std::max_align_t) go
/// to the aligned ::operator new. Stateless: every instance is equal.
/// Throws std::bad_alloc as frame_allocate does.
template <class T>
struct pool_allocator {
  using value_type = T;
  pool_allocator() noexcept = default;
  template <class U>
  pool_allocator(pool_allocator<U> const& /*other*/) noexcept {}

  [[nodiscard]] T* allocate(std::size_t n) {
    if constexpr (alignof(T) > alignof(std::max_align_t)) {
      return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
    } else {
      return static_cast<T*>(frame_allocate(n * sizeof(T)));
    }
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if constexpr (alignof(T) > alignof(std::max_align_t)) {
      ::operator delete (p, std::align_val_t{alignof(T)});
    } else {
      frame_deallocate(p, n * sizeof(T));
    }
  }
  template <class U>
  bool operator==(pool_allocator<U> const& /*other*/) const noexcept {
    return true;
  }
};

/// Counters of the calling thread's pool (for tests and benchmarks).
struct frame_pool_counters {
  std::uint64_t pool_hits = 0;      ///< allocations served from a free list
  std::uint64_t pool_misses = 0;    ///< allocations that went to ::operator new
  std::uint64_t depot_refills = 0;  ///< chains taken from the depot (an empty list)
  std::uint64_t depot_spills = 0;   ///< chains handed to the depot (a list past its high water)
};
[[nodiscard]] frame_pool_counters frame_pool_thread_counters() noexcept;

/// Bytes of free blocks held by the depot now (all classes), and its bound.
[[nodiscard]] std::size_t frame_pool_depot_bytes() noexcept;
[[nodiscard]] std::size_t frame_pool_depot_capacity() noexcept;

/// Gives every block in the depot back to ::operator delete (the threads'
/// own lists are kept). Thread-safe.
void frame_pool_release_depot() noexcept;

}  // namespace spindle::detail
