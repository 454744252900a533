// Shared by the tests that drive scheduler_core directly (test_core,
// test_inbox, test_spawn_batch): a core_platform that records which workers
// the core asked to unpark, and does nothing else.
#pragma once

#include <cstddef>
#include <vector>

#include "core.hpp"

namespace spindle_test {

/// The core's platform in a test: unpark requests are recorded in order
/// (`unparked`), nothing is woken; a remote push nobody noticed is ignored.
class recording_platform final : public spindle::detail::core_platform {
 public:
  void unpark_worker(std::size_t index) noexcept override { unparked.push_back(index); }
  void remote_push_unnoticed() noexcept override {}
  std::vector<std::size_t> unparked;
};

}  // namespace spindle_test
