// scan::matcher (see matcher.hpp): newline counting, strategy selection and
// the PCRE2 loop. The literal finder it uses is literal_finder.cpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "matcher.hpp"

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace scan {

// ---------------------------------------------------------------- newlines

std::size_t count_newlines(char const* data, std::size_t size) noexcept {
  std::size_t total = 0;
  std::size_t i = 0;
#if defined(__SSE2__)
  __m128i const newline = _mm_set1_epi8('\n');
  __m128i const zero = _mm_setzero_si128();
  while (size - i >= 16) {
    // Up to 255 blocks per round: each byte lane counts to at most 255.
    std::size_t const blocks = std::min<std::size_t>((size - i) / 16, 255);
    __m128i lanes = _mm_setzero_si128();
    for (std::size_t b = 0; b < blocks; ++b, i += 16) {
      __m128i const chunk = _mm_loadu_si128(reinterpret_cast<__m128i const*>(data + i));
      lanes = _mm_sub_epi8(lanes, _mm_cmpeq_epi8(chunk, newline));  // cmpeq gives -1
    }
    __m128i const sums = _mm_sad_epu8(lanes, zero);
    total += static_cast<std::size_t>(_mm_cvtsi128_si32(sums)) +
             static_cast<std::size_t>(_mm_cvtsi128_si32(_mm_srli_si128(sums, 8)));
  }
#endif
  for (; i < size; ++i)
    total += data[i] == '\n' ? 1 : 0;
  return total;
}

// ------------------------------------------------------------------ matcher

struct matcher::compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  bool has_backref = false;
  ~compiled() { pcre2_code_free(code); }
};

