// spindle/version.hpp: the macros and spindle::version() agree with
// meson.build's project version (passed in as SPINDLE_MESON_VERSION).
#include <gtest/gtest.h>

#include <string>

#include "spindle/spindle.hpp"  // the umbrella includes version.hpp

#ifndef SPINDLE_MESON_VERSION
#error "tests/meson.build passes SPINDLE_MESON_VERSION"
#endif

namespace {

TEST(Version, MacrosMatchMesonVersion) {
  std::string const expected = SPINDLE_MESON_VERSION;
  EXPECT_EQ(std::string(SPINDLE_VERSION_STRING), expected);
  std::string const joined = std::to_string(SPINDLE_VERSION_MAJOR) + "." +
                             std::to_string(SPINDLE_VERSION_MINOR) + "." +
                             std::to_string(SPINDLE_VERSION_PATCH);
  EXPECT_EQ(joined, expected);
  EXPECT_EQ(SPINDLE_VERSION,
            SPINDLE_VERSION_MAJOR * 10000 + SPINDLE_VERSION_MINOR * 100 + SPINDLE_VERSION_PATCH);
}

TEST(Version, LibraryReportsTheSameVersion) {
  EXPECT_EQ(std::string(spindle::version()), SPINDLE_MESON_VERSION);
}

}  // namespace
