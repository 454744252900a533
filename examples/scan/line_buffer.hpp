// scan::line_buffer: a reusable read buffer that hands out complete lines.
//
// Shape: one heap block [0, capacity). Reads land after the pending bytes;
// take_lines() returns everything through the last '\n' and keeps the
// partial last line pending; the next space() moves that line to the front.
// A line longer than the buffer doubles it (space() never returns an empty
// span); reset() shrinks a grown buffer back so that a pool of buffers stays
// bounded after one huge line.
//
// Thread-safety: none; a buffer belongs to one file scan at a time (the scan
// may move between threads while it owns the buffer).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

namespace scan {

class line_buffer {
 public:
  explicit line_buffer(std::size_t capacity = 128 * 1024);

  /// Writable space after the pending bytes (at least one byte).
  std::span<char> space();
  /// Records that `n` bytes were written at the start of space().
  void commit(std::size_t n) noexcept { end_ += n; }
  /// The complete lines received so far ('\n' included); may be empty.
  std::string_view take_lines() noexcept;
  /// Everything still pending (the unterminated last line at end of file).
  std::string_view take_rest() noexcept;
  /// Forgets the contents; shrinks the block back to the initial capacity
  /// when a long line grew it past `keep_limit`.
  void reset(std::size_t keep_limit = 1024 * 1024);

  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t pending() const noexcept { return end_ - begin_; }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t initial_capacity_;
  std::size_t capacity_;
  std::size_t begin_ = 0;  // first pending byte
  std::size_t end_ = 0;    // one past the last received byte
};

}  // namespace scan
