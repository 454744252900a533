// libFuzzer target: spindle-scan's line counting (examples/scan: the
// line_counter loop over a line_buffer, the matcher's literal, every-line and
// PCRE2 strategies, the ERE translation) against a reference that looks at
// one line of the whole input at a time.
//
// Input: byte 0: bit 0 fixed strings (-F) else ERE (-E), bit 1 -i; byte 1:
// the buffer's initial capacity (1..255 bytes, or spindle-scan's 128 KiB for
// 255), which a long line makes grow; byte 2: the read sizes (0: every read
// fills the space as pread does on a regular file; else a seed for reads of
// 1..space bytes); byte 3: the pattern's length (0..47); then the pattern
// (split at '\n' into several, as grep does) and the file.
//
// Reference: the file split into grep's lines; -F: a line matches when it
// contains one of the patterns (ASCII case folded with -i), or every line
// with an empty pattern; -E: the translated patterns joined as one PCRE2
// alternation, matched against each line alone (no MULTILINE, no prefilter,
// no buffer-level search). The count through the line_counter (twice: with a
// new buffer, then with the same buffer reset() as for the next file) and
// the matcher's count over the whole input in one call must all equal it.
//
// Skipped: patterns the matcher rejects (pattern_error), and inputs where
// PCRE2 gives up (a match limit in the reference, the matcher's documented
// std::runtime_error).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ere.hpp"
#include "line_buffer.hpp"
#include "line_counter.hpp"
#include "matcher.hpp"

namespace {

[[noreturn]] void fail(char const* what, std::uint64_t got, std::uint64_t want) {
  std::fprintf(stderr, "fuzz_line_count: %s: got %llu, want %llu\n", what,
               static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
  std::abort();
}

// grep's line model: split at '\n'; a final '\n' does not start a line.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  if (text.empty()) return lines;
  if (text.back() == '\n') text.remove_suffix(1);
  while (true) {
    const std::size_t nl = text.find('\n');
    lines.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

std::vector<std::string> split_patterns(std::string_view given) {
  std::vector<std::string> out;
  while (true) {
    const std::size_t nl = given.find('\n');
    out.emplace_back(given.substr(0, nl));
    if (nl == std::string_view::npos) break;
    given.remove_prefix(nl + 1);
  }
  return out;
}

std::string fold(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::uint64_t fixed_reference(std::vector<std::string> const& patterns, bool icase,
                              std::string_view text) {
  std::vector<std::string> needles;
  for (auto const& p : patterns)
    needles.push_back(icase ? fold(p) : p);
  std::uint64_t n = 0;
  for (std::string_view line : split_lines(text)) {
    const std::string hay = icase ? fold(line) : std::string(line);
    n += std::any_of(
             needles.begin(), needles.end(),
             [&](std::string const& needle) { return hay.find(needle) != std::string::npos; })
             ? 1
             : 0;
  }
  return n;
}

// nullopt: PCRE2 gave up on some line (a match limit), or on the pattern
// (a size limit).
std::optional<std::uint64_t> ere_reference(std::vector<std::string> const& patterns, bool icase,
                                           std::string_view text) {
  std::string pcre;
  int offset = 0;
  bool every = false;
  for (std::size_t k = 0; k < patterns.size(); ++k) {
    every = every || patterns[k].empty();
    const scan::ere_translation t = scan::translate_ere(patterns[k], true, offset);
    offset += t.groups;
    if (k > 0) pcre += '|';
    pcre += "(?:" + t.pcre + ")";
  }
  const std::vector<std::string_view> lines = split_lines(text);
  if (every) return lines.size();
  // PCRE2's interpreter spends time in the product of nested bounded
  // repetitions (K?{677}?{3177}: 12 s on one line, past the match limit's
  // reach, a fuzzing timeout) where spindle's matcher is linear: the
  // reference gives up when the bounds in the patterns multiply past 10^5.
  double bounds = 1;
  for (std::string const& p : patterns) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (p[i] != '{') continue;
      double b = 0;
      for (std::size_t j = i + 1; j < p.size() && (p[j] == ',' || (p[j] >= '0' && p[j] <= '9'));
           ++j) {
        b = p[j] == ',' ? 0 : b * 10 + (p[j] - '0');
      }
      bounds *= b > 1 ? b : 1;
    }
  }
  if (bounds > 1e5) return std::nullopt;
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  pcre2_code* code = pcre2_compile(
      reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(),
      (icase ? PCRE2_CASELESS : 0u) | PCRE2_NEVER_UTF | PCRE2_NEVER_UCP, &err, &err_offset, cc);
  pcre2_compile_context_free(cc);
  if (code == nullptr) {
    // PCRE2's own size limits (nested bounded repetitions such as
    // ((ab){774}){8} exceed its compiled-pattern size, where grep and
    // spindle's matcher take them): the reference gives up, as it does on
    // a match limit. Any other compile error is a translation bug.
    if (err == PCRE2_ERROR_PATTERN_TOO_LARGE || err == PCRE2_ERROR_PATTERN_TOO_COMPLICATED ||
        err == PCRE2_ERROR_HEAP_FAILED) {
      return std::nullopt;
    }
    std::fprintf(stderr, "fuzz_line_count: the reference cannot compile %s\n", pcre.c_str());
    std::abort();
  }
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  // Backtracking bounds for the reference: nested bounded repetitions such
  // as ?{677}?{3177} make PCRE2's interpreter backtrack for tens of seconds
  // over a few hundred lines (a fuzzing timeout, 42 s for one input), where
  // spindle's matcher (a DFA/NFA engine) is linear. Past 1,000,000 steps on a
  // line, or 2 s for the whole input, the reference gives up on the input.
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(mc, 1'000'000);
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::optional<std::uint64_t> n = 0;
  for (std::string_view line : lines) {
    int const rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(line.data()), line.size(), 0,
                               PCRE2_NO_JIT, data, mc);
    if (rc >= 0) {
      ++*n;
    } else if (rc != PCRE2_ERROR_NOMATCH) {
      n.reset();
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      n.reset();
      break;
    }
  }
  pcre2_match_context_free(mc);
  pcre2_match_data_free(data);
  pcre2_code_free(code);
  return n;
}

// Read sizes: every read fills the space, or a small xorshift picks 1..space.
class reads {
 public:
  explicit reads(std::uint8_t seed) : state_(seed), fill_(seed == 0) {}
  std::size_t next(std::size_t space) {
    if (fill_) return space;
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return 1 + static_cast<std::size_t>(state_ % space);
  }

