// detail::ring_buffer<T>: the growable FIFO ring that buffers a channel's
// values.
//
// Shape: one allocation of `capacity` slots, values constructed in place
// from `head` on (wrapping); capacity doubles when full (from 4) and never
// shrinks. push_front exists for values given back (a receiving task aborted
// after a value was handed to it).
//
// Thread-safety: none; its owner's lock guards it.
// Design source: std::deque's interface on Tokio's VecDeque-backed channel
// buffer.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

namespace spindle::detail {

/// Growable FIFO ring of T (with push_front for give-backs). Not
/// thread-safe. Capacity doubles when full; it never shrinks.
template <class T>
class ring_buffer {
 public:
  ring_buffer() noexcept = default;
  ring_buffer(ring_buffer const&) = delete;
  ring_buffer& operator=(ring_buffer const&) = delete;
  ~ring_buffer() {
    clear();
    if (data_ != nullptr) std::allocator<T>{}.deallocate(data_, cap_);
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  /// Makes room for at least `n` values. Throws std::bad_alloc.
  void reserve(std::size_t n) {
    if (n > cap_) reallocate(n);
  }

  /// Appends. Throws std::bad_alloc before moving from `v`.
  void push_back(T&& v) {
    if (size_ == cap_) grow();
    std::construct_at(slot(head_ + size_), std::move(v));
    ++size_;
  }

  /// Prepends. Throws std::bad_alloc before moving from `v`.
  void push_front(T&& v) {
    if (size_ == cap_) grow();
    head_ = head_ == 0 ? cap_ - 1 : head_ - 1;
    std::construct_at(data_ + head_, std::move(v));
    ++size_;
  }

  /// Removes and returns the first value. Precondition: !empty().
  T pop_front() noexcept {
    T* p = data_ + head_;
    T v(std::move(*p));
    std::destroy_at(p);
    head_ = head_ + 1 == cap_ ? 0 : head_ + 1;
    --size_;
    return v;
  }

  void clear() noexcept {
    while (size_ != 0) {
      std::destroy_at(data_ + head_);
      head_ = head_ + 1 == cap_ ? 0 : head_ + 1;
      --size_;
    }
    head_ = 0;
  }

 private:
  T* slot(std::size_t i) noexcept { return data_ + (i >= cap_ ? i - cap_ : i); }

  void grow() { reallocate(cap_ < 4 ? 4 : cap_ * 2); }

  void reallocate(std::size_t n) {
    T* fresh = std::allocator<T>{}.allocate(n);
    for (std::size_t i = 0; i < size_; ++i) {
      T* from = slot(head_ + i);
      std::construct_at(fresh + i, std::move(*from));
      std::destroy_at(from);
    }
    if (data_ != nullptr) std::allocator<T>{}.deallocate(data_, cap_);
    data_ = fresh;
    cap_ = n;
    head_ = 0;
  }

  T* data_ = nullptr;
  std::size_t cap_ = 0;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace spindle::detail
