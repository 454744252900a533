#include "reply.hpp"

#include <charconv>
#include <cstddef>

namespace resp::reply {

namespace {

void append_number(std::string& out, long long value) {
  char digits[24];
  auto const result = std::to_chars(digits, digits + sizeof digits, value);
  out.append(digits, result.ptr);
}

}  // namespace

void simple(std::string& out, std::string_view text) {
  out += '+';
  out += text;
  out += "\r\n";
}

void error(std::string& out, std::string_view message) {
  std::size_t const at = out.size();
  out += '-';
  out += message;
  for (std::size_t k = at + 1; k < out.size(); ++k) {
    if (out[k] == '\r' || out[k] == '\n') out[k] = ' ';
  }
  out += "\r\n";
}

void integer(std::string& out, long long value) {
  out += ':';
  append_number(out, value);
  out += "\r\n";
}

void bulk(std::string& out, std::string_view bytes) {
  out += '$';
  append_number(out, static_cast<long long>(bytes.size()));
  out += "\r\n";
  out += bytes;
  out += "\r\n";
}

void null_bulk(std::string& out) {
  out += "$-1\r\n";
}

}  // namespace resp::reply
