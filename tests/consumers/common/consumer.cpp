// The program each consumer project (Meson wrap, CMake find_package,
// Makefile + pkg-config) builds against spindle: spawns a task that reads the
// file named on the command line, awaits its join handle, and prints the
// byte count, spindle's version and CONSUMER (the build system's name).
// Exit 0 when the count matches std::filesystem::file_size and the library's
// version is the headers' one; 1 otherwise; 2 without an argument. A missing
// file is reported as a message and exit 1.
#include <spindle/spindle.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#ifndef CONSUMER
#define CONSUMER "unknown"
#endif

namespace {

spindle::task<std::size_t> count_bytes(std::filesystem::path path) {
  std::vector<std::byte> data = co_await spindle::io::read_file(std::move(path));
  co_return data.size();
}

spindle::task<std::size_t> run(std::filesystem::path path) {
  spindle::join_handle<std::size_t> reader = spindle::spawn(count_bytes(path));
  co_return co_await reader;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  try {
    spindle::runtime rt{{.workers = 2}};
    std::size_t bytes = rt.block_on(run(argv[1]));
    std::printf("%s: %zu bytes in %s, spindle %s\n", CONSUMER, bytes, argv[1], spindle::version());
    if (bytes != std::filesystem::file_size(argv[1])) return 1;
    if (std::strcmp(spindle::version(), SPINDLE_VERSION_STRING) != 0) return 1;
    return 0;
  } catch (std::system_error const& e) {
    std::fprintf(stderr, "%s: %s: %s\n", CONSUMER, argv[1], e.code().message().c_str());
    return 1;
  }
}
