// io::detail::make_driver: picks the I/O backend of a runtime.
//
// config.io == uring: the io_uring driver, or std::system_error with the
// errno of the failing setup step ("spindle: io_uring unavailable: ...").
// config.io == threadpool: the thread-pool driver.
// config.io == automatic: SPINDLE_IO=uring|threadpool decides as if it were
// config.io (an empty SPINDLE_IO counts as unset, any other value throws
// std::system_error(EINVAL)); without it io_uring is tried and, when it cannot
// be set up (EPERM under seccomp, ENOSYS, ENOMEM, EINVAL, ...), the thread
// pool is used silently: the runtime reports the choice through
// io_backend_in_use().
#include "make_driver.hpp"

#include <cerrno>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "env.hpp"
#include "spindle/runtime.hpp"
#include "threadpool_driver.hpp"
#include "uring_driver.hpp"

namespace spindle::io::detail {

std::unique_ptr<spindle::detail::driver> make_driver(spindle::detail::io_host& host,
                                                     runtime_config const& config) {
  io_backend wanted = config.io;
  if (wanted == io_backend::automatic) {
    if (char const* env = spindle::detail::env_value("SPINDLE_IO")) {
      std::string_view const value{env};
      if (value == "uring") {
        wanted = io_backend::uring;
      } else if (value == "threadpool") {
        wanted = io_backend::threadpool;
      } else {
        throw std::system_error(EINVAL, std::system_category(),
                                "spindle: SPINDLE_IO must be \"uring\" or \"threadpool\", not \"" +
                                    std::string(value) + "\"");
      }
    }
  }
  if (wanted != io_backend::threadpool) {
    try {
      return uring_driver::make(host, config.workers, config.ring_entries);
    } catch (std::system_error const&) {
      if (wanted == io_backend::uring) throw;
      // automatic: fall back to the thread pool
    }
  }
  return std::make_unique<threadpool_driver>(host, config.workers, config.io_pool_threads);
}

}  // namespace spindle::io::detail
