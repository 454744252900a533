// RESP2 reply serialization: each function appends one reply to `out`.
// (Parsing requests is hiredis's job, see session.hpp; writing replies is
// a handful of formats.)
#pragma once

#include <string>
#include <string_view>

namespace resp::reply {

/// "+text\r\n". `text` must not contain CR or LF.
void simple(std::string& out, std::string_view text);
/// "-message\r\n" with every CR and LF of `message` replaced by a space,
/// as Redis does for error texts that quote a client's arguments.
void error(std::string& out, std::string_view message);
/// ":value\r\n".
void integer(std::string& out, long long value);
/// "$length\r\nbytes\r\n" (binary safe).
void bulk(std::string& out, std::string_view bytes);
/// The null bulk string "$-1\r\n" (a missing key).
void null_bulk(std::string& out);

}  // namespace resp::reply
