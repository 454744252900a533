#include "count.hpp"

#include <algorithm>
#include <array>

namespace wc {
namespace {

// Per byte: bit 0 = printable non-space (a word byte), bit 1 = whitespace.
constexpr std::array<unsigned char, 256> kTable = [] {
  std::array<unsigned char, 256> t{};
  for (unsigned c = 0; c < 256; ++c) {
    switch (classify(static_cast<unsigned char>(c))) {
      case byte_class::print:
        t[c] = 1;
        break;
      case byte_class::space:
        t[c] = 2;
        break;
      case byte_class::other:
        break;
    }
  }
  return t;
}();

}  // namespace

void counter::feed(std::span<std::byte const> data) noexcept {
  auto const* p = reinterpret_cast<unsigned char const*>(data.data());
  std::size_t const n = data.size();
  counts_.bytes += n;
  counts_.lines += static_cast<std::uint64_t>(std::count(p, p + n, '\n'));
  if (!count_words_) return;
  // Branch-free: a word starts at a word byte outside a word; whitespace
  // leaves the word, other bytes keep the state.
  std::uint64_t words = 0;
  unsigned in_word = in_word_ ? 1u : 0u;
  for (std::size_t k = 0; k < n; ++k) {
    unsigned const t = kTable[p[k]];
    unsigned const word_byte = t & 1u;
    words += word_byte & (in_word ^ 1u);
    in_word = word_byte | (in_word & ((t >> 1) ^ 1u));
  }
  counts_.words += words;
  in_word_ = in_word != 0;
}

counts count_buffer(std::span<std::byte const> data, bool words) noexcept {
  counter c(words);
  c.feed(data);
  return c.result();
}

}  // namespace wc
