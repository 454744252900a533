// spindle-http's connection loop: reads requests, answers them in order,
// over any byte stream with spindle's stream interface (net::tcp_stream in
// the server, an in-memory stream in tests/http/test_http.cpp).
//
// Shape: one read buffer per connection. Each read is parsed for as many
// complete requests as it holds (pipelining); their answers are appended to
// one output buffer, written with one write_all per batch. A file answer
// opens the file with spindle::io::file (through the runtime's I/O driver;
// O_NOFOLLOW: its path is already canonical, O_NONBLOCK: a FIFO never
// blocks the open) and checks its type with file::stat(): a regular file up
// to kInlineFileBytes is read into the output buffer behind its head, a
// larger one is streamed after the batch so far in kFileChunkBytes pieces
// (read_at, then write_all: no sendfile); a directory is answered with its
// index.html (checked as any file) or 404.
//
// Closing: after an answer that closes (Connection: close, HTTP/1.0 without
// keep-alive, 400/413/431) the connection shuts its sending side down and
// reads (and drops) what the client still sends, at most kLingerBytes for
// at most kLinger, so that a client that pipelined more requests reads the
// answer instead of a reset. End of stream from the client ends the
// connection (a partial request is dropped).
//
// Errors: serve_connection() never throws; a read, write or file error (peer
// reset, broken pipe, EIO) ends the connection. A file that shrinks while it
// is sent ends the connection after the bytes it still had (its
// Content-Length was sent already).
// Cancellation: aborting the task at any co_await drops the connection.
// Thread-safety: one task per connection; `site` is shared read-only.
#pragma once

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <spindle/io/file.hpp>
#include <spindle/task.hpp>
#include <spindle/time.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "request_reader.hpp"
#include "response.hpp"

namespace http_server {

/// The read buffer of a connection (a request head must fit: see kReadBufferBytes).
inline constexpr std::size_t kReadBufferBytes = 16 * 1024;
/// Files up to this size are read into the batch's output buffer.
inline constexpr std::size_t kInlineFileBytes = 64 * 1024;
/// Larger files are read and written in pieces of this size.
inline constexpr std::size_t kFileChunkBytes = 256 * 1024;
/// After a closing answer: how long, and how much, to read before closing.
inline constexpr std::chrono::milliseconds kLinger{1000};
inline constexpr std::size_t kLingerBytes = 1 << 20;

/// What serve_connection needs of a stream (spindle::net::tcp_stream has it).
template <class Stream>
concept byte_stream = requires(Stream& s, std::span<std::byte> in, std::span<std::byte const> out) {
  { s.read_some(in) } -> std::same_as<spindle::task<std::size_t>>;
  { s.write_all(out) } -> std::same_as<spindle::task<std::size_t>>;
  s.shutdown_write();
};

namespace detail {

inline std::span<std::byte const> bytes_of(std::string const& s) noexcept {
  return {reinterpret_cast<std::byte const*>(s.data()), s.size()};
}

/// Opens the file of `plan` (a directory: its index.html) for an answer.
/// Returns 0 with `f` open and `size` set (`plan.file` and its content type
/// updated for an index), or the status to answer instead: 404 (missing,
/// not a regular file, a directory without index.html), 403 (permission
/// denied, an index outside the root).
inline spindle::task<int> open_for_response(response_plan& plan, site const& s,
                                            spindle::io::file& f, std::uint64_t& size) {
  for (int hop = 0; hop < 2; ++hop) {
    std::error_code ec;
    f = co_await spindle::io::file::open_at(AT_FDCWD, plan.file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK,
                                            0, ec);
    if (ec) {
      co_return ec == std::errc::permission_denied || ec == std::errc::operation_not_permitted
          ? 403
          : 404;
    }
    spindle::io::file_status const st = co_await f.stat();
    if (st.is_regular()) {
      size = st.size;
      co_return 0;
    }
    if (!st.is_directory() || hop > 0) co_return 404;
    std::string const index = plan.file + "/index.html";
    if (int const status = canonical_below(s.root, index, plan.file); status != 0) co_return status;
    plan.content_type = content_type_of(plan.file);
  }
  co_return 404;
}

/// Appends the answer for a file to `out`, or streams it (see the file
/// comment). Returns false when the connection must close (the file
/// shrank).
template <byte_stream Stream>
spindle::task<bool> append_file_response(Stream& stream, request_head const& req,
                                         response_plan& plan, site const& s, std::string& out,
                                         std::vector<std::byte>& chunk) {
  spindle::io::file f;
  std::uint64_t size = 0;
  if (int const status = co_await open_for_response(plan, s, f, size); status != 0) {
    response_plan const error = error_plan(status, req, false);
    append_fixed_response(out, error, s);
    co_return true;
  }
  append_head(out, plan, size, s);
  if (!plan.send_body || size == 0) co_return true;

  if (size <= kInlineFileBytes) {
    std::size_t const at = out.size();
    out.resize(at + size);
    std::uint64_t got = 0;
    while (got < size) {
      std::span<std::byte> const rest(reinterpret_cast<std::byte*>(out.data() + at + got),
                                      size - got);
      std::size_t const n = co_await f.read_at(rest, got);
      if (n == 0) break;
      got += n;
    }
    out.resize(at + got);
    co_return got == size;
  }

  co_await stream.write_all(bytes_of(out));
  out.clear();
  if (chunk.empty()) chunk.resize(kFileChunkBytes);
  std::uint64_t offset = 0;
  while (offset < size) {
    std::size_t const want =
        static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), size - offset));
    std::size_t const n = co_await f.read_at(std::span(chunk).first(want), offset);
    if (n == 0) co_return false;
    co_await stream.write_all(std::span<std::byte const>(chunk).first(n));
    offset += n;
  }
  co_return true;
}

