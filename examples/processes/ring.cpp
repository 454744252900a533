// spindle-ring: the classic ring benchmark on spindle processes. N processes
// in a ring pass one token HOPS times; prints ns per hop.
//
//   spindle-ring [-j WORKERS] [N] [HOPS]     (defaults: 2 workers, 10000, 1000000)
//
// Exit status: 0, or 2 for a usage error (CLI11's message on stderr).
#include <CLI/CLI.hpp>
#include <spindle/spindle.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
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
  std::size_t n = 10000;
  long hops = 1'000'000;
  CLI::App app{"spindle-ring: N processes in a ring pass one token HOPS times; prints ns per hop",
               "spindle-ring"};
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.add_option("-j,--workers", workers, "Worker threads (default 2)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("N", n, "Processes in the ring (default 10000)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000'000}));
  app.add_option("HOPS", hops, "Hops of the token (default 1000000)")
      ->check(CLI::Range(1L, 1'000'000'000'000L));
  try {
    app.parse(argc, argv);
  } catch (CLI::CallForHelp const& e) {
    return app.exit(e);
  } catch (CLI::ParseError const& e) {
    std::fprintf(stderr,
                 "spindle-ring: %s\nusage: spindle-ring [-j WORKERS] [N] [HOPS]\n"
                 "Try 'spindle-ring --help' for more information.\n",
                 e.what());
    return 2;
  }
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
