// spindle::runtime: the public face of the scheduler (runtime/), with the
// I/O driver of io/. It lives above both: the runtime knows no I/O driver,
// io/ knows the runtime's driver interface, and this file joins them.
#include "spindle/runtime.hpp"

#include "make_driver.hpp"
#include "scheduler.hpp"

namespace spindle {

runtime::runtime(runtime_config config)
    : sched_(std::make_unique<detail::scheduler>(config, &io::detail::make_driver)) {}

runtime::~runtime() = default;

runtime_stats runtime::stats() const {
  return sched_->stats();
}

runtime_dump runtime::dump(std::chrono::milliseconds timeout) const {
  return sched_->dump(timeout);
}

std::size_t runtime::worker_count() const noexcept {
  return sched_->worker_count();
}

runtime_config const& runtime::config() const noexcept {
  return sched_->config();
}

spindle::io_backend runtime::io_backend_in_use() const noexcept {
  return sched_->backend();
}

}  // namespace spindle
