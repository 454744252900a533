// A worker's inbox: where spawns and wakes from threads that are not workers
// go under placement::p2c (runtime_config::placement).
//
// Shape: an intrusive multi-producer queue of task headers linked through
// task_header::next (Vyukov's node-based MPSC queue: a producer exchanges
// the tail, then links the previous tail to its first node; the consumer
// walks from a stub node the inbox owns), a count of pushed tasks that
// producers raise after linking and one of taken tasks that the consumer
// raises (each on its own side's cache line), and a consumer
// flag: whoever holds it (the owning worker, a stealer, a block_on thread
// helping) is the single consumer for that moment. A batch of tasks, already
// linked first..last, is pushed with one exchange; so is a task_chain, whose
// nodes are chunks that hold up to 129 tasks' pointers each (a run queue's
// overflow), which consumers take from in order across takes.
//
// A producer preempted between its exchange and its link hides the nodes
// behind it until it links (Vyukov's window): take() then returns fewer
// tasks than len() says, and the rest are found on a later look. The pushed
// count is raised only after the link, so a reader that sees a task counted
// can also reach it once the producers before it have linked.
//
// Thread-safety: push from any thread; take under the consumer flag, which
// try_take acquires (any thread; false when another consumer holds it), or
// under a lock of the owner's that serializes every consumer (global_queue);
// len/is_empty/may_hold_tasks from any thread (a relaxed estimate while
// racing).
// Design source: Veloq's per-worker mesh inbox (seed 003), Dmitry Vyukov's
// intrusive MPSC node-based queue.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include "spindle/detail/task_header.hpp"

namespace spindle::detail {

/// A node that carries up to task_chunk::capacity tasks as an array of
/// pointers (built by task_chain: a run queue's overflow of 128 + 1 fills
/// one). Its `node` is what the list links. Its node.waits_on holds
/// chunk_mark, a value outside wait_kind's enumerators, which no task's ever
/// holds: waits_on is atomic, so a consumer may read it relaxed while a
/// task's poller writes the task's other fields (an entry can be stale: a
/// joiner that claimed a queued task runs it inline while the entry waits
/// for a consumer to release it). A consumer that took the
/// node takes its tasks from the array, front to back, across takes, and
/// frees the chunk with the last one.
struct task_chunk {
  static constexpr std::uint32_t capacity = 129;
  task_header node;
  std::uint32_t count = 0;
  std::uint32_t taken = 0;  // written by the consumer holding the node
  task_header* tasks[capacity];
};
inline constexpr auto chunk_mark = static_cast<wait_kind>(0xff);
static_assert(static_cast<std::uint8_t>(wait_kind::fiber) < 0xff,
              "chunk_mark must be no enumerator of wait_kind");

/// Builds a run of tasks, in order, that one exchange appends (inbox::push,
/// global_queue::push_chain): the tasks go into task_chunks, linked one
/// after the other, so that a consumer reads their pointers from the
/// chunks' lines instead of following a link into each task's header (a
/// transfer from the pusher's cache per task, one after the other:
/// fetch_global's cost in spawn_many_local). A task for which no chunk can
/// be allocated is linked itself, as before chunks.
///
/// A chunk costs 8 bytes per task while the task is queued, which a long
/// backlog pays in peak memory: 1,000,000 suspended spawns on one worker
/// (bench_runtime memory_per_task/1) took 120.5 bytes a task in chunks
/// against 112.2 linked, and with 2 workers 112.2-117.9 depending on how
/// far the other worker fell behind. So only the first `chunked` tasks of
/// a chain go into chunks and the rest are linked; the pushers pass
/// chunk_room(the target queue's length), so a queue's tasks go into
/// chunks only while it holds fewer than chunk_backlog (16,384: at most
/// 128 KiB of pointers), above the 10,000 tasks of spawn_many_local. One
/// thread; the run must be pushed (an empty one needs not be).
class task_chain {
 public:
  /// The queue length (tasks waiting) from which pushers link instead of
  /// putting tasks into chunks.
  static constexpr std::size_t chunk_backlog = 16384;
  /// How many more tasks may go into chunks when `queued` wait already.
  [[nodiscard]] static std::size_t chunk_room(std::size_t queued) noexcept {
    return queued < chunk_backlog ? chunk_backlog - queued : 0;
  }

  explicit task_chain(std::size_t chunked = chunk_backlog) noexcept : chunked_(chunked) {}

  void append(task_header* task) noexcept {
    // A task taken from a queue has no link (inbox::take); one that has a
    // stale link gets it cleared here, where the load overlaps the others.
    if (task->next != nullptr) task->next = nullptr;
    ++count_;
    if (count_ > chunked_) {
      chunk_ = nullptr;  // no later task goes into an earlier chunk
      link(task);
      return;
    }
    if (chunk_ == nullptr || chunk_->count == task_chunk::capacity) {
      chunk_ = new (std::nothrow) task_chunk;
      if (chunk_ == nullptr) {
        link(task);
        return;
      }
      chunk_->node.waits_on.store(chunk_mark, std::memory_order_relaxed);
      link(&chunk_->node);
    }
    chunk_->tasks[chunk_->count++] = task;
  }
  [[nodiscard]] task_header* first() const noexcept { return first_; }
  [[nodiscard]] task_header* last() const noexcept { return last_; }
  /// Tasks appended (not nodes).
  [[nodiscard]] std::size_t count() const noexcept { return count_; }

