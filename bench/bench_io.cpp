// File I/O benchmarks (Google Benchmark): 4 KiB random reads at queue depth
// 1 and 32 (one task per read in flight) and 128 KiB sequential reads at
// depth 8, on a file in the page cache, with both spindle backends and a
// plain pread loop on one thread as the baseline. The file is 256 MiB by
// default; SPINDLE_BENCH_FILE_MIB changes it (the comparison uses
// 1024). Reported: bytes/s and items (reads)/s.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "spindle/spindle.hpp"

namespace {

namespace fs = std::filesystem;
using spindle::io_backend;
using spindle::task;
using spindle::io::file;

constexpr std::size_t small_block = 4096;
constexpr std::size_t large_block = 128 * 1024;

std::uint64_t file_bytes() {
  char const* mib = std::getenv("SPINDLE_BENCH_FILE_MIB");
  std::uint64_t n = mib != nullptr ? std::strtoull(mib, nullptr, 10) : 256;
  return (n == 0 ? 256 : n) * 1024 * 1024;
}

// The test file: created once, filled, read once so that it is in the page
// cache, removed at exit.
struct test_file {
  fs::path path;
  std::uint64_t bytes = file_bytes();
  test_file() {
    std::string tmpl = (fs::temp_directory_path() / "spindle-bench-io-XXXXXX").string();
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0) std::abort();
    path = tmpl;
    std::vector<char> chunk(1 << 20);
    for (std::size_t i = 0; i < chunk.size(); ++i)
      chunk[i] = static_cast<char>(i * 131);
    for (std::uint64_t off = 0; off < bytes; off += chunk.size()) {
      if (::pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(off)) < 0) std::abort();
    }
    for (std::uint64_t off = 0; off < bytes; off += chunk.size()) {
      if (::pread(fd, chunk.data(), chunk.size(), static_cast<off_t>(off)) < 0) std::abort();
    }
    ::close(fd);
  }
  ~test_file() { fs::remove(path); }
};

test_file& the_file() {
  static test_file f;
  return f;
}

std::uint64_t next_offset(std::uint64_t& rng, std::uint64_t blocks, std::size_t block) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (rng % blocks) * block;
}

// One reader: `reads` random (or sequential) reads of `block` bytes.
task<std::uint64_t> reader(file* f, std::uint64_t seed, int reads, std::size_t block,
                           bool sequential, std::uint64_t start) {
  std::vector<std::byte> buffer(block);
  std::uint64_t blocks = the_file().bytes / block;
  std::uint64_t rng = seed | 1;
  std::uint64_t total = 0;
  for (int i = 0; i < reads; ++i) {
    std::uint64_t offset = sequential ? ((start + static_cast<std::uint64_t>(i)) % blocks) * block
                                      : next_offset(rng, blocks, block);
    total += co_await f->read_at(buffer, offset);
  }
  co_return total;
}

// `depth` readers at once: depth reads in flight.
task<std::uint64_t> run_depth(file* f, int depth, int reads_each, std::size_t block,
                              bool sequential) {
  std::vector<spindle::join_handle<std::uint64_t>> readers;
  readers.reserve(static_cast<std::size_t>(depth));
  std::uint64_t blocks = the_file().bytes / block;
  for (int d = 0; d < depth; ++d) {
    readers.push_back(spindle::spawn(reader(f, 0x9e3779b97f4a7c15ULL * (d + 1), reads_each, block,
                                            sequential, blocks / depth * d)));
  }
  std::uint64_t total = 0;
  for (auto& r : readers)
    total += co_await r;
  co_return total;
}

task<file> open_file(fs::path path) {
  co_return co_await file::open(path);
}

void spindle_reads(benchmark::State& state, io_backend backend, std::size_t block,
                   bool sequential) {
  int depth = static_cast<int>(state.range(0));
  std::size_t workers = static_cast<std::size_t>(state.range(1));
  spindle::runtime rt{{.workers = workers, .io = backend}};
  file f = rt.block_on(open_file(the_file().path));
  constexpr int reads_per_iteration = 2048;
  int reads_each = reads_per_iteration / depth;
  for (auto _ : state) {
    std::uint64_t got = rt.block_on(run_depth(&f, depth, reads_each, block, sequential));
    if (got != static_cast<std::uint64_t>(reads_each) * depth * block) {
      state.SkipWithError("short read");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * reads_each * depth);
  state.SetBytesProcessed(state.iterations() * reads_each * depth *
                          static_cast<std::int64_t>(block));
}

void random_4k_uring(benchmark::State& s) {
  spindle_reads(s, io_backend::uring, small_block, false);
}
void random_4k_threadpool(benchmark::State& s) {
  spindle_reads(s, io_backend::threadpool, small_block, false);
}
void sequential_128k_uring(benchmark::State& s) {
  spindle_reads(s, io_backend::uring, large_block, true);
}
void sequential_128k_threadpool(benchmark::State& s) {
  spindle_reads(s, io_backend::threadpool, large_block, true);
}

// Baseline: one thread, blocking pread, depth 1.
void random_4k_pread(benchmark::State& state) {
  int fd = ::open(the_file().path.c_str(), O_RDONLY | O_CLOEXEC);
  std::vector<char> buffer(small_block);
  std::uint64_t rng = 12345;
  std::uint64_t blocks = the_file().bytes / small_block;
  for (auto _ : state) {
    ssize_t n = ::pread(fd, buffer.data(), small_block,
                        static_cast<off_t>(next_offset(rng, blocks, small_block)));
    benchmark::DoNotOptimize(n);
  }
  ::close(fd);
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(small_block));
}

// Args: {queue depth, workers}.
BENCHMARK(random_4k_uring)->Args({1, 1})->Args({32, 1})->Args({32, 2})->UseRealTime();
BENCHMARK(random_4k_threadpool)->Args({1, 1})->Args({32, 1})->Args({32, 2})->UseRealTime();
BENCHMARK(sequential_128k_uring)->Args({8, 2})->UseRealTime();
BENCHMARK(sequential_128k_threadpool)->Args({8, 2})->UseRealTime();
BENCHMARK(random_4k_pread);

}  // namespace

BENCHMARK_MAIN();
