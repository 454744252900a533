// Tests of spindle-scan's runtime-independent core (examples/scan): the GNU
// ERE -> PCRE2 translation, line counting against simple references (a
// per-line PCRE2 match, std::regex's POSIX ERE, std::string::find) on
// generated inputs, the chunked line buffer, the literal finder, JSON paths
// and the walker's grep-like traversal.
//
// The expectations about grep come from GNU grep 3.8 in the C locale
// (`LC_ALL=C grep -E -c`), checked by hand when the translation was written.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <pcre2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ere.hpp"
#include "line_buffer.hpp"
#include "line_counter.hpp"
#include "matcher.hpp"
#include "output.hpp"
#include "walker.hpp"
#include "window.hpp"

#include <spindle/runtime.hpp>

namespace {

using scan::match_options;
using scan::matcher;
using scan::pattern_syntax;

match_options ere(std::vector<std::string> patterns, bool icase = false) {
  return match_options{pattern_syntax::extended, icase, std::move(patterns)};
}
match_options fixed(std::vector<std::string> patterns, bool icase = false) {
  return match_options{pattern_syntax::fixed, icase, std::move(patterns)};
}

std::uint64_t count(match_options const& o, std::string_view text) {
  matcher m(o);
  auto s = m.make_scratch();
  return m.count_lines(text, s);
}

// grep's line model: split at '\n'; a final '\n' does not start a line.
std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  if (text.empty()) return lines;
  if (text.back() == '\n') text.remove_suffix(1);
  std::size_t start = 0;
  while (true) {
    const std::size_t nl = text.find('\n', start);
    lines.emplace_back(text.substr(start, nl == std::string_view::npos ? text.npos : nl - start));
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return lines;
}

// Reference 1: the translated patterns, joined, matched by PCRE2 against one
// line at a time (no MULTILINE, no buffer tricks).
class per_line_reference {
 public:
  explicit per_line_reference(match_options const& o) {
    std::string pcre;
    int offset = 0;
    bool every = false;
    std::vector<std::string> patterns;  // each given pattern split at every '\n'
    for (auto const& p : o.patterns) {
      std::size_t start = 0;
      while (true) {
        const std::size_t nl = p.find('\n', start);
        patterns.push_back(p.substr(start, nl == std::string::npos ? nl : nl - start));
        if (nl == std::string::npos) break;
        start = nl + 1;
      }
    }
    for (std::size_t k = 0; k < patterns.size(); ++k) {
      if (patterns[k].empty()) every = true;
      std::string part;
      if (o.syntax == pattern_syntax::fixed) {
        part = scan::pcre_escape_literal(patterns[k]);
      } else {
        auto t = scan::translate_ere(patterns[k], true, offset);
        offset += t.groups;
        part = t.pcre;
      }
      if (k > 0) pcre += '|';
      pcre += "(?:" + part + ")";
    }
    every_ = every;
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(),
                          o.ignore_case ? PCRE2_CASELESS : 0, &err, &off, cc);
    pcre2_compile_context_free(cc);
    if (code_ == nullptr) throw std::runtime_error("reference: cannot compile " + pcre);
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~per_line_reference() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  std::uint64_t count(std::string_view text) const {
    std::uint64_t n = 0;
    for (auto const& line : split_lines(text)) {
      if (every_) {
        ++n;
        continue;
      }
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(line.data()), line.size(), 0,
                                 0, data_, nullptr);
      if (rc >= 0) ++n;
    }
    return n;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
  bool every_ = false;
};

// Reference 2: std::regex's POSIX ERE grammar, per line (patterns without
// GNU extensions only).
std::uint64_t std_regex_count(std::string const& pattern, bool icase, std::string_view text) {
  auto flags = std::regex::extended | std::regex::nosubs;
  if (icase) flags |= std::regex::icase;
  const std::regex re(pattern, flags);
  std::uint64_t n = 0;
  for (auto const& line : split_lines(text))
    n += std::regex_search(line, re) ? 1 : 0;
  return n;
}

// Random text over a small alphabet so that patterns hit often; `nul`: NUL
// bytes too; some lines are long.
std::string random_text(std::mt19937& rng, std::size_t lines, bool nul, bool crlf_and_high = true) {
  static const std::string base = "aabbcxyzABC  _0123.-\t";
  std::string alphabet = base;
  if (nul) alphabet += '\0';
  if (crlf_and_high) alphabet += "\r\xff\xe4";
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<int> len(0, 12);
  std::uniform_int_distribution<int> rare(0, 99);
  std::string out;
  for (std::size_t l = 0; l < lines; ++l) {
    int n = len(rng);
    if (rare(rng) == 0) n = 3000 + rare(rng) * 50;  // a long line now and then
    for (int k = 0; k < n; ++k)
      out += alphabet[pick(rng)];
    if (l + 1 < lines || rare(rng) < 50) out += '\n';  // half the texts end unterminated
  }
  return out;
}

// Counts `text` fed through a line_buffer of `capacity` in chunks of random
// sizes, as spindle-scan does with its reads.
std::uint64_t chunked_count(matcher const& m, std::string_view text, std::size_t capacity,
                            std::mt19937& rng) {
  scan::line_buffer buffer(capacity);
  auto s = m.make_scratch();
  scan::line_counter counter(m, s, buffer);
  std::size_t at = 0;
  while (at < text.size()) {
    std::span<char> space = counter.space();
    EXPECT_FALSE(space.empty());
    std::uniform_int_distribution<std::size_t> pick(1, space.size());
    const std::size_t take = std::min(pick(rng), text.size() - at);
    std::copy_n(text.data() + at, take, space.data());
    counter.commit(take);
    at += take;
  }
  return counter.finish();
}

// ------------------------------------------------------------ line model

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
  const std::string text("a\0b\nxx\n\xe4\n", 9);
  EXPECT_EQ(count(ere({"a.b"}), text), 1u);
  EXPECT_EQ(count(ere({"[^x]"}), text), 2u);
  EXPECT_EQ(count(fixed({std::string("\0b", 2)}), text), 1u);
  EXPECT_EQ(count(ere({"."}), text), 3u);
}

