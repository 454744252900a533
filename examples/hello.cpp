// hello: the smallest useful spindle program. Copy it to start your own.
//
//   spawn a few tasks, join them, and read a file through spindle::io.
//   usage: hello [FILE]   (default: the program itself)
#include <cstdio>
#include <spindle/spindle.hpp>
#include <string>
#include <system_error>
#include <vector>

// Coroutines take their parameters by value: a task starts later than the
// expression that created it.
spindle::task<long> square(long x) {
  co_return x* x;
}

spindle::task<long> sum_of_squares(int n) {
  std::vector<spindle::join_handle<long>> handles;
  for (int i = 1; i <= n; ++i)
    handles.push_back(spindle::spawn(square(i)));  // run in parallel
  long total = 0;
  for (auto& h : handles)
    total += co_await h;  // join: the value, or the task's exception
  co_return total;
}

spindle::task<std::size_t> count_lines(std::string path) {
  std::vector<std::byte> bytes = co_await spindle::io::read_file(path);
  std::size_t lines = 0;
  for (std::byte b : bytes)
    lines += b == std::byte{'\n'} ? 1 : 0;
  co_return lines;
}

int main(int argc, char** argv) {
  spindle::runtime rt{spindle::runtime_config{.workers = 4}};

  long const total = rt.block_on(sum_of_squares(10));
  std::printf("1^2 + ... + 10^2 = %ld (on %zu workers)\n", total, rt.worker_count());

  std::string const path = argc > 1 ? argv[1] : argv[0];
  try {
    std::size_t const lines = rt.block_on(count_lines(path));
    std::printf("%s: %zu lines\n", path.c_str(), lines);
  } catch (std::system_error const& e) {
    std::fprintf(stderr, "hello: %s: %s\n", path.c_str(), e.code().message().c_str());
    return 1;
  }
  return 0;
}
