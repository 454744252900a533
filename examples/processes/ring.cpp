// spindle-ring: the classic ring benchmark on spindle processes. N processes
// in a ring pass one token HOPS times; prints ns per hop.
//
//   spindle-ring [-j WORKERS] [N] [HOPS]     (defaults: 2 workers, 10000, 1000000)
#include <spindle/spindle.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct ring {
  std::vector<spindle::pid<long>> members;
  spindle::event built;
};

spindle::task<void> member(spindle::process_context<long>& ctx, ring* r, std::size_t me) {
  co_await r->built.wait();
  spindle::pid<long> const next = r->members[(me + 1) % r->members.size()];
  for (;;) {
    long const v = co_await ctx.receive();
    if (v <= 0) {
      (void)spindle::send(next, 0L);  // pass the stop on; the last finds the first gone
      co_return;
    }
    (void)spindle::send(next, v - 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t workers = 2;
  std::vector<long> nums;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (a == "-j" && i + 1 < argc) {
      workers = std::strtoul(argv[++i], nullptr, 10);
    } else {
      char* end = nullptr;
      long v = std::strtol(argv[i], &end, 10);
      if (end == argv[i] || *end != '\0' || v <= 0) {
        std::fprintf(stderr, "usage: spindle-ring [-j WORKERS] [N] [HOPS]\n");
        return 2;
      }
      nums.push_back(v);
    }
  }
  std::size_t const n = nums.size() > 0 ? static_cast<std::size_t>(nums[0]) : 10000;
  long const hops = nums.size() > 1 ? nums[1] : 1'000'000;
  spindle::runtime rt{{.workers = workers}};
  ring r;
  for (std::size_t i = 0; i < n; ++i) {
    r.members.push_back(rt.spawn_process<long>(
        [&r, i](spindle::process_context<long>& ctx) { return member(ctx, &r, i); }));
  }
  r.built.set();
  auto const t0 = std::chrono::steady_clock::now();
  (void)spindle::send(r.members[0], hops);
  for (auto const& p : r.members)
    rt.block_on(spindle::monitor(p));
  auto const ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  std::printf("ring: %zu processes, %ld hops, %.1f ns/hop\n", n, hops,
              ns / static_cast<double>(hops + n));
  return 0;
}