struct matcher::scratch::state {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;  // allocated on the first JIT stack overflow
  std::vector<int> dfa_workspace;        // for pcre2_dfa_match, when it is needed
  ~state() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

matcher::scratch::scratch() noexcept = default;
matcher::scratch::scratch(scratch&&) noexcept = default;
matcher::scratch& matcher::scratch::operator=(scratch&&) noexcept = default;
matcher::scratch::~scratch() = default;

matcher::matcher(matcher&&) noexcept = default;
matcher& matcher::operator=(matcher&&) noexcept = default;
matcher::~matcher() = default;

namespace {

std::vector<std::string> split_lines(std::vector<std::string> const& given) {
  std::vector<std::string> out;
  for (auto const& p : given) {
    std::size_t start = 0;
    while (true) {
      std::size_t const nl = p.find('\n', start);
      out.push_back(p.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  }
  return out;
}

std::string pcre_error_text(int code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  pcre2_get_error_message(code, buffer.data(), buffer.size());
  return std::string(reinterpret_cast<char const*>(buffer.data()));
}

}  // namespace

matcher::matcher(match_options const& options) {
  std::vector<std::string> const patterns = split_lines(options.patterns);
  if (patterns.empty()) throw pattern_error("no pattern");
  if (std::any_of(patterns.begin(), patterns.end(), [](auto const& p) { return p.empty(); })) {
    kind_ = strategy::every_line;
    // grep still rejects the other patterns if they are invalid.
    if (options.syntax == pattern_syntax::extended) {
      for (auto const& p : patterns)
        (void)translate_ere(p);
    }
    return;
  }

  std::string single_literal;
  std::string required;  // a literal every match contains: search it first
  bool literal_ok = false;
  bool any_backref = false;
  std::string pcre;
  if (options.syntax == pattern_syntax::fixed) {
    if (patterns.size() == 1) {
      single_literal = patterns[0];
      literal_ok = true;
    }
    for (std::size_t k = 0; k < patterns.size(); ++k) {
      if (k > 0) pcre += '|';
      pcre += pcre_escape_literal(patterns[k]);
    }
  } else {
    std::vector<ere_translation> parts;
    bool backrefs = false;
    for (auto const& p : patterns) {
      parts.push_back(translate_ere(p));
      backrefs = backrefs || parts.back().has_backref;
    }
    any_backref = backrefs;
    if (backrefs) {  // number the groups across the whole alternation
      int offset = 0;
      for (std::size_t k = 0; k < patterns.size(); ++k) {
        parts[k] = translate_ere(patterns[k], true, offset);
        offset += parts[k].groups;
      }
    }
    if (parts.size() == 1 && parts[0].required.size() >= 2) {
      required = parts[0].required;
    }
    if (parts.size() == 1 && parts[0].is_literal && !parts[0].literal.empty()) {
      single_literal = parts[0].literal;
      literal_ok = true;
    }
    if (parts.size() == 1) {
      pcre = parts[0].pcre;
    } else {
      for (std::size_t k = 0; k < parts.size(); ++k) {
        if (k > 0) pcre += '|';
        pcre += "(?:" + parts[k].pcre + ')';
      }
    }
  }

  if (literal_ok) {
    kind_ = strategy::literal;
    literal_ = std::make_unique<literal_finder>(std::move(single_literal), options.ignore_case);
    return;
  }

  kind_ = strategy::pcre2;
  pcre_pattern_ = pcre;
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  if (context == nullptr) throw std::bad_alloc();
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  std::uint32_t flags = PCRE2_MULTILINE | PCRE2_ALT_CIRCUMFLEX | PCRE2_NEVER_UTF | PCRE2_NEVER_UCP |
                        PCRE2_NEVER_BACKSLASH_C;
  if (options.ignore_case) flags |= PCRE2_CASELESS;
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(), flags,
                                   &error, &offset, context);
  pcre2_compile_context_free(context);
  if (code == nullptr) {
    throw pattern_error("cannot compile the pattern with PCRE2: " + pcre_error_text(error));
  }
  code_ = std::make_unique<compiled>();
  code_->code = code;
  code_->has_backref = any_backref;
  if (!required.empty()) {
    required_ = std::make_unique<literal_finder>(std::move(required), options.ignore_case);
  }
  code_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

std::string matcher::describe() const {
  switch (kind_) {
    case strategy::every_line:
      return "every-line";
    case strategy::literal:
      return "literal";
    case strategy::pcre2:
      return std::string(code_->jit ? "pcre2-jit" : "pcre2") +
             (required_ ? " after literal \"" + required_->needle() + "\"" : "");
  }
  return "?";
}

matcher::scratch matcher::make_scratch() const {
  scratch s;
  if (kind_ != strategy::pcre2) return s;
  s.state_ = std::make_unique<scratch::state>();
  s.state_->data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  s.state_->context = pcre2_match_context_create(nullptr);
  if (s.state_->data == nullptr || s.state_->context == nullptr) throw std::bad_alloc();
  return s;
}

namespace {

// One pcre2 call; grows the JIT stack once when the default one is too small.
int run_match(pcre2_code const* code, bool jit, std::string_view subject, std::size_t start,
              pcre2_match_data* data, pcre2_match_context* context, pcre2_jit_stack*& stack) {
  auto const* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  if (!jit) return pcre2_match(code, s, subject.size(), start, PCRE2_NO_JIT, data, context);
  int rc = pcre2_jit_match(code, s, subject.size(), start, 0, data, context);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT && stack == nullptr) {
    stack = pcre2_jit_stack_create(256 * 1024, 64 * 1024 * 1024, nullptr);
    if (stack == nullptr) return rc;
    pcre2_jit_stack_assign(context, nullptr, stack);
    rc = pcre2_jit_match(code, s, subject.size(), start, 0, data, context);
  }
  return rc;
}

}  // namespace

bool matcher::line_matches(std::string_view line, scratch& s) const {
  auto& st = *s.state_;
  int const rc = run_match(code_->code, code_->jit, line, 0, st.data, st.context, st.jit_stack);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) return line_matches_slowly(line, s);
  return true;
}

bool matcher::line_matches_slowly(std::string_view line, scratch& s) const {
  // After a backtracking limit (nested repetitions on a long line): PCRE2's
  // DFA matcher does not backtrack and only has to say whether the line has
  // a match. It has no back-references; for those use the interpreter.
  auto& st = *s.state_;
  int const rc = code_->has_backref
                     ? run_match(code_->code, false, line, 0, st.data, st.context, st.jit_stack)
                     : dfa_match(line, st);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) throw std::runtime_error("PCRE2 match failed: " + pcre_error_text(rc));
  return true;
}

int matcher::dfa_match(std::string_view line, scratch::state& st) const {
  auto const* subject = reinterpret_cast<PCRE2_SPTR>(line.data());
  for (std::size_t words = 4096; words <= (std::size_t{1} << 24); words *= 8) {
    if (st.dfa_workspace.size() < words) st.dfa_workspace.resize(words);
    int const rc = pcre2_dfa_match(code_->code, subject, line.size(), 0, 0, st.data, st.context,
                                   st.dfa_workspace.data(), st.dfa_workspace.size());
    if (rc != PCRE2_ERROR_DFA_WSSIZE && rc != PCRE2_ERROR_DFA_RECURSE) {
      return rc == 0 ? 1 : rc;  // 0: the ovector was too small, still a match
    }
  }
  return PCRE2_ERROR_DFA_WSSIZE;
}

