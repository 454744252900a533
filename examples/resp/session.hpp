// One client connection's protocol state, without the socket: bytes in,
// commands run, reply bytes out. spindle-resp's connection task reads a
// chunk, hands it to feed(), and writes what feed() appended with one
// write_all: every command complete in the chunk is answered in that one
// write (pipelining).
//
// Requests: RESP arrays of bulk strings ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
// parsed by hiredis's reader (redisReaderFeed / redisReaderGetReply), and
// inline commands (a line such as "PING\r\n" or `SET k "a b"`, split with
// the rules of Redis's sdssplitargs: blanks separate words, double quotes
// with \n \r \t \b \a \xHH and \c escapes, single quotes with \'), which
// redis-benchmark's PING_INLINE sends. As in Redis, a request that starts
// with '*' is an array, anything else a line.
//
// Protocol errors are answered "-ERR Protocol error: ..." and close the
// connection (feed() returns after_reply::close; later feeds are ignored):
//   too big inline request        a line longer than 64 KiB without '\n'
//   unbalanced quotes in request  an inline line with a bad quote
//   too big mbulk count string    an array header longer than 64 KiB
//   invalid multibulk length      an array count that is not an integer
//                                 or exceeds max_multibulk (Redis allows
//                                 up to 2^31-1)
//   invalid bulk length           an element with a negative or malformed
//                                 length
//   expected '$', got 'c'         an element that is not a bulk string
//                                 (an array inside a request is refused
//                                 before hiredis allocates it)
//   got "c" as reply type byte    (hiredis's text) a byte that starts no
//                                 RESP value
// Texts other than these may differ from Redis's for the same bytes, since
// hiredis's reader (a reply parser) is not Redis's request parser. An array
// count <= 0 is skipped, as Redis skips it. More than max_query_buffer
// bytes buffered without a complete request closes the connection without
// a reply (Redis's client-query-buffer-limit, 1 GiB by default).
//
// Thread-safety: a session is used by one task at a time (it may move
// between threads between calls).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "keyspace.hpp"

struct redisReader;

namespace resp {

/// Bounds on what one connection may buffer.
struct session_limits {
  /// Bytes buffered without a complete request before the connection is
  /// closed (Redis's client-query-buffer-limit).
  std::size_t max_query_buffer = std::size_t{1} << 30;
  /// Longest inline line, and longest array header line (Redis's
  /// PROTO_INLINE_MAX_SIZE).
  std::size_t max_inline = 64 * 1024;
  /// Largest array count accepted (hiredis's reader allocates the array
  /// up front).
  long long max_multibulk = 1024 * 1024;
};

/// Splits an inline request line as Redis's sdssplitargs does. Returns
/// false for unbalanced quotes (or a closing quote followed by a non-blank).
/// The line ends at its first NUL byte, as a C string.
bool split_inline(std::string_view line, std::vector<std::string>& words);

/// One connection's parser and command runner.
class session {
 public:
  /// Throws std::bad_alloc when hiredis cannot create its reader.
  explicit session(keyspace& keys, session_limits limits = {});
  ~session();
  session(session const&) = delete;
  session& operator=(session const&) = delete;

  /// Parses `input` after the bytes kept from earlier calls, runs every
  /// complete request in order and appends each reply to `out`. Returns
  /// after_reply::close when the connection must be closed once `out` is
  /// written (QUIT, a protocol error, the query buffer limit); the session
  /// then ignores further input.
  after_reply feed(std::string_view input, std::string& out);

  /// Bytes received and not yet parsed into a complete request.
  [[nodiscard]] std::size_t buffered() const noexcept;

 private:
  // Appends "-ERR Protocol error: <what>" and marks the session closed.
  void protocol_error(std::string_view what, std::string& out);
  // Drops `bytes` parsed here (not by hiredis) from the reader's buffer.
  void consume(std::size_t bytes) noexcept;

  keyspace& keys_;
  session_limits limits_;
  redisReader* reader_;
  bool closed_ = false;
  bool nested_array_ = false;              // set by the reader: an array inside a request
  std::vector<std::string_view> argv_;     // the request being run
  std::vector<std::string> inline_words_;  // an inline request's words (argv_ views them)
};

}  // namespace resp
