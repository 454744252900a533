// spindle-http's request reader: Boost.Beast's HTTP/1.x parser
// (beast::http::basic_parser) fed with put() from the connection's own read
// buffer. Only the request head is kept (method, target, version, Host,
// keep-alive); a body (Content-Length or chunked) is parsed and discarded.
//
// Shape: the derived parser stores what it needs into a request_head whose
// strings keep their capacity from one request to the next, so a keep-alive
// connection parses without allocating once its buffers are warm. A Beast
// parser parses one message: reset() constructs the next one in place.
//
// Errors: put()'s errors end the connection: header_limit -> 431, body_limit
// -> 413, anything else (bad method, target, version, field, chunk, ...) ->
// 400. Never throws.
// Thread-safety: one reader per connection, used by one task at a time.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/verb.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace http_server {

/// What is kept of a request: its head.
struct request_head {
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::string target;      ///< the request-target as sent (percent-encoded)
  int version = 11;        ///< 10 for HTTP/1.0, 11 for HTTP/1.1
  bool keep_alive = true;  ///< Beast's rule: 1.1 unless "close", 1.0 only with "keep-alive"
  bool has_host = false;   ///< a Host field was present (HTTP/1.1 requires one)
};

/// Size limits of a request.
struct request_limits {
  std::uint32_t header = 8 * 1024;  ///< request line + fields; beyond: 431
  std::uint64_t body = 1 << 20;     ///< discarded body bytes; beyond: 413
};

/// Parses requests one after the other from the bytes given to parse().
class request_reader {
 public:
  enum class state {
    need_more,  ///< the request is not complete: call parse() with more bytes
    complete,   ///< head() is a complete request (its body, if any, was discarded)
    failed,     ///< a malformed or oversized request: answer failure_status() and close
  };

  explicit request_reader(request_limits limits = {});

  /// Parses from `input`, the bytes not consumed yet. Returns the number of
  /// bytes consumed; stops at the end of one request. Beast consumes the
  /// request line once it is complete and the fields only as a whole: bytes
  /// not consumed must be passed again, with more behind them.
  std::size_t parse(std::string_view input);

  [[nodiscard]] state status() const noexcept { return state_; }
  /// The request (valid when status() is complete).
  [[nodiscard]] request_head const& head() const noexcept { return head_; }
  /// 400, 413 or 431 when status() is failed.
  [[nodiscard]] int failure_status() const noexcept { return failure_status_; }
  /// True when some bytes of the current request were consumed.
  [[nodiscard]] bool started() const noexcept { return parser_->got_some(); }

  /// Gets ready for the next request (after complete).
  void reset();

 private:
  /// Beast's parser with callbacks that fill a request_head.
  class head_parser final : public boost::beast::http::basic_parser<true> {
   public:
    explicit head_parser(request_head& head) noexcept : head_(head) {}

   private:
    using string_view = boost::beast::string_view;
    using error_code = boost::beast::error_code;
    void on_request_impl(boost::beast::http::verb method, string_view method_text,
                         string_view target, int version, error_code& ec) override;
    void on_response_impl(int status, string_view reason, int version, error_code& ec) override;
    void on_field_impl(boost::beast::http::field name, string_view name_text, string_view value,
                       error_code& ec) override;
    void on_header_impl(error_code& ec) override;
    void on_body_init_impl(boost::optional<std::uint64_t> const& length, error_code& ec) override;
    std::size_t on_body_impl(string_view body, error_code& ec) override;
    void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
    std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
    void on_finish_impl(error_code& ec) override;

    request_head& head_;
  };

  request_limits limits_;
  request_head head_;
  std::optional<head_parser> parser_;
  state state_ = state::need_more;
  int failure_status_ = 0;
};

}  // namespace http_server
