#include "output.hpp"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

namespace scan {

void append_result(std::string& out, result_format format, std::string_view path,
                   std::uint64_t count) {
  char digits[24];
  auto const end = std::to_chars(digits, digits + sizeof digits, count).ptr;
  std::string_view const number(digits, static_cast<std::size_t>(end - digits));
  switch (format) {
    case result_format::path_count:
      out.append(path);
      out += ':';
      out.append(number);
      break;
    case result_format::count_only:
      out.append(number);
      break;
    case result_format::json:
      out += "{\"path\":";
      out += json_string(path);
      out += ",\"count\":";
      out.append(number);
      out += '}';
      break;
  }
  out += '\n';
}

std::string json_string(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string errno_text(int err) {
  char buffer[256];
  // GNU strerror_r: returns the message, in `buffer` or a static string.
  return ::strerror_r(err, buffer, sizeof buffer);
}

int write_all(int fd, std::string_view data) noexcept {
  while (!data.empty()) {
    ssize_t const n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

int console::write_out(std::string& batch) {
  if (batch.empty()) return 0;
  int err = 0;
  {
    std::lock_guard lock(out_mutex_);
    {
      std::lock_guard err_lock(err_mutex_);  // a terminal may show both
      clear_line_locked();
    }
    err = write_all(STDOUT_FILENO, batch);
  }
  batch.clear();
  return err;
}

void console::clear_line_locked() {
  if (line_shown_) {
    (void)write_all(STDERR_FILENO, "\r\x1b[K");
    line_shown_ = false;
  }
}

void console::error(std::string_view path, std::string_view message) {
  std::string line = "spindle-scan: ";
  line.append(path);
  line += ": ";
  line.append(message);
  line += '\n';
  std::lock_guard lock(err_mutex_);
  clear_line_locked();
  (void)write_all(STDERR_FILENO, line);
}

void console::message(std::string_view text) {
  std::string line = "spindle-scan: ";
  line.append(text);
  line += '\n';
  std::lock_guard lock(err_mutex_);
  clear_line_locked();
  (void)write_all(STDERR_FILENO, line);
}

void console::progress(std::string_view line) {
  std::string text = "\r\x1b[K";
  text.append(line);
  std::lock_guard lock(err_mutex_);
  if (!progress_) return;
  (void)write_all(STDERR_FILENO, text);
  line_shown_ = true;
}

void console::end_progress() {
  std::lock_guard lock(err_mutex_);
  clear_line_locked();
  progress_ = false;
}

}  // namespace scan
