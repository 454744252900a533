// spindle-http's request -> response layer: see response.hpp.
#include "response.hpp"

#include <limits.h>
#include <stdlib.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <ctime>
#include <memory>

namespace http_server {

namespace beast_http = boost::beast::http;

std::string_view reason_of(int status) noexcept {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    default:
      return "Unknown";
  }
}

std::string_view error_body(int status) noexcept {
  switch (status) {
    case 400:
      return "400 Bad Request\n";
    case 403:
      return "403 Forbidden\n";
    case 404:
      return "404 Not Found\n";
    case 405:
      return "405 Method Not Allowed\n";
    case 413:
      return "413 Content Too Large\n";
    case 431:
      return "431 Request Header Fields Too Large\n";
    default:
      return "500 Internal Server Error\n";
  }
}

std::string_view content_type_of(std::string_view path) noexcept {
  struct entry {
    std::string_view extension;
    std::string_view type;
  };
  static constexpr std::array<entry, 14> kTypes{{
      {".html", "text/html; charset=utf-8"},
      {".htm", "text/html; charset=utf-8"},
      {".txt", "text/plain; charset=utf-8"},
      {".css", "text/css"},
      {".js", "text/javascript"},
      {".json", "application/json"},
      {".xml", "application/xml"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},
      {".gif", "image/gif"},
      {".pdf", "application/pdf"},
      {".wasm", "application/wasm"},
  }};
  std::size_t const slash = path.rfind('/');
  std::size_t const dot = path.rfind('.');
  if (dot != std::string_view::npos && (slash == std::string_view::npos || dot > slash)) {
    std::string_view const ext = path.substr(dot);
    for (entry const& e : kTypes)
      if (e.extension == ext) return e.type;
  }
  return "application/octet-stream";
}

namespace {

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

int sanitize_target(std::string_view target, std::string& relative) {
  relative.clear();
  if (target.empty() || target.front() != '/') return 400;  // origin-form only
  std::size_t const query = target.find_first_of("?#");
  if (query != std::string_view::npos) target = target.substr(0, query);

  // Decode into `relative`, then resolve the segments in place.
  std::string decoded;
  decoded.reserve(target.size());
  for (std::size_t i = 0; i < target.size(); ++i) {
    char c = target[i];
    if (c == '%') {
      if (i + 2 >= target.size()) return 400;  // truncated escape
      int const hi = hex_value(target[i + 1]);
      int const lo = hex_value(target[i + 2]);
      if (hi < 0 || lo < 0) return 400;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (c == '\0') return 400;
    decoded.push_back(c);
  }

  std::size_t pos = 0;
  while (pos < decoded.size()) {
    std::size_t end = decoded.find('/', pos);
    if (end == std::string::npos) end = decoded.size();
    std::string_view const segment(decoded.data() + pos, end - pos);
    pos = end + 1;
    if (segment.empty() || segment == ".") continue;
    if (segment == "..") {
      if (relative.empty()) return 403;  // above the root
      std::size_t const cut = relative.rfind('/');
      relative.resize(cut == std::string::npos ? 0 : cut);
      continue;
    }
    if (!relative.empty()) relative.push_back('/');
    relative.append(segment);
  }
  return 0;
}

int canonical_below(std::string const& root, std::string const& path, std::string& canonical) {
  std::unique_ptr<char, decltype(&::free)> const real(::realpath(path.c_str(), nullptr), &::free);
  if (!real) {
    switch (errno) {
      case EACCES:
      case EPERM:
        return 403;
      default:
        return 404;  // ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG
    }
  }
  std::string_view const found(real.get());
  bool const inside = found == root || (found.size() > root.size() && found.starts_with(root) &&
                                        (root == "/" || found[root.size()] == '/'));
  if (!inside) return 403;
  canonical.assign(found);
  return 0;
}

int resolve_below(std::string const& root, std::string_view relative, std::string& canonical) {
  std::string joined = root;
  if (!relative.empty()) {
    if (joined.back() != '/') joined.push_back('/');
    joined.append(relative);
  }
  return canonical_below(root, joined, canonical);
}

response_plan error_plan(int status, request_head const& req, bool close) {
  response_plan plan;
  plan.status = status;
  plan.body = error_body(status);
  plan.send_body = req.method != beast_http::verb::head;
  plan.keep_alive = req.keep_alive && !close;
  plan.version = req.version;
  plan.allow = status == 405;
  return plan;
}

response_plan route(request_head const& req, site const& s) {
  if (req.version >= 11 && !req.has_host) return error_plan(400, req, true);
  if (req.method != beast_http::verb::get && req.method != beast_http::verb::head)
    return error_plan(405, req, false);

  response_plan plan;
  plan.send_body = req.method == beast_http::verb::get;
  plan.keep_alive = req.keep_alive;
  plan.version = req.version;

  std::string relative;
  if (int const status = sanitize_target(req.target, relative); status != 0)
    return error_plan(status, req, status == 400);
  if (s.root.empty()) {
    if (!relative.empty()) return error_plan(404, req, false);
    plan.body = s.hello_body;
    return plan;
  }
  if (int const status = resolve_below(s.root, relative, plan.file); status != 0)
    return error_plan(status, req, false);
  plan.content_type = content_type_of(plan.file);
  return plan;
}

namespace {

/// "Sun, 06 Nov 1994 08:49:37 GMT" for the current second, formatted at
/// most once a second per thread.
std::string_view http_date() noexcept {
  struct cache {
    std::time_t second = -1;
    std::array<char, 32> text{};
    std::size_t size = 0;
  };
  thread_local cache c;
  std::time_t const now = std::time(nullptr);
  if (now != c.second) {
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    c.size = std::strftime(c.text.data(), c.text.size(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    c.second = now;
  }
  return {c.text.data(), c.size};
}

}  // namespace

void append_head(std::string& out, response_plan const& plan, std::uint64_t content_length,
                 site const& s) {
  std::array<char, 24> number{};
  out.append("HTTP/1.1 ");
  auto status_end = std::to_chars(number.data(), number.data() + number.size(), plan.status).ptr;
  out.append(number.data(), status_end);
  out.push_back(' ');
  out.append(reason_of(plan.status));
  out.append("\r\nServer: spindle-http\r\n");
  if (s.date_header) {
    out.append("Date: ");
    out.append(http_date());
    out.append("\r\n");
  }
  out.append("Content-Type: ");
  out.append(plan.content_type);
  out.append("\r\nContent-Length: ");
  auto length_end = std::to_chars(number.data(), number.data() + number.size(), content_length).ptr;
  out.append(number.data(), length_end);
  out.append("\r\n");
  if (!plan.keep_alive) {
    out.append("Connection: close\r\n");
  } else if (plan.version < 11) {
    out.append("Connection: keep-alive\r\n");
  }
  if (plan.allow) out.append("Allow: GET, HEAD\r\n");
  out.append("\r\n");
}

void append_fixed_response(std::string& out, response_plan const& plan, site const& s) {
  append_head(out, plan, plan.body.size(), s);
  if (plan.send_body) out.append(plan.body);
}

}  // namespace http_server
