// scan::matcher: strategy selection, the literal finder and the PCRE2 loop.
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
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace scan {

// ---------------------------------------------------------------- newlines

std::size_t count_newlines(const char* data, std::size_t size) noexcept {
  std::size_t total = 0;
  std::size_t i = 0;
#if defined(__SSE2__)
  const __m128i newline = _mm_set1_epi8('\n');
  const __m128i zero = _mm_setzero_si128();
  while (size - i >= 16) {
    // Up to 255 blocks per round: each byte lane counts to at most 255.
    const std::size_t blocks = std::min<std::size_t>((size - i) / 16, 255);
    __m128i lanes = _mm_setzero_si128();
    for (std::size_t b = 0; b < blocks; ++b, i += 16) {
      const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i));
      lanes = _mm_sub_epi8(lanes, _mm_cmpeq_epi8(chunk, newline));  // cmpeq gives -1
    }
    const __m128i sums = _mm_sad_epu8(lanes, zero);
    total += static_cast<std::size_t>(_mm_cvtsi128_si32(sums)) +
             static_cast<std::size_t>(_mm_cvtsi128_si32(_mm_srli_si128(sums, 8)));
  }
#endif
  for (; i < size; ++i)
    total += data[i] == '\n' ? 1 : 0;
  return total;
}

// ---------------------------------------------------------- literal finder

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
  const char* by_frequency = "etaoinsrhldcumfpgwybvkxjqz";  // common first
  for (int k = 0; by_frequency[k] != 0; ++k) {
    const int score = 250 - 6 * k;
    r[static_cast<unsigned char>(by_frequency[k])] = static_cast<std::uint8_t>(score);
    r[static_cast<unsigned char>(by_frequency[k] - 'a' + 'A')] =
        static_cast<std::uint8_t>(std::max(40, score / 2));
  }
  for (int d = '0'; d <= '9'; ++d)
    r[d] = d <= '2' ? 140 : 110;
  const char* punct_common = "_.,()/;-=*\"";
  for (int k = 0; punct_common[k] != 0; ++k)
    r[static_cast<unsigned char>(punct_common[k])] = 160;
  const char* punct_middle = "':{}<>[]#+";
  for (int k = 0; punct_middle[k] != 0; ++k)
    r[static_cast<unsigned char>(punct_middle[k])] = 115;
  const char* punct_rare = "&|!?%@$\\^`~";
  for (int k = 0; punct_rare[k] != 0; ++k)
    r[static_cast<unsigned char>(punct_rare[k])] = 70;
  return r;
}