 private:
  void link(task_header* node) noexcept {
    if (last_ != nullptr) {
      last_->next = node;
    } else {
      first_ = node;
    }
    last_ = node;
  }
  task_header* first_ = nullptr;
  task_header* last_ = nullptr;
  task_chunk* chunk_ = nullptr;
  std::size_t count_ = 0;
  std::size_t chunked_;
};

class inbox {
 public:
  inbox() noexcept : tail_(&stub_), head_(&stub_) {}
  /// Frees the chunks still queued (their tasks are the owner's to drain
  /// before: runtime shutdown empties every queue first).
  ~inbox() {
    delete partial_.load(std::memory_order_relaxed);
    for (task_header* t = head_.load(std::memory_order_relaxed); t != nullptr;) {
      task_header* next = link_of(t).load(std::memory_order_relaxed);
      if (t != &stub_ && is_chunk(t)) delete chunk_of(t);
      t = next;
    }
  }
  inbox(inbox const&) = delete;
  inbox& operator=(inbox const&) = delete;

  /// Appends the list first..last (linked through next) of `count` tasks
  /// with one exchange. Any thread. The count is raised with a seq_cst RMW,
  /// which orders the push before the caller's look at the idle state.
  void push(task_header* first, task_header* last, std::size_t count) noexcept {
    link_of(last).store(nullptr, std::memory_order_relaxed);
    task_header* prev = tail_.exchange(last, std::memory_order_acq_rel);
    link_of(prev).store(first, std::memory_order_release);
    pushed_.fetch_add(count, std::memory_order_seq_cst);
  }
  void push(task_header* task) noexcept { push(task, task, 1); }

  /// Appends a task_chain's run with one exchange (nothing when it is
  /// empty). Any thread.
  void push(task_chain const& chain) noexcept {
    if (chain.count() != 0) push(chain.first(), chain.last(), chain.count());
  }

  /// Acquires the consumer flag: true when the caller may take().
  [[nodiscard]] bool try_lock_consumer() noexcept {
    return !consuming_.load(std::memory_order_relaxed) &&
           !consuming_.exchange(true, std::memory_order_acquire);
  }
  void unlock_consumer() noexcept { consuming_.store(false, std::memory_order_release); }

  /// Consumer (holding the flag): removes up to `max` tasks from the front in
  /// FIFO order into out[0..n), their links cleared, and returns n (fewer
  /// than len() says while a producer is between its exchange and its
  /// link). With `leave_last`, the newest linked task stays when others
  /// were taken (it is taken when it is the only one): taking the last
  /// task puts the stub back, an exchange on the producers' tail, and an
  /// owner that keeps up with a stream of pushes took that line away from
  /// the producers at almost every push.
  std::size_t take(task_header** out, std::size_t max, bool leave_last = false) noexcept {
    std::size_t n = 0;
    while (n < max) {
      if (task_chunk* chunk = partial_.load(std::memory_order_relaxed)) {
        n += take_from(chunk, out + n, max - n);
        continue;
      }
      task_header* task = pop_one(!leave_last || n == 0);
      if (task == nullptr) break;
      if (is_chunk(task)) {
        partial_.store(chunk_of(task), std::memory_order_relaxed);
        continue;
      }
      // No stale link: the task is the caller's now (a producer linked it
      // before pop_one could return it, and nobody writes it again).
      link_of(task).store(nullptr, std::memory_order_relaxed);
      out[n++] = task;
    }
    if (n != 0) taken_.store(taken_.load(std::memory_order_relaxed) + n, std::memory_order_release);
    return n;
  }

  /// take() under the flag, or 0 when another consumer holds it.
  std::size_t try_take(task_header** out, std::size_t max, bool leave_last = false) noexcept {
    if (!try_lock_consumer()) return 0;
    std::size_t n = take(out, max, leave_last);
    unlock_consumer();
    return n;
  }

  /// Consumer (holding the flag, or global_queue's lock): calls fn(task) on
  /// every task take() could reach now, front to back.
  template <class Fn>
  void for_each(Fn&& fn) const {
    auto each_of = [&fn](task_chunk const* chunk) {
      for (std::uint32_t i = chunk->taken; i < chunk->count; ++i)
        fn(chunk->tasks[i]);
    };
    if (task_chunk const* chunk = partial_.load(std::memory_order_relaxed)) each_of(chunk);
    for (task_header* t = head_.load(std::memory_order_relaxed); t != nullptr;
         t = link_of(t).load(std::memory_order_acquire)) {
      if (t == &stub_) continue;
      if (is_chunk(t)) {
        each_of(chunk_of(t));
      } else {
        fn(t);
      }
    }
  }

