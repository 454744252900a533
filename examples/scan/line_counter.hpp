// scan::line_counter: the matching lines of one file that arrives in reads of
// any size (spindle-scan's per-file loop; tests/fuzz/fuzz_line_count.cpp
// drives it with arbitrary buffer and read sizes).
//
// Shape: read into space(), then commit(n) the bytes read: the complete lines
// received so far are counted at once and the partial last line waits in the
// line_buffer for the next read (the buffer grows when one line fills it);
// finish() counts the unterminated last line at end of file and returns the
// number of matching lines (grep's line model, see matcher.hpp).
//
// Errors: matcher::count_lines' std::runtime_error (PCRE2 gave up on a line);
// line_buffer::space() may throw std::bad_alloc.
// Thread-safety: none; one file scan at a time, which owns the buffer and
// the scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "line_buffer.hpp"
#include "matcher.hpp"

namespace scan {

class line_counter {
 public:
  /// Counts into `buffer` as it is (reset() it first for a new file).
  line_counter(matcher const& m, matcher::scratch& s, line_buffer& buffer) noexcept
      : matcher_(m), scratch_(s), buffer_(buffer) {}

  /// Where the next read goes (at least one byte).
  [[nodiscard]] std::span<char> space() { return buffer_.space(); }

  /// Records `n` bytes read into space() and counts the lines they complete.
  void commit(std::size_t n) {
    buffer_.commit(n);
    count_ += matcher_.count_lines(buffer_.take_lines(), scratch_);
  }

  /// End of file: counts the last line if it had no '\n'; returns the total.
  [[nodiscard]] std::uint64_t finish() {
    count_ += matcher_.count_lines(buffer_.take_rest(), scratch_);
    return count_;
  }

 private:
  matcher const& matcher_;
  matcher::scratch& scratch_;
  line_buffer& buffer_;
  std::uint64_t count_ = 0;
};

}  // namespace scan
