// scan::matcher: counts the lines of a buffer that match grep-style patterns.
//
// Shape: the patterns are compiled once (immutable, shared by every worker);
// each concurrent search brings its own matcher::scratch (PCRE2 match data and
// JIT stack), so one scratch is used by one thread at a time. The search runs
// over many lines at once: find the leftmost match in the buffer, count its
// line, resume at the start of the next line. Strategies, chosen at
// construction:
//   - every_line: some pattern is empty; the count is the number of lines;
//   - literal: one fixed string (-F, or an ERE without operators), with or
//     without -i: literal_finder (literal_finder.hpp);
//   - pcre2: everything else, one alternation of all patterns, JIT-compiled
//     when PCRE2 has a JIT, PCRE2_MULTILINE, no UTF. The ERE translation
//     guarantees that no match crosses a newline; a match that still does is
//     checked again against its first line alone. A single ERE with a
//     required literal of 2+ bytes (`struct` in \<struct\>) is
//     searched for that literal first; PCRE2 then runs on the lines that
//     contain it (until the literal turns out to be on most lines).
//
// Line model (grep's): a buffer is a sequence of lines, each ended by '\n'
// except perhaps the last; a final '\n' ends the last line and does not start
// an empty one. "" has no lines, "\n" one empty line, "a" one line.
// Bytes are bytes: NUL and bytes >= 0x80 are ordinary; -i folds ASCII only.
//
// Backtracking: when PCRE2 hits its match limit on the buffer (nested
// repetitions such as ^(\w+\s?)*$ on a line that does not match), the rest
// of the buffer is decided line by line by pcre2_dfa_match, which does not
// backtrack (patterns with back-references: by the interpreter). Its cost
// grows with the square of the line length for some patterns ((x+x+)+y on
// lines of thousands of x): a known limit of using a backtracking library.
//
// Errors: the constructor throws pattern_error for an invalid pattern (grep's
// message) or a PCRE2 compile failure; count_lines throws std::runtime_error
// when PCRE2 gives up even on a single line with every fallback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ere.hpp"
#include "literal_finder.hpp"

namespace scan {

enum class pattern_syntax { extended, fixed };

struct match_options {
  pattern_syntax syntax = pattern_syntax::extended;
  bool ignore_case = false;
  /// Patterns as the user gave them (-e values, or the positional pattern);
  /// each is split at '\n' into several patterns, as grep does.
  std::vector<std::string> patterns;
};

/// Number of '\n' bytes in [data, data + size).
std::size_t count_newlines(char const* data, std::size_t size) noexcept;

class matcher {
 public:
  enum class strategy { every_line, literal, pcre2 };

  /// Per-search state; create one per concurrent search with make_scratch().
  class scratch {
   public:
    scratch() noexcept;
    scratch(scratch&&) noexcept;
    scratch& operator=(scratch&&) noexcept;
    ~scratch();

    struct state;

   private:
    friend class matcher;
    std::unique_ptr<state> state_;
  };

  explicit matcher(match_options const& options);
  ~matcher();
  matcher(matcher&&) noexcept;
  matcher& operator=(matcher&&) noexcept;
  matcher(matcher const&) = delete;
  matcher& operator=(matcher const&) = delete;

  [[nodiscard]] scratch make_scratch() const;

  /// Number of lines of `text` (see the line model above) with a match.
  [[nodiscard]] std::uint64_t count_lines(std::string_view text, scratch& s) const;

  [[nodiscard]] strategy kind() const noexcept { return kind_; }
  /// The PCRE2 pattern (empty unless kind() == pcre2).
  [[nodiscard]] std::string const& pcre_pattern() const noexcept { return pcre_pattern_; }
  /// "every-line", "literal" or "pcre2-jit" / "pcre2".
  [[nodiscard]] std::string describe() const;

 private:
  struct compiled;
  std::uint64_t count_pcre(std::string_view text, scratch& s) const;
  std::uint64_t count_prefiltered(std::string_view text, scratch& s) const;
  std::uint64_t count_whole(std::string_view text, scratch& s) const;
  bool line_matches(std::string_view line, scratch& s) const;
  bool line_matches_slowly(std::string_view line, scratch& s) const;
  int dfa_match(std::string_view line, scratch::state& st) const;

  strategy kind_ = strategy::pcre2;
  std::unique_ptr<literal_finder> literal_;
  std::unique_ptr<compiled> code_;
  std::unique_ptr<literal_finder> required_;  // prefilter: a literal every match contains
  std::string pcre_pattern_;
};

}  // namespace scan