std::uint64_t matcher::count_prefiltered(std::string_view text, scratch& s) const {
  char const* const base = text.data();
  std::size_t const n = text.size();
  std::uint64_t count = 0;
  std::uint64_t candidates = 0;
  std::size_t pos = 0;  // always the start of a line
  while (true) {
    // The literal is on most lines here (#define in headers): one PCRE2
    // call per line costs more than letting PCRE2 scan the rest itself.
    if (++candidates > 16 && pos < candidates * 1024)
      return count + count_whole(text.substr(pos), s);
    char const* hit = required_->find(base + pos, base + n);
    if (hit == nullptr) break;
    auto const at = static_cast<std::size_t>(hit - base);
    void const* prev = at > pos ? memrchr(base + pos, '\n', at - pos) : nullptr;
    std::size_t const line_start =
        prev != nullptr ? static_cast<std::size_t>(static_cast<char const*>(prev) - base) + 1 : pos;
    char const* nl = static_cast<char const*>(std::memchr(hit, '\n', n - at));
    std::size_t const line_end = nl != nullptr ? static_cast<std::size_t>(nl - base) : n;
    if (line_matches(text.substr(line_start, line_end - line_start), s)) ++count;
    if (nl == nullptr) break;
    pos = line_end + 1;
  }
  return count;
}

std::uint64_t matcher::count_pcre(std::string_view text, scratch& s) const {
  return required_ ? count_prefiltered(text, s) : count_whole(text, s);
}

std::uint64_t matcher::count_whole(std::string_view text, scratch& s) const {
  auto& st = *s.state_;
  char const* const base = text.data();
  std::size_t const n = text.size();
  PCRE2_SIZE const* ovector = pcre2_get_ovector_pointer(st.data);
  std::uint64_t count = 0;
  std::size_t pos = 0;  // always the start of a line
  while (true) {
    int const rc = run_match(code_->code, code_->jit, text, pos, st.data, st.context, st.jit_stack);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // A backtracking limit over the buffer: the rest of it line by line,
      // with the matcher that does not backtrack.
      while (true) {
        char const* nl = static_cast<char const*>(std::memchr(base + pos, '\n', n - pos));
        std::size_t const end = nl != nullptr ? static_cast<std::size_t>(nl - base) : n;
        if (line_matches_slowly(text.substr(pos, end - pos), s)) ++count;
        if (nl == nullptr) return count;
        pos = end + 1;
      }
    }
    std::size_t const match_start = ovector[0];
    std::size_t const match_end = ovector[1];
    char const* nl =
        static_cast<char const*>(std::memchr(base + match_start, '\n', n - match_start));
    std::size_t const line_end = nl != nullptr ? static_cast<std::size_t>(nl - base) : n;
    if (match_end > line_end) {
      // The match ran past the end of its line: ask again about that line.
      void const* prev = match_start > pos ? memrchr(base + pos, '\n', match_start - pos) : nullptr;
      std::size_t const line_start =
          prev != nullptr ? static_cast<std::size_t>(static_cast<char const*>(prev) - base) + 1
                          : pos;
      if (line_matches(text.substr(line_start, line_end - line_start), s)) ++count;
    } else {
      ++count;
    }
    if (nl == nullptr) break;
    pos = line_end + 1;
  }
  return count;
}

std::uint64_t matcher::count_lines(std::string_view text, scratch& s) const {
  if (text.empty()) return 0;
  if (text.back() == '\n') text.remove_suffix(1);  // ends the last line
  switch (kind_) {
    case strategy::every_line:
      return count_newlines(text.data(), text.size()) + 1;
    case strategy::literal: {
      std::uint64_t count = 0;
      char const* pos = text.data();
      char const* const end = pos + text.size();
      while (true) {
        char const* hit = literal_->find(pos, end);
        if (hit == nullptr) break;
        ++count;
        char const* nl = static_cast<char const*>(std::memchr(hit, '\n', end - hit));
        if (nl == nullptr) break;
        pos = nl + 1;
      }
      return count;
    }
    case strategy::pcre2:
      return count_pcre(text, s);
  }
  return 0;
}

}  // namespace scan
