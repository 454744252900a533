// scan::literal_finder (see literal_finder.hpp).
#include "literal_finder.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace scan {

namespace {

// How common a byte is in the files people search (source code, text,
// some binaries): higher is more common. A hand-made estimate, used only to
// pick which needle byte to hand to memchr.
std::array<std::uint8_t, 256> make_byte_ranks() {
  std::array<std::uint8_t, 256> r{};
  for (int c = 0; c < 256; ++c)
    r[c] = c < 32 ? 10 : (c < 127 ? 90 : 30);
  r[0] = 60;
  r[0xff] = 60;
  r['\t'] = 140;
  r['\r'] = 50;
  r[' '] = 255;
  char const* by_frequency = "etaoinsrhldcumfpgwybvkxjqz";  // common first
  for (int k = 0; by_frequency[k] != 0; ++k) {
    int const score = 250 - 6 * k;
    r[static_cast<unsigned char>(by_frequency[k])] = static_cast<std::uint8_t>(score);
    r[static_cast<unsigned char>(by_frequency[k] - 'a' + 'A')] =
        static_cast<std::uint8_t>(std::max(40, score / 2));
  }
  for (int d = '0'; d <= '9'; ++d)
    r[d] = d <= '2' ? 140 : 110;
  char const* punct_common = "_.,()/;-=*\"";
  for (int k = 0; punct_common[k] != 0; ++k)
    r[static_cast<unsigned char>(punct_common[k])] = 160;
  char const* punct_middle = "':{}<>[]#+";
  for (int k = 0; punct_middle[k] != 0; ++k)
    r[static_cast<unsigned char>(punct_middle[k])] = 115;
  char const* punct_rare = "&|!?%@$\\^`~";
  for (int k = 0; punct_rare[k] != 0; ++k)
    r[static_cast<unsigned char>(punct_rare[k])] = 70;
  return r;
}

std::array<std::uint8_t, 256> const byte_ranks = make_byte_ranks();

}  // namespace

namespace {

constexpr unsigned char fold(unsigned char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<unsigned char>(c + ('a' - 'A')) : c;
}
constexpr unsigned char other_case(unsigned char c) noexcept {
  if (c >= 'a' && c <= 'z') return static_cast<unsigned char>(c - ('a' - 'A'));
  if (c >= 'A' && c <= 'Z') return static_cast<unsigned char>(c + ('a' - 'A'));
  return c;
}
// `text` equals the lower-case `folded` ignoring ASCII case.
bool equal_folded(char const* text, std::string const& folded) noexcept {
  for (std::size_t k = 0; k < folded.size(); ++k) {
    if (fold(static_cast<unsigned char>(text[k])) != static_cast<unsigned char>(folded[k])) {
      return false;
    }
  }
  return true;
}

}  // namespace

literal_finder::literal_finder(std::string needle, bool ignore_case, bool allow_avx2)
    : needle_(std::move(needle)) {
  if (needle_.empty()) throw std::invalid_argument("literal_finder: empty needle");
  icase_ = ignore_case && std::any_of(needle_.begin(), needle_.end(), [](char c) {
             return other_case(static_cast<unsigned char>(c)) != static_cast<unsigned char>(c);
           });
  if (icase_) {
    for (char& c : needle_)
      c = static_cast<char>(fold(static_cast<unsigned char>(c)));
  }
  auto rank = [this](std::size_t k) {
    auto const c = static_cast<unsigned char>(needle_[k]);
    return icase_ ? std::max(byte_ranks[c], byte_ranks[other_case(c)]) : byte_ranks[c];
  };
  for (std::size_t k = 1; k < needle_.size(); ++k) {
    if (rank(k) < rank(first_)) first_ = k;
  }
  // The second offset: the rarest among the others, preferring a byte value
  // different from the first (two equal bytes filter less).
  second_ = first_ == 0 ? needle_.size() - 1 : 0;
  for (std::size_t k = 0; k < needle_.size(); ++k) {
    if (k == first_) continue;
    bool const k_differs = needle_[k] != needle_[first_];
    bool const cur_differs = needle_[second_] != needle_[first_];
    if ((k_differs && !cur_differs) || (k_differs == cur_differs && rank(k) < rank(second_))) {
      second_ = k;
    }
  }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  avx2_ = allow_avx2 && __builtin_cpu_supports("avx2") != 0;
#else
  (void)allow_avx2;
#endif
}

