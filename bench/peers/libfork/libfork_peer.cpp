// libfork side of bench/compare.py (`--libfork DIR`): fork-join fib, the
// same recursion as spindle's fib_fork_join and the oneTBB peer's (fork
// fib(n-1), call fib(n-2) inline, join), on libfork's lazy_pool of N worker
// threads (workers sleep when there is no work, as spindle's park; its
// busy_pool spins instead). libfork is header-only and not packaged by
// Debian: compare.py compiles this file against the include/ directory of
// a libfork checkout the user names (3.8 tested). Nothing of libfork is kept
// in this repository.
//
// Workloads: fib_30, fib_35 (ms per fib). Usage and output: peer_common.hpp.
#include <libfork.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "../peer_common.hpp"

namespace {

constexpr auto fib = [](auto self, int n) LF_STATIC_CALL -> lf::task<long> {
  if (n < 2) co_return n;
  long a = 0;
  long b = 0;
  co_await lf::fork(&a, self)(n - 1);
  co_await lf::call(&b, self)(n - 2);
  co_await lf::join;
  co_return a + b;
};

long serial_fib(int n) {
  return n < 2 ? n : serial_fib(n - 1) + serial_fib(n - 2);
}

}  // namespace

int main(int argc, char** argv) {
  peer::options o = peer::parse(argc, argv, "libfork_peer");
  if (o.workloads.empty()) o.workloads = {"fib_30", "fib_35"};
  lf::lazy_pool pool(static_cast<std::size_t>(o.workers));
  std::vector<peer::result> results;
  for (std::string const& w : o.workloads) {
    if (w == "fib_30" || w == "fib_35") {
      int const n = w == "fib_30" ? 30 : 35;
      long const expected = serial_fib(n);
      results.push_back({w, "ms", peer::measure(o, 1e-6, 1, [&] {
                           if (lf::sync_wait(pool, fib, n) != expected) std::abort();
                         })});
    } else {
      std::fprintf(stderr, "libfork_peer: unknown workload %s\n", w.c_str());
      return 2;
    }
  }
  peer::print("libfork", o, results);
}
