// The runtime side of spindle::fold (spindle/fold.hpp): the helper task that
// a runtime fold spawns on the workers, and the worker count it sizes its
// participants by.
//
// A helper is one coroutine frame per recruitment (from the runtime's frame
// pools), never per node. It leaves the fold when its share is done; its
// fold_ticket is a coroutine parameter, so a frame dropped unrun (a spawn
// refused at shutdown) leaves through the ticket's destructor. Leaving is
// the helper's last touch of the fold (the latch of runtime folds).
// Thread-safety: any runtime thread. Design source: hylic's fold pool.
#include "spindle/fold.hpp"

#include "scheduler.hpp"

namespace spindle::detail {

namespace {
task<void> fold_helper(fold_ticket ticket) {
  ticket.run_and_leave();
  co_return;
}

task<void> nothing() {
  co_return;
}
}  // namespace

void spawn_fold_helper(fold_ticket ticket) {
  auto handle = spindle::spawn(fold_helper(std::move(ticket)));
  (void)handle;  // detached
  // A spawn on a worker lands in its LIFO slot, which siblings cannot
  // steal, and the helper that recruits keeps this worker busy until it
  // runs out of work: with 2 workers the recruit waited there for the whole
  // fold (no parallelism at all). An empty task spawned after it takes the
  // slot and pushes the recruit into the worker's stealable ring, which
  // wakes a parked sibling. From a thread that is not a worker the recruit
  // went to the global queue already.
  if (current_worker_index() != not_a_worker) {
    auto filler = spindle::spawn(nothing());
    (void)filler;
  }
}

std::size_t current_runtime_workers() noexcept {
  scheduler* sched = current_scheduler();
  return sched == nullptr ? 0 : sched->worker_count();
}

}  // namespace spindle::detail
