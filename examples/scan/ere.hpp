// GNU extended regular expressions (grep -E, C locale) translated to PCRE2.
//
// spindle-scan matches through PCRE2, but its patterns are POSIX/GNU EREs
// with grep's meaning. translate_ere() rewrites one ERE into an equivalent
// PCRE2 pattern (for use with PCRE2_MULTILINE and NEWLINE_LF, no UTF/UCP):
//
//  - every literal byte is escaped, so PCRE2-only syntax (\d, (?...), *+, *?)
//    cannot leak in; `\X` for an X without GNU meaning is the literal X
//    (grep 3.8 warns "stray \" and matches X);
//  - bracket expressions are parsed with POSIX rules (backslash is literal,
//    `]` first is literal, [:class:], [.c.], [=c=], C-locale byte ranges)
//    and emitted as explicit byte sets;
//  - \< \> become \b(?=\w) and \b(?<=\w); \` and \' become ^ and $ (a line is
//    grep's buffer); \w \W \s \S \b \B keep their GNU meaning;
//  - intervals: {,n} is {0,n}; a `{` that does not start a valid interval is
//    literal; {} {n,m,o} {3,1} are errors; counts above 32767 are "too big";
//  - a repetition operator with nothing before it (start, after `(` or `|`)
//    repeats the empty string and is dropped; a repetition of an anchor
//    removes the anchor when its minimum is 0; stacked repetitions (a+?, a*+,
//    a{2}{3}) apply to the repeated atom, as in POSIX, not PCRE's lazy or
//    possessive forms, and merge into one quantifier when the inner minimum
//    is at most 1 (a+* is a*: no nested repetition for PCRE2 to backtrack);
//  - an unmatched `)` is literal; an unmatched `(` is an error;
//  - back-references \1..\9 must name a group completed earlier in the same
//    alternative (glibc's rule) and are renumbered by `group_offset` so that
//    several patterns can share one alternation;
//  - no construct of the result can match '\n': negated sets, \W and \S
//    exclude it, so a match never crosses a line of the searched buffer;
//  - `required` is the longest run of top-level literal bytes every match
//    contains (for a literal prefilter), empty with a top-level `|`.
//
// Not supported / known differences from grep -E: multibyte locales (the C
// locale is assumed); grep's warnings (stray backslashes, `*` at the start).
// grep hands patterns with [=c=], [.c.] or back-references to glibc's regex
// instead of its DFA, and there a leading `{0}` or a stray escape under -i
// can make it find nothing (`{0}[[=e=]]`, `[[=e=]]\x` with -i): we keep the
// DFA's meaning in every case.
//
// Errors: pattern_error with grep's message ("Unmatched [, [^, [:, [., or [=",
// "Invalid range end", "Invalid back reference", "Trailing backslash", ...).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace scan {

/// A pattern that cannot be compiled; what() is the user-facing message.
class pattern_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ere_translation {
  std::string pcre;          ///< PCRE2 pattern text
  bool is_literal = false;   ///< the ERE is a plain byte string (no operators)
  std::string literal;       ///< that string, when is_literal
  std::string required;      ///< a byte string every match contains (maybe empty)
  int groups = 0;            ///< capturing groups emitted (0 unless `capture`)
  bool has_backref = false;  ///< the ERE uses \1..\9
};

/// Translates one GNU ERE (no newline inside). With `capture`, `(` emits a
/// capturing group and back-references become \g{N + group_offset};
/// without it groups are non-capturing and a back-reference only sets
/// has_backref (its text is a placeholder): translate again with capture.
ere_translation translate_ere(std::string_view ere, bool capture = false, int group_offset = 0);

/// A PCRE2 pattern matching `text` literally (for -F patterns).
std::string pcre_escape_literal(std::string_view text);

}  // namespace scan