TEST(LineModel, IgnoreCaseIsAsciiOnly) {
  const std::string text = "A\nb\n\xe4\n\xc4\n";
  EXPECT_EQ(count(ere({"a"}, true), text), 1u);
  EXPECT_EQ(count(ere({"\xe4"}, true), text), 1u);
  EXPECT_EQ(count(ere({"[[:alpha:]]"}), text), 2u);
  EXPECT_EQ(count(ere({"[[:upper:]]"}, true), text), 2u);
  EXPECT_EQ(count(ere({"\\w"}), text), 2u);
  EXPECT_EQ(count(fixed({"B"}, true), text), 1u);
  EXPECT_EQ(count(fixed({"A", "B"}, true), text), 2u);
}

// ------------------------------------------------------- ERE vs grep -E

struct grep_case {
  const char* pattern;
  const char* line;
  bool matches;
};

// Each row: LC_ALL=C grep -E -c PATTERN on a one-line file holding LINE.
const grep_case grep_cases[] = {
    {"a{,3}b", "b", true},
    {"a{", "a{", true},
    {"a{", "a", false},
    {"a{x", "a{x", true},
    {"a{1", "a{1", true},
    {"a{1", "a", false},
    {"a{1,2", "a", false},
    {"a{,}", "b", true},
    {"a{ 1}", "a{ 1}", true},
    {"a{0}b", "b", true},
    {"a{1}{2}", "aa", true},
    {"{1}", "x", true},
    {"*a", "a", true},
    {"+a", "a", true},
    {"?a", "a", true},
    {"a|*b", "b", true},
    {"(*a)", "a", true},
    {"^*", "x", true},
    {"^*x", "ax", true},
    {"x$*", "xa", true},
    {"^+a", "a", true},
    {"^+a", "ba", false},
    {"\\<*a", "a", true},
    {"a**", "b", true},
    {"ab+?c", "ac", true},
    {"ab*+c", "ac", true},
    {"[\\]", "\\", true},
    {"[\\]", "]", false},
    {"[a\\]b]", "b]", false},
    {"[a\\]b]", "\\b]", true},
    {"[]a]", "]", true},
    {"[^]a]", "b", true},
    {"[^]a]", "]", false},
    {"[a-]", "-", true},
    {"[]-a]", "^", true},
    {"[[.a.]]", "a", true},
    {"[[=a=]]", "a", true},
    {"[[.-.]]", "-", true},
    {"[[.a.]-c]", "b", true},
    {"[a-[.c.]]", "b", true},
    {"[[]", "[", true},
    {"[[.].]]", "]", true},
    {"[[:alpha:][:digit:]]", "5", true},
    {"()", "x", true},
    {"(a|)", "x", true},
    {"a||b", "x", true},
    {"|a", "x", true},
    {")", ")", true},
    {"a)", "a)", true},
    {"\\d", "d", true},
    {"\\d", "1", false},
    {"\\n", "n", true},
    {"\\t", "t", true},
    {"\\.", "x", false},
    {"\\x41", "x41", true},
    {"\\(", "(", true},
    {"\\{1", "{1", true},
    {"\\<foo\\>", "a foo b", true},
    {"\\<foo\\>", "afoo", false},
    {"\\<foo\\>", "foo_", false},
    {"\\bfoo", "xfoo", false},
    {"\\Bfoo", "xfoo", true},
    {"\\`a", "a", true},
    {"a\\'", "a", true},
    {"x\\`a", "xa", false},
    {"\\w+", "_", true},
    {"\\W", "a", false},
    {"\\s", " ", true},
    {"\\S", " ", false},
    {"(a)\\1", "aa", true},
    {"(a)\\10", "aa0", true},
    {"((a)|b)\\2", "bb", false},
    {"(a)*\\1", "b", false},
    {"a^b", "a^b", false},
    {"a$b", "a$b", false},
    {"$a", "a", false},
    {"a^", "a", false},
    {"(^a)", "a", true},
    {"b|^a", "a", true},
    {"x*^a", "a", true},
    {"a{32767}", "a", false},
};

