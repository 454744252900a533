// GNU ERE -> PCRE2 translation; see ere.hpp for the rules.
#include "ere.hpp"

#include <array>
#include <bitset>
#include <cctype>
#include <cstdint>
#include <optional>
#include <vector>

namespace scan {
namespace {

constexpr int kDupMax = 0x7fff;  // glibc RE_DUP_MAX

using byte_set = std::bitset<256>;

void append_hex(std::string& out, unsigned char c) {
  static constexpr char digits[] = "0123456789abcdef";
  out += "\\x";
  out += digits[c >> 4];
  out += digits[c & 15];
}

// One byte as a PCRE2 literal outside a class.
void append_literal(std::string& out, unsigned char c) {
  if (std::isalnum(c) != 0 || c == '_') {
    out += static_cast<char>(c);
  } else {
    append_hex(out, c);
  }
}

std::optional<byte_set> named_class(std::string_view name) {
  int (*pred)(int) = nullptr;
  if (name == "alpha") pred = [](int c) { return std::isalpha(c); };
  if (name == "upper") pred = [](int c) { return std::isupper(c); };
  if (name == "lower") pred = [](int c) { return std::islower(c); };
  if (name == "digit") pred = [](int c) { return std::isdigit(c); };
  if (name == "xdigit") pred = [](int c) { return std::isxdigit(c); };
  if (name == "space") pred = [](int c) { return std::isspace(c); };
  if (name == "print") pred = [](int c) { return std::isprint(c); };
  if (name == "punct") pred = [](int c) { return std::ispunct(c); };
  if (name == "graph") pred = [](int c) { return std::isgraph(c); };
  if (name == "cntrl") pred = [](int c) { return std::iscntrl(c); };
  if (name == "blank") pred = [](int c) { return std::isblank(c); };
  if (name == "alnum") pred = [](int c) { return std::isalnum(c); };
  if (pred == nullptr) return std::nullopt;
  byte_set set;
  // The C locale: only ASCII bytes belong to any class.
  for (int c = 0; c < 128; ++c) {
    if (pred(c) != 0) set.set(static_cast<std::size_t>(c));
  }
  return set;
}

class translator {
 public:
  translator(std::string_view ere, bool capture, int group_offset)
      : p_(ere), capture_(capture), group_offset_(group_offset) {}

  ere_translation run() {
    literal_ok_ = true;
    while (i_ < p_.size())
      step();
    if (!open_.empty()) throw pattern_error("Unmatched ( or \\(");
    end_run();
    ere_translation r;
    if (!top_alternation_) r.required = best_run_;
    r.pcre = std::move(out_);
    r.is_literal = literal_ok_;
    if (literal_ok_) r.literal = std::move(literal_);
    r.groups = capture_ ? groups_ : 0;
    r.has_backref = has_backref_;
    return r;
  }

 private:
  enum class last_kind { none, atom, anchor };

  struct open_group {
    std::size_t out_pos;
    int number;  // 1-based within this pattern
    std::vector<bool> completed_at_open;
    std::vector<bool> accumulated;  // groups completed in earlier alternatives
  };

  static void merge(std::vector<bool>& into, std::vector<bool> const& from) {
    if (into.size() < from.size()) into.resize(from.size());
    for (std::size_t k = 0; k < from.size(); ++k) {
      if (from[k]) into[k] = true;
    }
  }

  void not_literal() { literal_ok_ = false; }

  // Required literal: the longest run of literal bytes at the top level
  // (outside groups, not repeated) that every match contains; zero-width
  // anchors do not interrupt a run, every other atom does.
  void end_run() {
    if (run_.size() > best_run_.size()) best_run_ = run_;
    run_.clear();
  }

  void begin_atom(bool keeps_run = false) {
    if (!keeps_run) end_run();
    atom_start_ = out_.size();
    last_ = last_kind::atom;
    quantified_ = false;
  }
  void begin_anchor() {
    atom_start_ = out_.size();
    last_ = last_kind::anchor;
    quantified_ = false;
    not_literal();
  }

