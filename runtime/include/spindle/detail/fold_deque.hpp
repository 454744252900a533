// The per-participant work deque of a tree fold (spindle/fold.hpp): a
// Chase-Lev deque of pointers. The owner pushes and pops at the bottom (LIFO,
// depth first), thieves take from the top (FIFO, the oldest and usually the
// largest subtrees).
//
// Shape: a power-of-two ring of std::atomic<T*>, starting at 256 entries and
// doubling when full; retired rings are kept until the deque is destroyed
// (a thief may still read one), so a fold's deques free everything at the
// fold's end. One allocation per doubling, none in steady state.
//
// Why not spindle's run_queue (runtime/src/run_queue.hpp): that ring holds
// task headers, is bounded at 256 and spills into the runtime's global
// queue; a fold's pending children are not tasks and have no global queue to
// spill into (a node with 10^6 children pushes them all), so this deque grows
// instead.
//
// Memory ordering: the slots are atomics written with release and read with
// acquire, so a thief that reads a slot sees the object it points to (also
// under ThreadSanitizer, which does not model standalone fences); top and
// bottom use seq_cst where the algorithm needs the store-load order (pop's
// bottom decrement against steal's top read).
//
// Thread-safety: push and pop by the owner only; steal from any thread.
// Design source: Chase and Lev, "Dynamic circular work-stealing deque"
// (SPAA 2005), with the C11 orderings of Le, Pop, Cohen and Zappa Nardelli
// (PPoPP 2013).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace spindle::detail {

template <class T>
class fold_deque {
 public:
  fold_deque() {
    ring_.push_back(make_ring(256));
    array_.store(ring_.back().get(), std::memory_order_relaxed);
  }
  fold_deque(fold_deque const&) = delete;
  fold_deque& operator=(fold_deque const&) = delete;

  /// Owner: pushes `item` at the bottom (may allocate a larger ring).
  /// Always inlined (a fold's walk pushes every child; the rare growth is
  /// out of line).
  [[gnu::always_inline]] void push(T* item) {
    std::int64_t b = bottom_.load(std::memory_order_relaxed);
    std::int64_t t = top_.load(std::memory_order_acquire);
    ring* a = array_.load(std::memory_order_relaxed);
    if (b - t >= static_cast<std::int64_t>(a->mask)) a = grow(a, t, b);
    a->slots[static_cast<std::size_t>(b) & a->mask].store(item, std::memory_order_release);
    bottom_.store(b + 1, std::memory_order_release);
  }

  /// Owner: the most recently pushed item, or nullptr when empty.
  [[nodiscard]] T* pop() noexcept {
    std::int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
    ring* a = array_.load(std::memory_order_relaxed);
    bottom_.store(b, std::memory_order_seq_cst);
    std::int64_t t = top_.load(std::memory_order_seq_cst);
    if (t > b) {
      bottom_.store(b + 1, std::memory_order_relaxed);
      return nullptr;
    }
    T* item = a->slots[static_cast<std::size_t>(b) & a->mask].load(std::memory_order_relaxed);
    if (t == b) {  // the last item: race the thieves for it
      if (top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst,
                                       std::memory_order_relaxed)) {
        ++own_takes_;
      } else {
        item = nullptr;
      }
      bottom_.store(b + 1, std::memory_order_relaxed);
    }
    return item;
  }

  /// Owner: how many items thieves have taken from this deque so far (top
  /// counts every take from the top; the owner's own are its last-item
  /// pops). A relaxed read: a steal is seen by the owner's next pop at the
  /// latest, whose seq_cst read of top is newer.
  [[nodiscard]] std::int64_t stolen() const noexcept {
    return top_.load(std::memory_order_relaxed) - own_takes_;
  }

  /// Any thread: the oldest item, or nullptr when empty or lost to a race.
  [[nodiscard]] T* steal() noexcept {
    std::int64_t t = top_.load(std::memory_order_seq_cst);
    std::int64_t b = bottom_.load(std::memory_order_seq_cst);
    if (t >= b) return nullptr;
    ring* a = array_.load(std::memory_order_acquire);
    T* item = a->slots[static_cast<std::size_t>(t) & a->mask].load(std::memory_order_acquire);
    if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst,
                                      std::memory_order_relaxed)) {
      return nullptr;
    }
    return item;
  }

  /// A snapshot of the number of items (any thread; exact for the owner).
  [[nodiscard]] std::size_t size() const noexcept {
    std::int64_t b = bottom_.load(std::memory_order_relaxed);
    std::int64_t t = top_.load(std::memory_order_relaxed);
    return b > t ? static_cast<std::size_t>(b - t) : 0;
  }

 private:
  struct ring {
    std::size_t mask;
    std::unique_ptr<std::atomic<T*>[]> slots;
  };

  static std::unique_ptr<ring> make_ring(std::size_t capacity) {
    auto r = std::make_unique<ring>();
    r->mask = capacity - 1;
    r->slots = std::make_unique<std::atomic<T*>[]>(capacity);
    return r;
  }

  [[gnu::noinline]] ring* grow(ring* old, std::int64_t t, std::int64_t b) {
    ring_.push_back(make_ring((old->mask + 1) * 2));
    ring* a = ring_.back().get();
    for (std::int64_t i = t; i < b; ++i) {
      a->slots[static_cast<std::size_t>(i) & a->mask].store(
          old->slots[static_cast<std::size_t>(i) & old->mask].load(std::memory_order_relaxed),
          std::memory_order_relaxed);
    }
    array_.store(a, std::memory_order_release);
    return a;
  }

  alignas(64) std::atomic<std::int64_t> top_{0};
  alignas(64) std::atomic<std::int64_t> bottom_{0};
  std::atomic<ring*> array_{nullptr};
  std::vector<std::unique_ptr<ring>> ring_;  // owner only; all kept until destruction
  std::int64_t own_takes_ = 0;               // owner only: its pops that advanced top
};

}  // namespace spindle::detail
