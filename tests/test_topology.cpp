// The CPU topology readers (sysfs, hwloc) and the victim-order builder
// (runtime/src/topology.hpp), on synthetic topologies and a fake sysfs tree.
#include <gtest/gtest.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "topology.hpp"

namespace {

namespace fs = std::filesystem;
using spindle::detail::build_victim_orders;
using spindle::detail::cpu_place;
using spindle::detail::cpu_topology;
using spindle::detail::parse_cpu_list;
using spindle::detail::steal_level;
using spindle::detail::victim_order;

std::set<std::uint32_t> level_set(victim_order const& o, steal_level l) {
  auto s = o.level(static_cast<std::size_t>(l));
  return {s.begin(), s.end()};
}

// 2 NUMA nodes x 2 last-level caches x 2 cores x 2 SMT threads: CPU c is on
// core c/2, cache c/4, node c/8.
cpu_topology two_sockets() {
  cpu_topology t;
  for (int c = 0; c < 16; ++c)
    t.cpus.push_back(cpu_place{c / 2, c / 4, c / 8});
  return t;
}

TEST(Topology, ParsesCpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_EQ(parse_cpu_list(""), (std::vector<int>{}));
  EXPECT_EQ(parse_cpu_list("\n"), (std::vector<int>{}));
  // Malformed parts are skipped, the rest kept.
  EXPECT_EQ(parse_cpu_list("x,2,3-1,4-5,7-y"), (std::vector<int>{2, 4, 5}));
}

TEST(Topology, LevelsFollowSmtCacheNodeRest) {
  std::vector<int> cpus(16);
  std::iota(cpus.begin(), cpus.end(), 0);  // worker i on CPU i
  auto orders = build_victim_orders(two_sockets(), cpus, 42);
  ASSERT_EQ(orders.size(), 16u);
  victim_order const& o = orders[0];
  EXPECT_EQ(level_set(o, steal_level::smt), (std::set<std::uint32_t>{1}));
  EXPECT_EQ(level_set(o, steal_level::llc), (std::set<std::uint32_t>{2, 3}));
  EXPECT_EQ(level_set(o, steal_level::node), (std::set<std::uint32_t>{4, 5, 6, 7}));
  EXPECT_EQ(level_set(o, steal_level::rest),
            (std::set<std::uint32_t>{8, 9, 10, 11, 12, 13, 14, 15}));
  victim_order const& o13 = orders[13];
  EXPECT_EQ(level_set(o13, steal_level::smt), (std::set<std::uint32_t>{12}));
  EXPECT_EQ(level_set(o13, steal_level::llc), (std::set<std::uint32_t>{14, 15}));
  EXPECT_EQ(level_set(o13, steal_level::node), (std::set<std::uint32_t>{8, 9, 10, 11}));
  // Every order lists every other worker exactly once.
  for (std::size_t w = 0; w < orders.size(); ++w) {
    std::vector<std::uint32_t> v = orders[w].victims;
    std::sort(v.begin(), v.end());
    std::vector<std::uint32_t> expected;
    for (std::uint32_t i = 0; i < 16; ++i)
      if (i != w) expected.push_back(i);
    EXPECT_EQ(v, expected) << "worker " << w;
  }
}

TEST(Topology, SeededShuffleWithinLevels) {
  std::vector<int> cpus(16);
  std::iota(cpus.begin(), cpus.end(), 0);
  auto a = build_victim_orders(two_sockets(), cpus, 7);
  auto b = build_victim_orders(two_sockets(), cpus, 7);
  for (std::size_t w = 0; w < a.size(); ++w)
    EXPECT_EQ(a[w].victims, b[w].victims) << "same seed, same order";
  // Another seed permutes the 8-worker level of some worker differently
  // (8! orders: a collision on all 16 workers does not happen by chance).
  bool differs = false;
  for (std::uint64_t seed = 8; seed < 12 && !differs; ++seed) {
    auto c = build_victim_orders(two_sockets(), cpus, seed);
    for (std::size_t w = 0; w < a.size(); ++w)
      differs = differs || a[w].victims != c[w].victims;
  }
  EXPECT_TRUE(differs);
}

TEST(Topology, MoreWorkersThanCpusAndUnknowns) {
  // Workers 0 and 4 share CPU 0; worker 5's CPU is unknown (-1); worker 6
  // is on a CPU the topology does not list.
  std::vector<int> cpus{0, 1, 2, 8, 0, -1, 99};
  auto orders = build_victim_orders(two_sockets(), cpus, 1);
  EXPECT_EQ(level_set(orders[0], steal_level::smt), (std::set<std::uint32_t>{1, 4}));
  EXPECT_EQ(level_set(orders[0], steal_level::llc), (std::set<std::uint32_t>{2}));
  EXPECT_EQ(level_set(orders[0], steal_level::rest), (std::set<std::uint32_t>{3, 5, 6}));
  // An unknown CPU: every victim in the last level (the flat random order).
  EXPECT_EQ(orders[5].level(static_cast<std::size_t>(steal_level::rest)).size(), 6u);
  EXPECT_EQ(orders[6].level(static_cast<std::size_t>(steal_level::rest)).size(), 6u);
  // An empty topology (nothing readable): flat.
  auto flat = build_victim_orders(cpu_topology{}, cpus, 1);
  for (auto const& o : flat)
    EXPECT_EQ(o.level(static_cast<std::size_t>(steal_level::rest)).size(), 6u);
  // One worker: no victims.
  std::vector<int> one{0};
  auto single = build_victim_orders(two_sockets(), one, 1);
  EXPECT_TRUE(single[0].victims.empty());
}

class fake_sysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("spindle-topology-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  void write(fs::path const& rel, std::string const& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  // A cache index directory of `cpu`.
  void cache(int cpu, int index, int level, std::string const& type, std::string const& shared) {
    fs::path d =
        fs::path("cpu" + std::to_string(cpu)) / "cache" / ("index" + std::to_string(index));
    write(d / "level", std::to_string(level) + "\n");
    write(d / "type", type + "\n");
    write(d / "shared_cpu_list", shared + "\n");
  }

  fs::path root_;
};

TEST_F(fake_sysfs, ReadsCoresCachesAndNodes) {
  // 8 CPUs: SMT pairs (0,4) (1,5) (2,6) (3,7); L3 shared by 0,1,4,5 and by
  // 2,3,6,7; nodes 0 (CPUs 0-1,4-5) and 1. L1i lists a wider set on purpose
  // (an instruction cache must not be taken for the last level).
  for (int c = 0; c < 8; ++c) {
    fs::path d = "cpu" + std::to_string(c);
    int sibling = c < 4 ? c + 4 : c - 4;
    write(d / "topology" / "thread_siblings_list",
          std::to_string(std::min(c, sibling)) + "," + std::to_string(std::max(c, sibling)) + "\n");
    bool low = c % 4 < 2;
    std::string l3 = low ? "0-1,4-5" : "2-3,6-7";
    cache(c, 0, 1, "Data", std::to_string(c));
    cache(c, 1, 1, "Instruction", "0-7");
    cache(c, 2, 2, "Unified",
          std::to_string(std::min(c, sibling)) + "," + std::to_string(std::max(c, sibling)));
    cache(c, 3, 3, "Unified", l3);
    fs::create_directories(root_ / d / ("node" + std::to_string(low ? 0 : 1)));
  }
  // Not CPUs: skipped.
  fs::create_directories(root_ / "cpufreq");
  fs::create_directories(root_ / "cpuidle");
  write("online", "0-7\n");

  cpu_topology t = spindle::detail::read_sysfs_topology(root_);
  ASSERT_EQ(t.cpus.size(), 8u);
  EXPECT_EQ(t.cpus[0].core, t.cpus[4].core);
  EXPECT_NE(t.cpus[0].core, t.cpus[1].core);
  EXPECT_EQ(t.cpus[0].llc, t.cpus[5].llc);
  EXPECT_NE(t.cpus[0].llc, t.cpus[2].llc);
  EXPECT_EQ(t.cpus[0].node, 0);
  EXPECT_EQ(t.cpus[3].node, 1);

  std::vector<int> cpus{0, 1, 2, 3, 4, 5, 6, 7};
  auto orders = build_victim_orders(t, cpus, 3);
  EXPECT_EQ(level_set(orders[0], steal_level::smt), (std::set<std::uint32_t>{4}));
  EXPECT_EQ(level_set(orders[0], steal_level::llc), (std::set<std::uint32_t>{1, 5}));
  EXPECT_EQ(level_set(orders[0], steal_level::node), (std::set<std::uint32_t>{}));
  EXPECT_EQ(level_set(orders[0], steal_level::rest), (std::set<std::uint32_t>{2, 3, 6, 7}));
}

TEST_F(fake_sysfs, MissingFilesLeaveKeysUnknown) {
  // cpu0 complete but without caches; cpu2 a bare directory; cpu1 absent.
  write("cpu0/topology/thread_siblings_list", "0\n");
  fs::create_directories(root_ / "cpu0" / "node0");
  fs::create_directories(root_ / "cpu2");
  write("cpu2/cache/index0/level", "garbage");  // no type, no shared list
  cpu_topology t = spindle::detail::read_sysfs_topology(root_);
  ASSERT_EQ(t.cpus.size(), 3u);
  EXPECT_EQ(t.cpus[0].core, 0);
  EXPECT_EQ(t.cpus[0].llc, -1);
  EXPECT_EQ(t.cpus[0].node, 0);
  EXPECT_EQ(t.cpus[1].core, -1);
  EXPECT_EQ(t.cpus[2].core, -1);
  EXPECT_EQ(t.cpus[2].llc, -1);
  EXPECT_EQ(t.cpus[2].node, -1);
  // A root that does not exist: empty, no throw.
  EXPECT_TRUE(spindle::detail::read_sysfs_topology(root_ / "nowhere").cpus.empty());
}

TEST(Topology, ThisMachine) {
  // Whatever the machine is, the CPU this thread runs on is described (when
  // sysfs or hwloc can be read at all) and sits in its own core group.
  cpu_topology const& t = spindle::detail::cached_topology();
  cpu_topology sys = spindle::detail::read_sysfs_topology("/sys/devices/system/cpu");
  if (t.cpus.empty()) GTEST_SKIP() << "no topology readable here";
  int cpu = ::sched_getcpu();
  ASSERT_GE(cpu, 0);
  cpu_place const* p = t.find(cpu);
  ASSERT_NE(p, nullptr);
  if (spindle::detail::have_hwloc() && !sys.cpus.empty()) {
    // hwloc and sysfs agree on which CPUs share a core and a node.
    for (std::size_t a = 0; a < std::min(t.cpus.size(), sys.cpus.size()); ++a) {
      for (std::size_t b = 0; b < std::min(t.cpus.size(), sys.cpus.size()); ++b) {
        if (t.cpus[a].core < 0 || sys.cpus[a].core < 0) continue;
        EXPECT_EQ(t.cpus[a].core == t.cpus[b].core, sys.cpus[a].core == sys.cpus[b].core)
            << "CPUs " << a << " and " << b;
      }
    }
  }
}

}  // namespace
