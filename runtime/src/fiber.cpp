// Fibers: stacks and their pools, the context switch (Boost.Context's
// fcontext), the C++ exception state and the sanitizers' fiber annotations.
// The scheduling side is the root coroutine in spindle/fiber.hpp: a fiber
// is polled, queued, stolen, aborted and destroyed as the task it is.
//
// Switch protocol. resume() (root side, on a worker's stack, inside the
// root coroutine's poll) jumps to the fiber's saved context; the fiber runs
// until suspend() (an await) or the end of its entry function, each of
// which jumps back to the context resume() came from. A suspended fiber
// holds no thread: the next resume() may come from any worker.
// Design source: Boost.Context (fcontext_t, jump_fcontext's transfer_t),
// Boost.Context's protected_fixedsize_stack (guard page), Go's per-P stack
// cache for the per-thread pool.
#include <sys/mman.h>
#include <unistd.h>

#include <cxxabi.h>
#include <array>
#include <atomic>
#include <boost/context/detail/fcontext.hpp>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <system_error>
#include <vector>

#include "spindle/fiber.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPINDLE_FIBER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define SPINDLE_FIBER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(SPINDLE_FIBER_ASAN)
#define SPINDLE_FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(SPINDLE_FIBER_TSAN)
#define SPINDLE_FIBER_TSAN 1
#endif

#if defined(SPINDLE_FIBER_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(SPINDLE_FIBER_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102  // Linux 6.13: guard pages without a VMA split
#endif

namespace spindle::detail {

namespace fc = boost::context::detail;

namespace {

constexpr std::size_t min_stack_bytes = 16 * 1024;
constexpr std::size_t local_pool_stacks = 64;                  // per thread and size
constexpr std::size_t shared_pool_bytes = 256u * 1024 * 1024;  // guard pages included

std::size_t page_bytes() noexcept {
  static std::size_t const page = [] {
    long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
  }();
  return page;
}

// How guard pages are made: MADV_GUARD_INSTALL where the kernel has it
// (adjacent stacks stay one mapping, so vm.max_map_count does not bound
// the number of fibers), else mprotect (one more mapping per stack).
std::atomic<int> guard_mode{0};  // 0 unknown, 1 madvise, 2 mprotect

bool install_guard(void* page) noexcept {
  int mode = guard_mode.load(std::memory_order_relaxed);
  if (mode != 2) {
    if (::madvise(page, page_bytes(), MADV_GUARD_INSTALL) == 0) {
      guard_mode.store(1, std::memory_order_relaxed);
      return true;
    }
    if (mode == 1) return false;  // worked before: a real failure
    guard_mode.store(2, std::memory_order_relaxed);
  }
  return ::mprotect(page, page_bytes(), PROT_NONE) == 0;
}

std::atomic<std::uint64_t> mapped_count{0};
std::atomic<std::uint64_t> unmapped_count{0};

struct free_stack {
  void* base;  // usable memory; the guard page is below it
  std::size_t bytes;
};

void unmap(free_stack s) noexcept {
  unmapped_count.fetch_add(1, std::memory_order_relaxed);
  ::munmap(static_cast<char*>(s.base) - page_bytes(), s.bytes + page_bytes());
}

struct shared_pool {
  std::mutex lock;
  std::vector<free_stack> stacks;  // guarded by lock
  std::size_t bytes = 0;           // guarded by lock; guard pages included
};

shared_pool& shared() noexcept {
  static shared_pool* const pool = new shared_pool;  // never destroyed: used at thread exit
  return *pool;
}

// Up to `local_pool_bins` sizes, `local_pool_stacks` stacks each: O(1)
// take and give for the sizes a thread uses; others go to the shared pool.
constexpr std::size_t local_pool_bins = 4;

struct local_bin {
  std::size_t bytes = 0;  // 0: unclaimed
  std::size_t count = 0;
  std::array<void*, local_pool_stacks> bases{};
};

struct local_pool {
  std::array<local_bin, local_pool_bins> bins{};
  bool destroyed = false;

  /// The bin of `bytes`, claiming an empty one; nullptr when none is free.
  local_bin* bin_for(std::size_t bytes) noexcept {
    for (local_bin& b : bins) {
      if (b.bytes == bytes) return &b;
    }
    for (local_bin& b : bins) {
      if (b.count == 0) {
        b.bytes = bytes;
        return &b;
      }
    }
    return nullptr;
  }

