// libFuzzer target: the worker run queue (runtime/src/run_queue.hpp) with its
// overflow into the global queue, against a std::deque model.
//
// Input: a byte string of operations on two rings A and B (each the other's
// stealer), a thief ring (steals, then is drained at once) and the global
// queue; the first two bytes pick where A's and B's u32 positions start (near
// the wrap-around, or 0). Operations: push a burst of 1..256 new tasks, pop,
// drain, steal_into in one go (A<->B, or into the thief), a steal stopped
// between its claim and its release (steal_begin ... steal_end, as a
// preempted stealer would be) while the owners go on pushing, popping and
// stealing, global push / push_batch / pop / pop_batch. An operation the
// runtime could not perform at that moment (the owner of a ring that is in
// the middle of a steal pushing into it) is skipped.
//
// Checked after every operation: len, is_empty and remaining_slots of every
// ring and the global queue's len equal the model's; every task that comes
// out is the one the model names: the owner pops in FIFO order, a steal takes
// the larger half from the front and returns the last of it (refused when
// the stealer's ring is more than half full or another steal is in progress),
// a push into a full ring moves the 128 oldest tasks and the new one to the
// global queue in that order (only the new one while a steal is in
// progress; the slots the owner pops during a steal only come back at its
// release). At the end everything is drained: every task pushed came out
// exactly once.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "global_queue.hpp"
#include "run_queue.hpp"

namespace spindle::detail {

// The friend run_queue declares for tests: its steal in steps, and a start
// position.
struct run_queue_test_access {
  using claimed_range = run_queue::claimed_range;

  static void start_at(run_queue& q, std::uint32_t pos) {
    q.head_.store(run_queue::pack(pos, pos), std::memory_order_relaxed);
    q.tail_.store(pos, std::memory_order_relaxed);
  }
  static std::uint32_t tail(run_queue const& q) { return q.tail_.load(std::memory_order_relaxed); }
  static bool has_room_to_steal(run_queue const& dst) { return dst.has_room_to_steal(tail(dst)); }
  static claimed_range claim(run_queue& src) { return src.claim(); }
  static void copy_claimed(run_queue const& src, claimed_range c, run_queue& dst,
                           std::uint32_t dst_tail) {
    src.copy_claimed(c, dst, dst_tail);
  }
  static void release(run_queue& src, claimed_range c) { src.release(c); }
  static task_header* publish_stolen(run_queue& dst, std::uint32_t dst_tail, std::uint32_t n) {
    return dst.publish_stolen(dst_tail, n);
  }
};

}  // namespace spindle::detail

namespace {

using spindle::detail::global_queue;
using spindle::detail::run_queue;
using spindle::detail::task_header;
using access = spindle::detail::run_queue_test_access;

[[noreturn]] void fail(const char* what, long long got, long long want) {
  std::fprintf(stderr, "fuzz_run_queue: %s: got %lld, want %lld\n", what, got, want);
  std::abort();
}

void expect_eq(const char* what, long long got, long long want) {
  if (got != want) fail(what, got, want);
}

constexpr std::size_t pool_size = 1024;
constexpr long long none = -1;  // "no task"

struct reader {
  const std::uint8_t* p;
  std::size_t n;
  bool done() const { return n == 0; }
  std::uint8_t next() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

struct ring {
  run_queue q;
  std::deque<std::size_t> model;
};

struct pending_steal {
  int src;
  int dst;
  access::claimed_range claimed;
  std::uint32_t dst_tail;
  std::vector<std::size_t> moved;  // claimed, in order
  // Positions of src from its steal_head to its real_head: the claimed tasks
  // and those its owner popped since. The ring cannot reuse them before the
  // release.
  std::uint32_t held;
};

class harness {
 public:
  harness(std::uint8_t start_a, std::uint8_t start_b) {
    for (std::size_t i = 0; i < pool_size; ++i)
      free_.push_back(i);
    access::start_at(rings_[0].q, start_position(start_a));
    access::start_at(rings_[1].q, start_position(start_b));
    access::start_at(rings_[2].q, start_position(static_cast<std::uint8_t>(start_a ^ start_b)));
  }

