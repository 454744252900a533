// The spawn-site table (runtime/src/spawn_sites.hpp): a task's header keeps
// its spawn_location as a 32-bit id, which runtime::dump() turns back into
// the file and line.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "spawn_sites.hpp"
#include "spindle/task_info.hpp"

namespace {

using spindle::spawn_location;
using spindle::detail::spawn_site_id;
using spindle::detail::spawn_site_location;

// File names with distinct addresses (the table keys on the address).
char const files[4][16] = {"alpha.cpp", "beta.cpp", "gamma.cpp", "delta.cpp"};

TEST(SpawnSites, EverySiteComesBackAsItWasSpawnedFrom) {
  std::set<std::uint32_t> ids;
  for (int f = 0; f < 4; ++f) {
    for (std::uint32_t line = 1; line <= 500; ++line) {
      spawn_location const where{files[f], line};
      std::uint32_t const id = spawn_site_id(where);
      ASSERT_NE(id, 0u);
      ids.insert(id);
      spawn_location const back = spawn_site_location(id);
      EXPECT_EQ(back.file, files[f]);
      EXPECT_EQ(back.line, line);
    }
  }
  EXPECT_EQ(ids.size(), 2000u) << "two sites shared an id";
}

TEST(SpawnSites, ASiteKeepsItsIdAcrossCacheEvictionsAndThreads) {
  // 2,000 sites through a 64-slot cache evict each other; every later
  // lookup, from this thread or another, must give the first id.
  std::vector<std::uint32_t> first;
  for (std::uint32_t line = 1; line <= 2000; ++line)
    first.push_back(spawn_site_id({files[0], 10'000 + line}));
  for (int round = 0; round < 3; ++round) {
    for (std::uint32_t line = 1; line <= 2000; ++line)
      ASSERT_EQ(spawn_site_id({files[0], 10'000 + line}), first[line - 1]);
  }
  std::vector<std::uint32_t> other(first.size());
  std::thread t([&] {
    for (std::uint32_t line = 1; line <= 2000; ++line)
      other[line - 1] = spawn_site_id({files[0], 10'000 + line});
  });
  t.join();
  EXPECT_EQ(other, first);
}

TEST(SpawnSites, ThreadsThatMeetANewSiteAtOnceGetOneId) {
  constexpr int threads = 4;
  constexpr std::uint32_t sites = 3000;
  std::vector<std::vector<std::uint32_t>> got(threads, std::vector<std::uint32_t>(sites));
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i) {
    ts.emplace_back([&got, i] {
      for (std::uint32_t line = 0; line < sites; ++line)
        got[i][line] = spawn_site_id({files[1], 20'000 + line});
    });
  }
  for (auto& t : ts)
    t.join();
  for (int i = 1; i < threads; ++i)
    EXPECT_EQ(got[i], got[0]);
  std::set<std::uint32_t> distinct(got[0].begin(), got[0].end());
  EXPECT_EQ(distinct.size(), sites);
  EXPECT_EQ(distinct.count(0u), 0u);
}

TEST(SpawnSites, LinesAreKeptModulo65536AndTheUnknownSiteIsZero) {
  // spawn_location::current() saturates at 65535; a line set by hand above
  // it is kept modulo 65536 (the documented 16 bits).
  spawn_location const high{files[2], 65535};
  EXPECT_EQ(spawn_site_location(spawn_site_id(high)).line, 65535u);
  spawn_location const wrapped{files[2], 65536 + 7};
  EXPECT_EQ(spawn_site_location(spawn_site_id(wrapped)).line, 7u);
  EXPECT_EQ(spawn_site_id(wrapped), spawn_site_id({files[2], 7}));
  // No file and no line: unknown, without a table entry.
  EXPECT_EQ(spawn_site_id({nullptr, 0}), 0u);
  spawn_location const unknown = spawn_site_location(0);
  EXPECT_STREQ(unknown.file, "");
  EXPECT_EQ(unknown.line, 0u);
  // An id the table never gave out reads unknown too.
  spawn_location const never = spawn_site_location(0xffffffffU);
  EXPECT_STREQ(never.file, "");
  EXPECT_EQ(never.line, 0u);
}

}  // namespace