  ~local_pool() {
    destroyed = true;
    // Hand what the shared pool has room for over to it; unmap the rest.
    shared_pool& sp = shared();
    std::lock_guard guard(sp.lock);
    for (local_bin& b : bins) {
      for (std::size_t i = 0; i < b.count; ++i) {
        free_stack s{b.bases[i], b.bytes};
        std::size_t const cost = s.bytes + page_bytes();
        if (sp.bytes + cost <= shared_pool_bytes) {
          sp.stacks.push_back(s);
          sp.bytes += cost;
        } else {
          unmap(s);
        }
      }
      b.count = 0;
    }
  }
};

local_pool& local() noexcept {
  // initial-exec: see t_thread_context (scheduler.hpp).
  [[gnu::tls_model("initial-exec")]] thread_local local_pool pool;
  return pool;
}

bool take_from(std::vector<free_stack>& v, std::size_t bytes, free_stack& out) noexcept {
  for (std::size_t i = v.size(); i-- > 0;) {
    if (v[i].bytes == bytes) {
      out = v[i];
      v[i] = v.back();
      v.pop_back();
      return true;
    }
  }
  return false;
}

// The C++ runtime's per-thread exception state (libstdc++ / libsupc++ and
// libc++abi share this layout on x86-64 and AArch64).
struct eh_globals {
  void* caught_exceptions;
  unsigned int uncaught_exceptions;
};

// The calling thread's fiber state: the fiber running on it, and its
// exception state's address (looked up once: __cxa_get_globals goes
// through __tls_get_addr from libstdc++).
struct thread_fiber_state {
  fiber_context* current = nullptr;
  eh_globals* eh = nullptr;
};

// Not inlined: a fiber may resume on another thread between two calls.
[[gnu::noinline]] thread_fiber_state& this_thread_fibers() noexcept {
  // initial-exec: see t_thread_context (scheduler.hpp).
  [[gnu::tls_model("initial-exec")]] thread_local thread_fiber_state state;
  return state;
}

}  // namespace

// ---------------------------------------------------------------------------
// Stacks

std::size_t fiber_stack::checked_size(std::size_t bytes) {
  if (bytes < min_stack_bytes) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle::fiber_options::stack_size must be at least 16 KiB");
  }
  std::size_t const page = page_bytes();
  if (bytes > (std::size_t{1} << 40)) {
    throw std::system_error(std::make_error_code(std::errc::not_enough_memory),
                            "spindle: fiber stack too large");
  }
  return (bytes + page - 1) / page * page;
}

fiber_stack fiber_stack::allocate(std::size_t bytes) {
  bytes = checked_size(bytes);
  std::size_t const page = page_bytes();
  fiber_stack s;
  free_stack f{};
  local_pool& lp = local();
  if (!lp.destroyed) {
    local_bin* bin = lp.bin_for(bytes);
    if (bin != nullptr && bin->count != 0) {
      s.base_ = bin->bases[--bin->count];
      s.bytes_ = bytes;
      return s;
    }
  }
  {
    shared_pool& sp = shared();
    std::lock_guard guard(sp.lock);
    if (take_from(sp.stacks, bytes, f)) {
      sp.bytes -= f.bytes + page;
      s.base_ = f.base;
      s.bytes_ = f.bytes;
      return s;
    }
  }
  void* p = ::mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) {
    throw std::system_error(std::make_error_code(std::errc::not_enough_memory),
                            "spindle: cannot map a fiber stack");
  }
  if (!install_guard(p)) {
    int const e = errno;
    ::munmap(p, bytes + page);
    throw std::system_error(e == ENOMEM ? std::make_error_code(std::errc::not_enough_memory)
                                        : std::error_code(e, std::generic_category()),
                            "spindle: cannot install a fiber stack's guard page");
  }
  mapped_count.fetch_add(1, std::memory_order_relaxed);
  s.base_ = static_cast<char*>(p) + page;
  s.bytes_ = bytes;
  return s;
}

void fiber_stack::release() noexcept {
  if (base_ == nullptr) return;
  free_stack f{std::exchange(base_, nullptr), std::exchange(bytes_, 0)};
#if defined(SPINDLE_FIBER_ASAN)
  // The fiber's last frames never returned (it jumped away): clear their
  // redzones before the stack is used again.
  ASAN_UNPOISON_MEMORY_REGION(f.base, f.bytes);
#endif
  local_pool& lp = local();
  if (!lp.destroyed) {
    local_bin* bin = lp.bin_for(f.bytes);
    if (bin != nullptr && bin->count < local_pool_stacks) {
      bin->bases[bin->count++] = f.base;
      return;
    }
  }
  shared_pool& sp = shared();
  {
    std::lock_guard guard(sp.lock);
    std::size_t const cost = f.bytes + page_bytes();
    if (sp.bytes + cost <= shared_pool_bytes) {
      sp.stacks.push_back(f);
      sp.bytes += cost;
      return;
    }
  }
  unmap(f);
}

std::size_t fiber_shared_pool_bytes() noexcept {
  shared_pool& sp = shared();
  std::lock_guard guard(sp.lock);
  return sp.bytes;
}

std::size_t fiber_local_pool_stacks(std::size_t bytes) noexcept {
  for (local_bin const& b : local().bins) {
    if (b.bytes == bytes) return b.count;
  }
  return 0;
}

std::uint64_t fiber_stacks_mapped() noexcept {
  return mapped_count.load(std::memory_order_relaxed);
}

