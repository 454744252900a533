// cpu_topology and victim orders: see topology.hpp.
#include "topology.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "rng.hpp"

#if SPINDLE_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace spindle::detail {

namespace {

namespace fs = std::filesystem;

// The whole (small) file, or "" when it cannot be read.
std::string read_small_file(fs::path const& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// "cpu12" -> 12, "node3" with prefix "node" -> 3; -1 otherwise.
int numbered_entry(std::string_view name, std::string_view prefix) {
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) return -1;
  std::string_view digits = name.substr(prefix.size());
  int value = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc{} || end != digits.data() + digits.size() || value < 0) return -1;
  return value;
}

// The smallest CPU of a CPU list file: the key of the group it describes.
std::int64_t group_key(fs::path const& list_file) {
  std::vector<int> cpus = parse_cpu_list(read_small_file(list_file));
  if (cpus.empty()) return -1;
  return *std::min_element(cpus.begin(), cpus.end());
}

cpu_place read_sysfs_cpu(fs::path const& dir) {
  cpu_place place;
  std::error_code ec;
  // SMT siblings: core_cpus_list on newer kernels, thread_siblings_list on all.
  place.core = group_key(dir / "topology" / "thread_siblings_list");
  if (place.core < 0) place.core = group_key(dir / "topology" / "core_cpus_list");
  // Last-level cache: the data or unified cache of the highest level.
  int best_level = -1;
  for (fs::directory_iterator it(dir / "cache", ec), end; !ec && it != end; it.increment(ec)) {
    if (numbered_entry(it->path().filename().string(), "index") < 0) continue;
    std::string type = read_small_file(it->path() / "type");
    if (type.rfind("Instruction", 0) == 0) continue;
    std::string level_text = read_small_file(it->path() / "level");
    int level = -1;
    std::from_chars(level_text.data(), level_text.data() + level_text.size(), level);
    if (level <= best_level) continue;
    std::int64_t key = group_key(it->path() / "shared_cpu_list");
    if (key < 0) continue;
    best_level = level;
    // Caches of different levels are different groups even when their
    // smallest CPU is the same.
    place.llc = (static_cast<std::int64_t>(level) << 32) | key;
  }
  // NUMA node: a nodeK entry in the CPU's directory.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    int node = numbered_entry(it->path().filename().string(), "node");
    if (node >= 0) {
      place.node = node;
      break;
    }
  }
  return place;
}

}  // namespace

std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> out;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    while (!part.empty() && (part.back() == '\n' || part.back() == ' '))
      part.remove_suffix(1);
    while (!part.empty() && part.front() == ' ')
      part.remove_prefix(1);
    if (part.empty()) continue;
    int lo = -1;
    int hi = -1;
    char const* const last = part.data() + part.size();
    auto [end, ec] = std::from_chars(part.data(), last, lo);
    if (ec != std::errc{} || lo < 0) continue;
    if (end == last) {
      hi = lo;
    } else if (*end == '-') {
      auto [end2, ec2] = std::from_chars(end + 1, last, hi);
      if (ec2 != std::errc{} || end2 != last || hi < lo) continue;
    } else {
      continue;
    }
    // A list names at most a few thousand CPUs; anything wider is malformed.
    if (hi - lo > 65536) continue;
    for (int c = lo; c <= hi; ++c)
      out.push_back(c);
  }
  return out;
}

cpu_topology read_sysfs_topology(fs::path const& root) {
  cpu_topology topo;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    int cpu = numbered_entry(it->path().filename().string(), "cpu");
    if (cpu < 0 || cpu > 1 << 20) continue;
    if (static_cast<std::size_t>(cpu) >= topo.cpus.size()) topo.cpus.resize(cpu + 1);
    topo.cpus[static_cast<std::size_t>(cpu)] = read_sysfs_cpu(it->path());
  }
  return topo;
}

bool have_hwloc() noexcept {
  return SPINDLE_HAVE_HWLOC != 0;
}

cpu_topology read_hwloc_topology() {
  cpu_topology topo;
#if SPINDLE_HAVE_HWLOC
  hwloc_topology_t t = nullptr;
  if (hwloc_topology_init(&t) != 0) return topo;
  if (hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    return topo;
  }
  int const n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, static_cast<unsigned>(i));
    if (pu == nullptr || pu->os_index > 1u << 20) continue;
    cpu_place place;
    if (hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu)) {
      place.core = static_cast<std::int64_t>(core->gp_index);
    }
    // The highest data or unified cache above the PU.
    for (hwloc_obj_t o = pu->parent; o != nullptr; o = o->parent) {
      if (hwloc_obj_type_is_dcache(o->type)) place.llc = static_cast<std::int64_t>(o->gp_index);
    }
    if (pu->nodeset != nullptr) {
      int node = hwloc_bitmap_first(pu->nodeset);
      if (node >= 0) place.node = node;
    }
    if (pu->os_index >= topo.cpus.size()) topo.cpus.resize(pu->os_index + 1);
    topo.cpus[pu->os_index] = place;
  }
  hwloc_topology_destroy(t);
#endif
  return topo;
}

cpu_topology const& cached_topology() {
  static cpu_topology const topo = [] {
    cpu_topology t = read_hwloc_topology();
    if (t.cpus.empty()) t = read_sysfs_topology("/sys/devices/system/cpu");
    return t;
  }();
  return topo;
}

std::vector<victim_order> build_victim_orders(cpu_topology const& topology,
                                              std::span<int const> worker_cpus,
                                              std::uint64_t seed) {
  std::size_t const n = worker_cpus.size();
  std::vector<victim_order> orders(n);
  auto same = [](std::int64_t a, std::int64_t b) { return a >= 0 && a == b; };
  for (std::size_t w = 0; w < n; ++w) {
    cpu_place const* mine = topology.find(worker_cpus[w]);
    std::array<std::vector<std::uint32_t>, steal_levels> levels;
    for (std::size_t v = 0; v < n; ++v) {
      if (v == w) continue;
      cpu_place const* theirs = topology.find(worker_cpus[v]);
      steal_level l = steal_level::rest;
      if (mine != nullptr && theirs != nullptr) {
        if (worker_cpus[v] == worker_cpus[w] || same(mine->core, theirs->core)) {
          l = steal_level::smt;
        } else if (same(mine->llc, theirs->llc)) {
          l = steal_level::llc;
        } else if (same(mine->node, theirs->node)) {
          l = steal_level::node;
        }
      }
      levels[static_cast<std::size_t>(l)].push_back(static_cast<std::uint32_t>(v));
    }
    xorshift64 rng(seed ^ (0xbf58476d1ce4e5b9ULL * (w + 1)));
    victim_order& order = orders[w];
    order.victims.reserve(n - 1);
    for (std::size_t l = 0; l < steal_levels; ++l) {
      auto& level = levels[l];
      // Fisher-Yates with the seeded RNG.
      for (std::size_t i = level.size(); i > 1; --i) {
        std::size_t j = rng.below(static_cast<std::uint32_t>(i));
        std::swap(level[i - 1], level[j]);
      }
      order.begin[l] = static_cast<std::uint32_t>(order.victims.size());
      order.victims.insert(order.victims.end(), level.begin(), level.end());
    }
    order.begin[steal_levels] = static_cast<std::uint32_t>(order.victims.size());
  }
  return orders;
}

}  // namespace spindle::detail
