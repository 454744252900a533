// The walk of a tree fold (spindle/fold.hpp): per-fold state shared by the
// participants (fold_pool threads and its caller, or runtime helper tasks),
// each with a work deque, an arena and free lists.
//
// Continuation passing: a node whose children are pending becomes a `chain`
// (its heap, a pending counter, the results that arrived from other
// participants, its parent chain); each pending child is a `node_task` (the
// child and its parent chain) in the deque of the participant that emitted
// it. A leaf is init-ed and finalized on the spot and its result handed to
// its parent chain; the one that brings a chain's counter to zero finalizes
// it and hands the result further up, so no participant ever waits for a
// child. Chains, tasks and result cells come from per-participant free lists
// carved from 64 KiB arena chunks: once warm, a node costs no allocation and
// no coroutine frame. Everything is freed when the fold's state is
// destroyed (one fold, one state).
//
// Private chains (the common case, nothing stolen): a chain's owner (the
// participant that created it) counts the results it hands in itself, in a
// plain field, and accumulates them straight into the heap. Each child
// delivers exactly once, so when the owner has handed in all of them, no
// other participant can still deliver: the owner finishes the chain with no
// atomic operation at all (libfork's join has the same fast path: no
// atomic unless the parent was stolen). A result can only come from another
// participant if something of the chain's subtree was stolen from the
// owner's deque, which the owner notices (fold_deque::stolen()) at its next
// pop, or when its deque runs dry: it then settles all its private chains,
// each subtracting from its counter (which started at a large bias) the
// bias less the results still due. From then on the chain counts
// atomically: results from other participants are pushed as cells on its
// lock-free list and subtract 1; the owner's are accumulated into the heap
// and counted in a per-participant credit, subtracted in one atomic when
// the owner moves to another chain or runs dry. Whoever brings the counter
// to zero accumulates the cells and finalizes. The heap is only ever
// touched by one thread at a time: the owner until it settled and flushed
// its credit, the finisher after the counter reached zero (acq_rel).
// Before, every chain paid two locked operations (count settled at the end
// of the walk, credit flushed on every chain switch), 83% of deliver's perf
// samples on an AMD EPYC VM: bench_runtime fib_fold/1/30 42.9 -> 26.6 ms,
// fib_fold/2/30 21.7 -> 13.4 ms (medians of 3, alternating builds).
//
// Errors: the first exception thrown by init, accumulate, finalize or
// children (or std::bad_alloc) is kept and stops the fold: nodes popped
// afterwards are not started, chains are destroyed unfinalized, every object
// created is destroyed once, and the root receives nothing; the caller
// rethrows it.
//
// Thread-safety: internal to spindle/fold.hpp.
// Design source: hylic's fold pool (its funnel executor: CPS walk, arenas,
// per-worker deques); split-deque stealing (fold_deque.hpp, after Lace).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "spindle/detail/cpu_relax.hpp"
#include "spindle/detail/fold_deque.hpp"

namespace spindle {

/// How a fold shares out its work. Presets (hylic's funnel presets):
/// fold_policy::standard(), wide_light(), deep_narrow(). The figures that
/// chose them (bench/bench_fold, 2 threads, ms per fold, medians of 3, on a
/// 2-core VM shared with other builds: differences under ~20% are noise):
///
///   tree (bench_fold)        preset:  standard  wide_light  deep_narrow
///   wide_light, runtime::fold          23.3       19.2        20.1
///   wide_light, fold_pool              30.2       37.9        52.5
///   deep_narrow, runtime::fold        266        316         201
///   deep_narrow, fold_pool            319        363         227
///   heavy, runtime::fold              264        205         201
///   heavy, fold_pool                  199        305         214
///
/// deep_narrow (recruit a thief for every pending node, give the CPU away
/// sooner) wins clearly on the binary tree; wide_light (fewer recruitments,
/// longer spinning) helps runtime folds of wide trees but not the pool,
/// whose threads are all there anyway; standard sits between.
/// The runtime::fold rows were measured while a recruited helper task still
/// waited in the recruiting worker's LIFO slot, which no sibling can steal
/// (runtime/src/fold.cpp now pushes it into the stealable ring): with 2
/// workers those folds ran on one worker. They are to be measured again;
/// a 10^4-node tree of ~20 us nodes now takes half the time on 2 workers.
struct fold_policy {
  /// Pause-loop rounds a participant that found no work spins before it
  /// starts giving its CPU away (sched_yield) between looks.
  std::uint32_t idle_spins = 64;
  /// Rounds without work after which a runtime helper task ends (its worker
  /// then runs other tasks); fold_pool threads stay until the root is done.
  std::uint32_t helper_idle_rounds = 32;
  /// Runtime folds: a participant asks for one more helper task (up to the
  /// worker count) when its deque holds at least this many nodes.
  std::uint32_t helper_threshold = 2;

