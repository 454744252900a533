// spindle-du: GNU `du -b` over directory trees, as a spindle fold.
// See du.hpp and README.md.
#include <cstdio>

#include "du.hpp"

int main(int argc, char** argv) {
  du::options opts;
  if (auto status = du::parse_command_line(argc, argv, opts)) return *status;
  try {
    return du::run(opts);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "spindle-du: %s\n", e.what());
    return 1;
  }
}
