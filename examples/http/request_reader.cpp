// spindle-http's request reader: see request_reader.hpp.
#include "request_reader.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

namespace http_server {

namespace beast_http = boost::beast::http;

void request_reader::head_parser::on_request_impl(beast_http::verb method,
                                                  string_view /*method_text*/, string_view target,
                                                  int version, error_code& /*ec*/) {
  head_.method = method;
  head_.target.assign(target.data(), target.size());  // keeps its capacity
  head_.version = version;
  head_.has_host = false;
}

void request_reader::head_parser::on_response_impl(int /*status*/, string_view /*reason*/,
                                                   int /*version*/, error_code& ec) {
  ec = beast_http::error::bad_method;  // a request parser never sees a status line
}

void request_reader::head_parser::on_field_impl(beast_http::field name, string_view /*name_text*/,
                                                string_view /*value*/, error_code& /*ec*/) {
  if (name == beast_http::field::host) head_.has_host = true;
}

void request_reader::head_parser::on_header_impl(error_code& /*ec*/) {}

void request_reader::head_parser::on_body_init_impl(
    boost::optional<std::uint64_t> const& /*length*/, error_code& /*ec*/) {}

std::size_t request_reader::head_parser::on_body_impl(string_view body, error_code& /*ec*/) {
  return body.size();  // discarded
}

void request_reader::head_parser::on_chunk_header_impl(std::uint64_t /*size*/,
                                                       string_view /*extensions*/,
                                                       error_code& /*ec*/) {}

std::size_t request_reader::head_parser::on_chunk_body_impl(std::uint64_t /*remain*/,
                                                            string_view body, error_code& /*ec*/) {
  return body.size();  // discarded
}

void request_reader::head_parser::on_finish_impl(error_code& /*ec*/) {}

request_reader::request_reader(request_limits limits) : limits_(limits) {
  reset();
}

void request_reader::reset() {
  parser_.emplace(head_);
  parser_->header_limit(limits_.header);
  parser_->body_limit(limits_.body);
  parser_->eager(true);  // one put() runs on from the head into the body
  state_ = state::need_more;
  failure_status_ = 0;
}

std::size_t request_reader::parse(std::string_view input) {
  std::size_t used = 0;
  while (state_ == state::need_more && used < input.size()) {
    boost::beast::error_code ec;
    std::size_t const n =
        parser_->put(boost::asio::const_buffer(input.data() + used, input.size() - used), ec);
    used += n;
    if (ec == beast_http::error::need_more) break;
    if (ec) {
      state_ = state::failed;
      failure_status_ = ec == beast_http::error::header_limit ? 431
                        : ec == beast_http::error::body_limit ? 413
                                                              : 400;
      break;
    }
    if (parser_->is_done()) {
      head_.keep_alive = parser_->keep_alive();
      state_ = state::complete;
      break;
    }
    if (n == 0) break;  // no progress without an error: wait for more bytes
  }
  return used;
}

}  // namespace http_server
