// xorshift64* generator for steal-victim selection (seeded: deterministic runs).
// Design source: Volt's PRNG and the scanner executor's seeded victim RNG.
#pragma once

#include <cstdint>

namespace spindle::detail {

class xorshift64 {
 public:
  explicit xorshift64(std::uint64_t seed) noexcept
      : state_(seed != 0 ? seed : 0x9e3779b97f4a7c15ULL) {}
  std::uint64_t next() noexcept {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545f4914f6cdd1dULL;
  }
  /// Uniform-enough value in [0, bound).
  std::uint32_t below(std::uint32_t bound) noexcept {
    return static_cast<std::uint32_t>(((next() >> 32) * bound) >> 32);
  }

 private:
  std::uint64_t state_;
};

}  // namespace spindle::detail
