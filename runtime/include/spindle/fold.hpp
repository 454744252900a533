// Parallel bottom-up folds over implicit trees: on a scoped pool of threads
// (spindle::fold_pool) or on a runtime's workers (spindle::fold,
// runtime::fold).
//
//   struct graph { void children(node const& n, auto&& emit) const { for (...) emit(child); } };
//   struct sum { std::uint64_t init(node const& n) const { return n.size; }
//                void accumulate(std::uint64_t& h, std::uint64_t&& c) const { h += c; }
//                std::uint64_t finalize(std::uint64_t&& h) const { return h; } };
//   auto total = spindle::fold_pool::with(3, [&](spindle::fold_pool& pool) {
//     return pool.run(graph{}, sum{}, root);        // 3 threads + the caller
//   });
//   std::uint64_t t = co_await spindle::fold(graph{}, sum{}, root);   // in a task or fiber
//   std::uint64_t u = rt.fold(graph{}, sum{}, root);                  // from a plain thread
//
// Shapes: a graph G has `void children(N const& node, E&& emit) const`,
// calling `emit(N child)` once per child (synchronously, before it returns).
// A fold F has `H init(N const&) const`, `void accumulate(H& heap, R&& child)
// const` and `R finalize(H&& heap) const`. For every node: init, then the
// children are walked (anywhere, in parallel), each child's R is accumulated
// into the node's heap (in an unspecified order, never two at once for one
// heap), then finalize gives the node's R. N, H and R must be
// move-constructible; G and F are used through const references from several
// threads at once (their const members must be thread-safe).
//
// No coroutine frame and no heap allocation per node once warm: pending
// nodes are continuations in per-fold arenas (detail/fold_walk.hpp), work is
// shared through per-participant split deques (detail/fold_deque.hpp, after
// Lace): a participant's newer pending nodes are its own, and it shares the
// older half of them when another participant finds nothing to take, at
// its next node (a thief waits at most one node of the owner's).
//
// Errors: the first exception thrown by init, accumulate, finalize or
// children stops the fold (no node is started afterwards; nodes already
// running finish), every object created is destroyed, and the exception is
// rethrown to the caller of run / co_await / runtime::fold. The pool or the
// runtime stays usable. spindle::fold awaited outside a spindle task or
// fiber throws std::system_error(std::errc::operation_not_permitted);
// runtime::fold from one of the runtime's workers throws
// std::system_error(std::errc::resource_deadlock_would_occur) (co_await
// spindle::fold there instead).
//
// Thread-safety: fold_pool::run may be called from several threads at once
// (the folds take turns: one at a time per pool), but not from inside a
// fold's own callbacks. spindle::fold and runtime::fold may run any number
// of folds at once.
//
// Design source: hylic's fold pool (persistent scoped threads,
// dispatch = publish, body, seal, latch, with the in_job counter raised
// before the job pointer is read; CPS walk with arenas; sessions; presets).
#pragma once

#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <memory>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "spindle/detail/fold_walk.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace spindle {

namespace detail {
/// The emit callable a graph is checked with.
template <class N>
struct fold_emit_probe {
  void operator()(N) const {}
};
template <class G, class N>
concept has_children = requires(G const& g, N const& n, fold_emit_probe<N>& e) {
  g.children(n, e);
};
template <class F, class N>
concept has_init = requires(F const& f, N const& n) {
  { f.init(n) } -> std::move_constructible;
};
template <class F, class N>
concept has_finalize = has_init<F, N> && requires(F const& f, fold_heap_t<F, N>&& h) {
  { f.finalize(std::move(h)) } -> std::move_constructible;
};
template <class F, class N>
concept has_accumulate = has_finalize<F, N> &&
    requires(F const& f, fold_heap_t<F, N>& h, fold_value_t<F, N>&& r) {
  f.accumulate(h, std::move(r));
};

// static_asserts one requirement at a time, so that a mistake reads as one
// sentence rather than a concept's substitution trace.
template <class G, class F, class N>
constexpr bool check_fold_arguments() {
  static_assert(std::move_constructible<N>,
                "spindle::fold: the node type N must be move-constructible");
  static_assert(has_children<G, N>,
                "spindle::fold: the graph needs `void children(N const& node, E&& emit) const` "
                "calling emit(N) for each child");
  static_assert(has_init<F, N>,
                "spindle::fold: the fold needs `H init(N const&) const` (H movable)");
  if constexpr (has_init<F, N>) {
    static_assert(has_finalize<F, N>,
                  "spindle::fold: the fold needs `R finalize(H&& heap) const` (R movable)");
    if constexpr (has_finalize<F, N>) {
      static_assert(has_accumulate<F, N>,
                    "spindle::fold: the fold needs `void accumulate(H& heap, R&& child) const`");
    }
  }
  return true;
}
// All of the above: the entry points compile their body only then, so that a
// mistake reports the static_assert's sentence alone.
template <class G, class F, class N>
concept fold_arguments_ok =
    std::move_constructible<N> && has_children<G, N> && has_accumulate<F, N>;
}  // namespace detail