  void literal_byte(unsigned char c) {
    begin_atom(true);
    append_literal(out_, c);
    literal_ += static_cast<char>(c);
    bool const repeated = i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' ||
                                             p_[i_] == '{');  // maybe: stay on the safe side
    if (!open_.empty() || repeated) {
      end_run();
    } else {
      run_ += static_cast<char>(c);
    }
  }

  void step() {
    auto const c = static_cast<unsigned char>(p_[i_]);
    switch (c) {
      case '(': {
        ++i_;
        not_literal();
        end_run();
        open_group g{out_.size(), ++groups_, completed_, {}};
        out_ += capture_ ? "(" : "(?:";
        open_.push_back(std::move(g));
        last_ = last_kind::none;
        return;
      }
      case ')': {
        ++i_;
        if (open_.empty()) {  // unmatched ')' is an ordinary character
          literal_byte(c);
          return;
        }
        end_run();
        open_group g = std::move(open_.back());
        open_.pop_back();
        out_ += ')';
        merge(completed_, g.accumulated);
        mark_completed(g.number);
        atom_start_ = g.out_pos;
        last_ = last_kind::atom;
        quantified_ = false;
        return;
      }
      case '|':
        ++i_;
        not_literal();
        end_run();
        if (open_.empty()) top_alternation_ = true;
        out_ += '|';
        last_ = last_kind::none;
        // glibc: a back-reference may only name a group completed before the
        // alternation or in its own alternative; after the alternation every
        // alternative's groups count.
        if (open_.empty()) {
          completed_.clear();
        } else {
          merge(open_.back().accumulated, completed_);
          completed_ = open_.back().completed_at_open;
        }
        return;
      case '^':
        ++i_;
        begin_anchor();
        out_ += '^';
        return;
      case '$':
        ++i_;
        begin_anchor();
        out_ += '$';
        return;
      case '.':
        ++i_;
        not_literal();
        begin_atom();
        out_ += '.';  // NEWLINE_LF, no DOTALL: any byte but '\n'
        return;
      case '[':
        not_literal();
        bracket();
        return;
      case '*':
        ++i_;
        quantifier(0, -1);
        return;
      case '+':
        ++i_;
        quantifier(1, -1);
        return;
      case '?':
        ++i_;
        quantifier(0, 1);
        return;
      case '{': {
        int lo = 0;
        int hi = 0;
        std::size_t end = 0;
        if (parse_interval(lo, hi, end)) {
          i_ = end;
          quantifier(lo, hi);
        } else {
          ++i_;
          literal_byte(c);
        }
        return;
      }
      case '\\':
        escape();
        return;
      default:
        ++i_;
        literal_byte(c);
        return;
    }
  }

  void mark_completed(int number) {
    if (completed_.size() <= static_cast<std::size_t>(number)) completed_.resize(number + 1);
    completed_[number] = true;
  }

  void escape() {
    if (i_ + 1 >= p_.size()) throw pattern_error("Trailing backslash");
    auto const d = static_cast<unsigned char>(p_[i_ + 1]);
    i_ += 2;
    switch (d) {
      case 'w':
        not_literal();
        begin_atom();
        out_ += "\\w";
        return;
      case 'W':
        not_literal();
        begin_atom();
        out_ += "[^\\w\\n]";
        return;
      case 's':
        not_literal();
        begin_atom();
        out_ += "[\\t\\x0b\\f\\r ]";
        return;
      case 'S':
        not_literal();
        begin_atom();
        out_ += "[^\\s]";  // PCRE2 \s contains \n, so [^\s] excludes it
        return;
      case 'b':
        begin_anchor();
        out_ += "\\b";
        return;
      case 'B':
        begin_anchor();
        out_ += "\\B";
        return;
      case '<':
        begin_anchor();
        out_ += "\\b(?=\\w)";
        return;
      case '>':
        begin_anchor();
        out_ += "\\b(?<=\\w)";
        return;
      case '`':
        begin_anchor();
        out_ += '^';
        return;
      case '\'':
        begin_anchor();
        out_ += '$';
        return;
      default:
        break;
    }
    if (d >= '1' && d <= '9') {
      int const n = d - '0';
      if (static_cast<std::size_t>(n) >= completed_.size() || !completed_[n]) {
        throw pattern_error("Invalid back reference");
      }
      not_literal();
      has_backref_ = true;
      begin_atom();
      if (capture_) {
        out_ += "\\g{";
        out_ += std::to_string(n + group_offset_);
        out_ += '}';
      } else {
        out_ += "(?!)";  // placeholder: the caller translates again with capture
      }
      return;
    }
    literal_byte(d);
  }