  /// The default: balanced trees of moderate fan-out and node cost.
  [[nodiscard]] static constexpr fold_policy standard() noexcept { return {}; }
  /// Wide trees of light nodes: stay spinning longer (work reappears in
  /// microseconds), recruit helpers only for a real backlog.
  [[nodiscard]] static constexpr fold_policy wide_light() noexcept { return {256, 64, 8}; }
  /// Deep, narrow trees (binary, long chains): every extra node is worth
  /// a thief at once; idle participants give the CPU away sooner.
  [[nodiscard]] static constexpr fold_policy deep_narrow() noexcept { return {16, 16, 1}; }
};

namespace detail {

/// A bump allocator of 64 KiB chunks, freed all at once.
class fold_arena {
 public:
  void* allocate(std::size_t size, std::size_t align) {
    std::size_t at = (used_ + align - 1) & ~(align - 1);
    if (chunks_.empty() || at + size > chunk_bytes) {
      chunks_.push_back(std::make_unique<std::byte[]>(size > chunk_bytes ? size : chunk_bytes));
      at = 0;
    }
    used_ = at + size;
    return chunks_.back().get() + at;
  }

 private:
  static constexpr std::size_t chunk_bytes = 64 * 1024;
  std::vector<std::unique_ptr<std::byte[]>> chunks_;
  std::size_t used_ = 0;
};

/// Recycled storage for objects of type T (construction is the user's).
template <class T>
class fold_free_list {
 public:
  [[nodiscard]] void* get(fold_arena& arena) {
    if (head_ != nullptr) {
      slot* s = head_;
      head_ = s->next;
      return s;
    }
    return arena.allocate(sizeof(slot), alignof(slot));
  }
  void put(T* p) noexcept {
    auto* s = reinterpret_cast<slot*>(p);
    s->next = head_;
    head_ = s;
  }

 private:
  union slot {
    slot* next;
    alignas(T) std::byte storage[sizeof(T)];
  };
  slot* head_ = nullptr;
};

template <class F, class N>
using fold_heap_t =
    std::remove_cvref_t<decltype(std::declval<F const&>().init(std::declval<N const&>()))>;
template <class F, class N>
using fold_value_t = std::remove_cvref_t<decltype(std::declval<F const&>().finalize(
    std::declval<fold_heap_t<F, N>&&>()))>;

template <class G, class F, class N>
class fold_state {
 public:
  using H = fold_heap_t<F, N>;
  using R = fold_value_t<F, N>;

  struct cell;
  struct chain {
    H heap;
    std::atomic<std::int64_t> pending;
    std::atomic<cell*> results{nullptr};
    chain* parent;
    std::size_t owner;
    // The owner's alone (see "Private chains" above):
    std::int64_t due = 0;        // while private: results not yet handed in
    bool settled = false;        // pending now counts what is still due
    chain* open_prev = nullptr;  // the owner's list of private chains
    chain* open_next = nullptr;
  };
  struct cell {
    R value;
    cell* next;
  };
  struct node_task {
    N node;
    chain* parent;
  };

