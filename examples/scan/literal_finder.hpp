// scan::literal_finder: finds a fixed byte string in a buffer, fast.
//
// Shape: one byte: memchr. Longer (or ignoring ASCII case): a SIMD filter
// compares two of the needle's rarest bytes (by a hand-made estimate of how
// common each byte is in the files people search) at their offsets against
// 32 (AVX2, when the CPU has it) or 16 (SSE2) candidate positions per step;
// each surviving position is checked with memcmp (or a case-folded compare).
// The last few positions go through memchr on the rarest byte, and glibc's
// memmem takes over when the filter lets too much through.
//
// Thread-safety: immutable after construction; find() from any thread.
// Design source: the rare-byte pair filter of the memchr crate that ripgrep
// uses, and Wojciech Mula's SIMD-friendly substring search.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace scan {

/// Finds a fixed byte string (optionally ignoring ASCII case). One byte:
/// memchr. Longer (or ignoring case): a SIMD filter on two of its rarest
/// bytes at their offsets (AVX2 when the CPU has it, else SSE2; 32 or 16
/// candidate positions per step), each surviving position checked with
/// memcmp; memchr on the rarest byte for the last few positions, and glibc's
/// memmem when the filter lets too much through.
class literal_finder {
 public:
  /// `ignore_case`: ASCII letters match either case. `allow_avx2 = false`
  /// keeps to SSE2 (for tests).
  explicit literal_finder(std::string needle, bool ignore_case = false, bool allow_avx2 = true);
  /// First occurrence in [begin, end), or nullptr.
  char const* find(char const* begin, char const* end) const noexcept;
  [[nodiscard]] std::string const& needle() const noexcept { return needle_; }
  /// The two needle offsets the SIMD filter compares (for tests).
  [[nodiscard]] std::pair<std::size_t, std::size_t> filter_offsets() const noexcept {
    return {first_, second_};
  }

 private:
  char const* find_scalar(char const* begin, char const* end) const noexcept;

  std::string needle_;
  std::size_t first_ = 0;   // offset of the rarest byte
  std::size_t second_ = 0;  // offset of the next rarest (another offset)
  bool icase_ = false;      // needle_ is then in lower case
  bool avx2_ = false;
};

}  // namespace scan
