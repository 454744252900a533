// Interned spawn sites (see spawn_sites.hpp).
#include "spawn_sites.hpp"

#include <sys/mman.h>

#include <mutex>

namespace spindle::detail {

[[gnu::tls_model("initial-exec")]] constinit thread_local spawn_site_cache t_spawn_sites{};

namespace {

// Open addressing over table_slots words, each a site's key (0: empty); a
// site's id is its slot + 1, so the table is also the id -> site map. Its
// memory is one anonymous mapping made on the first miss: pages are touched
// as sites arrive (a program with a few hundred sites touches a few pages),
// and no site ever calls malloc or operator new (a spawn path's promise:
// docs/design.md). At most max_spawn_sites sites, three quarters of the
// slots, so that a probe stays short.
constexpr std::size_t table_slots = max_spawn_sites / 3 * 4;
static_assert((table_slots & (table_slots - 1)) == 0, "a power of two: the probe masks");

struct site_table {
  std::mutex lock;
  std::uint64_t* keys = nullptr;  // guarded by lock; nullptr: no mapping (every site unknown)
  std::size_t sites = 0;          // guarded by lock
  bool mapped = false;            // guarded by lock: the mapping was tried
};

site_table& table() noexcept {
  // Never destroyed: threads may spawn (or dump) during static destruction.
  static site_table* const t = new site_table;
  return *t;
}

/// The table's words, mapped on first use (nullptr when the system refused).
std::uint64_t* keys_of(site_table& t) noexcept {
  if (!t.mapped) {
    t.mapped = true;
    void* p = ::mmap(nullptr, table_slots * sizeof(std::uint64_t), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) t.keys = static_cast<std::uint64_t*>(p);
  }
  return t.keys;
}

}  // namespace

std::uint32_t spawn_site_id_slow(std::uint64_t key, std::size_t slot) noexcept {
  if (key == 0) return 0;
  std::uint32_t id = 0;
  site_table& t = table();
  {
    std::lock_guard guard(t.lock);
    if (std::uint64_t* keys = keys_of(t)) {
      std::size_t i = static_cast<std::size_t>(spawn_site_hash(key) >> 40) & (table_slots - 1);
      while (keys[i] != 0 && keys[i] != key)
        i = (i + 1) & (table_slots - 1);
      if (keys[i] == key) {
        id = static_cast<std::uint32_t>(i + 1);
      } else if (t.sites < max_spawn_sites) {
        keys[i] = key;
        ++t.sites;
        id = static_cast<std::uint32_t>(i + 1);
      }
    }
  }
  // A full table (or no mapping) answers 0 without caching it: a later
  // spawn from the site asks again, and the unknown answer costs only that.
  if (id != 0) {
    spawn_site_cache& cache = t_spawn_sites;
    cache.keys[slot] = key;
    cache.ids[slot] = id;
  }
  return id;
}

spawn_location spawn_site_location(std::uint32_t id) noexcept {
  std::uint64_t key = 0;
  if (id != 0 && id <= table_slots) {
    site_table& t = table();
    std::lock_guard guard(t.lock);
    if (t.keys != nullptr) key = t.keys[id - 1];
  }
  auto const* file = reinterpret_cast<char const*>(
      static_cast<std::uintptr_t>(key & ((std::uint64_t{1} << 48) - 1)));
  return spawn_location{file != nullptr ? file : "", static_cast<std::uint32_t>(key >> 48)};
}

}  // namespace spindle::detail