  struct alignas(64) participant {
    fold_deque<node_task> deque;
    fold_arena arena;
    fold_free_list<node_task> tasks;
    fold_free_list<chain> chains;
    fold_free_list<cell> cells;
    chain* credit_chain = nullptr;
    std::int64_t credit = 0;
    chain* open = nullptr;         // private chains, newest first
    std::int64_t steals_seen = 0;  // deque.stolen() when they were last settled
    std::uint64_t rng = 0;
    std::size_t index = 0;
    std::atomic<bool> claimed{false};  // runtime folds: a helper task holds it
  };

  /// Called (runtime folds) when a participant's deque holds at least
  /// policy.helper_threshold nodes.
  using backlog_fn = void (*)(void* arg);

  fold_state(G const& graph, F const& fold, fold_policy policy, std::size_t participants)
      : graph_(graph),
        fold_(fold),
        policy_(policy),
        count_(participants == 0 ? 1 : participants),
        parts_(std::make_unique<participant[]>(count_)) {
    for (std::size_t i = 0; i < count_; ++i) {
      parts_[i].index = i;
      parts_[i].rng = 0x9e3779b97f4a7c15ULL * (i + 1);
    }
  }
  fold_state(fold_state const&) = delete;
  fold_state& operator=(fold_state const&) = delete;

  void set_backlog_hook(backlog_fn fn, void* arg) noexcept {
    backlog_fn_ = fn;
    backlog_arg_ = arg;
  }

  [[nodiscard]] std::size_t participant_count() const noexcept { return count_; }
  [[nodiscard]] participant& part(std::size_t i) noexcept { return parts_[i]; }
  [[nodiscard]] bool root_done() const noexcept {
    return root_done_.load(std::memory_order_acquire);
  }

  /// Walks the root on participant `p` (its subtree's nodes land in p's deque).
  void start(participant& p, N const& root) noexcept { walk(p, root, nullptr); }

  /// Runs nodes until the root is done (helper == false) or until no work
  /// was found for policy.helper_idle_rounds rounds (helper == true). Leaves
  /// no credit behind and, for a helper, an empty deque.
  void participate(participant& p, bool helper) noexcept {
    std::uint32_t idle = 0;
    while (!root_done_.load(std::memory_order_acquire)) {
      node_task* t = p.deque.pop();
      if (t == nullptr) {
        settle_open(p);
        flush_and_complete(p);
        t = steal(p);
      } else if (p.open != nullptr && p.deque.stolen() != p.steals_seen) {
        settle_open(p);
      }
      if (t != nullptr) {
        execute(p, t);
        idle = 0;
        continue;
      }
      ++idle;
      if (helper && idle > policy_.helper_idle_rounds) return;
      if (idle <= policy_.idle_spins) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
    }
  }

  /// After root_done(): the result, or the fold's exception rethrown.
  R take_result() {
    if (error_) std::rethrow_exception(error_);
    return std::move(*root_value_);
  }

  /// Records a failure that happened outside the walk (e.g. starting threads).
  void fail() noexcept {
    std::lock_guard<std::mutex> guard(error_lock_);
    if (!error_) error_ = std::current_exception();
    stopped_.store(true, std::memory_order_release);
  }

  /// Ends a fold whose root was never walked (runtime shutdown): it fails
  /// with std::system_error(std::errc::operation_canceled).
  void abandon() noexcept {
    try {
      throw std::system_error(std::make_error_code(std::errc::operation_canceled),
                              "spindle::fold: the runtime shut down before the fold started");
    } catch (...) {
      fail();
    }
    root_done_.store(true, std::memory_order_release);
  }

  ~fold_state() = default;

 private:
  static constexpr std::int64_t bias = std::int64_t{1} << 62;

  [[nodiscard]] bool stopped() const noexcept { return stopped_.load(std::memory_order_relaxed); }

  node_task* steal(participant& p) noexcept {
    if (count_ == 1) return nullptr;
    p.rng ^= p.rng << 13;
    p.rng ^= p.rng >> 7;
    p.rng ^= p.rng << 17;
    std::size_t start = static_cast<std::size_t>(p.rng % count_);
    for (std::size_t k = 0; k < count_; ++k) {
      std::size_t v = start + k < count_ ? start + k : start + k - count_;
      if (v == p.index) continue;
      if (node_task* t = parts_[v].deque.steal()) return t;
    }
    return nullptr;
  }

