// The driver factory spindle::runtime hands its scheduler: io_uring, or the
// thread pool when io_uring cannot be set up (see make_driver.cpp).
// Design source: Tokio's driver builder (enable_io), which picks the driver
// stack a runtime parks in.
#pragma once

#include <memory>

#include "driver.hpp"

namespace spindle {
struct runtime_config;
}  // namespace spindle

namespace spindle::io::detail {

/// A spindle::detail::driver_factory. `config` is resolved (workers known).
/// Throws std::system_error when config.io (or SPINDLE_IO) demands io_uring
/// and it cannot be set up, or EINVAL for a bad SPINDLE_IO.
[[nodiscard]] std::unique_ptr<spindle::detail::driver> make_driver(spindle::detail::io_host& host,
                                                                   runtime_config const& config);

}  // namespace spindle::io::detail
