// The machine's CPU topology and the victim order a worker steals in.
//
// Shape: cpu_topology maps each logical CPU (its OS number) to three group
// keys: its core (SMT siblings share it), its last-level cache and its NUMA
// node (-1: unknown). It is read from hwloc when spindle is built with it
// (libhwloc-dev; meson finds it as an optional dependency) and from sysfs
// otherwise: /sys/devices/system/cpu/cpuN/topology/thread_siblings_list,
// cpuN/cache/indexK/{level,type,shared_cpu_list} (the data or unified cache
// of the highest level is the last-level cache) and the cpuN/nodeK entries.
// A machine or container where none of it is readable gives an empty
// topology: every victim is then in the last level, which is the flat random
// order.
//
// build_victim_orders gives each worker its victims in four levels: the
// workers on its own core (SMT siblings, or the same CPU when there are more
// workers than CPUs), then those sharing its last-level cache, then those on
// its NUMA node, then the rest. Each level is shuffled by an RNG seeded from
// runtime_config::seed and the worker's index (deterministic runs);
// scheduler_core::steal_work also starts each level at a random victim per
// steal, so that searchers of one level do not all hit the same queue first.
//
// Which CPU a worker is on: with runtime_config::pin_threads the CPU it is
// pinned to; otherwise the CPU it starts on (sched_getcpu), a hint only,
// since the kernel may move an unpinned thread later.
//
// Thread-safety: read_* may be called from any thread; cached_topology reads
// the machine once per process (hwloc's load takes milliseconds) and returns
// the same object afterwards. build_victim_orders is a pure function.
// Design source: seed 003's open problem (NUMA-aware stealing); the levels
// follow hwloc's object tree, Go's and Tokio's searchers stay flat.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace spindle::detail {

/// Where one logical CPU sits: keys of its core, last-level cache and NUMA
/// node. Two CPUs share a group when their keys are equal; -1 is unknown
/// and equal to nothing.
struct cpu_place {
  std::int64_t core = -1;
  std::int64_t llc = -1;
  std::int64_t node = -1;
};

/// The logical CPUs of the machine, indexed by OS CPU number (CPUs that are
/// not present have every key -1).
struct cpu_topology {
  std::vector<cpu_place> cpus;
  /// Where `cpu` sits, or nullptr when it is unknown (negative or past the end).
  [[nodiscard]] cpu_place const* find(int cpu) const noexcept {
    if (cpu < 0 || static_cast<std::size_t>(cpu) >= cpus.size()) return nullptr;
    return &cpus[static_cast<std::size_t>(cpu)];
  }
};

/// Parses a kernel CPU list ("0-3,8,10-11", a trailing newline allowed).
/// Malformed parts are skipped; returns the CPUs in the order listed.
[[nodiscard]] std::vector<int> parse_cpu_list(std::string_view text);

/// Reads the topology from a sysfs CPU directory laid out as
/// /sys/devices/system/cpu (`root`). Missing files leave keys unknown.
[[nodiscard]] cpu_topology read_sysfs_topology(std::filesystem::path const& root);

/// Reads the topology through hwloc; an empty topology when spindle was
/// built without hwloc or hwloc fails.
[[nodiscard]] cpu_topology read_hwloc_topology();

/// True when spindle was built with hwloc.
[[nodiscard]] bool have_hwloc() noexcept;

/// hwloc when it is there and finds CPUs, sysfs otherwise; read once per
/// process.
[[nodiscard]] cpu_topology const& cached_topology();

/// How close a victim is to the thief.
enum class steal_level : std::uint8_t { smt, llc, node, rest };
inline constexpr std::size_t steal_levels = 4;

/// One worker's victims, nearest level first.
struct victim_order {
  /// Worker indices, level by level.
  std::vector<std::uint32_t> victims;
  /// Level l is victims[begin[l], begin[l + 1]).
  std::array<std::uint32_t, steal_levels + 1> begin{};

  [[nodiscard]] std::span<std::uint32_t const> level(std::size_t l) const noexcept {
    return std::span<std::uint32_t const>(victims).subspan(begin[l], begin[l + 1] - begin[l]);
  }
};

/// Victim orders for workers on `worker_cpus` (one entry per worker, the
/// OS CPU number or -1 when unknown), shuffled within levels by an RNG
/// seeded from `seed` and the worker's index.
[[nodiscard]] std::vector<victim_order> build_victim_orders(cpu_topology const& topology,
                                                            std::span<int const> worker_cpus,
                                                            std::uint64_t seed);

}  // namespace spindle::detail