  void execute(participant& p, node_task* t) noexcept {
    chain* parent = t->parent;
    if (stopped()) {
      t->~node_task();
      p.tasks.put(t);
      deliver(p, parent, nullptr);
      return;
    }
    std::optional<N> node;
    try {
      node.emplace(std::move(t->node));
    } catch (...) {
      fail();
    }
    t->~node_task();
    p.tasks.put(t);
    if (!node) {
      deliver(p, parent, nullptr);
      return;
    }
    walk(p, *node, parent);
  }

  // The node's heap from init, or nothing when init threw (then failed).
  std::optional<H> init_heap(N const& node) noexcept {
    try {
      return std::optional<H>(fold_.init(node));
    } catch (...) {
      fail();
      return std::nullopt;
    }
  }

  // init, children, and finalize right away for a leaf.
  void walk(participant& p, N const& node, chain* parent) noexcept {
    std::optional<H> heap = init_heap(node);
    if (!heap.has_value()) {
      deliver(p, parent, nullptr);
      return;
    }
    chain* c = nullptr;
    std::int64_t count = 0;
    try {
      // Inlined into the graph's children(), with fold_deque::push inlined
      // into it: GCC 12 otherwise calls it once per child when children()
      // has two call sites (a binary tree's), and the push from it.
      // callgrind, a fib fold: fold_pool fib(25) 43.3M -> 34.2M
      // instructions; bench_runtime's fib_fold/1/30 508M -> 413M.
      auto emit = [&](N child) __attribute__((always_inline)) {
        if (c == nullptr) {
          void* mem = p.chains.get(p.arena);
          c = ::new (mem) chain{std::move(*heap), {bias}, {nullptr}, parent, p.index};
          heap.reset();
          c->open_next = p.open;
          if (p.open != nullptr) p.open->open_prev = c;
          p.open = c;
        }
        void* mem = p.tasks.get(p.arena);
        node_task* t = ::new (mem) node_task{std::move(child), c};
        p.deque.push(t);
        ++count;
      };
      graph_.children(node, emit);
    } catch (...) {
      fail();
    }
    if (c == nullptr) {
      if (stopped()) {
        deliver(p, parent, nullptr);
        return;
      }
      std::optional<R> value;
      try {
        value.emplace(fold_.finalize(std::move(*heap)));
      } catch (...) {
        fail();
      }
      heap.reset();
      deliver(p, parent, value ? &*value : nullptr);
      return;
    }
    c->due = count;  // private: no atomic until a steal settles it
    if (backlog_fn_ != nullptr && p.deque.size() >= policy_.helper_threshold) {
      backlog_fn_(backlog_arg_);
    }
  }

  void unlink_open(participant& p, chain* c) noexcept {
    if (c->open_prev != nullptr) {
      c->open_prev->open_next = c->open_next;
    } else {
      p.open = c->open_next;
    }
    if (c->open_next != nullptr) c->open_next->open_prev = c->open_prev;
  }

  // Settles every private chain of p: each subtracts from its counter the
  // bias less the results still due (`due`), so that the last
  // of them, delivered by anyone, brings it to zero. Chains that this
  // finishes (every result due had arrived from other participants) are
  // completed once all are settled: completing one delivers to its parent,
  // which must already count the settled way.
  void settle_open(participant& p) noexcept {
    p.steals_seen = p.deque.stolen();
    chain* c = p.open;
    p.open = nullptr;
    chain* done = nullptr;
    while (c != nullptr) {
      chain* next = c->open_next;
      c->settled = true;
      std::int64_t amount = bias - c->due;
      if (c->pending.fetch_sub(amount, std::memory_order_acq_rel) == amount) {
        c->open_next = done;
        done = c;
      }
      c = next;
    }
    while (done != nullptr) {
      chain* next = done->open_next;
      std::optional<R> carry;
      chain* up = complete(p, done, carry);
      deliver(p, up, carry ? &*carry : nullptr);
      done = next;
    }
  }

