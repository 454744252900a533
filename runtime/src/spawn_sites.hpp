// Interned spawn sites: the 32-bit id a task's header keeps for the
// spawn_location runtime::dump() reports.
//
// Shape: one table for the process, an open-addressed set of sites whose
// slot + 1 is the site's id (so it maps ids back to sites too), filled on a
// site's first spawn and never emptied (sites are places in the program:
// few, and fixed); 0 is the unknown site. Its memory is one anonymous
// mapping whose pages are touched as sites arrive: no spawn calls malloc.
// Each thread keeps a direct-mapped cache of 64 sites, so a spawn from a
// site it used before reads one slot and compares one word; only a cache
// miss takes the table's lock. The table holds at most max_spawn_sites sites; a site beyond them
// is reported as unknown ("" and line 0).
//
// Thread-safety: both functions, any thread; the cache is the calling
// thread's own.
// Design source: string interning (symbol tables); the header's size
// budget follows Tokio's task layout (a 64-byte header is what fits a
// 112-byte task: docs/design.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "spindle/task_info.hpp"

namespace spindle::detail {

/// Most distinct spawn sites the table holds.
inline constexpr std::size_t max_spawn_sites = std::size_t{3} << 16;

/// A spawn site as one word: the file name's address in the low 48 bits
/// (user-space addresses fit in 47 bits on x86-64, 48 on AArch64) and the
/// line modulo 65536 in the high 16 (spawn_location::current() saturates
/// it at 65535). 0: unknown.
[[nodiscard]] inline std::uint64_t spawn_site_key(spawn_location where) noexcept {
  static_assert(sizeof(std::uintptr_t) == 8, "the spawn site packs a 48-bit address");
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(where.file)) |
         (static_cast<std::uint64_t>(where.line & 0xffffU) << 48);
}

/// The hash of a site's key; the cache and the table each take their index
/// from its high bits (Fibonacci hashing).
[[nodiscard]] constexpr std::uint64_t spawn_site_hash(std::uint64_t key) noexcept {
  return key * 0x9e3779b97f4a7c15ULL;
}

/// A thread's cache of spawn-site ids (see the file's comment). Constant-
/// initialized and trivially destructible, so a spawn reaches it with one
/// thread-pointer-relative access; an empty slot has key 0 and id 0, which
/// is also the answer for the unknown site.
struct spawn_site_cache {
  static constexpr std::size_t slots = 64;
  std::array<std::uint64_t, slots> keys;
  std::array<std::uint32_t, slots> ids;
};
[[gnu::tls_model("initial-exec")]] extern constinit thread_local spawn_site_cache t_spawn_sites;

/// The table's id for `key` (the cache missed): takes the table's lock,
/// adds the site if it is new and there is room, fills the cache's `slot`.
[[nodiscard]] std::uint32_t spawn_site_id_slow(std::uint64_t key, std::size_t slot) noexcept;

/// The id of `where` (0 when the table is full). A cache hit is a multiply,
/// a shift, a load and a compare.
[[nodiscard]] inline std::uint32_t spawn_site_id(spawn_location where) noexcept {
  std::uint64_t const key = spawn_site_key(where);
  std::size_t const slot = static_cast<std::size_t>(spawn_site_hash(key) >> 58);
  spawn_site_cache& cache = t_spawn_sites;
  if (cache.keys[slot] == key) [[likely]]
    return cache.ids[slot];
  return spawn_site_id_slow(key, slot);
}

/// The spawn_location of id `id` ("" and line 0 for 0 or an id the table
/// never gave out).
[[nodiscard]] spawn_location spawn_site_location(std::uint32_t id) noexcept;

}  // namespace spindle::detail
