// Helpers shared by the io/ test files (test_file, test_stat_at, test_net,
// test_driver): whether io_uring can be set up here, a fixture that runs a
// test once per I/O backend in a fresh temporary directory, the errno a
// task's std::system_error carries, and writing a plain file.
//
// Nothing here measures time.
#pragma once

#include <stdlib.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace spindle_test {

/// True when this machine lets spindle set up io_uring (checked once).
inline bool uring_available() {
  static bool const available = [] {
    try {
      spindle::runtime rt{spindle::runtime_config{.workers = 1, .io = spindle::io_backend::uring}};
      return true;
    } catch (std::system_error const&) {
      return false;
    }
  }();
  return available;
}

/// A test run once per I/O backend (the parameter; instantiate with
/// backends() and backend_name) in a fresh directory dir_ under /tmp, which
/// TearDown removes with what it holds. The uring run is skipped when
/// io_uring cannot be set up here.
class backend_dir_test : public ::testing::TestWithParam<spindle::io_backend> {
 protected:
  /// The directory is /tmp/spindle-test-NAME-XXXXXX.
  explicit backend_dir_test(std::string name) : name_(std::move(name)) {}

  void SetUp() override {
    if (GetParam() == spindle::io_backend::uring && !uring_available()) {
      GTEST_SKIP() << "io_uring cannot be set up here";
    }
    std::string tmpl = "/tmp/spindle-test-" + name_ + "-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  /// Two workers on the backend under test.
  [[nodiscard]] spindle::runtime_config config() const {
    return spindle::runtime_config{.workers = 2, .io = GetParam()};
  }

  std::filesystem::path dir_;

 private:
  std::string name_;
};

/// The parameters of a backend_dir_test: both backends.
inline auto backends() {
  return ::testing::Values(spindle::io_backend::uring, spindle::io_backend::threadpool);
}

/// "uring" or "threadpool": the instantiated tests' name suffix.
inline std::string backend_name(::testing::TestParamInfo<spindle::io_backend> const& info) {
  return info.param == spindle::io_backend::uring ? "uring" : "threadpool";
}

/// Runs `t` and returns the errno of the std::system_error it throws (0 if
/// it completes). Any other exception fails the test.
template <class T>
spindle::task<int> errno_of(spindle::task<T> t) {
  int code = 0;
  try {
    co_await std::move(t);
  } catch (std::system_error const& e) {
    EXPECT_EQ(&e.code().category(), &std::system_category()) << e.what();
    code = e.code().value();
  }
  co_return code;
}

/// Creates (or truncates) `path` holding `data`, with stdio.
inline void write_plain(std::filesystem::path const& path, std::vector<std::byte> const& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!data.empty()) {
    ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
  }
  std::fclose(f);
}

}  // namespace spindle_test