  // Subtracts p's credit from its chain; returns the chain if that finished it.
  chain* flush(participant& p) noexcept {
    chain* c = p.credit_chain;
    if (c == nullptr) return nullptr;
    std::int64_t n = p.credit;
    p.credit_chain = nullptr;
    p.credit = 0;
    return c->pending.fetch_sub(n, std::memory_order_acq_rel) == n ? c : nullptr;
  }

  // Flushes p's credit until it finishes nothing more (completing a chain
  // hands its result to the parent, often as new credit).
  void flush_and_complete(participant& p) noexcept {
    while (chain* done = flush(p)) {
      std::optional<R> carry;
      chain* up = complete(p, done, carry);
      deliver(p, up, carry ? &*carry : nullptr);
    }
  }

  // The counter of `c` reached zero: accumulate the cells, finalize into
  // `carry` (unless stopped), free `c`; returns its parent.
  chain* complete(participant& p, chain* c, std::optional<R>& carry) noexcept {
    cell* x = c->results.load(std::memory_order_acquire);
    while (x != nullptr) {
      cell* next = x->next;
      if (!stopped()) {
        try {
          fold_.accumulate(c->heap, std::move(x->value));
        } catch (...) {
          fail();
        }
      }
      x->~cell();
      p.cells.put(x);
      x = next;
    }
    if (!stopped()) {
      try {
        carry.emplace(fold_.finalize(std::move(c->heap)));
      } catch (...) {
        fail();
      }
    }
    chain* up = c->parent;
    c->~chain();
    p.chains.put(c);
    return up;
  }

  // Hands `r` (nullptr: nothing, the node was dropped) to chain `c`, and
  // completes every chain that this finishes, up to the root.
  void deliver(participant& p, chain* c, R* r) noexcept {
    std::optional<R> carry;
    for (;;) {
      if (c == nullptr) {
        if (r != nullptr && !stopped()) {
          try {
            root_value_.emplace(std::move(*r));
          } catch (...) {
            fail();
          }
        }
        root_done_.store(true, std::memory_order_release);
        return;
      }
      chain* done = nullptr;
      if (c->owner == p.index) {
        if (r != nullptr && !stopped()) {
          try {
            fold_.accumulate(c->heap, std::move(*r));
          } catch (...) {
            fail();
          }
        }
        if (!c->settled) {
          // Private: every result so far was the owner's. When all are,
          // none can come from elsewhere (each child delivers once).
          if (--c->due != 0) return;
          unlink_open(p, c);
          done = c;
        } else {
          if (p.credit_chain != c) {
            done = flush(p);
            p.credit_chain = c;
          }
          ++p.credit;
          if (done == nullptr) return;
        }
      } else {
        if (r != nullptr && !stopped()) {
          cell* x = nullptr;
          try {
            x = ::new (p.cells.get(p.arena)) cell{std::move(*r), nullptr};
          } catch (...) {
            fail();
          }
          if (x != nullptr) {
            cell* head = c->results.load(std::memory_order_relaxed);
            do {
              x->next = head;
            } while (!c->results.compare_exchange_weak(head, x, std::memory_order_release,
                                                       std::memory_order_relaxed));
          }
        }
        if (c->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        done = c;
      }
      r = nullptr;
      carry.reset();
      c = complete(p, done, carry);
      if (carry) r = &*carry;
    }
  }

  G const& graph_;
  F const& fold_;
  fold_policy policy_;
  std::size_t count_;
  std::unique_ptr<participant[]> parts_;
  backlog_fn backlog_fn_ = nullptr;
  void* backlog_arg_ = nullptr;
  alignas(64) std::atomic<bool> root_done_{false};
  std::atomic<bool> stopped_{false};
  std::optional<R> root_value_;
  std::mutex error_lock_;
  std::exception_ptr error_;
};

}  // namespace detail
}  // namespace spindle
