// spindle-scan's output: result lines, JSON, and the shared stdout/stderr.
//
// Shape: results are formatted into a caller-owned batch string (one per
// scan slot, no lock) and the batch is written to stdout in one write when it
// grows large or at the end; `console` serialises those writes and the
// messages on stderr, and owns the progress line (cleared before a message,
// redrawn by the next tick).
//
// Thread-safety: console's members may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace scan {

enum class result_format {
  path_count,  ///< "path:count"
  count_only,  ///< "count" (one operand that is not a directory, or -h)
  json,        ///< {"path":"...","count":N}
};

/// Appends the line reporting `count` matching lines in `path`.
void append_result(std::string& out, result_format format, std::string_view path,
                   std::uint64_t count);

/// `text` as a JSON string value (quotes included); bytes that are not
/// UTF-8 become U+FFFD.
std::string json_string(std::string_view text);

/// The text of an errno value ("No such file or directory"), from
/// strerror_r: no virtual call, no allocation beyond the string (usable when
/// descriptors have run out, where a sanitizer's vptr check cannot run).
std::string errno_text(int err);

/// Writes all of `data` to `fd` (retrying short writes and EINTR). Returns
/// 0 or the errno of the failure.
int write_all(int fd, std::string_view data) noexcept;

class console {
 public:
  /// `progress`: a progress line may be drawn on stderr.
  explicit console(bool progress) : progress_(progress) {}

  /// Writes `batch` to stdout and clears it. Returns 0 or an errno.
  int write_out(std::string& batch);
  /// "spindle-scan: PATH: MESSAGE" on stderr.
  void error(std::string_view path, std::string_view message);
  /// "spindle-scan: MESSAGE" on stderr.
  void message(std::string_view text);
  /// Replaces the progress line (no-op without progress).
  void progress(std::string_view line);
  /// Erases the progress line for good.
  void end_progress();

 private:
  void clear_line_locked();
  std::mutex out_mutex_;
  std::mutex err_mutex_;
  bool progress_;
  bool line_shown_ = false;
};

}  // namespace scan
