// libFuzzer target: the global queue (runtime/src/global_queue.hpp) against a
// std::deque model.
//
// Input: a byte string of operations: push one task, push_batch of 1..64
// tasks linked by the caller (the last one's link left stale: push_batch must
// end the list), push_chain of 1..280 tasks in chunks (task_chain: up to 129
// per chunk, so a long one is several chunks; each task's link left stale:
// the chain clears it; every third one with a chunk budget of a third of its
// tasks, the rest linked after them), pop, pop_batch with max 0..95 into an array with a sentinel
// behind the last slot it may write. Tasks come from a pool of 256 and go
// back to it when they come out, so the same headers pass through the queue
// again and again; a push with the pool empty does nothing.
//
// Checked after every operation: len and is_empty equal the model's; every
// task that comes out is the model's front (FIFO across single pushes and
// batches), has its link cleared, and was in the queue (none lost, none
// twice); pop_batch returns min(max, len) and writes nothing past its count.
// At the end the queue is drained and every task came back.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <vector>

#include "global_queue.hpp"

namespace {

using spindle::detail::global_queue;
using spindle::detail::task_header;

[[noreturn]] void fail(char const* what, long long got, long long want) {
  std::fprintf(stderr, "fuzz_global_queue: %s: got %lld, want %lld\n", what, got, want);
  std::abort();
}

void expect_eq(char const* what, long long got, long long want) {
  if (got != want) fail(what, got, want);
}

constexpr std::size_t pool_size = 256;
constexpr long long none = -1;

class harness {
 public:
  harness() {
    for (std::size_t i = 0; i < pool_size; ++i)
      free_.push_back(i);
  }

  void run(std::uint8_t const* data, std::size_t size) {
    for (std::size_t i = 0; i < size; ++i) {
      const std::uint8_t op = data[i];
      switch (op & 3) {
        case 0:
          if ((op & 4) != 0) {
            push_chain(1 + static_cast<std::size_t>(op >> 3) * 9u);  // 1..280
          } else {
            push(1, true);
          }
          break;
        case 1:
          push(1 + (op >> 2), false);  // 1..64
          break;
        case 2:
          pop();
          break;
        default:
          pop_batch((op >> 2) + (op >> 6) * 16);  // 0..63, up to 111 for large bytes
          break;
      }
      check();
    }
    pop_batch(model_.size() + 1);
    check();
    expect_eq("tasks never returned", static_cast<long long>(pool_size - free_.size()), 0);
  }

 private:
  task_header* task(std::size_t id) { return &tasks_[id]; }

  long long id_of(task_header const* t) const {
    if (t == nullptr) return none;
    if (t < tasks_.get() || t >= tasks_.get() + pool_size) fail("foreign task pointer", 0, 0);
    return t - tasks_.get();
  }

  void came_out(long long id) {
    if (id == none || !queued_[id]) fail("task came out that was not queued", id, none);
    queued_[id] = false;
    free_.push_back(static_cast<std::size_t>(id));
  }

  void push(std::size_t count, bool single) {
    std::vector<std::size_t> ids;
    while (ids.size() < count && !free_.empty()) {
      ids.push_back(free_.front());
      free_.pop_front();
    }
    if (ids.empty()) return;
    for (std::size_t id : ids) {
      queued_[id] = true;
      model_.push_back(id);
    }
    for (std::size_t k = 0; k + 1 < ids.size(); ++k)
      task(ids[k])->next = task(ids[k + 1]);
    task(ids.back())->next = task(ids.front());  // stale
    if (single && ids.size() == 1) {
      queue_.push(task(ids[0]));
    } else {
      queue_.push_batch(task(ids.front()), task(ids.back()), ids.size());
    }
  }

  void push_chain(std::size_t count) {
    ++chains_;
    spindle::detail::task_chain chain(
        chains_ % 3 == 0 ? count / 3 : spindle::detail::task_chain::chunk_backlog);
    while (chain.count() < count && !free_.empty()) {
      std::size_t const id = free_.front();
      free_.pop_front();
      queued_[id] = true;
      model_.push_back(id);
      task(id)->next = task(pool_size - 1 - id);  // stale
      chain.append(task(id));
    }
    queue_.push_chain(chain);
  }

  void pop() {
    long long const got = id_of(queue_.pop());
    long long const want = model_.empty() ? none : static_cast<long long>(model_.front());
    expect_eq("pop", got, want);
    if (got == none) return;
    expect_eq("popped task keeps a link", id_of(task(got)->next), none);
    model_.pop_front();
    came_out(got);
  }

  void pop_batch(std::size_t max) {
    task_header* const sentinel = task(pool_size - 1);
    std::vector<task_header*> out(max + 1, sentinel);
    const std::size_t n = queue_.pop_batch(out.data(), max);
    expect_eq("pop_batch count", static_cast<long long>(n),
              static_cast<long long>(std::min(max, model_.size())));
    for (std::size_t k = 0; k < n; ++k) {
      long long const got = id_of(out[k]);
      expect_eq("pop_batch order", got, static_cast<long long>(model_.front()));
      expect_eq("popped task keeps a link", id_of(out[k]->next), none);
      model_.pop_front();
      came_out(got);
    }
    for (std::size_t k = n; k <= max; ++k)
      expect_eq("pop_batch wrote past its count", id_of(out[k]), id_of(sentinel));
  }

  void check() const {
    expect_eq("len", static_cast<long long>(queue_.len()), static_cast<long long>(model_.size()));
    expect_eq("is_empty", queue_.is_empty(), model_.empty());
  }

  std::unique_ptr<task_header[]> tasks_ = std::make_unique<task_header[]>(pool_size);
  std::vector<bool> queued_ = std::vector<bool>(pool_size, false);
  std::deque<std::size_t> free_;
  global_queue queue_;
  std::deque<std::size_t> model_;
  std::size_t chains_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  auto h = std::make_unique<harness>();
  h->run(data, size);
  return 0;
}
