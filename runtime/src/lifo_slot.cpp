// The two process-wide halves of the LIFO slot's asymmetric barrier
// (lifo_slot.hpp): registering for expedited private membarriers, and the
// barrier a rescuer issues.
//
// SPINDLE_LIFO_MEMBARRIER=0 leaves membarrier unused (the owners then fence
// every take), to compare the two or to test the fallback.
// Thread-safety: both functions from any thread.
// Design source: membarrier(2), MEMBARRIER_CMD_PRIVATE_EXPEDITED.
#include "lifo_slot.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "env.hpp"

namespace spindle::detail {

namespace {

long membarrier(int cmd) noexcept {
  return syscall(__NR_membarrier, cmd, 0U, 0);
}

bool register_membarrier() noexcept {
  if (!env_switch_on("SPINDLE_LIFO_MEMBARRIER")) return false;
  long const supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

}  // namespace

bool lifo_membarrier_available() noexcept {
  static bool const available = register_membarrier();
  return available;
}

void lifo_rescuer_barrier() noexcept {
  // Also a fence of our own: it orders this thread's accesses in the C++
  // model (and for ThreadSanitizer) in both modes.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (lifo_membarrier_available()) {
    // Registered, so it cannot fail with EPERM; nothing else is possible
    // for this command.
    static_cast<void>(membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED));
  }
}

}  // namespace spindle::detail