/// A graph over nodes N: `children(node, emit)` calls emit(N) per child.
template <class G, class N>
concept fold_graph = std::move_constructible<N> && detail::has_children<G, N>;

/// A fold over nodes N: init, accumulate, finalize (see the file comment).
template <class F, class N>
concept fold_algebra = detail::has_accumulate<F, N>;

/// The heap type H and result type R of fold F over nodes N.
template <class F, class N>
using fold_heap_t = detail::fold_heap_t<F, N>;
/// The result type R of fold F over nodes N (what finalize returns).
template <class F, class N>
using fold_result_t = detail::fold_value_t<F, N>;

namespace detail {
/// Test hook (tests/test_fold.cpp): when set, a fold_pool thread calls it
/// with (its index, true) between reading a non-null job pointer and
/// entering the job, and with (its index, false) when the job returned.
extern std::atomic<void (*)(std::size_t, bool)> fold_pool_entry_hook;
}  // namespace detail

/// A scoped pool of persistent threads for folds (hylic's funnel pool).
/// Threads park on a futex between folds; a fold wakes them all, and the
/// calling thread works too. Created only through with().
class fold_pool {
 public:
  /// Starts `threads` threads (0 is allowed: the caller folds alone), calls
  /// `body(pool)`, joins the threads when body returns or throws, and
  /// returns what body returned (or rethrows). Thread start failure throws
  /// std::system_error(std::errc::resource_unavailable_try_again).
  template <class B>
  requires std::invocable<B&&, fold_pool&>
  static decltype(auto) with(std::size_t threads, B&& body) {
    fold_pool pool(threads);
    return std::forward<B>(body)(pool);
  }

  fold_pool(fold_pool const&) = delete;
  fold_pool& operator=(fold_pool const&) = delete;
  ~fold_pool();

  /// Runs one fold from `root` with the pool's threads and the calling
  /// thread, returning the root's R (or rethrowing the fold's exception).
  /// Folds from several threads take turns. Not from inside a fold callback
  /// of this pool (it would wait for itself).
  template <class G, class F, class N>
  auto run(G const& graph, F const& fold, N root, fold_policy policy = fold_policy::standard()) {
    static_assert(detail::check_fold_arguments<G, F, N>());
    if constexpr (detail::fold_arguments_ok<G, F, N>) {
      using state_t = detail::fold_state<G, F, N>;
      state_t state(graph, fold, policy, threads_ + 1);
      struct body_ctx {
        state_t* state;
        N const* root;
        std::size_t caller;
      } ctx{&state, &root, threads_};
      dispatch(
          &state,
          [](void* data, std::size_t index) noexcept {
            auto* s = static_cast<state_t*>(data);
            s->participate(s->part(index), false);
          },
          &ctx,
          [](void* arg) noexcept {
            auto* c = static_cast<body_ctx*>(arg);
            c->state->start(c->state->part(c->caller), *c->root);
            c->state->participate(c->state->part(c->caller), false);
          });
      return state.take_result();
    }
  }

  /// Pool threads (not counting a caller of run).
  [[nodiscard]] std::size_t thread_count() const noexcept { return threads_; }

 private:
  using job_fn = void (*)(void* data, std::size_t index) noexcept;
  using body_fn = void (*)(void* arg) noexcept;
  explicit fold_pool(std::size_t threads);
  // publish (job_fn, data), run body(arg) here, seal, wait until no thread
  // is inside the job (latch); serialized by a mutex.
  void dispatch(void* data, job_fn job, void* arg, body_fn body);

  struct shared;
  std::size_t threads_;
  std::unique_ptr<shared> shared_;
};

