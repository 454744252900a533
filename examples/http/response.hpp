// spindle-http's request -> response layer, without sockets: routing, target
// sanitizing and the response head, written as bytes into the connection's
// output buffer.
//
// Routing (route()):
//  - GET and HEAD only; any other method: 405 with "Allow: GET, HEAD".
//  - HTTP/1.1 without Host: 400 (RFC 9112 3.2), and the connection closes.
//  - Without a root: "/" answers site::hello_body (text/plain), anything
//    else 404.
//  - With a root: the target's path (query dropped, percent-decoded,
//    "." and ".." resolved lexically) names a file below the root. A path
//    that climbs above "/" is refused (403). The file's canonical path
//    (realpath: every symlink resolved) must lie below the canonical root,
//    or 403: a symlink may point anywhere inside the root, not outside.
//    Missing: 404; permission denied: 403. The connection opens and streams
//    the file (connection.hpp); a directory serves its index.html (which is
//    checked the same way) or 404.
//  - A malformed request: 400; oversized head 431; oversized body 413; the
//    connection closes after these.
//
// Responses are "HTTP/1.1" with Server, Date (cached per thread, formatted
// once a second), Content-Type, Content-Length, and Connection when it is
// not the version's default ("close" for HTTP/1.1, "keep-alive" for a
// HTTP/1.0 client that asked for it; "close" otherwise for 1.0). A HEAD
// response carries the headers GET would, without the body.
//
// Errors: nothing here throws except std::bad_alloc.
// Thread-safety: site is read-only once serving starts; everything else is
// per connection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "request_reader.hpp"

namespace http_server {

/// What the server serves; shared read-only by every connection.
struct site {
  std::string root;  ///< canonical root directory without trailing '/'; empty: none
  std::string_view hello_body = "Hello, World!\n";  ///< GET / without a root
  bool date_header = true;  ///< send Date (tests turn it off for byte-exact answers)
  request_limits limits;
};

/// What to answer to one request.
struct response_plan {
  int status = 200;
  std::string_view content_type = "text/plain; charset=utf-8";
  std::string_view body;  ///< a fixed body (static storage), unless `file` is set
  std::string file;       ///< non-empty: stream this file (canonical path below the root)
  bool send_body = true;  ///< false for HEAD: Content-Length still tells the body's size
  bool keep_alive = true;
  int version = 11;    ///< the request's version (decides the Connection header)
  bool allow = false;  ///< add "Allow: GET, HEAD" (405)
};

/// The reason phrase of `status` ("OK", "Not Found", ...).
std::string_view reason_of(int status) noexcept;

/// A short text/plain body for an error status ("404 Not Found\n").
std::string_view error_body(int status) noexcept;

/// The Content-Type for a file name, by extension; application/octet-stream
/// when unknown.
std::string_view content_type_of(std::string_view path) noexcept;

/// Turns a request-target into a path relative to the root: drops the
/// query, percent-decodes, resolves "." and ".." segments, drops empty
/// segments. On success returns 0 and sets `relative` ("" for the root
/// itself, else "a/b" without leading or trailing '/'); otherwise returns
/// the status to answer: 400 (not origin-form, bad %-escape, NUL byte) or
/// 403 (".." above the root).
int sanitize_target(std::string_view target, std::string& relative);

/// Resolves `relative` below `root` (canonical) with realpath and checks
/// that the result stays below the root. Returns 0 and sets `canonical`, or
/// 404 (missing), 403 (permission denied, or outside the root).
int resolve_below(std::string const& root, std::string_view relative, std::string& canonical);

/// Canonicalizes `path` (realpath) and checks that the result is `root` or
/// lies below it. Returns 0 and sets `canonical`, or 404 (missing), 403
/// (permission denied, or outside the root).
int canonical_below(std::string const& root, std::string const& path, std::string& canonical);

/// An error answer: the status's text body; closes when the status ends the
/// connection (400, 413, 431) or the request did not keep it alive.
response_plan error_plan(int status, request_head const& req, bool close);

/// Decides the answer to a complete request (see the file comment). A file
/// answer has `file` set and its status, type and length are settled when
/// the connection opens it.
response_plan route(request_head const& req, site const& s);

/// Appends the status line and headers (with the blank line) to `out`.
void append_head(std::string& out, response_plan const& plan, std::uint64_t content_length,
                 site const& s);

/// Appends a whole fixed answer: head, and the body unless HEAD.
void append_fixed_response(std::string& out, response_plan const& plan, site const& s);

}  // namespace http_server
