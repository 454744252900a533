#include "format.hpp"

#include <charconv>
#include <cstring>

namespace wc {

int number_width(std::span<input_status const> inputs, selection sel) noexcept {
  if (inputs.empty() || (inputs.size() == 1 && sel.size() == 1)) return 1;
  int minimum = 1;
  std::uint64_t regular_total = 0;
  for (input_status const& in : inputs) {
    if (in.stat_failed) continue;
    if (in.regular) {
      regular_total += in.size;
    } else {
      minimum = 7;
    }
  }
  int width = 1;
  for (; regular_total >= 10; regular_total /= 10)
    ++width;
  return width < minimum ? minimum : width;
}

void append_counts(std::string& out, counts const& c, selection sel, int width,
                   std::string const* name) {
  bool first = true;
  auto number = [&](std::uint64_t value) {
    char digits[24];
    auto const end = std::to_chars(digits, digits + sizeof digits, value).ptr;
    auto const len = static_cast<int>(end - digits);
    if (!first) out += ' ';
    first = false;
    if (len < width) out.append(static_cast<std::size_t>(width - len), ' ');
    out.append(digits, end);
  };
  if (sel.lines) number(c.lines);
  if (sel.words) number(c.words);
  if (sel.bytes) number(c.bytes);
  if (name != nullptr) {
    out += ' ';
    if (name->find('\n') != std::string::npos) {
      out += quote_name(*name);
    } else {
      out += *name;
    }
  }
  out += '\n';
}

namespace {

bool printable(unsigned char c) {
  return c >= 0x20 && c < 0x7f;
}

// Printable characters that make quotearg's shell style quote the name
// (':' is added by quotef); '#' and '~' only at the start.
bool needs_quotes(unsigned char c) {
  return std::strchr(" !\"$&'()*;<=>?[\\^`|:", c) != nullptr && c != 0;
}

void append_escape(std::string& out, unsigned char c) {
  out += '\\';
  switch (c) {
    case '\a':
      out += 'a';
      return;
    case '\b':
      out += 'b';
      return;
    case '\f':
      out += 'f';
      return;
    case '\n':
      out += 'n';
      return;
    case '\r':
      out += 'r';
      return;
    case '\t':
      out += 't';
      return;
    case '\v':
      out += 'v';
      return;
    default:
      out += static_cast<char>('0' + ((c >> 6) & 7));
      out += static_cast<char>('0' + ((c >> 3) & 7));
      out += static_cast<char>('0' + (c & 7));
  }
}

}  // namespace

std::string quote_name(std::string_view name) {
  if (name.empty()) return "''";
  bool quote = name.front() == '#' || name.front() == '~';
  bool has_single = false;
  bool has_unprintable = false;
  bool double_unsafe = false;  // characters that "..." would not keep literal
  for (char ch : name) {
    auto const c = static_cast<unsigned char>(ch);
    if (!printable(c)) {
      has_unprintable = true;
      quote = true;
    } else if (needs_quotes(c)) {
      quote = true;
      if (c == '\'') has_single = true;
      if (std::strchr("$`\\\"!", c) != nullptr) double_unsafe = true;
    }
  }
  if (!quote) return std::string(name);
  std::string out;
  out.reserve(name.size() + 8);
  if (has_single && !has_unprintable && !double_unsafe) {
    out += '"';
    out += name;
    out += '"';
    return out;
  }
  // '...' with '\'' for a quote and $'...' pieces for unprintable bytes.
  out += '\'';
  bool in_dollar = false;
  for (char ch : name) {
    auto const c = static_cast<unsigned char>(ch);
    if (c == '\'') {
      out += "'\\''";
      in_dollar = false;
    } else if (!printable(c)) {
      if (!in_dollar) out += "'$'";
      in_dollar = true;
      append_escape(out, c);
    } else {
      if (in_dollar) out += "''";
      in_dollar = false;
      out += ch;
    }
  }
  out += '\'';
  return out;
}

std::string error_line(std::string_view name, std::string_view message) {
  std::string line = "spindle-wc: ";
  line += quote_name(name);
  line += ": ";
  line += message;
  line += '\n';
  return line;
}

std::string errno_text(int err) {
  char buffer[256];
  // GNU strerror_r: returns the message, in `buffer` or a static string.
  return ::strerror_r(err, buffer, sizeof buffer);
}

}  // namespace wc
