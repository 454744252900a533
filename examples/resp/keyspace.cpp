#include "keyspace.hpp"

namespace resp {

std::size_t keyspace::size() {
  std::size_t total = 0;
  for (shard& s : shards_) {
    std::lock_guard<std::mutex> const guard(s.lock);
    total += s.entries.size();
  }
  return total;
}

}  // namespace resp
