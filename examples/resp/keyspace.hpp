// spindle-resp's keyspace: string keys to string values, split into 64
// shards, each an std::unordered_map guarded by its own std::mutex.
//
// Why std::mutex and not spindle::mutex: a command runs from start to end
// without suspending (it never awaits), so a shard lock is held only for
// one map operation (a lookup, an insert, an erase, copying one value into
// a reply buffer). A blocking lock held that briefly is cheaper than a
// spindle::mutex (whose lock() is a task to await), and a worker thread
// blocked on it waits at most for another worker's map operation. The rule
// that makes this safe: the callable given to with_shard() must not
// suspend, block on anything else, or call back into the keyspace.
//
// Thread-safety: every member may be called from any number of threads.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace resp {

class keyspace {
 public:
  /// The number of shards (a power of two).
  static constexpr std::size_t shard_count = 64;

  /// Hashes std::string and std::string_view alike, so that lookups by
  /// string_view do not build a std::string (C++20 heterogeneous lookup).
  struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  /// One shard's map.
  using map = std::unordered_map<std::string, std::string, string_hash, std::equal_to<>>;

  /// Calls fn(map&) with the shard that holds `key` locked and returns what
  /// fn returns. fn must not suspend, block, or use the keyspace again.
  template <class F>
  decltype(auto) with_shard(std::string_view key, F&& fn) {
    shard& s = shards_[shard_of(key)];
    std::lock_guard<std::mutex> const guard(s.lock);
    return std::forward<F>(fn)(s.entries);
  }

  /// The number of keys (each shard locked in turn: not a snapshot).
  [[nodiscard]] std::size_t size();

  /// The shard index of `key` (the hash's top bits; the maps use its low
  /// bits for their buckets).
  [[nodiscard]] static std::size_t shard_of(std::string_view key) noexcept {
    return string_hash{}(key) >> (8 * sizeof(std::size_t) - 6);
  }

 private:
  // One cache line per lock, so that two workers on different shards do not
  // contend for the line.
  struct alignas(64) shard {
    std::mutex lock;
    map entries;
  };
  static_assert(shard_count == 64, "shard_of takes the hash's top 6 bits");
  std::array<shard, shard_count> shards_;
};

}  // namespace resp
