// The per-participant work deque of a tree fold (spindle/fold.hpp): a split
// deque of pointers. The owner pushes and pops at the bottom (LIFO, depth
// first), thieves take from the top (FIFO, the oldest and usually the
// largest subtrees).
//
// Split: the items are in two parts, [top, split) public and [split,
// bottom) private. Thieves take only public items; the owner pushes and
// pops private items with plain loads and stores, no fence and no locked
// instruction. A Chase-Lev pop needs a store-load fence on every call
// (an xchg on x86, 80% of the walk's perf samples in bench_runtime's
// fib_fold/2/35 at stop 42). Here the owner pays an atomic operation only
// when it moves the split:
//   - share: a thief that finds the public part empty raises `want`; the
//     owner's next pop sees it and makes the older half of its private
//     items public (one fetch_add on the (top, split) word). A thief waits
//     at most until the owner's next pop, which comes after one node.
//   - reclaim: a pop that finds the private part empty takes back the newer
//     half of the public items (one CAS that lowers split), or the last one
//     by advancing top, as a thief would.
// With no thief asking, a fold runs without a single atomic write here.
//
// Shape: top and split are 32-bit halves of one 64-bit atomic word, so a
// thief's CAS checks both at once: it takes item `top` only if top and
// split are still what it read. Positions are uint32 and wrap; every live
// item lies in [top, top + capacity), so differences are exact. top only
// grows (the owner takes the last public item by advancing it, never by
// lowering split to top), so a stalled thief's CAS can never succeed
// against an item that was taken or reused since it read it. The ring is a
// power of two of std::atomic<T*>, starting at 256 entries and doubling
// when full; retired rings are kept until the deque is destroyed (a thief
// may still read one). One allocation per doubling, none in steady state.
//
// Why not spindle's run_queue (runtime/src/run_queue.hpp): that ring holds
// task headers, is bounded at 256 and spills into the runtime's global
// queue; a fold's pending children are not tasks and have no global queue to
// spill into (a node with 10^6 children pushes them all), so this deque grows
// instead.
//
// Memory ordering: the owner writes a slot (relaxed) before the release RMW
// that makes it public; a thief's acquire load of the word then sees the
// slot and the object it points to (also under ThreadSanitizer, which does
// not model standalone fences). Thieves' CASes are acq_rel RMWs on the same
// word, so they continue its release sequence.
//
// Thread-safety: push, pop, share, stolen and size by the owner only;
// steal from any thread.
// Design source: the split deque of Lace (van Dijk and van de Pol, "Lace:
// non-blocking split deque for work-stealing", Euro-Par 2014 workshops);
// receiver-initiated sharing as in Acar, Charguéraud and Rainey,
// "Scheduling parallel programs by work stealing with private deques"
// (PPoPP 2013); the growing ring of Chase and Lev (SPAA 2005).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace spindle::detail {

// The friend fold_deque declares for tests (tests/fuzz/fuzz_fold_deque.cpp):
// a start position, and a steal in two steps (a stalled thief).
struct fold_deque_test_access;

template <class T>
class fold_deque {
 public:
  fold_deque() {
    rings_.push_back(make_ring(256));
    ring_ = rings_.back().get();
    array_.store(ring_, std::memory_order_relaxed);
  }
  fold_deque(fold_deque const&) = delete;
  fold_deque& operator=(fold_deque const&) = delete;

  /// Owner: pushes `item` (not null) at the bottom, private (may allocate a larger
  /// ring; std::bad_alloc then, with nothing pushed). Always inlined (a
  /// fold's walk pushes every child; the rare growth is out of line).
  [[gnu::always_inline]] void push(T* item) {
    std::uint32_t b = bottom_;
    if (b - top_seen_ >= ring_->mask) grow();
    ring_->slots[b & ring_->mask].store(item, std::memory_order_relaxed);
    bottom_ = b + 1;
  }

  /// Owner: the most recently pushed item, or nullptr when the deque is
  /// empty (every item popped or stolen). Shares half of the private items
  /// first when a thief asked.
  [[nodiscard, gnu::always_inline]] T* pop() noexcept {
    if (want_.load(std::memory_order_relaxed)) [[unlikely]]
      share_on_request();
    if (bottom_ != split_) [[likely]] {
      --bottom_;
      return ring_->slots[bottom_ & ring_->mask].load(std::memory_order_relaxed);
    }
    return reclaim();
  }

  /// Owner: makes the `n` oldest private items public (all of them when
  /// fewer), with one atomic RMW; no-op for 0. pop() calls it when a thief
  /// asks; a caller may also share ahead of time.
  void share(std::uint32_t n) noexcept {
    std::uint32_t have = bottom_ - split_;
    if (n > have) n = have;
    if (n == 0) return;
    word_.fetch_add(std::uint64_t{n} << 32, std::memory_order_release);
    split_ += n;
  }

  /// Owner: how many items thieves have taken from this deque so far (top
  /// counts every take from the public part; the owner's own are its takes
  /// of the last public item). A relaxed read of the word thieves advance.
  [[nodiscard]] std::int64_t stolen() const noexcept {
    return static_cast<std::int64_t>(
        static_cast<std::uint32_t>(top_of(word_.load(std::memory_order_relaxed)) - own_takes_));
  }