  // `{` at i_: a GNU interval? On success lo/hi (hi = -1: unbounded) and the
  // index after '}'. Returns false when '{' is an ordinary character. Throws
  // for the forms glibc rejects.
  bool parse_interval(int& lo, int& hi, std::size_t& end) const {
    std::size_t k = i_ + 1;
    auto number = [&](int& value, bool& any, bool& bad) -> bool {  // false at end of pattern
      value = -1;
      any = false;
      bad = false;
      while (k < p_.size() && p_[k] != '}' && p_[k] != ',') {
        char const ch = p_[k++];
        if (ch >= '0' && ch <= '9' && !bad) {
          value = any ? std::min(kDupMax + 1, value * 10 + (ch - '0')) : ch - '0';
          any = true;
        } else {
          bad = true;
        }
      }
      return k < p_.size();
    };
    int first = -1;
    bool any = false;
    bool bad = false;
    if (!number(first, any, bad)) return false;  // "{..." runs to the end: literal
    if (bad) return false;
    int second = -1;
    if (p_[k] == ',') {
      ++k;
      if (!any) first = 0;
      bool any2 = false;
      bool bad2 = false;
      if (!number(second, any2, bad2)) return false;
      if (bad2) return false;
      if (p_[k] != '}') throw pattern_error("Invalid content of \\{\\}");  // {1,2,3}
      if (!any2) second = -1;
    } else {
      if (!any) throw pattern_error("Invalid content of \\{\\}");  // {}
      second = first;
    }
    if (second >= 0 && first > second) throw pattern_error("Invalid content of \\{\\}");
    if ((second < 0 ? first : second) > kDupMax) {
      throw pattern_error("Regular expression too big");
    }
    lo = first;
    hi = second;
    end = k + 1;
    return true;
  }

  void quantifier(int lo, int hi) {
    not_literal();
    if (last_ == last_kind::none) return;  // repeats the empty string
    if (last_ == last_kind::anchor) {
      if (lo == 0) {  // an optional anchor constrains nothing
        out_.erase(atom_start_);
        last_ = last_kind::none;
      }
      return;
    }
    if (quantified_) {
      // POSIX: a+? is (a+)?, not PCRE's lazy a+?. When the inner minimum is
      // at most 1 the counts (X{a,b}){c,d} allows are exactly a*c..b*d, so
      // the two merge into one quantifier (a+* is a*): nested quantifiers
      // make a backtracking matcher exponential. Otherwise group and repeat.
      int const a = quant_lo_;
      int const b = quant_hi_;
      if (a <= 1 && b != 0) {
        long long const top = b < 0 || hi < 0 ? -1 : static_cast<long long>(b) * hi;
        if (top <= 65535) {
          lo = a * lo;
          hi = hi == 0 ? 0 : static_cast<int>(top);
          out_.erase(quant_pos_);
          emit_quantifier(lo, hi);
          return;
        }
      }
      out_.insert(atom_start_, "(?:");
      out_ += ')';
    }
    emit_quantifier(lo, hi);
  }

  void emit_quantifier(int lo, int hi) {
    quant_pos_ = out_.size();
    quant_lo_ = lo;
    quant_hi_ = hi;
    if (lo == 0 && hi < 0) {
      out_ += '*';
    } else if (lo == 1 && hi < 0) {
      out_ += '+';
    } else if (lo == 0 && hi == 1) {
      out_ += '?';
    } else {
      out_ += '{';
      out_ += std::to_string(lo);
      if (hi != lo) {
        out_ += ',';
        if (hi >= 0) out_ += std::to_string(hi);
      }
      out_ += '}';
    }
    quantified_ = true;
  }

  struct bracket_elem {
    bool is_class = false;
    bool is_equiv = false;
    unsigned char ch = 0;
    byte_set set;
  };