const std::array<std::uint8_t, 256> byte_ranks = make_byte_ranks();

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
bool equal_folded(const char* text, std::string const& folded) noexcept {
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
    const auto c = static_cast<unsigned char>(needle_[k]);
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
    const bool k_differs = needle_[k] != needle_[first_];
    const bool cur_differs = needle_[second_] != needle_[first_];
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

const char* literal_finder::find_scalar(const char* begin, const char* end) const noexcept {
  const std::size_t m = needle_.size();
  if (static_cast<std::size_t>(end - begin) < m) return nullptr;
  const char* const last_start = end - m;
  if (icase_) {
    const auto rare = static_cast<unsigned char>(needle_[first_]);
    for (const char* start = begin; start <= last_start; ++start) {
      if (fold(static_cast<unsigned char>(start[first_])) == rare && equal_folded(start, needle_)) {
        return start;
      }
    }
    return nullptr;
  }
  const char rare = needle_[first_];
  const char* p = begin + first_;
  const char* const scan_end = last_start + first_ + 1;  // rare byte of the last start
  std::size_t misses = 0;
  while (p < scan_end) {
    const char* q = static_cast<const char*>(std::memchr(p, rare, scan_end - p));
    if (q == nullptr) return nullptr;
    const char* start = q - first_;
    if (std::memcmp(start, needle_.data(), m) == 0) return start;
    p = q + 1;
    // The rare byte is not rare here: let glibc's memmem take the rest.
    if (++misses >= 16 && static_cast<std::size_t>(p - begin) < misses * 64) {
      return static_cast<const char*>(memmem(start + 1, end - (start + 1), needle_.data(), m));
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
  const char* begin;
  const char* last_start;  // last possible start of a match
  std::size_t false_hits = 0;
  bool give_up = false;

  // Returns the first match among the candidate starts in `mask`.
  template <bool Icase>
  const char* check(const char* p, std::uint32_t mask) noexcept {
    while (mask != 0) {
      const char* candidate = p + __builtin_ctz(mask);
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
  bool too_noisy(const char* p) const noexcept {
    return false_hits > 64 && static_cast<std::size_t>(p - begin) < false_hits * 16;
  }

  char byte(std::size_t k, bool upper) const noexcept {
    const auto c = static_cast<unsigned char>(needle[k]);
    return static_cast<char>(upper ? other_case(c) : c);
  }

  template <bool Icase>
  const char* run_sse2(const char*& p, const char* last_block) noexcept {
    const __m128i b1 = _mm_set1_epi8(byte(first, false));
    const __m128i b2 = _mm_set1_epi8(byte(second, false));
    const __m128i u1 = _mm_set1_epi8(byte(first, true));
    const __m128i u2 = _mm_set1_epi8(byte(second, true));
    // Locals, so that the compiler keeps them in registers.
    const char* q = p;
    const std::size_t o1 = first;
    const std::size_t o2 = second;
    for (; q <= last_block; q += 16) {
      const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + o1));
      const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + o2));
      __m128i e1 = _mm_cmpeq_epi8(v1, b1);
      __m128i e2 = _mm_cmpeq_epi8(v2, b2);
      if constexpr (Icase) {
        e1 = _mm_or_si128(e1, _mm_cmpeq_epi8(v1, u1));
        e2 = _mm_or_si128(e2, _mm_cmpeq_epi8(v2, u2));
      }
      const auto mask = static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_and_si128(e1, e2)));
      if (mask != 0) {
        p = q;
        if (const char* hit = check<Icase>(q, mask)) return hit;
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
  __attribute__((target("avx2"))) const char* run_avx2(const char*& p,
                                                       const char* last_block) noexcept {
    const __m256i b1 = _mm256_set1_epi8(byte(first, false));
    const __m256i b2 = _mm256_set1_epi8(byte(second, false));
    const __m256i u1 = _mm256_set1_epi8(byte(first, true));
    const __m256i u2 = _mm256_set1_epi8(byte(second, true));
    const char* q = p;
    const std::size_t o1 = first;
    const std::size_t o2 = second;
    for (; q <= last_block; q += 32) {
      const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + o1));
      const __m256i v2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + o2));
      __m256i e1 = _mm256_cmpeq_epi8(v1, b1);
      __m256i e2 = _mm256_cmpeq_epi8(v2, b2);
      if constexpr (Icase) {
        e1 = _mm256_or_si256(e1, _mm256_cmpeq_epi8(v1, u1));
        e2 = _mm256_or_si256(e2, _mm256_cmpeq_epi8(v2, u2));
      }
      const auto mask = static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_and_si256(e1, e2)));
      if (mask != 0) {
        p = q;
        if (const char* hit = check<Icase>(q, mask)) return hit;
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

const char* literal_finder::find(const char* begin, const char* end) const noexcept {
  const std::size_t m = needle_.size();
  if (static_cast<std::size_t>(end - begin) < m) return nullptr;
  if (m == 1 && !icase_)
    return static_cast<const char*>(std::memchr(begin, needle_[0], end - begin));
  const char* p = begin;
#if defined(__SSE2__)
  // Both loads of a block stay inside [begin, end).
  const std::size_t reach = std::max(first_, second_);
  pair_filter filter{needle_, first_, second_, begin, end - m};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (avx2_ && static_cast<std::size_t>(end - p) >= reach + 32) {
    const char* hit = icase_ ? filter.run_avx2<true>(p, end - reach - 32)
                             : filter.run_avx2<false>(p, end - reach - 32);
    if (hit != nullptr) return hit;
  }
#endif
  if (!filter.give_up && static_cast<std::size_t>(end - p) >= reach + 16) {
    const char* hit = icase_ ? filter.run_sse2<true>(p, end - reach - 16)
                             : filter.run_sse2<false>(p, end - reach - 16);
    if (hit != nullptr) return hit;
  }
  if (filter.give_up) return static_cast<const char*>(memmem(p, end - p, needle_.data(), m));
#endif
  return find_scalar(p, end);  // the last few starts
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
      const std::size_t nl = p.find('\n', start);
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
  return std::string(reinterpret_cast<const char*>(buffer.data()));
}

}  // namespace