TEST(Ere, AgreesWithGrep) {
  for (auto const& c : grep_cases) {
    SCOPED_TRACE(std::string("pattern ") + c.pattern + " line " + c.line);
    EXPECT_EQ(count(ere({c.pattern}), std::string(c.line) + "\n"), c.matches ? 1u : 0u)
        << scan::translate_ere(c.pattern, true).pcre;
  }
}

TEST(Ere, ErrorsLikeGrep) {
  const std::pair<const char*, const char*> errors[] = {
      {"a{3,1}", "Invalid content of \\{\\}"},
      {"a{}", "Invalid content of \\{\\}"},
      {"a{1,2,3}", "Invalid content of \\{\\}"},
      {"a{32768}", "Regular expression too big"},
      {"a{1,32768}", "Regular expression too big"},
      {"[[:foo:]]", "Invalid character class name"},
      {"[z-a]", "Invalid range end"},
      {"[[:alpha:]-z]", "Invalid range end"},
      {"[a-[:alpha:]]", "Invalid range end"},
      {"[a-b-c]", "Invalid range end"},
      {"[[=a=]-c]", "Invalid range end"},
      {"[[:alpha:]", "Unmatched [, [^, [:, [., or [="},
      {"[]", "Unmatched [, [^, [:, [., or [="},
      {"[^]", "Unmatched [, [^, [:, [., or [="},
      {"[[:]", "Unmatched [, [^, [:, [., or [="},
      {"[[.space.]]", "Invalid collation character"},
      {"(", "Unmatched ( or \\("},
      {"((a)", "Unmatched ( or \\("},
      {"a\\", "Trailing backslash"},
      {"\\1(a)", "Invalid back reference"},
      {"(a)|\\1", "Invalid back reference"},
      {"(a\\1)", "Invalid back reference"},
      {"\\2(a)", "Invalid back reference"},
  };
  for (auto const& [pattern, message] : errors) {
    SCOPED_TRACE(pattern);
    try {
      matcher m(ere({pattern}));
      ADD_FAILURE() << "no error";
    } catch (scan::pattern_error const& e) {
      EXPECT_STREQ(e.what(), message);
    }
  }
  // An invalid pattern next to an empty one is still an error.
  EXPECT_THROW(matcher(ere({"", "a{1,2,3}"})), scan::pattern_error);
}

TEST(Ere, LiteralPatternsTakeTheFastPath) {
  EXPECT_EQ(matcher(ere({"foo_bar"})).kind(), matcher::strategy::literal);
  EXPECT_EQ(matcher(ere({"a\\.b"})).kind(), matcher::strategy::literal);
  EXPECT_EQ(matcher(fixed({"a.b*"})).kind(), matcher::strategy::literal);
  EXPECT_EQ(matcher(fixed({"123"}, true)).kind(), matcher::strategy::literal);
  EXPECT_EQ(matcher(ere({"a.b"})).kind(), matcher::strategy::pcre2);
  EXPECT_EQ(matcher(fixed({"ab"}, true)).kind(), matcher::strategy::literal);
  EXPECT_EQ(matcher(ere({"aB_c"}, true)).kind(), matcher::strategy::literal);
  EXPECT_EQ(count(ere({"aB_c"}, true), "AB_C\nab_c\nab-c\nxAb_Cx"), 3u);
  EXPECT_EQ(matcher(fixed({"a", "b"})).kind(), matcher::strategy::pcre2);
  EXPECT_EQ(count(fixed({"a.b*"}), "a.b*\naxb\n"), 1u);
  EXPECT_EQ(count(ere({"a\\.b"}), "a.b\naxb\n"), 1u);
}

