// spindle-resp's commands: one request (the command name and its
// arguments, as the client sent them) in, one RESP2 reply out, with
// redis-server 7.0's replies and error texts.
//
// Commands: PING [message], ECHO message, SET key value [NX | XX] [GET],
// GET key, DEL key [key ...], EXISTS key [key ...], INCR key, DECR key,
// INCRBY key increment, DECRBY key decrement, QUIT. Names are matched
// case-insensitively. Anything else is answered as Redis answers a command
// it does not know; a wrong argument count as Redis answers it. SET's
// expiry options (EX, PX, EXAT, PXAT, KEEPTTL) are not implemented: there
// are no expiries, so they are answered "ERR syntax error", as any other
// unknown SET option.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "keyspace.hpp"

namespace resp {

/// What the connection does after the reply is written.
enum class after_reply { keep_open, close };

/// Runs one command against `keys` and appends its reply to `out`.
/// `argv` holds the command name first; it must not be empty. Never throws
/// for anything a client sends (std::bad_alloc aside).
after_reply execute(keyspace& keys, std::span<std::string_view const> argv, std::string& out);

/// Redis's string2ll: `text` as a signed 64-bit decimal integer, strictly
/// (an optional '-', no '+', no spaces, no leading zeros, at most 20
/// characters, no overflow). Returns false for anything else.
bool parse_integer(std::string_view text, long long& value) noexcept;

}  // namespace resp
