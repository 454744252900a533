// wc::counter: lines, words and bytes of a byte stream fed in chunks, with
// GNU wc's rules in the C locale (LC_ALL=C).
//
// Rules (coreutils 9.1 wc.c, single-byte locale): a line is a '\n'; a byte
// count is every byte; a word is a maximal run of bytes that starts at a
// printable non-space byte (0x21..0x7e) and ends at whitespace (space, \t,
// \n, \v, \f, \r). Every other byte (controls such as NUL or ESC, DEL, and
// bytes 0x80..0xff) neither starts nor ends a word: "a\x80b" is one word,
// "\x80" alone is none. A word that runs to the end of the input counts.
//
// Chunk boundaries do not matter: the counter carries the "inside a word"
// state from one feed() to the next, so feeding a stream in any split gives
// the same counts as feeding it whole.
//
// Thread-safety: a counter is a plain value, used by one thread (or fiber)
// at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace wc {

struct counts {
  std::uint64_t lines = 0;
  std::uint64_t words = 0;
  std::uint64_t bytes = 0;

  counts& operator+=(counts const& other) noexcept {
    lines += other.lines;
    words += other.words;
    bytes += other.bytes;
    return *this;
  }
  friend bool operator==(counts const&, counts const&) = default;
};

/// What is counted and printed (GNU wc's -l, -w, -c; none given: all three).
struct selection {
  bool lines = true;
  bool words = true;
  bool bytes = true;

  [[nodiscard]] int size() const noexcept {
    return static_cast<int>(lines) + static_cast<int>(words) + static_cast<int>(bytes);
  }
};

/// How GNU wc classifies a byte in the C locale.
enum class byte_class : unsigned char {
  other,  ///< neither starts nor ends a word (controls, DEL, 0x80..0xff)
  space,  ///< ends a word: ' ', \t, \n, \v, \f, \r
  print,  ///< starts or continues a word: 0x21..0x7e
};

[[nodiscard]] constexpr byte_class classify(unsigned char c) noexcept {
  if (c == ' ' || (c >= '\t' && c <= '\r')) return byte_class::space;
  if (c > ' ' && c < 0x7f) return byte_class::print;
  return byte_class::other;
}

class counter {
 public:
  /// `words`: count words (the slower byte loop); without it only lines
  /// and bytes are counted (words stay 0).
  explicit counter(bool words = true) noexcept : count_words_(words) {}

  /// Counts `data`, continuing a word left open by the previous chunk.
  void feed(std::span<std::byte const> data) noexcept;

  /// The counts of everything fed so far.
  [[nodiscard]] counts result() const noexcept { return counts_; }

 private:
  counts counts_;
  bool count_words_;
  bool in_word_ = false;
};

/// Counts one buffer on its own (a fresh counter).
[[nodiscard]] counts count_buffer(std::span<std::byte const> data, bool words = true) noexcept;

}  // namespace wc