TEST(Ere, NothingMatchesANewline) {
  // Negated sets, \W, \S and POSIX classes exclude '\n' so that a match in
  // the whole buffer never spans lines.
  for (const char* p : {"a[^x]b", "a\\Wb", "a\\sb", "a[[:space:]]b", "a[[:cntrl:]]b", "a\\Sb",
                        "a[^[:alpha:]]*b", "a.b"}) {
    SCOPED_TRACE(p);
    EXPECT_EQ(count(ere({p}), "a\nb\na\nb"), 0u);
    EXPECT_EQ(count(ere({p}), "xa\nbx\na b\na\x01b\n"),
              per_line_reference(ere({p})).count("xa\nbx\na b\na\x01b\n"));
  }
}

TEST(Ere, BackReferencesAcrossSeveralPatterns) {
  // Each pattern numbers its own groups.
  EXPECT_EQ(count(ere({"(a)\\1", "(b)\\1"}), "aa\nbb\nab\n"), 2u);
  EXPECT_EQ(count(ere({"(x)(y)\\2", "(b)\\1"}), "xyy\nbb\nxy\n"), 2u);
}

TEST(Ere, StackedRepetitionsMerge) {
  EXPECT_EQ(scan::translate_ere("a+*").pcre, "a*");
  EXPECT_EQ(scan::translate_ere("a*+").pcre, "a*");
  EXPECT_EQ(scan::translate_ere("a?{3}").pcre, "a{0,3}");
  EXPECT_EQ(scan::translate_ere("a{0,3}{2,5}").pcre, "a{0,15}");
  EXPECT_EQ(scan::translate_ere("a{2}*").pcre, "(?:a{2})*");  // counts 0, 2, 4, ...
  EXPECT_EQ(count(ere({"xa{2}*y"}), "xay\nxaay\nxy\n"), 2u);
}

TEST(Ere, RequiredLiteral) {
  EXPECT_EQ(scan::translate_ere("\\<struct\\>").required, "struct");
  EXPECT_EQ(scan::translate_ere("^#define [A-Z]+").required, "#define ");
  EXPECT_EQ(scan::translate_ere("(a|b)cde").required, "cde");
  EXPECT_EQ(scan::translate_ere("abc?d").required, "ab");
  EXPECT_EQ(scan::translate_ere("x(yz)w").required, "x");
  EXPECT_EQ(scan::translate_ere("foo|bar").required, "");
  EXPECT_EQ(scan::translate_ere("a\\.b\\<cd").required, "a.bcd");
  EXPECT_NE(matcher(ere({"\\<struct\\>"})).describe().find("struct"), std::string::npos);
  EXPECT_EQ(count(ere({"\\<struct\\>"}), "struct a\nastruct\nx struct\n"), 2u);
}

TEST(Ere, CatastrophicBacktrackingStillAnswers) {
  // Nested repetitions exceed PCRE2's match limit on long lines; the DFA
  // matcher decides those lines.
  std::string words;
  while (words.size() < 3000)
    words += "word ";
  const std::string text = words + "!\n" + words + "\nx\n" + words + "!\n" + words;
  EXPECT_EQ(count(ere({"^(\\w+\\s?)*$"}), text), 3u);
  EXPECT_EQ(count(ere({"^(\\w+\\s?)*!$", "zz"}), text), 2u);
  EXPECT_EQ(count(ere({"^(x+x+)+$"}), std::string(300, 'x') + "y\n" + std::string(30, 'x')), 1u);
}

// ---------------------------------------------- random vs references

const std::vector<std::vector<std::string>> random_patterns = {
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
      const match_options o = ere(patterns, icase);
      matcher m(o);
      auto s = m.make_scratch();
      per_line_reference ref(o);
      for (int round = 0; round < 6; ++round) {
        const std::string text = random_text(rng, 200, round % 2 == 0);
        SCOPED_TRACE(patterns[0] + (icase ? " -i" : "") + " round " + std::to_string(round));
        const std::uint64_t expected = ref.count(text);
        EXPECT_EQ(m.count_lines(text, s), expected);
        EXPECT_EQ(chunked_count(m, text, 64, rng), expected);
        EXPECT_EQ(chunked_count(m, text, 4096, rng), expected);
      }
    }
  }
}

