#include "session.hpp"

// hiredis 0.14's sds.h has no extern "C" of its own, and hiredis.h includes
// it outside its own: first here, inside one.
extern "C" {
#include <hiredis/sds.h>
}
#include <hiredis/hiredis.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <new>

#include "reply.hpp"

namespace resp {

namespace {

// isspace() in the C locale, as sdssplitargs uses it.
bool is_blank(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

bool is_hex(char c) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

struct reply_deleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// The RESP type byte of a parsed element, for "expected '$', got 'c'".
char type_byte(int type) noexcept {
  switch (type) {
    case REDIS_REPLY_ARRAY:
      return '*';
    case REDIS_REPLY_INTEGER:
      return ':';
    case REDIS_REPLY_STATUS:
      return '+';
    case REDIS_REPLY_ERROR:
      return '-';
    default:
      return '$';
  }
}

// hiredis's own createArray (it builds a redisReply), wrapped below.
void* (*g_default_create_array)(redisReadTask const*, int) = nullptr;

// createArray for requests: a request is one array of bulk strings, so an
// array inside it is refused before hiredis allocates it (hiredis 0.14
// allocates an array's element pointers up front, so "*1\r\n*2000000000\r\n"
// would ask for 16 GB). Flags the session (privdata) and returns null,
// which stops the reader with an error.
void* create_request_array(redisReadTask const* task, int elements) {
  if (task->parent != nullptr) {
    *static_cast<bool*>(task->privdata) = true;
    return nullptr;
  }
  return g_default_create_array(task, elements);
}

// hiredis's default reply functions with createArray wrapped; one table for
// every session, made from the first reader's.
redisReplyObjectFunctions* request_functions(redisReplyObjectFunctions const& defaults) {
  static redisReplyObjectFunctions table = [&defaults] {
    redisReplyObjectFunctions t = defaults;
    g_default_create_array = t.createArray;
    t.createArray = &create_request_array;
    return t;
  }();
  return &table;
}

// Redis's text for what hiredis's reader rejected, where Redis has one.
std::string_view describe_reader_error(std::string_view hiredis_text) noexcept {
  if (hiredis_text.starts_with("Bulk string length") || hiredis_text.starts_with("Bad bulk")) {
    return "invalid bulk length";
  }
  if (hiredis_text.starts_with("Multi-bulk length") || hiredis_text.starts_with("Bad multi")) {
    return "invalid multibulk length";
  }
  if (hiredis_text.starts_with("No support for nested")) return "expected '$', got '*'";
  if (hiredis_text.starts_with("Protocol error, ")) hiredis_text.remove_prefix(16);
  return hiredis_text;
}

}  // namespace

bool split_inline(std::string_view line, std::vector<std::string>& words) {
  words.clear();
  std::size_t const nul = line.find('\0');
  if (nul != std::string_view::npos) line = line.substr(0, nul);
  // at(k): the byte at k, or NUL past the end (the C string's terminator).
  auto at = [&line](std::size_t k) noexcept { return k < line.size() ? line[k] : '\0'; };
  std::size_t p = 0;
  for (;;) {
    while (at(p) != '\0' && is_blank(at(p)))
      ++p;
    if (at(p) == '\0') return true;
    bool in_double = false;
    bool in_single = false;
    bool done = false;
    std::string current;
    while (!done) {
      char const c = at(p);
      if (in_double) {
        if (c == '\\' && at(p + 1) == 'x' && is_hex(at(p + 2)) && is_hex(at(p + 3))) {
          current += static_cast<char>(hex_value(at(p + 2)) * 16 + hex_value(at(p + 3)));
          p += 3;
        } else if (c == '\\' && at(p + 1) != '\0') {
          ++p;
          switch (at(p)) {
            case 'n':
              current += '\n';
              break;
            case 'r':
              current += '\r';
              break;
            case 't':
              current += '\t';
              break;
            case 'b':
              current += '\b';
              break;
            case 'a':
              current += '\a';
              break;
            default:
              current += at(p);
              break;
          }
        } else if (c == '"') {
          // A closing quote must be followed by a blank or the end.
          if (at(p + 1) != '\0' && !is_blank(at(p + 1))) return false;
          done = true;
        } else if (c == '\0') {
          return false;  // unterminated quotes
        } else {
          current += c;
        }
      } else if (in_single) {
        if (c == '\\' && at(p + 1) == '\'') {
          ++p;
          current += '\'';
        } else if (c == '\'') {
          if (at(p + 1) != '\0' && !is_blank(at(p + 1))) return false;
          done = true;
        } else if (c == '\0') {
          return false;
        } else {
          current += c;
        }
      } else {
        switch (c) {
          case ' ':
          case '\n':
          case '\r':
          case '\t':
          case '\0':
            done = true;
            break;
          case '"':
            in_double = true;
            break;
          case '\'':
            in_single = true;
            break;
          default:
            current += c;
            break;
        }
      }
      if (at(p) != '\0') ++p;
    }
    words.push_back(std::move(current));
  }
}

session::session(keyspace& keys, session_limits limits)
    : keys_(keys), limits_(limits), reader_(redisReaderCreate()) {
  if (reader_ == nullptr) throw std::bad_alloc();
  reader_->fn = request_functions(*reader_->fn);
  reader_->privdata = &nested_array_;
}

session::~session() {
  redisReaderFree(reader_);
}

std::size_t session::buffered() const noexcept {
  return reader_->len - reader_->pos;
}

void session::protocol_error(std::string_view what, std::string& out) {
  std::string text = "ERR Protocol error: ";
  text += what;
  reply::error(out, text);
  closed_ = true;
}

// Drops `bytes` parsed outside hiredis (inline lines, skipped headers) from
// the reader's buffer, and compacts it as redisReaderGetReply does.
void session::consume(std::size_t bytes) noexcept {
  reader_->pos += bytes;
  if (reader_->pos >= 1024 || reader_->pos == reader_->len) {
    // pos is below the query buffer limit plus one read: it fits an int.
    sdsrange(reader_->buf, static_cast<int>(reader_->pos), -1);
    reader_->pos = 0;
    reader_->len = sdslen(reader_->buf);
  }
}

after_reply session::feed(std::string_view input, std::string& out) {
  if (closed_) return after_reply::close;
  if (!input.empty() && redisReaderFeed(reader_, input.data(), input.size()) != REDIS_OK) {
    closed_ = true;  // out of memory
    return after_reply::close;
  }
  for (;;) {
    std::size_t const pending = reader_->len - reader_->pos;
    char const* const begin = reader_->buf + reader_->pos;
    if (reader_->ridx == -1) {
      // Between requests: what comes next decides its kind, as in Redis.
      if (pending == 0) break;
      if (begin[0] != '*') {
        auto const* const newline = static_cast<char const*>(std::memchr(begin, '\n', pending));
        if (newline == nullptr) {
          if (pending > limits_.max_inline) {
            protocol_error("too big inline request", out);
            return after_reply::close;
          }
          break;
        }
        std::size_t length = static_cast<std::size_t>(newline - begin);
        std::size_t const line_bytes = length + 1;
        if (length > 0 && begin[length - 1] == '\r') --length;
        bool const balanced = split_inline(std::string_view(begin, length), inline_words_);
        consume(line_bytes);
        if (!balanced) {
          protocol_error("unbalanced quotes in request", out);
          return after_reply::close;
        }
        if (inline_words_.empty()) continue;
        argv_.assign(inline_words_.begin(), inline_words_.end());
        if (execute(keys_, argv_, out) == after_reply::close) {
          closed_ = true;
          return after_reply::close;
        }
        continue;
      }
      // An array: check its count before hiredis allocates the array.
      auto const* const cr = static_cast<char const*>(std::memchr(begin, '\r', pending));
      if (cr == nullptr || cr + 1 == begin + pending) {
        if (pending > limits_.max_inline) {
          protocol_error("too big mbulk count string", out);
          return after_reply::close;
        }
        break;  // the header line is not complete yet
      }
      long long count = 0;
      if (!parse_integer(std::string_view(begin + 1, static_cast<std::size_t>(cr - begin - 1)),
                         count) ||
          count > INT_MAX || count > limits_.max_multibulk) {
        protocol_error("invalid multibulk length", out);
        return after_reply::close;
      }
      if (count <= 0) {
        consume(static_cast<std::size_t>(cr - begin) + 2);
        continue;
      }
    }
    void* raw = nullptr;
    if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
      protocol_error(
          nested_array_ ? "expected '$', got '*'" : describe_reader_error(reader_->errstr), out);
      return after_reply::close;
    }
    if (raw == nullptr) {
      if (buffered() > limits_.max_query_buffer) {
        closed_ = true;
        return after_reply::close;
      }
      break;  // incomplete: wait for more bytes
    }
    reply_ptr const request(static_cast<redisReply*>(raw));
    if (request->type != REDIS_REPLY_ARRAY) continue;  // cannot happen after a '*' header
    argv_.clear();
    for (std::size_t k = 0; k < request->elements; ++k) {
      redisReply const* const element = request->element[k];
      if (element->type == REDIS_REPLY_NIL) {
        protocol_error("invalid bulk length", out);
        return after_reply::close;
      }
      if (element->type != REDIS_REPLY_STRING) {
        std::string what = "expected '$', got ' '";
        what[what.size() - 2] = type_byte(element->type);
        protocol_error(what, out);
        return after_reply::close;
      }
      argv_.emplace_back(element->str, element->len);
    }
    if (argv_.empty()) continue;
    if (execute(keys_, argv_, out) == after_reply::close) {
      closed_ = true;
      return after_reply::close;
    }
  }
  return after_reply::keep_open;
}

}  // namespace resp
