// scan::literal_finder: first occurrences with and without AVX2, ignoring
// case, and the fallbacks (a noisy filter, a frequent rare byte: memmem).
#include <gtest/gtest.h>

#include <cctype>
#include <cstddef>
#include <random>
#include <string>

#include "literal_finder.hpp"

namespace {

TEST(LiteralFinder, FindsFirstOccurrence) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> pick(0, 3);
  for (int round = 0; round < 2000; ++round) {
    std::string hay(static_cast<std::size_t>(round % 300), 'a');
    for (auto& c : hay)
      c = "abc\n"[pick(rng)];
    std::string needle(static_cast<std::size_t>(1 + round % 5), 'a');
    for (auto& c : needle)
      c = "abc"[pick(rng) % 3];
    for (bool avx2 : {true, false}) {
      scan::literal_finder const f(needle, false, avx2);
      char const* got = f.find(hay.data(), hay.data() + hay.size());
      std::size_t const want = hay.find(needle);
      if (want == std::string::npos) {
        EXPECT_EQ(got, nullptr);
      } else {
        EXPECT_EQ(got, hay.data() + want) << needle << " in " << hay;
      }
    }
  }
}

TEST(LiteralFinder, IgnoreCase) {
  std::mt19937 rng(6);
  auto lower = [](std::string s) {
    for (auto& c : s)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  for (int round = 0; round < 3000; ++round) {
    std::string hay(static_cast<std::size_t>(round % 400), 'a');
    for (auto& c : hay)
      c = "aAbB-\xe4\xc4\n"[rng() % 8];
    std::string needle(static_cast<std::size_t>(1 + round % 6), 'a');
    for (auto& c : needle)
      c = "aAbB-\xe4"[rng() % 6];
    std::size_t const want = lower(hay).find(lower(needle));  // tolower: C locale, ASCII
    for (bool avx2 : {true, false}) {
      scan::literal_finder const f(needle, true, avx2);
      char const* got = f.find(hay.data(), hay.data() + hay.size());
      EXPECT_EQ(got, want == std::string::npos ? nullptr : hay.data() + want) << needle;
    }
  }
}

TEST(LiteralFinder, NoisyFilterFallsBackCorrectly) {
  // Over a two-letter alphabet the byte-pair filter passes a quarter of all
  // positions: the finder gives up on it and must still be exact.
  std::mt19937 rng(11);
  for (int round = 0; round < 300; ++round) {
    std::string hay(5000 + static_cast<std::size_t>(round), 'a');
    for (auto& c : hay)
      c = (rng() & 1) != 0 ? 'a' : 'b';
    std::string needle(2 + static_cast<std::size_t>(round % 12), 'a');
    for (auto& c : needle)
      c = (rng() & 1) != 0 ? 'a' : 'b';
    for (bool avx2 : {true, false}) {
      scan::literal_finder const f(needle, false, avx2);
      for (std::size_t from : {std::size_t{0}, std::size_t{1}, std::size_t{777}}) {
        char const* got = f.find(hay.data() + from, hay.data() + hay.size());
        std::size_t const want = hay.find(needle, from);
        EXPECT_EQ(got, want == std::string::npos ? nullptr : hay.data() + want) << needle;
      }
    }
  }
}

TEST(LiteralFinder, FrequentRareByteFallsBackToMemmem) {
  std::string hay(100000, 'q');
  hay += "qqz";
  scan::literal_finder const f("qz");  // every byte is a candidate
  EXPECT_EQ(f.find(hay.data(), hay.data() + hay.size()), hay.data() + 100001);
}

}  // namespace
