// scan::line_buffer: partial lines carried across chunks, growth past the
// initial capacity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "line_buffer.hpp"

namespace {

TEST(LineBuffer, CarriesPartialLinesAndGrows) {
  scan::line_buffer b(8);
  std::string const line(100, 'x');  // longer than the buffer
  std::string const input = line + "\nab\ncd";
  std::string seen;
  std::size_t at = 0;
  while (at < input.size()) {
    auto space = b.space();
    ASSERT_FALSE(space.empty());
    std::size_t const n = std::min(space.size(), input.size() - at);
    std::copy_n(input.data() + at, n, space.data());
    b.commit(n);
    at += n;
    seen += b.take_lines();
  }
  EXPECT_EQ(seen, line + "\nab\n");
  EXPECT_EQ(b.take_rest(), "cd");
  EXPECT_GE(b.capacity(), 101u);
  b.reset(16);  // grown past the limit: back to 8
  EXPECT_EQ(b.capacity(), 8u);
  EXPECT_EQ(b.pending(), 0u);
}

}  // namespace
