// spindle-wc's output, byte for byte as GNU wc 9.1 prints it (C locale).
//
// A line is the selected counts in the order lines, words, bytes, each
// right-aligned to one common width and separated by one space, then " NAME"
// (none for standard input read without operands), then '\n'. A name that
// contains a newline is quoted as in messages (quote_name); other names are
// printed as they are.
//
// The width (number_width) is GNU wc's compute_number_width: the digits of
// the sum of the sizes (st_size) of the regular files among the inputs, at
// least 7 when an input is not a regular file (a FIFO, a device), and 1 --
// no padding -- when there is a single input and a single count. Inputs
// that could not be stat()ed (missing files) add nothing.
//
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "count.hpp"

namespace wc {

/// What number_width needs to know of one input (as GNU wc's stat() saw it).
struct input_status {
  bool stat_failed = false;  ///< stat() failed (missing file, ...)
  bool regular = true;       ///< a regular file (else: a FIFO, device, ...)
  std::uint64_t size = 0;    ///< st_size of a regular file
};

/// The width every count is padded to, for these inputs in printing order.
[[nodiscard]] int number_width(std::span<input_status const> inputs, selection sel) noexcept;

/// Appends one output line: the selected counts padded to `width`, then
/// " name" unless `name` is null, then '\n'.
void append_counts(std::string& out, counts const& c, selection sel, int width,
                   std::string const* name);

/// `name` quoted as GNU's quotef() quotes file names in messages (gnulib
/// quotearg, shell-escape style, ':' quoted too), in the C locale: as it is
/// when it needs no quoting; in '...' when it holds shell metacharacters,
/// with ' written '\''; in "..." when its only troublesome character
/// besides harmless ones is ', and no $ ` \ " ! is present; bytes that are
/// not printable as $'\n', $'\t', ... or $'\ooo' pieces.
[[nodiscard]] std::string quote_name(std::string_view name);

/// "spindle-wc: NAME: MESSAGE\n" (NAME quoted by quote_name).
[[nodiscard]] std::string error_line(std::string_view name, std::string_view message);

/// strerror text of an errno value ("No such file or directory").
[[nodiscard]] std::string errno_text(int err);

}  // namespace wc
