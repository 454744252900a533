// scan::matcher: grep's line model, and line counting on random texts
// against simple references (a per-line PCRE2 match, std::regex's POSIX
// ERE, std::string::find), whole and fed through a line_buffer in chunks.
// scan::count_newlines against std::count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "scan_test_support.hpp"

namespace {

using namespace scan_test;

TEST(LineModel, FinalLineWithoutNewlineCounts) {
  EXPECT_EQ(count(ere({"a"}), "a"), 1u);
  EXPECT_EQ(count(ere({"a"}), "b\na"), 1u);
  EXPECT_EQ(count(ere({"a"}), "a\n"), 1u);
  EXPECT_EQ(count(fixed({"abc"}), "xx\nzabc"), 1u);
}

TEST(LineModel, EmptyPatternMatchesEveryLine) {
  EXPECT_EQ(count(ere({""}), ""), 0u);
  EXPECT_EQ(count(ere({""}), "\n"), 1u);
  EXPECT_EQ(count(ere({""}), "a\n\nb"), 3u);
  EXPECT_EQ(count(fixed({""}), "a\n\nb\n"), 3u);
  EXPECT_EQ(count(ere({"zzz", ""}), "a\nb"), 2u);
  EXPECT_EQ(matcher(ere({""})).kind(), matcher::strategy::every_line);
}

TEST(LineModel, NewlineInPatternSeparatesPatterns) {
  EXPECT_EQ(count(ere({"foo\nbar"}), "foo\nbar\nbaz\n"), 2u);
  EXPECT_EQ(count(fixed({"foo\nbar"}), "foo\nbar\nbaz\n"), 2u);
  // A trailing newline adds an empty pattern, which matches every line (grep).
  EXPECT_EQ(count(ere({"zzz\n"}), "foo\nbar\n"), 2u);
}

TEST(LineModel, EmptyLinesAndAnchors) {
  EXPECT_EQ(count(ere({"^$"}), "a\n\n\nb\n\n"), 3u);
  EXPECT_EQ(count(ere({"^$"}), "\n"), 1u);
  EXPECT_EQ(count(ere({"^"}), "a\n\n"), 2u);
  EXPECT_EQ(count(ere({"$"}), "a\n\nb"), 3u);
  EXPECT_EQ(count(ere({"^b"}), "a\nb\nab"), 1u);
  EXPECT_EQ(count(ere({"a$"}), "a\r\nba\n"), 1u);  // CR is an ordinary byte
  EXPECT_EQ(count(ere({"a\r$"}), "a\r\nba\n"), 1u);
}

TEST(LineModel, NulAndHighBytesAreOrdinary) {
  std::string const text("a\0b\nxx\n\xe4\n", 9);
  EXPECT_EQ(count(ere({"a.b"}), text), 1u);
  EXPECT_EQ(count(ere({"[^x]"}), text), 2u);
  EXPECT_EQ(count(fixed({std::string("\0b", 2)}), text), 1u);
  EXPECT_EQ(count(ere({"."}), text), 3u);
}

TEST(LineModel, IgnoreCaseIsAsciiOnly) {
  std::string const text = "A\nb\n\xe4\n\xc4\n";
  EXPECT_EQ(count(ere({"a"}, true), text), 1u);
  EXPECT_EQ(count(ere({"\xe4"}, true), text), 1u);
  EXPECT_EQ(count(ere({"[[:alpha:]]"}), text), 2u);
  EXPECT_EQ(count(ere({"[[:upper:]]"}, true), text), 2u);
  EXPECT_EQ(count(ere({"\\w"}), text), 2u);
  EXPECT_EQ(count(fixed({"B"}, true), text), 1u);
  EXPECT_EQ(count(fixed({"A", "B"}, true), text), 2u);
}

std::vector<std::vector<std::string>> const random_patterns = {
    {"a"},
    {"ab"},
    {"abc"},
    {"a b"},
    {"xyz"},
    {"a", "b"},
    {"ab", "zz", "C"},
    {"^a"},
    {"b$"},
    {"^$"},
    {"^a.*b$"},
    {"a.b"},
    {"[^ab]"},
    {"[^a]b"},
    {"a[^x]*c"},
    {"(ab|ba){2}"},
    {"a?b+c"},
    {"[0-9]{2,3}"},
    {"[[:upper:]]a"},
    {"[[:space:]]$"},
    {"[[:punct:]][[:digit:]]"},
    {"\\<ab"},
    {"b\\>"},
    {"\\bc\\b"},
    {"\\Bb"},
    {"\\w\\W\\w"},
    {"a\\s+b"},
    {"\\S{5}"},
    {"(a|b)\\1"},
    {"([abc])x?\\1"},
    {"x|y|z"},
    {"a{,2}b{2,}"},
    {"[^\xff]\xe4"},
    {"\r$"},
    {"\\.-"},
    {"_0123"},
    {"ab.c"},
    {"xy[0-9]"},
    {"\\<_0"},
    {"C.*ab"},
    {"a b\\>"},
    {"^ab"},
    {"bc$"},
    {"(a|b)c d"},
};

TEST(Random, PcreMatchesPerLineReference) {
  std::mt19937 rng(12345);
  for (bool icase : {false, true}) {
    for (auto const& patterns : random_patterns) {
      match_options const o = ere(patterns, icase);
      matcher m(o);
      auto s = m.make_scratch();
      per_line_reference ref(o);
      for (int round = 0; round < 6; ++round) {
        std::string const text = random_text(rng, 200, round % 2 == 0);
        SCOPED_TRACE(patterns[0] + (icase ? " -i" : "") + " round " + std::to_string(round));
        std::uint64_t const expected = ref.count(text);
        EXPECT_EQ(m.count_lines(text, s), expected);
        EXPECT_EQ(chunked_count(m, text, 64, rng), expected);
        EXPECT_EQ(chunked_count(m, text, 4096, rng), expected);
      }
    }
  }
}

TEST(Random, PlainEreMatchesStdRegex) {
  // Patterns within POSIX ERE, which std::regex implements independently.
  std::vector<std::string> const posix = {
      "a",
      "ab",
      "a b",
      "^a",
      "b$",
      "^$",
      "a.b",
      "[^ab]",
      "[^a]b",
      "(ab|ba){2}",
      "a?b+c",
      "[0-9]{2,3}",
      "[[:upper:]]a",
      "x|y|z",
      "a(b|c)*",
      "[[:space:]]$",
      "[[:punct:]][[:digit:]]",
      "^[^a]*$",
      "(a|b|c)+_",
      "C.*a",
  };
  std::mt19937 rng(777);
  for (bool icase : {false, true}) {
    for (auto const& p : posix) {
      matcher m(ere({p}, icase));
      auto s = m.make_scratch();
      for (int round = 0; round < 4; ++round) {
        std::string const text = random_text(rng, 150, false, false);
        SCOPED_TRACE(p + (icase ? " -i" : "") + " round " + std::to_string(round));
        EXPECT_EQ(m.count_lines(text, s), std_regex_count(p, icase, text));
      }
    }
  }
}

TEST(Random, FixedStringsMatchFind) {
  std::mt19937 rng(99);
  std::vector<std::string> const needles = {"a",  "ab",   "b c", "xyz", "0123", "  ",
                                            "__", "aab.", "\t-", "zz",  "ABC",  "a a a"};
  for (auto const& needle : needles) {
    matcher m(fixed({needle}));
    ASSERT_EQ(m.kind(), matcher::strategy::literal);
    auto s = m.make_scratch();
    for (int round = 0; round < 6; ++round) {
      std::string const text = random_text(rng, 300, round % 2 == 1);
      std::uint64_t expected = 0;
      for (auto const& line : split_lines(text))
        expected += line.find(needle) != line.npos;
      SCOPED_TRACE(needle);
      EXPECT_EQ(m.count_lines(text, s), expected);
      EXPECT_EQ(chunked_count(m, text, 32, rng), expected);
    }
  }
}

TEST(Random, FixedStringsIgnoreCaseAndSeveral) {
  std::mt19937 rng(4242);
  std::vector<std::vector<std::string>> const sets = {
      {"ab"}, {"Ab", "c"}, {"a.b", "xyz"}, {"(", "a"}, {"zz", "ZZ", "0"}};
  for (bool icase : {false, true}) {
    for (auto const& set : sets) {
      match_options const o = fixed(set, icase);
      matcher m(o);
      auto s = m.make_scratch();
      per_line_reference ref(o);
      for (int round = 0; round < 4; ++round) {
        std::string const text = random_text(rng, 200, true);
        EXPECT_EQ(m.count_lines(text, s), ref.count(text)) << set[0];
      }
    }
  }
}

TEST(CountNewlines, MatchesStdCount) {
  std::mt19937 rng(8);
  for (std::size_t size : {0u, 1u, 15u, 16u, 17u, 255u * 16u, 255u * 16u + 7u, 100000u}) {
    std::string s(size, 'x');
    for (auto& c : s)
      c = (rng() % 3 == 0) ? '\n' : 'x';
    EXPECT_EQ(scan::count_newlines(s.data(), s.size()),
              static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')));
  }
  std::string const all(100000, '\n');  // lanes must not overflow
  EXPECT_EQ(scan::count_newlines(all.data(), all.size()), all.size());
}

}  // namespace
