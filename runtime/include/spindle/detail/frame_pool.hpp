// Per-thread recycling pools for coroutine frames and task headers.
//
// Shape: size classes of 8 bytes up to 512 bytes and of 64 bytes up to 4096; each thread (in
// practice each worker) keeps a magazine per class (an array of up to 128 free blocks' addresses,
// used as a stack; nothing is written into a free block), so steady-state spawn/await does not
// call malloc. A block may be freed on another thread than the one that allocated it: it then
// joins the freeing thread's magazine (the pools are caches, not owners). A full magazine hands
// its 64 oldest blocks to a shared depot (at most 64 MiB in all classes; beyond that they go
// back to the system), and an empty one takes 64 from there before it asks the system: tasks
// spawned on one thread and completed on another recycle their blocks without malloc. The system
// is, for the classes whose size is a multiple of 16 bytes, a slab of 64 KiB that the thread carves
// one block at a time (no per-block malloc overhead: a 112-byte task costs 112 bytes, not malloc's
// 128; a slab's pages go back to the kernel once all its blocks are back), and ::operator new for
// the other classes and for larger requests.
//
// Thread-safety: each function touches the calling thread's lists, and the depot under a lock
// per class once per 64 blocks at most; slabs come from a shared source under a lock, once per
// slab.
// Design source: Volt and docs/design.md "Coroutine frames are allocated
// from per-worker recycling pools"; the layout follows tcmalloc's per-thread
// caches and transfer cache in miniature (Bonwick's magazines and depot),
// the slabs Bonwick's slab allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
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

/// The exception a task<T> reports when it failed and there was no memory
/// to keep its own exception (promise_base::unhandled_exception): a
/// std::bad_alloc, made when the library is loaded.
[[nodiscard]] std::exception_ptr const& lost_task_exception() noexcept;

/// Counters of the calling thread's pool (for tests and benchmarks).
struct frame_pool_counters {
  std::uint64_t pool_hits = 0;  ///< allocations served from a magazine
  /// Allocations that went to the system (a slab or ::operator new).
  std::uint64_t pool_misses = 0;
  std::uint64_t depot_refills = 0;  ///< 64 blocks taken from the depot (an empty magazine)
  std::uint64_t depot_spills = 0;   ///< 64 blocks handed to the depot (a full magazine)
};
[[nodiscard]] frame_pool_counters frame_pool_thread_counters() noexcept;

/// Slabs handed to carving threads so far, and slabs whose blocks all came
/// back (their pages purged, their ranges reused), process-wide.
struct frame_pool_slab_counters {
  std::uint64_t taken = 0;
  std::uint64_t returned = 0;
};
[[nodiscard]] frame_pool_slab_counters frame_pool_slabs() noexcept;

/// Bytes of free blocks held by the depot now (all classes), and its bound.
[[nodiscard]] std::size_t frame_pool_depot_bytes() noexcept;
[[nodiscard]] std::size_t frame_pool_depot_capacity() noexcept;

/// Gives every block in the depot back to the system (its slab, or
/// ::operator delete; the threads' own magazines are kept). Thread-safe.
void frame_pool_release_depot() noexcept;

/// Fault injection, for tests of the paths that run when memory runs out:
/// gives the calling thread's magazine of `bytes`-byte blocks back to the
/// system, and makes the thread's next allocation of that size that the
/// magazine cannot serve (the next one, unless the thread frees a block of that
/// size first) throw std::bad_alloc. One allocation only; the hook clears
/// itself. A size the pools do not serve (0, or above 4096 bytes) is
/// ignored. Affects the calling thread alone.
void frame_pool_fail_next_allocation(std::size_t bytes) noexcept;

}  // namespace spindle::detail
