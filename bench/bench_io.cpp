// File I/O benchmarks (Google Benchmark): 4 KiB random reads at queue depth
// 1 and 32 (one task per read in flight) and 128 KiB sequential reads at
// depth 8, with both spindle backends and a plain pread loop on one thread as
// the baseline; each on a file in the page cache (warm) and on one dropped
// from it before every iteration (cold, posix_fadvise(POSIX_FADV_DONTNEED);
// skipped with an error where the kernel keeps the pages, e.g. on tmpfs).
// Reported: bytes/s and items (reads)/s.
//
// The file: SPINDLE_BENCH_FILE=PATH reads an existing file (bench/compare.py
// shares one with fio); otherwise a temporary file of SPINDLE_BENCH_FILE_MIB
// MiB (default 256; the comparison uses 1024) is created and removed
// at exit. Worker counts: 1 and 2, or only N when SPINDLE_BENCH_WORKERS=N.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

// The test file: SPINDLE_BENCH_FILE, or created once, filled and removed at
// exit.
struct test_file {
  fs::path path;
  std::uint64_t bytes = 0;
  bool owned = false;
  test_file() {
    if (char const* given = std::getenv("SPINDLE_BENCH_FILE"); given != nullptr && *given) {
      path = given;
      struct stat st {};
      if (::stat(given, &st) != 0 || st.st_size < static_cast<off_t>(large_block)) std::abort();
      bytes = static_cast<std::uint64_t>(st.st_size);
      return;
    }
    bytes = file_bytes();
    owned = true;
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
    ::close(fd);
  }
  ~test_file() {
    if (owned) fs::remove(path);
  }
};

test_file& the_file() {
  static test_file f;
  return f;
}

// Reads the whole file once so that it is in the page cache.
void warm_cache() {
  int fd = ::open(the_file().path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) std::abort();
  std::vector<char> chunk(1 << 20);
  for (std::uint64_t off = 0; off < the_file().bytes; off += chunk.size()) {
    if (::pread(fd, chunk.data(), chunk.size(), static_cast<off_t>(off)) < 0) std::abort();
  }
  ::close(fd);
}

// Drops the file from the page cache; false when the pages stay (checked
// with mincore on the first 64 MiB).
bool drop_cache() {
  int fd = ::open(the_file().path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ::fdatasync(fd);
  bool ok = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  std::size_t probe = static_cast<std::size_t>(std::min<std::uint64_t>(the_file().bytes, 64 << 20));
  void* map = ::mmap(nullptr, probe, PROT_READ, MAP_SHARED, fd, 0);
  if (ok && map != MAP_FAILED) {
    std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> resident((probe + page - 1) / page);
    if (::mincore(map, probe, resident.data()) == 0) {
      std::size_t in_cache = 0;
      for (unsigned char r : resident)
        in_cache += r & 1;
      ok = in_cache * 10 < resident.size();  // at most 10% still cached
    }
  }
  if (map != MAP_FAILED) ::munmap(map, probe);
  ::close(fd);
  return ok;
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
  bool cold = state.range(2) != 0;
  spindle::runtime rt{{.workers = workers, .io = backend}};
  file f = rt.block_on(open_file(the_file().path));
  constexpr int reads_per_iteration = 2048;
  int reads_each = reads_per_iteration / depth;
  if (!cold) warm_cache();
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      bool dropped = drop_cache();
      state.ResumeTiming();
      if (!dropped) {
        state.SkipWithError("cannot drop the file from the page cache here");
        break;
      }
    }
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

// Baseline: one thread, blocking pread, depth 1, warm.
void random_4k_pread(benchmark::State& state) {
  warm_cache();
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

std::vector<int> worker_counts() {
  char const* env = std::getenv("SPINDLE_BENCH_WORKERS");
  if (env != nullptr && std::atoi(env) > 0) return {std::atoi(env)};
  return {1, 2};
}

// Args: {queue depth, workers, cold}. Warm ones first: the cold ones leave
// the file partly out of the cache (each warm benchmark re-reads it anyway).
void register_all() {
  using fn = void (*)(benchmark::State&);
  struct entry {
    char const* name;
    fn run;
    std::vector<int> depths;
  };
  entry const entries[] = {
      {"random_4k_uring", random_4k_uring, {1, 32}},
      {"random_4k_threadpool", random_4k_threadpool, {1, 32}},
      {"sequential_128k_uring", sequential_128k_uring, {8}},
      {"sequential_128k_threadpool", sequential_128k_threadpool, {8}},
  };
  for (int cold : {0, 1}) {
    for (entry const& e : entries) {
      auto* b = benchmark::RegisterBenchmark(e.name, e.run);
      for (int w : worker_counts()) {
        for (int d : e.depths)
          b->Args({d, w, cold});
      }
      b->ArgNames({"depth", "workers", "cold"})->UseRealTime();
    }
  }
  benchmark::RegisterBenchmark("random_4k_pread", random_4k_pread);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