 private:
  std::uint64_t state_;
  bool fill_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size < 4) return 0;
  bool const fixed = (data[0] & 1) != 0;
  bool const icase = (data[0] & 2) != 0;
  const std::size_t capacity = data[1] == 255 ? 128 * 1024 : 1 + std::size_t{data[1]};
  reads read_sizes(data[2]);
  const std::size_t pattern_len = std::min<std::size_t>(data[3] % 48, size - 4);
  const std::string_view pattern(reinterpret_cast<char const*>(data) + 4, pattern_len);
  const std::string_view file(reinterpret_cast<char const*>(data) + 4 + pattern_len,
                              size - 4 - pattern_len);

  scan::match_options options;
  options.syntax = fixed ? scan::pattern_syntax::fixed : scan::pattern_syntax::extended;
  options.ignore_case = icase;
  options.patterns.emplace_back(pattern);
  std::optional<scan::matcher> m;
  try {
    m.emplace(options);
  } catch (scan::pattern_error const&) {
    return 0;  // grep rejects it too
  }

  const std::vector<std::string> patterns = split_patterns(pattern);
  std::optional<std::uint64_t> want =
      fixed ? fixed_reference(patterns, icase, file) : ere_reference(patterns, icase, file);
  if (!want) return 0;

  std::uint64_t chunked[2] = {0, 0};
  std::uint64_t whole = 0;
  try {
    scan::matcher::scratch s = m->make_scratch();
    scan::line_buffer buffer(capacity);
    for (std::uint64_t& count : chunked) {
      // The second time the buffer is reused, as spindle-scan reuses a
      // slot's buffer for the next file: reset() shrinks it if a long line
      // grew it past twice its size.
      buffer.reset(2 * capacity);
      scan::line_counter counter(*m, s, buffer);
      std::size_t at = 0;
      while (at < file.size()) {
        const std::span<char> space = counter.space();
        if (space.empty()) fail("line_buffer::space() is empty", 0, 1);
        const std::size_t n = std::min(read_sizes.next(space.size()), file.size() - at);
        std::copy_n(file.data() + at, n, space.data());
        counter.commit(n);
        at += n;
      }
      count = counter.finish();
    }
    whole = m->count_lines(file, s);
  } catch (std::runtime_error const&) {
    return 0;  // PCRE2 gave up on a line with every fallback (documented)
  }
  if (chunked[0] != *want) fail("lines counted through the line buffer", chunked[0], *want);
  if (chunked[1] != *want) fail("lines counted through the reused buffer", chunked[1], *want);
  if (whole != *want) fail("lines counted in one buffer", whole, *want);
  return 0;
}