std::uint64_t fiber_stacks_unmapped() noexcept {
  return unmapped_count.load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// Switching

fiber_context* current_fiber() noexcept {
  return this_thread_fibers().current;
}

void throw_outside_fiber(char const* what) {
  throw std::system_error(std::make_error_code(std::errc::operation_not_permitted), what);
}

struct fiber_trampoline {
  // The fiber's first frame: never returns; its last jump goes back to the
  // root side for good.
  [[noreturn]] static void start(fc::transfer_t from) noexcept {
    auto* self = static_cast<fiber_context*>(from.data);
    self->caller_fctx_ = from.fctx;
#if defined(SPINDLE_FIBER_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &self->san_.caller_stack_bottom,
                                    &self->san_.caller_stack_size);
#endif
    self->entry_(self->arg_);
    self->finished_ = true;
#if defined(SPINDLE_FIBER_ASAN)
    __sanitizer_start_switch_fiber(nullptr, self->san_.caller_stack_bottom,
                                   self->san_.caller_stack_size);
#endif
#if defined(SPINDLE_FIBER_TSAN)
    __tsan_switch_to_fiber(self->san_.tsan_caller, 0);
#endif
    fc::jump_fcontext(self->caller_fctx_, nullptr);
    __builtin_unreachable();
  }
};

fiber_context::fiber_context(fiber_stack stack, void (*entry)(void*) noexcept, void* arg) noexcept
    : stack_(std::move(stack)), entry_(entry), arg_(arg) {
#if defined(SPINDLE_FIBER_TSAN)
  san_.tsan_fiber = __tsan_create_fiber(0);
#endif
}

fiber_context::~fiber_context() {
  if (started_ && !finished_) {
    // Suspended in an await: unwind it. Every await throws task_cancelled
    // from now on, without switching, so the fiber runs to its end.
    cancelling_ = true;
    while (!finished_)
      (void)resume();
  }
#if defined(SPINDLE_FIBER_TSAN)
  __tsan_destroy_fiber(san_.tsan_fiber);
#endif
}

fiber_await_op* fiber_context::resume() noexcept {
  if (!started_) {
    started_ = true;
    // First poll: the current task is the root (spawn_fiber_on spawned it;
    // none when a test drives the context by hand).
    if (task_header* task = current_task(); task != nullptr) root_ = task->frame();
    fctx_ = fc::make_fcontext(stack_.top(), stack_.bytes(), &fiber_trampoline::start);
  }
  thread_fiber_state& tls = this_thread_fibers();
  fiber_context* const outer = tls.current;
  tls.current = this;
  eh_globals* eh = tls.eh;
  if (eh == nullptr) eh = tls.eh = reinterpret_cast<eh_globals*>(abi::__cxa_get_globals());
  eh_globals const thread_state = *eh;
  eh->caught_exceptions = eh_caught_;
  eh->uncaught_exceptions = eh_uncaught_;
#if defined(SPINDLE_FIBER_TSAN)
  san_.tsan_caller = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(san_.tsan_fiber, 0);
#endif
#if defined(SPINDLE_FIBER_ASAN)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, stack_.base(), stack_.bytes());
#endif
  fc::transfer_t back = fc::jump_fcontext(fctx_, this);
#if defined(SPINDLE_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  fctx_ = back.fctx;
  eh_caught_ = eh->caught_exceptions;
  eh_uncaught_ = eh->uncaught_exceptions;
  *eh = thread_state;
  tls.current = outer;
  if (finished_) return nullptr;
  return std::exchange(pending_, nullptr);
}

void fiber_context::switch_to_root() noexcept {
#if defined(SPINDLE_FIBER_ASAN)
  __sanitizer_start_switch_fiber(&san_.asan_fake_stack, san_.caller_stack_bottom,
                                 san_.caller_stack_size);
#endif
#if defined(SPINDLE_FIBER_TSAN)
  __tsan_switch_to_fiber(san_.tsan_caller, 0);
#endif
  fc::transfer_t back = fc::jump_fcontext(caller_fctx_, nullptr);
  caller_fctx_ = back.fctx;  // resumed, perhaps from another thread
#if defined(SPINDLE_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(san_.asan_fake_stack, &san_.caller_stack_bottom,
                                  &san_.caller_stack_size);
#endif
}

static std::coroutine_handle<> already_suspended(fiber_await_op* /*op*/,
                                                 std::coroutine_handle<> /*root*/) noexcept {
  return std::noop_coroutine();
}

namespace {
// Shared and never written: suspend() only reads its error (always null).
fiber_await_op suspended_op_instance{nullptr, &already_suspended, {}};
}  // namespace

fiber_await_op& suspended_op() noexcept {
  return suspended_op_instance;
}

void fiber_yield() {
  fiber_context* self = this_thread_fibers().current;
  if (self == nullptr) throw_outside_fiber("spindle::this_fiber::yield outside a fiber");
  if (self->cancelling_) throw task_cancelled{};
  // As yield_now's await_suspend, on the fiber's stack (the root task is
  // the current one): the root then only suspends. With no task polling
  // the fiber (a context driven by hand) there is nothing to yield to, as
  // for yield_now outside a task.
  if (suspend_current(self->root_, wait_kind::fiber) == nullptr) return;
  yield_current();
  self->suspend(suspended_op());
}

void fiber_context::suspend(fiber_await_op& op) {
  pending_ = &op;
  switch_to_root();
  if (cancelling_) throw task_cancelled{};
  if (op.error) std::rethrow_exception(std::exchange(op.error, nullptr));
}

}  // namespace spindle::detail