TEST(Random, PlainEreMatchesStdRegex) {
  // Patterns within POSIX ERE, which std::regex implements independently.
  const std::vector<std::string> posix = {
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
        const std::string text = random_text(rng, 150, false, false);
        SCOPED_TRACE(p + (icase ? " -i" : "") + " round " + std::to_string(round));
        EXPECT_EQ(m.count_lines(text, s), std_regex_count(p, icase, text));
      }
    }
  }
}

TEST(Random, FixedStringsMatchFind) {
  std::mt19937 rng(99);
  const std::vector<std::string> needles = {"a",  "ab",   "b c", "xyz", "0123", "  ",
                                            "__", "aab.", "\t-", "zz",  "ABC",  "a a a"};
  for (auto const& needle : needles) {
    matcher m(fixed({needle}));
    ASSERT_EQ(m.kind(), matcher::strategy::literal);
    auto s = m.make_scratch();
    for (int round = 0; round < 6; ++round) {
      const std::string text = random_text(rng, 300, round % 2 == 1);
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
  const std::vector<std::vector<std::string>> sets = {
      {"ab"}, {"Ab", "c"}, {"a.b", "xyz"}, {"(", "a"}, {"zz", "ZZ", "0"}};
  for (bool icase : {false, true}) {
    for (auto const& set : sets) {
      const match_options o = fixed(set, icase);
      matcher m(o);
      auto s = m.make_scratch();
      per_line_reference ref(o);
      for (int round = 0; round < 4; ++round) {
        const std::string text = random_text(rng, 200, true);
        EXPECT_EQ(m.count_lines(text, s), ref.count(text)) << set[0];
      }
    }
  }
}

// ------------------------------------------------ literal finder etc.

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
      const scan::literal_finder f(needle, false, avx2);
      const char* got = f.find(hay.data(), hay.data() + hay.size());
      const std::size_t want = hay.find(needle);
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
    const std::size_t want = lower(hay).find(lower(needle));  // tolower: C locale, ASCII
    for (bool avx2 : {true, false}) {
      const scan::literal_finder f(needle, true, avx2);
      const char* got = f.find(hay.data(), hay.data() + hay.size());
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
      const scan::literal_finder f(needle, false, avx2);
      for (std::size_t from : {std::size_t{0}, std::size_t{1}, std::size_t{777}}) {
        const char* got = f.find(hay.data() + from, hay.data() + hay.size());
        const std::size_t want = hay.find(needle, from);
        EXPECT_EQ(got, want == std::string::npos ? nullptr : hay.data() + want) << needle;
      }
    }
  }
}

TEST(LiteralFinder, FrequentRareByteFallsBackToMemmem) {
  std::string hay(100000, 'q');
  hay += "qqz";
  const scan::literal_finder f("qz");  // every byte is a candidate
  EXPECT_EQ(f.find(hay.data(), hay.data() + hay.size()), hay.data() + 100001);
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
  const std::string all(100000, '\n');  // lanes must not overflow
  EXPECT_EQ(scan::count_newlines(all.data(), all.size()), all.size());
}

TEST(LineBuffer, CarriesPartialLinesAndGrows) {
  scan::line_buffer b(8);
  const std::string line(100, 'x');  // longer than the buffer
  const std::string input = line + "\nab\ncd";
  std::string seen;
  std::size_t at = 0;
  while (at < input.size()) {
    auto space = b.space();
    ASSERT_FALSE(space.empty());
    const std::size_t n = std::min(space.size(), input.size() - at);
    std::copy_n(input.data() + at, n, space.data());
    b.commit(n);
    at += n;
    seen += b.take_lines();
  }
  EXPECT_EQ(seen, line + "\nab\n");
  EXPECT_EQ(b.take_rest(), "cd");
  EXPECT_GE(b.capacity(), 101u);
  b.reset(16);  // grown past the limit: back to 8
  EXPECT_EQ(b.capacity(), 8u);
  EXPECT_EQ(b.pending(), 0u);
}