/// Reads and drops what the client still sends (at most kLingerBytes).
template <byte_stream Stream>
spindle::task<void> drain_input(Stream& stream, std::vector<char>& buffer) {
  std::size_t total = 0;
  while (total < kLingerBytes) {
    std::size_t const n = co_await stream.read_some(
        std::span(reinterpret_cast<std::byte*>(buffer.data()), buffer.size()));
    if (n == 0) break;
    total += n;
  }
}

/// Half-closes, then drains the input for at most kLinger.
template <byte_stream Stream>
spindle::task<void> linger_close(Stream& stream, std::vector<char>& buffer) {
  try {
    stream.shutdown_write();
  } catch (std::system_error const&) {
    co_return;  // not connected any more
  }
  try {
    co_await spindle::timeout(kLinger, drain_input(stream, buffer));
  } catch (spindle::timed_out const&) {
  }
}

}  // namespace detail

/// Serves one connection until the client closes it, an answer closes it,
/// or an I/O error ends it (see the file comment). Never throws.
template <byte_stream Stream>
spindle::task<void> serve_connection(Stream& stream, site const& s) {
  std::vector<char> in(std::max<std::size_t>(kReadBufferBytes, s.limits.header + 1024));
  std::size_t begin = 0;  // [begin, end): bytes read and not consumed yet
  std::size_t end = 0;
  std::string out;
  std::vector<std::byte> chunk;  // for large files, allocated at the first
  request_reader reader(s.limits);
  request_head failed_request;  // what a 400/413/431 answers: nothing, and it closes
  failed_request.keep_alive = false;
  bool closing = false;  // an answer closed the connection
  try {
    for (;;) {
      // Every complete request of this read, answered in order.
      while (begin < end && !closing) {
        begin += reader.parse(std::string_view(in.data() + begin, end - begin));
        request_reader::state const state = reader.status();
        if (state == request_reader::state::need_more) break;
        if (state == request_reader::state::failed) {
          append_fixed_response(out, error_plan(reader.failure_status(), failed_request, true), s);
          closing = true;
          break;
        }
        response_plan plan = route(reader.head(), s);
        bool keep = plan.keep_alive;
        if (plan.file.empty()) {
          append_fixed_response(out, plan, s);
        } else {
          keep =
              co_await detail::append_file_response(stream, reader.head(), plan, s, out, chunk) &&
              plan.keep_alive;
        }
        if (!keep) closing = true;
        reader.reset();
      }
      if (!out.empty()) {
        co_await stream.write_all(detail::bytes_of(out));
        out.clear();
      }
      if (closing) break;

      // Keep the unconsumed bytes (a partial request) at the front.
      if (begin == end) {
        begin = end = 0;
      } else if (begin > 0) {
        std::memmove(in.data(), in.data() + begin, end - begin);
        end -= begin;
        begin = 0;
      }
      if (end == in.size()) {  // a head that fills the buffer without failing the parser
        append_fixed_response(out, error_plan(431, failed_request, true), s);
        co_await stream.write_all(detail::bytes_of(out));
        closing = true;
        break;
      }
      std::size_t const n = co_await stream.read_some(
          std::span(reinterpret_cast<std::byte*>(in.data() + end), in.size() - end));
      if (n == 0) break;  // the client closed (a partial request is dropped)
      end += n;
    }
    if (closing) co_await detail::linger_close(stream, in);
  } catch (std::exception const&) {
    // Reset, broken pipe, a file read error: the connection ends here.
  }
}

}  // namespace http_server