matcher::matcher(match_options const& options) {
  const std::vector<std::string> patterns = split_lines(options.patterns);
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
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
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
  const int rc = run_match(code_->code, code_->jit, line, 0, st.data, st.context, st.jit_stack);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) return line_matches_slowly(line, s);
  return true;
}

bool matcher::line_matches_slowly(std::string_view line, scratch& s) const {
  // After a backtracking limit (nested repetitions on a long line): PCRE2's
  // DFA matcher does not backtrack and only has to say whether the line has
  // a match. It has no back-references; for those use the interpreter.
  auto& st = *s.state_;
  const int rc = code_->has_backref
                     ? run_match(code_->code, false, line, 0, st.data, st.context, st.jit_stack)
                     : dfa_match(line, st);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) throw std::runtime_error("PCRE2 match failed: " + pcre_error_text(rc));
  return true;
}

int matcher::dfa_match(std::string_view line, scratch::state& st) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(line.data());
  for (std::size_t words = 4096; words <= (std::size_t{1} << 24); words *= 8) {
    if (st.dfa_workspace.size() < words) st.dfa_workspace.resize(words);
    const int rc = pcre2_dfa_match(code_->code, subject, line.size(), 0, 0, st.data, st.context,
                                   st.dfa_workspace.data(), st.dfa_workspace.size());
    if (rc != PCRE2_ERROR_DFA_WSSIZE && rc != PCRE2_ERROR_DFA_RECURSE) {
      return rc == 0 ? 1 : rc;  // 0: the ovector was too small, still a match
    }
  }
  return PCRE2_ERROR_DFA_WSSIZE;
}

std::uint64_t matcher::count_prefiltered(std::string_view text, scratch& s) const {
  const char* const base = text.data();
  const std::size_t n = text.size();
  std::uint64_t count = 0;
  std::uint64_t candidates = 0;
  std::size_t pos = 0;  // always the start of a line
  while (true) {
    // The literal is on most lines here (#define in headers): one PCRE2
    // call per line costs more than letting PCRE2 scan the rest itself.
    if (++candidates > 16 && pos < candidates * 1024)
      return count + count_whole(text.substr(pos), s);
    const char* hit = required_->find(base + pos, base + n);
    if (hit == nullptr) break;
    const auto at = static_cast<std::size_t>(hit - base);
    const void* prev = at > pos ? memrchr(base + pos, '\n', at - pos) : nullptr;
    const std::size_t line_start =
        prev != nullptr ? static_cast<std::size_t>(static_cast<const char*>(prev) - base) + 1 : pos;
    const char* nl = static_cast<const char*>(std::memchr(hit, '\n', n - at));
    const std::size_t line_end = nl != nullptr ? static_cast<std::size_t>(nl - base) : n;
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
  const char* const base = text.data();
  const std::size_t n = text.size();
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(st.data);
  std::uint64_t count = 0;
  std::size_t pos = 0;  // always the start of a line
  while (true) {
    const int rc = run_match(code_->code, code_->jit, text, pos, st.data, st.context, st.jit_stack);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // A backtracking limit over the buffer: the rest of it line by line,
      // with the matcher that does not backtrack.
      while (true) {
        const char* nl = static_cast<const char*>(std::memchr(base + pos, '\n', n - pos));
        const std::size_t end = nl != nullptr ? static_cast<std::size_t>(nl - base) : n;
        if (line_matches_slowly(text.substr(pos, end - pos), s)) ++count;
        if (nl == nullptr) return count;
        pos = end + 1;
      }
    }
    const std::size_t match_start = ovector[0];
    const std::size_t match_end = ovector[1];
    const char* nl =
        static_cast<const char*>(std::memchr(base + match_start, '\n', n - match_start));
    const std::size_t line_end = nl != nullptr ? static_cast<std::size_t>(nl - base) : n;
    if (match_end > line_end) {
      // The match ran past the end of its line: ask again about that line.
      const void* prev = match_start > pos ? memrchr(base + pos, '\n', match_start - pos) : nullptr;
      const std::size_t line_start =
          prev != nullptr ? static_cast<std::size_t>(static_cast<const char*>(prev) - base) + 1
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
      const char* pos = text.data();
      const char* const end = pos + text.size();
      while (true) {
        const char* hit = literal_->find(pos, end);
        if (hit == nullptr) break;
        ++count;
        const char* nl = static_cast<const char*>(std::memchr(hit, '\n', end - hit));
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