TEST(Output, JsonReplacesInvalidUtf8) {
  const std::string j = scan::json_string("a\xff\"b\n");
  EXPECT_EQ(j, "\"a\xef\xbf\xbd\\\"b\\n\"");
  std::string out;
  scan::append_result(out, scan::result_format::json, "d/\xc3", 7);
  EXPECT_EQ(out, "{\"path\":\"d/\xef\xbf\xbd\",\"count\":7}\n");
  out.clear();
  scan::append_result(out, scan::result_format::path_count, "d/x", 3);
  scan::append_result(out, scan::result_format::count_only, "d/x", 0);
  EXPECT_EQ(out, "d/x:3\n0\n");
}

// -------------------------------------------------------------- window

// Takes a place per item (try_acquire, else acquire) and hands it over,
// then waits until all places are back.
spindle::task<void> produce(scan::window* w, int items, std::function<void(int)> const* submit) {
  for (int k = 0; k < items; ++k) {
    if (!w->try_acquire()) {
      const bool got = co_await w->acquire();
      EXPECT_TRUE(got);
    }
    (*submit)(k);
  }
  const bool all = co_await w->wait_all();
  EXPECT_TRUE(all);
}

// The retry-aware producer of Window.ShrinksAndWakesTheProducerForRetries:
// resubmits retries first, stops waiting for a place when retries appear.
struct retry_producer {
  scan::window* w;
  int items;
  std::function<bool()> has_retries;
  std::function<bool()> pop_retry;  // submits one retry if any; false: none
  std::function<void(int)> submit;

  spindle::task<void> drain() {
    for (;;) {
      if (!has_retries()) co_return;
      const bool got = co_await w->acquire();
      EXPECT_TRUE(got);
      if (!pop_retry()) w->release();  // taken meanwhile: give the place back
    }
  }
  spindle::task<void> run() {
    for (int k = 1; k <= items; ++k) {
      co_await drain();
      for (;;) {
        const bool got = co_await w->acquire(has_retries);
        if (got) break;
        co_await drain();
      }
      submit(k);
    }
    for (;;) {
      co_await drain();
      const bool all = co_await w->wait_all(has_retries);
      if (all && !has_retries()) break;
    }
    const bool released = co_await w->wait_release();
    EXPECT_FALSE(released);  // nothing held: returns at once
  }
};

TEST(Window, BoundsItemsInFlightAndDrains) {
  constexpr std::uint32_t size = 8;
  constexpr int items = 20000;
  scan::window w(size);
  std::atomic<int> in_flight{0};
  std::atomic<int> max_seen{0};
  std::atomic<int> done{0};
  std::mutex m;
  std::vector<int> queue;  // items handed to the consumers
  std::atomic<bool> stop{false};
  std::vector<std::thread> consumers;
  for (int t = 0; t < 3; ++t) {
    consumers.emplace_back([&] {
      while (!stop.load()) {
        bool got = false;
        {
          std::lock_guard lock(m);
          if (!queue.empty()) {
            queue.pop_back();
            got = true;
          }
        }
        if (!got) {
          std::this_thread::yield();
          continue;
        }
        in_flight.fetch_sub(1);
        done.fetch_add(1);
        w.release();
      }
    });
  }
  // The producer is a task (the window suspends it); the consumers are
  // plain threads (release() from any thread).
  auto submit = [&](int k) {
    const int now = in_flight.fetch_add(1) + 1;
    int seen = max_seen.load();
    while (now > seen && !max_seen.compare_exchange_weak(seen, now)) {
    }
    std::lock_guard lock(m);
    queue.push_back(k);
  };
  std::function<void(int)> submit_fn = submit;
  spindle::runtime rt(spindle::runtime_config{.workers = 2});
  rt.block_on(produce(&w, items, &submit_fn));
  EXPECT_EQ(done.load(), items);
  EXPECT_EQ(w.free_places(), size);
  EXPECT_LE(max_seen.load(), static_cast<int>(size));
  stop.store(true);
  for (auto& t : consumers)
    t.join();
}