  /// The owner's look before a take: false when the consumer's end shows
  /// nothing to take (the head is the stub, with nothing linked behind it).
  /// Reads the consumer's line and the stub's, not the producers' count:
  /// an owner that looks at its inbox at every tick (a loop of yields) does
  /// not take the producers' line away from them, nor pay the consumer
  /// flag's RMW. A relaxed estimate while racing, as len().
  [[nodiscard]] bool may_hold_tasks() const noexcept {
    task_header const* head = head_.load(std::memory_order_relaxed);
    return partial_.load(std::memory_order_relaxed) != nullptr || head != &stub_ ||
           std::atomic_ref<task_header*>(const_cast<task_header&>(stub_).next)
                   .load(std::memory_order_relaxed) != nullptr;
  }

  /// Tasks pushed and not yet taken (an estimate while racing; never
  /// negative).
  [[nodiscard]] std::size_t len() const noexcept {
    return difference(pushed_.load(std::memory_order_relaxed),
                      taken_.load(std::memory_order_relaxed));
  }
  /// len() == 0, read with seq_cst loads (the parking side of the wake-up
  /// check, against push's seq_cst RMW).
  [[nodiscard]] bool is_empty() const noexcept {
    return difference(pushed_.load(std::memory_order_seq_cst),
                      taken_.load(std::memory_order_seq_cst)) == 0;
  }

 private:
  // pushed - taken, or 0 when a consumer took tasks whose producers have
  // not counted them yet (the count follows the link).
  static std::size_t difference(std::uint64_t pushed, std::uint64_t taken) noexcept {
    return pushed > taken ? static_cast<std::size_t>(pushed - taken) : 0;
  }

  static bool is_chunk(task_header const* t) noexcept {
    return t->waits_on.load(std::memory_order_relaxed) == chunk_mark;
  }
  static task_chunk* chunk_of(task_header* t) noexcept {
    return reinterpret_cast<task_chunk*>(t);  // node is the first member
  }
  static task_chunk const* chunk_of(task_header const* t) noexcept {
    return chunk_of(const_cast<task_header*>(t));
  }
  // Consumer: up to `max` of the chunk's tasks into out; frees the chunk
  // with its last task.
  std::size_t take_from(task_chunk* chunk, task_header** out, std::size_t max) noexcept {
    std::size_t const n = std::min<std::size_t>(max, chunk->count - chunk->taken);
    std::copy_n(chunk->tasks + chunk->taken, n, out);
    chunk->taken += static_cast<std::uint32_t>(n);
    if (chunk->taken == chunk->count) {
      partial_.store(nullptr, std::memory_order_relaxed);
      delete chunk;
    }
    return n;
  }

  static std::atomic_ref<task_header*> link_of(task_header* t) noexcept {
    return std::atomic_ref<task_header*>(t->next);
  }

  // Vyukov's pop: head_ is the oldest node (the stub when the consumer has
  // taken everything it could reach).
  task_header* pop_one(bool take_last) noexcept {
    task_header* head = head_.load(std::memory_order_relaxed);
    task_header* next = link_of(head).load(std::memory_order_acquire);
    if (head == &stub_) {
      if (next == nullptr) return nullptr;
      head_.store(next, std::memory_order_relaxed);
      head = next;
      next = link_of(next).load(std::memory_order_acquire);
    }
    if (next != nullptr) {
      head_.store(next, std::memory_order_relaxed);
      return head;
    }
    // `head` is the last linked node: unless a producer is linking behind
    // it, put the stub behind it so that it can be taken.
    if (!take_last) return nullptr;
    if (head != tail_.load(std::memory_order_acquire)) return nullptr;
    link_of(&stub_).store(nullptr, std::memory_order_relaxed);
    task_header* prev = tail_.exchange(&stub_, std::memory_order_acq_rel);
    link_of(prev).store(&stub_, std::memory_order_release);
    next = link_of(head).load(std::memory_order_acquire);
    if (next != nullptr) {
      head_.store(next, std::memory_order_relaxed);
      return head;
    }
    return nullptr;
  }

  // Producers' end and their count: one line. The consumer's end, its flag
  // and its count: another. The stub, which a producer links to when the
  // inbox was empty, a third (it would take the consumer's line away).
  // len() = pushed_ - taken_.
  alignas(64) std::atomic<task_header*> tail_;
  std::atomic<std::uint64_t> pushed_{0};
  alignas(64) std::atomic<bool> consuming_{false};
  // Written under consuming_; atomic so that may_hold_tasks() may read it
  // without the flag.
  std::atomic<task_header*> head_;
  std::atomic<std::uint64_t> taken_{0};  // written under consuming_
  // A chunk the consumer took and has not emptied yet (written under
  // consuming_; atomic so that may_hold_tasks() may read it).
  std::atomic<task_chunk*> partial_{nullptr};
  alignas(64) task_header stub_;
};

}  // namespace spindle::detail
