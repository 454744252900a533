// The CPU's spin-wait hint, for loops that wait for another thread a few
// iterations at a time (x86 PAUSE, AArch64 YIELD; nothing elsewhere).
// Thread-safety: none needed. Design source: the architectures' manuals.
#pragma once

namespace spindle::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace spindle::detail