TEST(Window, ShrinksAndWakesTheProducerForRetries) {
  // Consumers give up their place for good on every 7th item while others
  // are in flight (as a scan out of descriptors does) and queue it again;
  // the producer resubmits queued items first, and drains everything.
  constexpr std::uint32_t size = 16;
  constexpr int items = 5000;
  scan::window w(size);
  std::mutex m;
  std::vector<int> queue, retries;
  std::atomic<int> active{0};
  std::atomic<int> done{0};
  std::atomic<int> shrinks{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> consumers;
  for (int t = 0; t < 3; ++t) {
    consumers.emplace_back([&] {
      while (!stop.load()) {
        int item = -1;
        {
          std::lock_guard lock(m);
          if (!queue.empty()) {
            item = queue.back();
            queue.pop_back();
          }
        }
        if (item < 0) {
          std::this_thread::yield();
          continue;
        }
        if (item % 7 == 0 && active.fetch_sub(1) > 1) {
          {
            std::lock_guard lock(m);
            retries.push_back(item + 1);  // comes back as an item that is done
          }
          shrinks.fetch_add(1);
          w.shrink();
          continue;
        }
        if (item % 7 == 0) active.fetch_add(1);  // alone: finish it after all
        active.fetch_sub(1);
        done.fetch_add(1);
        w.release();
      }
    });
  }
  auto has_retries = [&] {
    std::lock_guard lock(m);
    return !retries.empty();
  };
  auto submit = [&](int item) {
    active.fetch_add(1);
    std::lock_guard lock(m);
    queue.push_back(item);
  };
  auto pop_retry = [&] {
    int item = -1;
    {
      std::lock_guard lock(m);
      if (retries.empty()) return false;
      item = retries.back();
      retries.pop_back();
    }
    submit(item);
    return true;
  };
  retry_producer producer{&w, items, has_retries, pop_retry, submit};
  spindle::runtime rt(spindle::runtime_config{.workers = 2});
  rt.block_on(producer.run());
  EXPECT_EQ(done.load(), items);
  EXPECT_GE(w.size(), 1u);
  EXPECT_EQ(w.size(), size - static_cast<std::uint32_t>(shrinks.load()));
  EXPECT_EQ(w.free_places(), w.size());
  stop.store(true);
  for (auto& t : consumers)
    t.join();
}

// -------------------------------------------------------------- walker

class collect : public scan::walk_sink {
 public:
  spindle::task<void> file(scan::dir_ref const& dir, std::string_view name, std::string_view path,
                           bool command_line) override {
    files.emplace(std::string(path) + (command_line ? " (cl)" : ""));
    // `name` ends `path` and opens relative to `dir`.
    EXPECT_EQ(path.substr(path.size() - name.size()), name);
    struct stat st {};
    EXPECT_EQ(::fstatat(dir.fd(), std::string(name).c_str(), &st, 0), 0) << path;
    EXPECT_TRUE(S_ISREG(st.st_mode)) << path;
    if (command_line) {
      EXPECT_EQ(dir.fd(), AT_FDCWD);
    }
    if (walker != nullptr) {
      EXPECT_LE(walker->live_directories(), walker->max_directories()) << path;
      max_live = std::max(max_live, walker->live_directories());
    }
    if (hold > 0) {  // like scans in flight: keep the directory open
      held.push_back(dir);
      if (held.size() > hold) held.erase(held.begin());
    }
    co_return;
  }
  void error(std::string_view path, int) override { errors.emplace(path); }
  void failure(std::string_view path, std::string_view) override { errors.emplace(path); }
  void warning(std::string_view path, std::string_view) override { warnings.emplace(path); }
  spindle::task<bool> wait_for_descriptors() override {
    ++waits;
    if (held.empty()) co_return false;
    held.erase(held.begin());  // the oldest "scan" finished
    co_return true;
  }
  std::set<std::string> files, errors, warnings;
  scan::walker const* walker = nullptr;
  std::size_t hold = 0;
  std::vector<scan::dir_ref> held;
  std::size_t max_live = 0;
  std::size_t waits = 0;
};

class WalkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/scan-walker-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    namespace fs = std::filesystem;
    fs::create_directories(root_ / "d/sub/deeper");
    std::ofstream(root_ / "d/a") << "x\n";
    std::ofstream(root_ / "d/sub/b") << "x\n";
    std::ofstream(root_ / "d/sub/deeper/c") << "x\n";
    std::ofstream(root_ / "d/.hidden") << "x\n";
    fs::create_symlink("sub", root_ / "d/link_dir");
    fs::create_symlink("a", root_ / "d/link_file");
    fs::create_symlink("loop", root_ / "d/loop");
    ASSERT_EQ(::mkfifo((root_ / "d/fifo").c_str(), 0644), 0);
    saved_cwd_ = fs::current_path();
  }
  void TearDown() override {
    std::filesystem::current_path(saved_cwd_);
    std::filesystem::remove_all(root_);
  }
  // The walk is a task: run it on the runtime and wait.
  void walk(scan::walker& w, std::string operand) {
    rt_.block_on(w.walk_operand(std::move(operand)));
  }
  spindle::runtime rt_{spindle::runtime_config{.workers = 2}};
  std::filesystem::path root_;
  std::filesystem::path saved_cwd_;
};