namespace detail {

/// Type-erased handle a runtime helper task holds on its fold; destroying
/// it (when the helper ends, or its frame is dropped unrun) leaves the fold.
struct fold_helper_ops {
  void (*run)(void* fold, bool first) noexcept;
  void (*leave)(void* fold) noexcept;
  void (*abandon_root)(void* fold) noexcept;  // the first helper never ran
};
class fold_ticket {
 public:
  fold_ticket(void* fold, fold_helper_ops const* ops, bool first) noexcept
      : fold_(fold), ops_(ops), first_(first) {}
  fold_ticket(fold_ticket&& o) noexcept
      : fold_(std::exchange(o.fold_, nullptr)), ops_(o.ops_), first_(o.first_) {}
  fold_ticket& operator=(fold_ticket&&) = delete;
  /// A helper frame dropped unrun (a spawn refused at runtime shutdown):
  /// leaves; the first one also ends the fold (it never walked the root),
  /// which then throws std::system_error(std::errc::operation_canceled).
  ~fold_ticket() {
    if (fold_ == nullptr) return;
    if (first_) ops_->abandon_root(fold_);
    ops_->leave(fold_);
  }
  /// Runs the helper's share, then leaves the fold (the last touch of it).
  void run_and_leave() noexcept {
    ops_->run(fold_, first_);
    ops_->leave(std::exchange(fold_, nullptr));
  }

 private:
  void* fold_;
  fold_helper_ops const* ops_;
  bool first_;
};
/// Spawns a helper task on the calling thread's runtime.
void spawn_fold_helper(fold_ticket ticket);
/// Workers of the calling thread's runtime (a worker or a block_on thread), or 0.
[[nodiscard]] std::size_t current_runtime_workers() noexcept;

/// One runtime fold: the walk state plus the helper bookkeeping. Pinned
/// (owned by the awaiter through a unique_ptr).
template <class G, class F, class N>
class runtime_fold {
 public:
  runtime_fold(G const& graph, F const& fold, N root, fold_policy policy, std::size_t workers)
      : state_(graph, fold, policy, workers), root_(std::move(root)) {
    state_.set_backlog_hook(&runtime_fold::on_backlog, this);
  }

  void start(task_header* waiter) {
    waiter_ = waiter;
    outstanding_.store(2, std::memory_order_relaxed);  // the root's token + the first helper
    helpers_.store(1, std::memory_order_relaxed);
    spawn_fold_helper(fold_ticket(this, &ops, true));  // leaves on failure
  }

  auto result() { return state_.take_result(); }

 private:
  static void run_helper(void* self, bool first) noexcept {
    auto* f = static_cast<runtime_fold*>(self);
    auto& st = f->state_;
    std::size_t n = st.participant_count();
    std::size_t home = current_worker_index();
    home = home == not_a_worker ? 0 : home % n;
    for (std::size_t k = 0; k < n; ++k) {
      auto& p = st.part((home + k) % n);
      if (p.claimed.exchange(true, std::memory_order_acquire)) continue;
      if (first) st.start(p, f->root_);
      if (!st.root_done()) st.participate(p, true);
      p.claimed.store(false, std::memory_order_release);
      return;
    }
    // Every slot taken: only a later helper can find none; the first finds
    // them all free.
  }
  static void leave(void* self) noexcept {
    auto* f = static_cast<runtime_fold*>(self);
    f->helpers_.fetch_sub(1, std::memory_order_acq_rel);
    // The root's token is dropped by the first helper to leave after the
    // root is done; exactly one, through the exchange.
    std::size_t drop = 1;
    if (f->state_.root_done() && !f->token_dropped_.exchange(true, std::memory_order_acq_rel)) {
      drop = 2;
    }
    task_header* waiter = f->waiter_;
    if (f->outstanding_.fetch_sub(drop, std::memory_order_acq_rel) == drop) wake(waiter);
  }
  static void on_backlog(void* self) noexcept {
    auto* f = static_cast<runtime_fold*>(self);
    std::size_t h = f->helpers_.load(std::memory_order_relaxed);
    std::size_t n = f->state_.participant_count();
    while (h < n) {
      if (f->helpers_.compare_exchange_weak(h, h + 1, std::memory_order_acq_rel,
                                            std::memory_order_relaxed)) {
        f->outstanding_.fetch_add(1, std::memory_order_relaxed);
        try {
          spawn_fold_helper(fold_ticket(f, &ops, false));
        } catch (...) {
          // no helper: the others do the work (the ticket left already)
        }
        return;
      }
    }
  }