char const* literal_finder::find_scalar(char const* begin, char const* end) const noexcept {
  std::size_t const m = needle_.size();
  if (static_cast<std::size_t>(end - begin) < m) return nullptr;
  char const* const last_start = end - m;
  if (icase_) {
    auto const rare = static_cast<unsigned char>(needle_[first_]);
    for (char const* start = begin; start <= last_start; ++start) {
      if (fold(static_cast<unsigned char>(start[first_])) == rare && equal_folded(start, needle_)) {
        return start;
      }
    }
    return nullptr;
  }
  char const rare = needle_[first_];
  char const* p = begin + first_;
  char const* const scan_end = last_start + first_ + 1;  // rare byte of the last start
  std::size_t misses = 0;
  while (p < scan_end) {
    char const* q = static_cast<char const*>(std::memchr(p, rare, scan_end - p));
    if (q == nullptr) return nullptr;
    char const* start = q - first_;
    if (std::memcmp(start, needle_.data(), m) == 0) return start;
    p = q + 1;
    // The rare byte is not rare here: let glibc's memmem take the rest.
    if (++misses >= 16 && static_cast<std::size_t>(p - begin) < misses * 64) {
      return static_cast<char const*>(memmem(start + 1, end - (start + 1), needle_.data(), m));
    }
  }
  return nullptr;
}

#if defined(__SSE2__)
namespace {

// The SIMD filter: for every block of 16 or 32 candidate starts at p,
// compare the bytes at p + first and p + second with the needle's (with
// Icase, with both cases of each); check the starts where both agree.
// Advances `p` over the blocks it has cleared and returns a match, or
// nullptr when the blocks ran out (then p is where they stopped) or when
// false candidates came so often that memmem should take over (then
// `give_up` is set; never with Icase).
struct pair_filter {
  std::string const& needle;  // lower case with Icase
  std::size_t first;
  std::size_t second;
  char const* begin;
  char const* last_start;  // last possible start of a match
  std::size_t false_hits = 0;
  bool give_up = false;

  // Returns the first match among the candidate starts in `mask`.
  template <bool Icase>
  char const* check(char const* p, std::uint32_t mask) noexcept {
    while (mask != 0) {
      char const* candidate = p + __builtin_ctz(mask);
      if (candidate > last_start) return nullptr;
      if (Icase ? equal_folded(candidate, needle)
                : std::memcmp(candidate, needle.data(), needle.size()) == 0) {
        return candidate;
      }
      ++false_hits;
      mask &= mask - 1;
    }
    return nullptr;
  }
  // About one false candidate per 16 bytes: the filter does not pay.
  bool too_noisy(char const* p) const noexcept {
    return false_hits > 64 && static_cast<std::size_t>(p - begin) < false_hits * 16;
  }

  char byte(std::size_t k, bool upper) const noexcept {
    auto const c = static_cast<unsigned char>(needle[k]);
    return static_cast<char>(upper ? other_case(c) : c);
  }

