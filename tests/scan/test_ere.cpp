// scan's GNU ERE -> PCRE2 translation (ere.hpp) against grep -E: matches,
// errors, the literal fast path, no match across a newline, back references,
// required literals and catastrophic backtracking.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "scan_test_support.hpp"

namespace {

using namespace scan_test;

struct grep_case {
  char const* pattern;
  char const* line;
  bool matches;
};

// Each row: LC_ALL=C grep -E -c PATTERN on a one-line file holding LINE.
grep_case const grep_cases[] = {
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
  std::pair<char const*, char const*> const errors[] = {
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
  for (char const* p : {"a[^x]b", "a\\Wb", "a\\sb", "a[[:space:]]b", "a[[:cntrl:]]b", "a\\Sb",
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
  std::string const text = words + "!\n" + words + "\nx\n" + words + "!\n" + words;
  EXPECT_EQ(count(ere({"^(\\w+\\s?)*$"}), text), 3u);
  EXPECT_EQ(count(ere({"^(\\w+\\s?)*!$", "zz"}), text), 2u);
  EXPECT_EQ(count(ere({"^(x+x+)+$"}), std::string(300, 'x') + "y\n" + std::string(30, 'x')), 1u);
}

}  // namespace