  void run(reader& in) {
    while (!in.done()) {
      const std::uint8_t op = in.next();
      const int q = (op >> 4) & 1;  // A or B
      switch (op % 11) {
        case 0:
          push(q, 1 + static_cast<std::size_t>(in.next()));
          break;
        case 1:
          pop(q);
          break;
        case 2:
          drain(q);
          break;
        case 3:
          steal(q, 1 - q);
          break;
        case 4:
          steal(q, 2);
          break;
        case 5:
          steal_begin(q, 1 - q);
          break;
        case 6:
          steal_end();
          break;
        case 7:
          global_push(1);
          break;
        case 8:
          global_push(1 + in.next() % 32);
          break;
        case 9:
          global_pop_batch(1);
          break;
        default:
          global_pop_batch(in.next() % 70);
          break;
      }
      check();
    }
    steal_end();
    check();
    drain(0);
    drain(1);
    global_pop_batch(pool_size);
    check();
    expect_eq("tasks never returned", static_cast<long long>(pool_size - free_.size()), 0);
  }

 private:
  static std::uint32_t start_position(std::uint8_t b) {
    return b == 0 ? 0u : 0u - static_cast<std::uint32_t>(b) * 2u;
  }

  task_header* task(std::size_t id) { return &tasks_[id]; }

  long long id_of(task_header const* t) const {
    if (t == nullptr) return none;
    if (t < tasks_.get() || t >= tasks_.get() + pool_size) fail("foreign task pointer", 0, 0);
    return t - tasks_.get();
  }

  std::optional<std::size_t> take_free() {
    if (free_.empty()) return std::nullopt;
    std::size_t id = free_.front();
    free_.pop_front();
    out_[id] = false;
    return id;
  }

  // A task came out of a queue: it must be one that went in.
  void came_out(std::size_t id) {
    if (out_[id]) fail("task came out twice", static_cast<long long>(id), none);
    out_[id] = true;
    free_.push_back(id);
  }

  // Positions of ring q that a steal in progress holds.
  std::uint32_t held(int q) const { return pending_ && pending_->src == q ? pending_->held : 0; }
  // The owner of ring q is in the middle of a steal into it.
  bool busy(int q) const { return pending_ && pending_->dst == q; }

  void push(int q, std::size_t count) {
    if (busy(q)) return;
    ring& r = rings_[q];
    for (std::size_t k = 0; k < count; ++k) {
      std::optional<std::size_t> id = take_free();
      if (!id) return;
      const std::size_t occupancy = r.model.size() + held(q);
      task(*id)->next = task((*id + 1) % pool_size);  // a stale link the queues must not trust
      const bool overflowed = r.q.push_back(task(*id), global_);
      if (occupancy < run_queue::capacity) {
        expect_eq("push_back overflowed with room", overflowed, false);
        r.model.push_back(*id);
      } else if (held(q) > 0) {
        // A steal is copying out of the ring: only the new task goes global.
        expect_eq("push_back into a full ring while stolen from", overflowed, true);
        global_model_.push_back(*id);
      } else {
        expect_eq("push_back into a full ring", overflowed, true);
        for (std::uint32_t i = 0; i < run_queue::overflow_batch; ++i) {
          global_model_.push_back(r.model.front());
          r.model.pop_front();
        }
        global_model_.push_back(*id);
      }
      check();
    }
  }

  void pop(int q) {
    if (busy(q)) return;
    ring& r = rings_[q];
    const long long got = id_of(r.q.pop());
    const long long want = r.model.empty() ? none : static_cast<long long>(r.model.front());
    expect_eq("pop", got, want);
    if (got != none) {
      r.model.pop_front();
      came_out(static_cast<std::size_t>(got));
      if (pending_ && pending_->src == q) ++pending_->held;
    }
  }

  void drain(int q) {
    if (busy(q)) return;
    do {
      pop(q);
    } while (!rings_[q].model.empty());
    pop(q);  // and then nothing
  }

  // Whether a steal from src into dst is refused, and how many it takes.
  std::uint32_t expected_steal(int src, int dst) const {
    if (rings_[dst].model.size() + held(dst) > run_queue::capacity / 2) return 0;
    if (held(src) > 0) return 0;  // another steal is in progress
    const std::size_t len = rings_[src].model.size();
    return static_cast<std::uint32_t>(len - len / 2);
  }

  // Moves the first n tasks of src's model out, in order.
  std::vector<std::size_t> take_front(int src, std::uint32_t n) {
    std::vector<std::size_t> moved;
    for (std::uint32_t i = 0; i < n; ++i) {
      moved.push_back(rings_[src].model.front());
      rings_[src].model.pop_front();
    }
    return moved;
  }

  // The stolen tasks land in dst: all but the last are published there, the
  // last is returned to run now.
  void land(int dst, std::vector<std::size_t> const& moved, task_header* returned) {
    expect_eq("task returned by a steal", id_of(returned), static_cast<long long>(moved.back()));
    for (std::size_t i = 0; i + 1 < moved.size(); ++i)
      rings_[dst].model.push_back(moved[i]);
    came_out(moved.back());
  }