  template <bool Icase>
  char const* run_sse2(char const*& p, char const* last_block) noexcept {
    __m128i const b1 = _mm_set1_epi8(byte(first, false));
    __m128i const b2 = _mm_set1_epi8(byte(second, false));
    __m128i const u1 = _mm_set1_epi8(byte(first, true));
    __m128i const u2 = _mm_set1_epi8(byte(second, true));
    // Locals, so that the compiler keeps them in registers.
    char const* q = p;
    std::size_t const o1 = first;
    std::size_t const o2 = second;
    for (; q <= last_block; q += 16) {
      __m128i const v1 = _mm_loadu_si128(reinterpret_cast<__m128i const*>(q + o1));
      __m128i const v2 = _mm_loadu_si128(reinterpret_cast<__m128i const*>(q + o2));
      __m128i e1 = _mm_cmpeq_epi8(v1, b1);
      __m128i e2 = _mm_cmpeq_epi8(v2, b2);
      if constexpr (Icase) {
        e1 = _mm_or_si128(e1, _mm_cmpeq_epi8(v1, u1));
        e2 = _mm_or_si128(e2, _mm_cmpeq_epi8(v2, u2));
      }
      auto const mask = static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_and_si128(e1, e2)));
      if (mask != 0) {
        p = q;
        if (char const* hit = check<Icase>(q, mask)) return hit;
        if (!Icase && too_noisy(q)) {
          give_up = true;
          return nullptr;
        }
      }
    }
    p = q;
    return nullptr;
  }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  template <bool Icase>
  __attribute__((target("avx2"))) char const* run_avx2(char const*& p,
                                                       char const* last_block) noexcept {
    __m256i const b1 = _mm256_set1_epi8(byte(first, false));
    __m256i const b2 = _mm256_set1_epi8(byte(second, false));
    __m256i const u1 = _mm256_set1_epi8(byte(first, true));
    __m256i const u2 = _mm256_set1_epi8(byte(second, true));
    char const* q = p;
    std::size_t const o1 = first;
    std::size_t const o2 = second;
    for (; q <= last_block; q += 32) {
      __m256i const v1 = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(q + o1));
      __m256i const v2 = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(q + o2));
      __m256i e1 = _mm256_cmpeq_epi8(v1, b1);
      __m256i e2 = _mm256_cmpeq_epi8(v2, b2);
      if constexpr (Icase) {
        e1 = _mm256_or_si256(e1, _mm256_cmpeq_epi8(v1, u1));
        e2 = _mm256_or_si256(e2, _mm256_cmpeq_epi8(v2, u2));
      }
      auto const mask = static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_and_si256(e1, e2)));
      if (mask != 0) {
        p = q;
        if (char const* hit = check<Icase>(q, mask)) return hit;
        if (!Icase && too_noisy(q)) {
          give_up = true;
          return nullptr;
        }
      }
    }
    p = q;
    return nullptr;
  }
#endif
};

}  // namespace
#endif

char const* literal_finder::find(char const* begin, char const* end) const noexcept {
  std::size_t const m = needle_.size();
  if (static_cast<std::size_t>(end - begin) < m) return nullptr;
  if (m == 1 && !icase_)
    return static_cast<char const*>(std::memchr(begin, needle_[0], end - begin));
  char const* p = begin;
#if defined(__SSE2__)
  // Both loads of a block stay inside [begin, end).
  std::size_t const reach = std::max(first_, second_);
  pair_filter filter{needle_, first_, second_, begin, end - m};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (avx2_ && static_cast<std::size_t>(end - p) >= reach + 32) {
    char const* hit = icase_ ? filter.run_avx2<true>(p, end - reach - 32)
                             : filter.run_avx2<false>(p, end - reach - 32);
    if (hit != nullptr) return hit;
  }
#endif
  if (!filter.give_up && static_cast<std::size_t>(end - p) >= reach + 16) {
    char const* hit = icase_ ? filter.run_sse2<true>(p, end - reach - 16)
                             : filter.run_sse2<false>(p, end - reach - 16);
    if (hit != nullptr) return hit;
  }
  if (filter.give_up) return static_cast<char const*>(memmem(p, end - p, needle_.data(), m));
#endif
  return find_scalar(p, end);  // the last few starts
}

}  // namespace scan
