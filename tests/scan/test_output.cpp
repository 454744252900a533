// scan's output: JSON paths with invalid UTF-8 replaced.
#include <gtest/gtest.h>

#include <string>

#include "output.hpp"

namespace {

TEST(Output, JsonReplacesInvalidUtf8) {
  std::string const j = scan::json_string("a\xff\"b\n");
  EXPECT_EQ(j, "\"a\xef\xbf\xbd\\\"b\\n\"");
  std::string out;
  scan::append_result(out, scan::result_format::json, "d/\xc3", 7);
  EXPECT_EQ(out, "{\"path\":\"d/\xef\xbf\xbd\",\"count\":7}\n");
  out.clear();
  scan::append_result(out, scan::result_format::path_count, "d/x", 3);
  scan::append_result(out, scan::result_format::count_only, "d/x", 0);
  EXPECT_EQ(out, "d/x:3\n0\n");
}

}  // namespace