  void steal(int src, int dst) {
    if (busy(dst)) return;  // dst's owner is busy with another steal
    const std::uint32_t want = expected_steal(src, dst);
    std::uint32_t stolen = 12345;
    task_header* t = rings_[src].q.steal_into(rings_[dst].q, &stolen);
    expect_eq("tasks stolen", stolen, want);
    if (want == 0) {
      expect_eq("task returned by a refused steal", id_of(t), none);
    } else {
      land(dst, take_front(src, want), t);
    }
    if (dst == 2) {  // the thief runs what it stole
      check();
      drain(2);
    }
  }

  void steal_begin(int src, int dst) {
    if (pending_) return;  // one stealer stopped at a time
    ring& d = rings_[dst];
    const std::uint32_t dst_tail = access::tail(d.q);
    const bool room = d.model.size() <= run_queue::capacity / 2;
    expect_eq("room to steal", access::has_room_to_steal(d.q), room);
    if (!room) return;
    const std::uint32_t want = expected_steal(src, dst);
    const access::claimed_range c = access::claim(rings_[src].q);
    expect_eq("tasks claimed", c.n, want);
    if (c.n == 0) return;
    access::copy_claimed(rings_[src].q, c, d.q, dst_tail);
    pending_ = pending_steal{src, dst, c, dst_tail, take_front(src, c.n), c.n};
  }

  void steal_end() {
    if (!pending_) return;
    pending_steal p = std::move(*pending_);
    pending_.reset();
    access::release(rings_[p.src].q, p.claimed);
    expect_eq("stealer's tail moved during its steal", access::tail(rings_[p.dst].q), p.dst_tail);
    land(p.dst, p.moved, access::publish_stolen(rings_[p.dst].q, p.dst_tail, p.claimed.n));
  }

  void global_push(std::size_t count) {
    std::vector<std::size_t> ids;
    while (ids.size() < count) {
      std::optional<std::size_t> id = take_free();
      if (!id) break;
      ids.push_back(*id);
    }
    if (ids.empty()) return;
    for (std::size_t i = 0; i + 1 < ids.size(); ++i)
      task(ids[i])->next = task(ids[i + 1]);
    task(ids.back())->next = task(ids.front());  // stale: push_batch must end the list
    if (ids.size() == 1) {
      global_.push(task(ids[0]));
    } else {
      global_.push_batch(task(ids.front()), task(ids.back()), ids.size());
    }
    for (std::size_t id : ids)
      global_model_.push_back(id);
  }

  void global_pop_batch(std::size_t max) {
    std::vector<task_header*> out(max + 1, task(0));  // task(0): a sentinel that must stay
    std::size_t n = 0;
    if (max == 1) {  // pop()
      out[0] = global_.pop();
      n = out[0] != nullptr ? 1 : 0;
    } else {
      n = global_.pop_batch(out.data(), max);
    }
    const std::size_t want = std::min(max, global_model_.size());
    expect_eq("global pop_batch count", static_cast<long long>(n), static_cast<long long>(want));
    for (std::size_t i = 0; i < n; ++i) {
      expect_eq("global pop order", id_of(out[i]), static_cast<long long>(global_model_.front()));
      expect_eq("popped task keeps a link", id_of(out[i]->next), none);
      global_model_.pop_front();
      came_out(static_cast<std::size_t>(id_of(out[i])));
    }
    if (max != 1) expect_eq("pop_batch wrote past n", id_of(out[n]), 0);
  }

  void check() const {
    for (int q = 0; q < 3; ++q) {
      const ring& r = rings_[q];
      expect_eq("len", r.q.len(), static_cast<long long>(r.model.size()));
      expect_eq("is_empty", r.q.is_empty(), r.model.empty());
      expect_eq("remaining_slots", r.q.remaining_slots(),
                static_cast<long long>(run_queue::capacity - r.model.size() - held(q)));
    }
    expect_eq("global len", static_cast<long long>(global_.len()),
              static_cast<long long>(global_model_.size()));
    expect_eq("global is_empty", global_.is_empty(), global_model_.empty());
  }

  std::unique_ptr<task_header[]> tasks_ = std::make_unique<task_header[]>(pool_size);
  std::vector<bool> out_ = std::vector<bool>(pool_size, true);
  std::deque<std::size_t> free_;
  ring rings_[3];  // A, B, thief
  global_queue global_;
  std::deque<std::size_t> global_model_;
  std::optional<pending_steal> pending_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in{data, size};
  const std::uint8_t start_a = in.next();
  const std::uint8_t start_b = in.next();
  auto h = std::make_unique<harness>(start_a, start_b);
  h->run(in);
  return 0;
}
