#include <gtest/gtest.h>
TEST(Placeholder, stop_token) {}