  /// Any thread: the oldest public item, or nullptr when there is none or
  /// another thief won it. Finding the public part empty asks the owner
  /// to share (want), so a later attempt finds work if the owner has any.
  [[nodiscard]] T* steal() noexcept {
    attempt a = steal_read();
    return a.item != nullptr ? steal_commit(a) : nullptr;
  }

  /// Owner: the number of items, public and private (exact: thieves only
  /// lower it).
  [[nodiscard]] std::size_t size() const noexcept {
    return bottom_ - top_of(word_.load(std::memory_order_relaxed));
  }

 private:
  struct ring {
    std::uint32_t mask;
    std::unique_ptr<std::atomic<T*>[]> slots;
  };

  static constexpr std::uint32_t top_of(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w);
  }
  static constexpr std::uint32_t split_of(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w >> 32);
  }
  static constexpr std::uint64_t with_top(std::uint64_t w, std::uint32_t t) noexcept {
    return (w & ~std::uint64_t{0xffffffff}) | t;
  }
  static constexpr std::uint64_t pack(std::uint32_t t, std::uint32_t s) noexcept {
    return (std::uint64_t{s} << 32) | t;
  }

  friend struct fold_deque_test_access;

  // A steal's two steps: read the word and the oldest public item (nullptr
  // when there is none: then ask the owner to share), then take it if the
  // word is still what was read.
  struct attempt {
    std::uint64_t word;
    T* item;
  };
  [[gnu::always_inline]] attempt steal_read() noexcept {
    std::uint64_t w = word_.load(std::memory_order_acquire);
    std::uint32_t t = top_of(w);
    if (t == split_of(w)) {
      if (!want_.load(std::memory_order_relaxed)) want_.store(true, std::memory_order_relaxed);
      return {w, nullptr};
    }
    ring* a = array_.load(std::memory_order_acquire);
    return {w, a->slots[t & a->mask].load(std::memory_order_relaxed)};
  }
  [[gnu::always_inline]] T* steal_commit(attempt a) noexcept {
    std::uint64_t w = a.word;
    if (!word_.compare_exchange_strong(w, with_top(w, top_of(w) + 1), std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
      return nullptr;
    }
    return a.item;
  }

  static std::unique_ptr<ring> make_ring(std::uint32_t capacity) {
    auto r = std::make_unique<ring>();
    r->mask = capacity - 1;
    r->slots = std::make_unique<std::atomic<T*>[]>(capacity);
    return r;
  }

  // A thief asked: share the older half of the private items, when there
  // are at least two (the owner keeps the newer half and pops one of them
  // next). With fewer, the request stays for a later pop.
  [[gnu::noinline]] void share_on_request() noexcept {
    std::uint32_t have = bottom_ - split_;
    if (have < 2) return;
    want_.store(false, std::memory_order_relaxed);
    share(have / 2);
  }

  // The private part is empty: take back public items. nullptr when none
  // is left (everything was stolen).
  [[gnu::noinline]] T* reclaim() noexcept {
    std::uint64_t w = word_.load(std::memory_order_acquire);
    for (;;) {
      std::uint32_t t = top_of(w);
      std::uint32_t n = split_ - t;
      top_seen_ = t;
      if (n == 0) return nullptr;
      if (n == 1) {
        // The last one: advance top, as a thief does, so top stays the
        // only index that ever moves down the public part.
        if (word_.compare_exchange_weak(w, with_top(w, t + 1), std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
          ++own_takes_;
          top_seen_ = t + 1;
          return ring_->slots[t & ring_->mask].load(std::memory_order_relaxed);
        }
        continue;
      }
      // Keep the older half public (at least one, so split > top: no
      // index below split is ever reused while top has not passed it).
      std::uint32_t s = t + n / 2;
      if (word_.compare_exchange_weak(w, pack(t, s), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        split_ = s;
        --bottom_;
        return ring_->slots[bottom_ & ring_->mask].load(std::memory_order_relaxed);
      }
    }
  }

  // Full as far as the last top seen: read top again, and double the ring
  // if it really is.
  [[gnu::noinline]] void grow() {
    std::uint32_t t = top_of(word_.load(std::memory_order_relaxed));
    top_seen_ = t;
    if (bottom_ - t < ring_->mask) return;
    ring* old = ring_;
    rings_.push_back(make_ring((old->mask + 1) * 2));
    ring* a = rings_.back().get();
    for (std::uint32_t i = t; i != bottom_; ++i) {
      a->slots[i & a->mask].store(old->slots[i & old->mask].load(std::memory_order_relaxed),
                                  std::memory_order_relaxed);
    }
    ring_ = a;
    array_.store(a, std::memory_order_release);
  }

  // The thieves' line: the (top, split) word, the ring they read, and the
  // flag by which they ask the owner to share.
  alignas(64) std::atomic<std::uint64_t> word_{0};  // split << 32 | top
  std::atomic<ring*> array_{nullptr};
  std::atomic<bool> want_{false};
  // The owner's own (plain: nobody else reads them).
  alignas(64) std::uint32_t bottom_ = 0;
  std::uint32_t split_ = 0;      // = split_of(word_): only the owner moves split
  std::uint32_t top_seen_ = 0;   // a top read earlier (top only grows): the push's room check
  std::uint32_t own_takes_ = 0;  // the owner's takes of the last public item
  ring* ring_ = nullptr;
  std::vector<std::unique_ptr<ring>> rings_;  // all kept until destruction
};

}  // namespace spindle::detail