  // Parses one element at k: a byte, [:name:], [.c.] or [=c=].
  bracket_elem bracket_element(std::size_t& k) const {
    bracket_elem e;
    if (p_[k] == '[' && k + 1 < p_.size() &&
        (p_[k + 1] == ':' || p_[k + 1] == '.' || p_[k + 1] == '=')) {
      char const kind = p_[k + 1];
      // The content has at least one character: "[.].]" names ']'.
      char const terminator[] = {kind, ']', '\0'};
      std::size_t const close = p_.find(terminator, k + 3);
      if (close == std::string_view::npos) throw pattern_error("Unmatched [, [^, [:, [., or [=");
      std::string_view const content = p_.substr(k + 2, close - (k + 2));
      k = close + 2;
      if (kind == ':') {
        auto set = named_class(content);
        if (!set) throw pattern_error("Invalid character class name");
        e.is_class = true;
        e.set = *set;
      } else {
        if (content.size() != 1) throw pattern_error("Invalid collation character");
        e.ch = static_cast<unsigned char>(content[0]);
        e.is_equiv = kind == '=';
      }
      return e;
    }
    e.ch = static_cast<unsigned char>(p_[k++]);
    return e;
  }

  void bracket() {
    std::size_t k = i_ + 1;
    bool negate = false;
    if (k < p_.size() && p_[k] == '^') {
      negate = true;
      ++k;
    }
    byte_set set;
    bool first = true;
    while (true) {
      if (k >= p_.size()) throw pattern_error("Unmatched [, [^, [:, [., or [=");
      if (p_[k] == ']' && !first) {
        ++k;
        break;
      }
      first = false;
      bracket_elem const start = bracket_element(k);
      bool const range = k + 1 < p_.size() && p_[k] == '-' && p_[k + 1] != ']';
      if (!range) {
        if (start.is_class) {
          set |= start.set;
        } else {
          set.set(start.ch);
        }
        continue;
      }
      if (start.is_class || start.is_equiv) throw pattern_error("Invalid range end");
      ++k;  // '-'
      bracket_elem const stop = bracket_element(k);
      if (stop.is_class || stop.is_equiv || stop.ch < start.ch) {
        throw pattern_error("Invalid range end");
      }
      for (unsigned c = start.ch; c <= stop.ch; ++c)
        set.set(c);
      // "[a-b-c]": a range cannot start where another one ended.
      if (k + 1 < p_.size() && p_[k] == '-' && p_[k + 1] != ']') {
        throw pattern_error("Invalid range end");
      }
    }
    i_ = k;
    set.reset('\n');  // a line never contains its terminator
    begin_atom();
    if (!negate && set.none()) {
      out_ += "(?!)";
      return;
    }
    out_ += negate ? "[^" : "[";
    for (unsigned c = 0; c < 256;) {
      if (!set.test(c)) {
        ++c;
        continue;
      }
      unsigned run_end = c;
      while (run_end + 1 < 256 && set.test(run_end + 1))
        ++run_end;
      append_hex(out_, static_cast<unsigned char>(c));
      if (run_end > c) {
        if (run_end > c + 1) out_ += '-';
        append_hex(out_, static_cast<unsigned char>(run_end));
      }
      c = run_end + 1;
    }
    if (negate) out_ += "\\n";
    out_ += ']';
  }

  std::string_view p_;
  std::size_t i_ = 0;
  bool capture_;
  int group_offset_;
  std::string out_;
  std::string literal_;
  bool literal_ok_ = true;
  int groups_ = 0;
  bool has_backref_ = false;
  std::vector<open_group> open_;
  std::vector<bool> completed_;
  last_kind last_ = last_kind::none;
  std::size_t atom_start_ = 0;
  bool quantified_ = false;
  std::string run_;
  std::string best_run_;
  bool top_alternation_ = false;
  std::size_t quant_pos_ = 0;  // where the last atom's quantifier starts in out_
  int quant_lo_ = 0;           // and its bounds (hi -1: unbounded)
  int quant_hi_ = 0;
};

}  // namespace

ere_translation translate_ere(std::string_view ere, bool capture, int group_offset) {
  return translator(ere, capture, group_offset).run();
}

std::string pcre_escape_literal(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text)
    append_literal(out, static_cast<unsigned char>(c));
  return out;
}

}  // namespace scan