TEST_F(WalkerTest, WalksLikeGrepR) {
  std::filesystem::current_path(root_);
  collect c;
  scan::walker w(c);
  walk(w, "d/");
  EXPECT_EQ(c.files, (std::set<std::string>{"d/a", "d/sub/b", "d/sub/deeper/c", "d/.hidden"}));
  EXPECT_TRUE(c.errors.empty());
  collect c2;
  scan::walker w2(c2);
  walk(w2, "d//sub");
  walk(w2, "d/link_dir");  // command-line symlinks are followed
  walk(w2, "d/link_file");
  walk(w2, "d/fifo");  // never opened, never reported
  walk(w2, "nope");
  EXPECT_EQ(c2.files, (std::set<std::string>{"d//sub/b", "d//sub/deeper/c", "d/link_dir/b",
                                             "d/link_dir/deeper/c", "d/link_file (cl)"}));
  EXPECT_EQ(c2.errors, (std::set<std::string>{"nope"}));
}

TEST_F(WalkerTest, DeepTreeWithinADescriptorBudget) {
  // 40 levels of 200-byte names (over PATH_MAX), a file per level, and
  // files whose directories stay referenced ("in flight") for a while: the
  // walker stays within its directory budget, gives up its ancestors and
  // finds them again through "..", and still lists everything.
  namespace fs = std::filesystem;
  std::string const name(200, 'n');
  std::set<std::string> want;
  {
    int fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    std::string path = "deep";
    ASSERT_EQ(::mkdirat(fd, "deep", 0755), 0);
    int next = ::openat(fd, "deep", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ::close(fd);
    fd = next;
    for (int level = 0; level < 40; ++level) {
      for (char const* leaf : {"f1", "f2"}) {
        int const w = ::openat(fd, leaf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ASSERT_GE(w, 0);
        ::close(w);
        want.insert(path + "/" + leaf);
      }
      ASSERT_EQ(::mkdirat(fd, name.c_str(), 0755), 0);
      ASSERT_EQ(::mkdirat(fd, "side", 0755), 0);  // a second subdirectory per level
      int const side = ::openat(fd, "side", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      int const w = ::openat(side, "s", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      ASSERT_GE(w, 0);
      ::close(w);
      ::close(side);
      want.insert(path + "/side/s");
      next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      ::close(fd);
      ASSERT_GE(next, 0);
      fd = next;
      path += "/" + name;
    }
    ::close(fd);
    ASSERT_GT(path.size(), std::size_t{PATH_MAX});
  }
  fs::current_path(root_);
  for (std::size_t budget : {std::size_t{4}, std::size_t{8}, std::size_t{16}, std::size_t{1000}}) {
    collect c;
    scan::walker w(c);
    w.set_descriptor_budget(budget);
    c.walker = &w;
    c.hold = 3;
    walk(w, "deep");
    EXPECT_EQ(c.files, want) << budget;
    EXPECT_TRUE(c.errors.empty()) << budget;
    EXPECT_LE(c.max_live, w.max_directories()) << budget;
    c.held.clear();
    EXPECT_EQ(w.live_directories(), 0u) << budget;  // nothing leaked
  }
  // Removal with *at() only: the tree is deeper than PATH_MAX.
  std::function<void(int, char const*)> remove_at = [&](int parent, char const* entry) {
    int const fd = ::openat(parent, entry, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      ::unlinkat(parent, entry, 0);
      return;
    }
    for (char const* leaf : {"f1", "f2", "s"})
      ::unlinkat(fd, leaf, 0);
    remove_at(fd, "side");
    remove_at(fd, name.c_str());
    ::close(fd);
    ::unlinkat(parent, entry, AT_REMOVEDIR);
  };
  remove_at(AT_FDCWD, "deep");
  EXPECT_FALSE(fs::exists(root_ / "deep"));
}

TEST_F(WalkerTest, DefaultWalkNamesWithoutDotSlash) {
  std::filesystem::current_path(root_ / "d");
  collect c;
  scan::walker w(c);
  rt_.block_on(w.walk_default());
  EXPECT_EQ(c.files, (std::set<std::string>{"a", "sub/b", "sub/deeper/c", ".hidden"}));
  EXPECT_TRUE(scan::walker::is_directory("sub"));
  EXPECT_TRUE(scan::walker::is_directory("link_dir"));
  EXPECT_FALSE(scan::walker::is_directory("a"));
}

}  // namespace