  static void abandon_root(void* self) noexcept {
    static_cast<runtime_fold*>(self)->state_.abandon();
  }

  static constexpr fold_helper_ops ops{&runtime_fold::run_helper, &runtime_fold::leave,
                                       &runtime_fold::abandon_root};

  fold_state<G, F, N> state_;
  N root_;
  task_header* waiter_ = nullptr;
  std::atomic<std::size_t> outstanding_{0};
  std::atomic<std::size_t> helpers_{0};
  std::atomic<bool> token_dropped_{false};
};

}  // namespace detail

/// The awaiter of spindle::fold: runs the fold on helper tasks spread over
/// the runtime's workers (at most one per worker, each ending when it runs
/// out of work and recruited again when a backlog builds up); the awaiting
/// task or fiber is suspended meanwhile and blocks no worker. Movable until
/// awaited; awaited once.
template <class G, class F, class N>
class [[nodiscard]] fold_awaiter {
 public:
  /// this_fiber::await may run await_suspend on the fiber's own stack: the
  /// task is woken only through the scheduler, never resumed here.
  using wakes_through_scheduler = void;

  /// A fold of the tree below `root`; `graph` and `fold` are used by
  /// reference and must outlive the awaiting.
  fold_awaiter(G const& graph, F const& fold, N root, fold_policy policy)
      : graph_(&graph), fold_(&fold), root_(std::move(root)), policy_(policy) {}

  /// Awaiter protocol: always suspends.
  bool await_ready() const noexcept { return false; }

  /// Awaiter protocol: starts the helper tasks and suspends the caller.
  /// Throws std::system_error(std::errc::operation_not_permitted) outside a
  /// spindle task or fiber.
  bool await_suspend(std::coroutine_handle<> caller) {
    std::size_t workers = detail::current_runtime_workers();
    detail::task_header* self = detail::suspend_current(caller);
    if (self == nullptr || workers == 0) {
      throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                              "spindle::fold awaited outside a spindle task or fiber");
    }
    run_ = std::make_unique<detail::runtime_fold<G, F, N>>(*graph_, *fold_, std::move(*root_),
                                                           policy_, workers);
    run_->start(self);
    return true;
  }

  /// Awaiter protocol: the root's result, or the fold's first exception
  /// rethrown.
  fold_result_t<F, N> await_resume() { return run_->result(); }

 private:
  G const* graph_;
  F const* fold_;
  std::optional<N> root_;
  fold_policy policy_;
  std::unique_ptr<detail::runtime_fold<G, F, N>> run_;
};

/// Folds the tree below `root` on the calling task's runtime: `co_await
/// spindle::fold(graph, fold, root)` in a task, or
/// `spindle::this_fiber::await(spindle::fold(...))` in a fiber, yields the
/// root's R or rethrows the fold's exception. `graph` and `fold` are held by
/// reference until the await completes; `root` is copied or moved in.
template <class G, class F, class N>
[[nodiscard]] auto fold(G const& graph, F const& fold, N root,
                        fold_policy policy = fold_policy::standard()) {
  static_assert(detail::check_fold_arguments<G, F, N>());
  if constexpr (detail::fold_arguments_ok<G, F, N>) {
    return fold_awaiter<G, F, N>(graph, fold, std::move(root), policy);
  }
}

namespace detail {
// runtime::fold's task: graph and fold by reference (block_on outlives it).
template <class G, class F, class N>
SPINDLE_COROUTINE_TEMPLATE task<fold_result_t<F, N>> fold_task(G const& graph, F const& fold,
                                                               N root, fold_policy policy) {
  co_return co_await spindle::fold(graph, fold, std::move(root), policy);
}
}  // namespace detail

template <class G, class F, class N>
auto runtime::fold(G const& graph, F const& fold, N root, fold_policy policy) {
  static_assert(detail::check_fold_arguments<G, F, N>());
  if constexpr (detail::fold_arguments_ok<G, F, N>) {
    return block_on(detail::fold_task(graph, fold, std::move(root), policy));
  }
}

template <class G, class F, class N>
auto runtime::fold(G const& graph, F const& fold, N root) {
  return this->fold(graph, fold, std::move(root), fold_policy::standard());
}

}  // namespace spindle
