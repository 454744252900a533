// What spindle-scan's matcher tests share (tests/scan/test_*.cpp): pattern
// options, counting, grep's line model, and the references the matcher is
// checked against: the translated patterns matched line by line by PCRE2,
// std::regex's POSIX ERE, and random texts.
//
// The expectations about grep come from GNU grep 3.8 in the C locale
// (`LC_ALL=C grep -E -c`), checked by hand when the translation was written.
#pragma once

#include <gtest/gtest.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <regex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ere.hpp"
#include "line_buffer.hpp"
#include "line_counter.hpp"
#include "matcher.hpp"

namespace scan_test {

using scan::match_options;
using scan::matcher;
using scan::pattern_syntax;

inline match_options ere(std::vector<std::string> patterns, bool icase = false) {
  return match_options{pattern_syntax::extended, icase, std::move(patterns)};
}
inline match_options fixed(std::vector<std::string> patterns, bool icase = false) {
  return match_options{pattern_syntax::fixed, icase, std::move(patterns)};
}

inline std::uint64_t count(match_options const& o, std::string_view text) {
  matcher m(o);
  auto s = m.make_scratch();
  return m.count_lines(text, s);
}

// grep's line model: split at '\n'; a final '\n' does not start a line.
inline std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  if (text.empty()) return lines;
  if (text.back() == '\n') text.remove_suffix(1);
  std::size_t start = 0;
  while (true) {
    std::size_t const nl = text.find('\n', start);
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
        std::size_t const nl = p.find('\n', start);
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
      int const rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(line.data()), line.size(), 0,
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
inline std::uint64_t std_regex_count(std::string const& pattern, bool icase,
                                     std::string_view text) {
  auto flags = std::regex::extended | std::regex::nosubs;
  if (icase) flags |= std::regex::icase;
  std::regex const re(pattern, flags);
  std::uint64_t n = 0;
  for (auto const& line : split_lines(text))
    n += std::regex_search(line, re) ? 1 : 0;
  return n;
}

// Random text over a small alphabet so that patterns hit often; `nul`: NUL
// bytes too; some lines are long.
inline std::string random_text(std::mt19937& rng, std::size_t lines, bool nul,
                               bool crlf_and_high = true) {
  static std::string const base = "aabbcxyzABC  _0123.-\t";
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
inline std::uint64_t chunked_count(matcher const& m, std::string_view text, std::size_t capacity,
                                   std::mt19937& rng) {
  scan::line_buffer buffer(capacity);
  auto s = m.make_scratch();
  scan::line_counter counter(m, s, buffer);
  std::size_t at = 0;
  while (at < text.size()) {
    std::span<char> space = counter.space();
    EXPECT_FALSE(space.empty());
    std::uniform_int_distribution<std::size_t> pick(1, space.size());
    std::size_t const take = std::min(pick(rng), text.size() - at);
    std::copy_n(text.data() + at, take, space.data());
    counter.commit(take);
    at += take;
  }
  return counter.finish();
}

}  // namespace scan_test
