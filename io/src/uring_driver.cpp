// The io_uring driver (see uring_driver.hpp for the protocol).
#include "uring_driver.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "env.hpp"
#include "spindle/runtime.hpp"

namespace spindle::io::detail {

namespace {

/// user_data of the always-armed eventfd read (op pointers are never 1 or 2).
constexpr std::uint64_t wake_tag = 1;
/// user_data of async-cancel requests; their completions are ignored.
constexpr std::uint64_t cancel_tag = 2;

/// Makes `sqe` the IORING_OP_ASYNC_CANCEL of `op`'s SQE, or a no-op when
/// `op` is null (nothing left to cancel); either way tagged cancel_tag.
void prep_cancel_of(io_uring_sqe* sqe, io_op const* op) noexcept {
  if (op == nullptr) {
    io_uring_prep_nop(sqe);
  } else {
    io_uring_prep_cancel64(sqe, reinterpret_cast<std::uintptr_t>(op), 0);
  }
  io_uring_sqe_set_data64(sqe, cancel_tag);
}

/// How long on_worker_stop waits between re-issuing cancellations.
constexpr auto cancel_retry = std::chrono::milliseconds(100);

/// Setup flags, tried in order while io_uring_setup answers EINVAL (flags the
/// kernel does not know). SINGLE_ISSUER needs R_DISABLED here: the ring is
/// created on the constructing thread but its issuer is the worker thread
/// that enables it.
constexpr unsigned setup_tiers[] = {
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED |
        IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CQSIZE,  // 6.1
    IORING_SETUP_COOP_TASKRUN | IORING_SETUP_R_DISABLED | IORING_SETUP_SUBMIT_ALL |
        IORING_SETUP_CQSIZE,                        // 5.19
    IORING_SETUP_R_DISABLED | IORING_SETUP_CQSIZE,  // 5.10
    IORING_SETUP_CQSIZE,                            // 5.5
    0,
};

[[noreturn]] void throw_errno(int err, char const* what) {
  throw std::system_error(err, std::system_category(),
                          std::string("spindle: io_uring unavailable: ") + what);
}

/// True when the running kernel's release (uname) is at least major.minor.
bool kernel_at_least(int major, int minor) noexcept {
  utsname u{};
  if (::uname(&u) != 0) return false;
  int ma = 0;
  int mi = 0;
  if (std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

/// SPINDLE_NET_PROVIDED_BUFFERS=0 turns provided-buffer receives off (every
/// RECV gets the caller's buffer), for comparing the two.
bool provided_buffers_allowed() noexcept {
  static bool const allowed = spindle::detail::env_switch_on("SPINDLE_NET_PROVIDED_BUFFERS");
  return allowed;
}

/// Completes ops that were queued but never reached a ring, waking nobody.
void cancel_unsubmitted(io_op* list) noexcept {
  while (list != nullptr) {
    io_op* const next = list->next;
    if (list->code == op_code::close) ::close(list->fd);  // the file gave it up already
    list->result = -ECANCELED;
    list = next;
  }
}

}  // namespace

struct alignas(64) uring_driver::worker_ring {
  io_uring ring{};
  std::size_t index = 0;
  bool ring_open = false;   ///< io_uring_queue_init succeeded, not exited yet
  bool enabled = false;     ///< on_worker_start ran
  bool stopping = false;    ///< on_worker_stop is reaping: complete without waking
  bool stopped = false;     ///< on_worker_stop finished
  bool wake_armed = false;  ///< the eventfd read is in the ring
  int event_fd = -1;
  std::uint64_t wake_value = 0;  ///< target of the eventfd read
  /// Ops prepared or submitted and not reaped. Written by the owner only.
  std::atomic<std::size_t> in_flight{0};
  io_op* tracked = nullptr;  ///< doubly linked list of those ops (for cancellation)

  std::mutex remote_mutex;  ///< guards the remote list, the cancel list, remote_closed
  io_op* remote_head = nullptr;
  io_op* remote_tail = nullptr;
  bool remote_closed = false;
  std::atomic<bool> remote_pending{false};
  /// Ops of this ring other threads want cancelled (doubly linked through
  /// cancel_next/cancel_prev; each in state cancel_state::requested).
  io_op* cancel_head = nullptr;
  io_op* cancel_tail = nullptr;
  std::atomic<bool> cancel_pending{false};

  /// The provided-buffer ring (group 0) receives pick their buffer from, and
  /// its buffers; null when the kernel has none (before 5.19) or refused it.
  io_uring_buf_ring* buffer_ring = nullptr;
  std::byte* buffers = nullptr;
  /// Receives that took a provided buffer. Written by the owner only.
  std::atomic<std::uint64_t> buffer_receives{0};

  void track(io_op* op) noexcept {
    op_links::push_front(tracked, op);
    in_flight.store(in_flight.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void untrack(io_op* op) noexcept {
    op_links::unlink(tracked, op);
    in_flight.store(in_flight.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }

  /// Unlinks `op` from the remote list if it is there. Under remote_mutex.
  bool take_remote(io_op* op) noexcept {
    io_op* before = nullptr;
    for (io_op* it = remote_head; it != nullptr; before = it, it = it->next) {
      if (it != op) continue;
      (before != nullptr ? before->next : remote_head) = op->next;
      if (remote_tail == op) remote_tail = before;
      op->next = nullptr;
      return true;
    }
    return false;
  }
  /// Cancel list operations. Under remote_mutex.
  void link_cancel(io_op* op) noexcept {
    cancel_links::push_back(cancel_head, cancel_tail, op);
    cancel_pending.store(true, std::memory_order_release);
  }
  void unlink_cancel(io_op* op) noexcept {
    cancel_links::unlink(cancel_head, cancel_tail, op);
    if (cancel_head == nullptr) cancel_pending.store(false, std::memory_order_relaxed);
  }
  /// Queues the request that this ring's worker cancel `op` (its next poll
  /// or park issues it: drain_cancels; finish() unlinks it if the op
  /// completes first). False when `op` was asked already or has ended.
  /// Under remote_mutex; the caller then unparks the worker.
  bool queue_cancel(io_op* op) noexcept {
    cancel_state expected = cancel_state::none;
    if (!op->cancel.compare_exchange_strong(expected, cancel_state::requested,
                                            std::memory_order_acq_rel)) {
      return false;
    }
    link_cancel(op);
    return true;
  }
  /// Frees the provided buffers (after the ring exited: the kernel is done
  /// with them).
  void free_buffers() noexcept {
    std::free(buffers);
    std::free(buffer_ring);
    buffers = nullptr;
    buffer_ring = nullptr;
  }
  /// Drops every request (the worker stops: cancel_all covers their ops).
  void clear_cancels() noexcept {
    while (cancel_head != nullptr) {
      io_op* const op = cancel_head;
      unlink_cancel(op);
      op->cancel.store(cancel_state::sent, std::memory_order_relaxed);
    }
  }
};

uring_driver::uring_driver(spindle::detail::io_host& host, std::size_t workers)
    : host_(&host), worker_count_(workers), rings_(new worker_ring[workers]) {
  for (std::size_t i = 0; i < workers; ++i)
    rings_[i].index = i;
}

std::unique_ptr<uring_driver> uring_driver::make(spindle::detail::io_host& host,
                                                 std::size_t workers, std::uint32_t entries) {
  if (workers == 0) workers = 1;
  if (entries == 0) entries = 256;
  if (entries > 32768) entries = 32768;  // IORING_MAX_ENTRIES
  std::uint32_t const cq_entries = entries * 4 > 65536 ? 65536 : entries * 4;

  std::unique_ptr<uring_driver> d{new uring_driver(host, workers)};
  bool chosen = false;
  for (std::size_t i = 0; i < workers; ++i) {
    worker_ring& w = d->rings_[i];
    int r = -EINVAL;
    if (!chosen) {
      for (unsigned flags : setup_tiers) {
        io_uring_params params{};
        params.flags = flags;
        params.cq_entries = cq_entries;
        r = io_uring_queue_init_params(entries, &w.ring, &params);
        if (r != -EINVAL) {
          d->setup_flags_ = flags;
          break;
        }
      }
      chosen = true;
    } else {
      io_uring_params params{};
      params.flags = d->setup_flags_;
      params.cq_entries = cq_entries;
      r = io_uring_queue_init_params(entries, &w.ring, &params);
    }
    if (r < 0) throw_errno(-r, "io_uring_setup");
    w.ring_open = true;

    if (i == 0) {
      io_uring_probe* probe = io_uring_get_probe_ring(&w.ring);
      if (probe == nullptr) throw_errno(ENOSYS, "io_uring probe (kernel older than 5.6)");
      bool ok = true;
      for (int opcode : {IORING_OP_OPENAT, IORING_OP_STATX, IORING_OP_READ, IORING_OP_WRITE,
                         IORING_OP_CLOSE, IORING_OP_ASYNC_CANCEL}) {
        ok = ok && io_uring_opcode_supported(probe, opcode) != 0;
      }
      // Socket opcodes are optional: net.cpp falls back to non-blocking
      // system calls and POLL_ADD (5.1) for the ones this kernel lacks.
      constexpr std::pair<op_code, int> optional[] = {
          {op_code::accept, IORING_OP_ACCEPT},   {op_code::connect, IORING_OP_CONNECT},
          {op_code::recv, IORING_OP_RECV},       {op_code::send, IORING_OP_SEND},
          {op_code::recvmsg, IORING_OP_RECVMSG}, {op_code::sendmsg, IORING_OP_SENDMSG},
          {op_code::poll, IORING_OP_POLL_ADD},
      };
      for (auto [code, opcode] : optional) {
        d->supported_[static_cast<std::size_t>(code)] =
            io_uring_opcode_supported(probe, opcode) != 0;
      }
      ok = ok && d->supports(op_code::poll);
      d->supported_[static_cast<std::size_t>(op_code::statx_at)] = true;  // IORING_OP_STATX
      io_uring_free_probe(probe);
      if (!ok) throw_errno(ENOSYS, "io_uring lacks openat/statx/read/write/close/cancel/poll");
    }

    if (i == 0) d->multishot_accept_ = kernel_at_least(5, 19) && d->supports(op_code::accept);

    w.event_fd = ::eventfd(0, EFD_CLOEXEC);
    if (w.event_fd < 0) throw_errno(errno, "eventfd");
  }
  return d;
}

uring_driver::~uring_driver() {
  shutdown();
  for (std::size_t i = 0; i < worker_count_; ++i) {
    if (rings_[i].event_fd >= 0) ::close(rings_[i].event_fd);
  }
}

io_backend uring_driver::backend() const noexcept {
  return io_backend::uring;
}

void uring_driver::on_worker_start(std::size_t index) {
  worker_ring& w = rings_[index];
  if (setup_flags_ & IORING_SETUP_R_DISABLED) {
    // io_uring_enable_rings is declared but not exported by liburing 2.3's
    // shared library: register directly. This thread becomes the ring's
    // single issuer.
    if (::syscall(__NR_io_uring_register, w.ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr,
                  0) < 0) {
      throw_errno(errno, "IORING_REGISTER_ENABLE_RINGS");
    }
  }
  w.enabled = true;
  setup_provided_buffers(w);
  arm_wake(w);
  int r = io_uring_submit(&w.ring);
  if (r < 0) throw_errno(-r, "io_uring_submit");
}

void uring_driver::setup_provided_buffers(worker_ring& w) noexcept {
  if (!provided_buffers_allowed()) return;
  constexpr std::size_t ring_bytes = provided_buffer_count * sizeof(io_uring_buf);
  void* ring_memory = nullptr;
  if (::posix_memalign(&ring_memory, 4096, ring_bytes) != 0) return;
  auto* buffers = static_cast<std::byte*>(
      std::malloc(std::size_t{provided_buffer_count} * provided_buffer_size));
  if (buffers == nullptr) {
    std::free(ring_memory);
    return;
  }
  std::memset(ring_memory, 0, ring_bytes);
  auto* br = static_cast<io_uring_buf_ring*>(ring_memory);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<std::uintptr_t>(ring_memory);
  reg.ring_entries = provided_buffer_count;
  reg.bgid = 0;
  if (io_uring_register_buf_ring(&w.ring, &reg, 0) != 0) {
    std::free(buffers);
    std::free(ring_memory);
    return;  // receives then use the caller's buffer
  }
  io_uring_buf_ring_init(br);
  int const mask = io_uring_buf_ring_mask(provided_buffer_count);
  for (std::uint32_t i = 0; i < provided_buffer_count; ++i) {
    io_uring_buf_ring_add(br, buffers + std::size_t{i} * provided_buffer_size, provided_buffer_size,
                          static_cast<unsigned short>(i), mask, static_cast<int>(i));
  }
  io_uring_buf_ring_advance(br, static_cast<int>(provided_buffer_count));
  w.buffer_ring = br;
  w.buffers = buffers;
}

void uring_driver::take_provided_buffer(worker_ring& w, io_op& op, int res,
                                        unsigned cqe_flags) noexcept {
  if ((cqe_flags & IORING_CQE_F_BUFFER) == 0 || w.buffer_ring == nullptr) return;
  auto const bid = static_cast<unsigned short>(cqe_flags >> IORING_CQE_BUFFER_SHIFT);
  std::byte* const data = w.buffers + std::size_t{bid} * provided_buffer_size;
  if (res > 0) std::memcpy(op.buffer, data, static_cast<std::size_t>(res));
  w.buffer_receives.store(w.buffer_receives.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
  // Straight back to the ring for the next receive.
  io_uring_buf_ring_add(w.buffer_ring, data, provided_buffer_size, bid,
                        io_uring_buf_ring_mask(provided_buffer_count), 0);
  io_uring_buf_ring_advance(w.buffer_ring, 1);
}

std::uint64_t uring_driver::provided_buffer_receives() const noexcept {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < worker_count_; ++i)
    n += rings_[i].buffer_receives.load(std::memory_order_relaxed);
  return n;
}

io_uring_sqe* uring_driver::acquire_sqe(worker_ring& w) noexcept {
  for (;;) {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&w.ring)) return sqe;
    // The submission queue is full: hand it to the kernel and retry.
    int r = io_uring_submit_and_get_events(&w.ring);
    if (r >= 0 || r == -EINTR) continue;
    // -EBUSY: the completion queue overflowed; -EAGAIN: the kernel is short
    // of request memory. Reaping (and, failing that, waiting for one
    // completion) makes room.
    if (r != -EBUSY && r != -EAGAIN) {
      errno = -r;
      return nullptr;  // unexpected: the caller fails the op with this errno
    }
    std::size_t reaped = reap(w);
    if (reaped == 0 && w.in_flight.load(std::memory_order_relaxed) != 0) {
      io_uring_cqe* cqe = nullptr;
      io_uring_wait_cqe(&w.ring, &cqe);
      reaped = reap(w);
    }
    // poll() reports what it reaps itself; these happen outside it.
    if (reaped != 0 && !w.stopping) {
      host_->count_completions(w.index, reaped);
    }
  }
}

void uring_driver::arm_wake(worker_ring& w) noexcept {
  io_uring_sqe* sqe = acquire_sqe(w);
  if (sqe == nullptr) return;  // unpark then only works through completions
  io_uring_prep_read(sqe, w.event_fd, &w.wake_value, sizeof w.wake_value, 0);
  io_uring_sqe_set_data64(sqe, wake_tag);
  w.wake_armed = true;
}

int uring_driver::prepare(worker_ring& w, io_op& op) noexcept {
  io_uring_sqe* sqe = acquire_sqe(w);
  if (sqe == nullptr) return errno;
  switch (op.code) {
    case op_code::openat:
      io_uring_prep_openat(sqe, op.dir_fd, op.path, op.flags, op.mode);
      break;
    case op_code::statx:
      io_uring_prep_statx(sqe, op.fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS,
                          static_cast<struct statx*>(op.buffer));
      break;
    case op_code::read:
      io_uring_prep_read(sqe, op.fd, op.buffer, op.length, op.offset);
      break;
    case op_code::write:
      io_uring_prep_write(sqe, op.fd, op.buffer, op.length, op.offset);
      break;
    case op_code::close:
      io_uring_prep_close(sqe, op.fd);
      break;
    case op_code::accept:
      if (op.multishot) {
        io_uring_prep_multishot_accept(sqe, op.fd, nullptr, nullptr, op.flags);
      } else {
        io_uring_prep_accept(sqe, op.fd, static_cast<sockaddr*>(op.addr), op.addr_len, op.flags);
      }
      break;
    case op_code::connect:
      io_uring_prep_connect(sqe, op.fd, static_cast<sockaddr const*>(op.addr), op.length);
      break;
    case op_code::recv:
      if (op.select_buffer && w.buffer_ring != nullptr) {
        io_uring_prep_recv(sqe, op.fd, nullptr, std::min(op.length, provided_buffer_size),
                           op.flags);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = 0;
      } else {
        io_uring_prep_recv(sqe, op.fd, op.buffer, op.length, op.flags);
      }
      break;
    case op_code::send:
      io_uring_prep_send(sqe, op.fd, op.buffer, op.length, op.flags);
      break;
    case op_code::recvmsg:
      io_uring_prep_recvmsg(sqe, op.fd, static_cast<msghdr*>(op.buffer),
                            static_cast<unsigned>(op.flags));
      break;
    case op_code::sendmsg:
      io_uring_prep_sendmsg(sqe, op.fd, static_cast<msghdr const*>(op.buffer),
                            static_cast<unsigned>(op.flags));
      break;
    case op_code::poll:
      io_uring_prep_poll_add(sqe, op.fd, static_cast<unsigned>(op.flags));
      break;
    case op_code::statx_at:
      io_uring_prep_statx(sqe, op.dir_fd, op.path, op.flags, op.statx_mask(),
                          static_cast<struct statx*>(op.buffer));
      break;
  }
  io_uring_sqe_set_data64(sqe, reinterpret_cast<std::uintptr_t>(&op));
  w.track(&op);
  return 0;
}

bool uring_driver::submit(io_op& op) noexcept {
  std::size_t const self = host_->current_worker();
  if (self != spindle::detail::not_a_worker) {
    // Fast path: the calling thread is worker `self`: fill an SQE of its
    // own ring. poll() (tick end) or park() submits the batch.
    op.home = static_cast<std::uint32_t>(self);
    if (int const err = prepare(rings_[self], op); err != 0) {
      op.result = -err;
      return false;
    }
    return true;
  }

  // A thread that is not one of our workers (block_on): go through a worker.
  std::size_t const i = next_remote_.fetch_add(1, std::memory_order_relaxed) % worker_count_;
  worker_ring& w = rings_[i];
  op.home = static_cast<std::uint32_t>(i);
  {
    std::lock_guard lock(w.remote_mutex);
    if (w.remote_closed) {
      op.result = -ECANCELED;
      return false;
    }
    op.next = nullptr;
    if (w.remote_tail != nullptr) {
      w.remote_tail->next = &op;
    } else {
      w.remote_head = &op;
    }
    w.remote_tail = &op;
    w.remote_pending.store(true, std::memory_order_release);
  }
  // From here on `op` may complete and its frame resume at any time.
  host_->unpark(i);
  return true;
}

void uring_driver::drain_remote(worker_ring& w) noexcept {
  if (!w.remote_pending.load(std::memory_order_acquire)) return;
  io_op* list = nullptr;
  {
    std::lock_guard lock(w.remote_mutex);
    list = w.remote_head;
    w.remote_head = w.remote_tail = nullptr;
    w.remote_pending.store(false, std::memory_order_relaxed);
  }
  while (list != nullptr) {
    io_op* const next = list->next;
    if (int const err = prepare(w, *list); err != 0) {
      finish(w, *list, -err);  // could not be prepared: complete it at once
    }
    list = next;
  }
}

bool uring_driver::cancel(io_op& op) noexcept {
  worker_ring& w = rings_[op.home];
  bool const own = host_->current_worker() == op.home;
  bool requested = false;
  {
    std::lock_guard lock(w.remote_mutex);
    if (w.take_remote(&op)) {
      // Never submitted: nothing will complete it. A close op still owns the
      // descriptor the file gave up.
      if (op.code == op_code::close) ::close(op.fd);
      op.result = -ECANCELED;
      return true;
    }
    // A stopping worker cancels and reaps everything itself; a close
    // finishes promptly and must not be cancelled (the descriptor would leak).
    if (w.remote_closed || op.code == op_code::close) return false;
    if (!own) requested = w.queue_cancel(&op);
  }
  if (requested) {
    host_->unpark(op.home);  // its next poll/park issues the cancel
    return false;
  }
  cancel_state expected = cancel_state::none;
  if (own &&
      op.cancel.compare_exchange_strong(expected, cancel_state::sent, std::memory_order_acq_rel)) {
    // Worker i itself (the single issuer): prepare the cancel now; the tick
    // end or the next park submits it. acquire_sqe may reap (and wake) the op
    // itself, but its frame lives on: the caller holds the task.
    if (io_uring_sqe* sqe = acquire_sqe(w)) {
      prep_cancel_of(
          sqe, op.cancel.load(std::memory_order_acquire) == cancel_state::done ? nullptr : &op);
    }
  }
  return false;  // the op's completion wakes the task
}

void uring_driver::drain_cancels(worker_ring& w) noexcept {
  while (w.cancel_pending.load(std::memory_order_acquire)) {
    // The SQE first: acquire_sqe may reap, and reaping an op removes its
    // request, so an op taken from the list below is still in flight.
    io_uring_sqe* sqe = acquire_sqe(w);
    if (sqe == nullptr) return;  // the next poll retries
    io_op* op = nullptr;
    {
      std::lock_guard lock(w.remote_mutex);
      op = w.cancel_head;
      if (op != nullptr) {
        w.unlink_cancel(op);
        op->cancel.store(cancel_state::sent, std::memory_order_relaxed);
      }
    }
    prep_cancel_of(sqe, op);  // null: the requests were completed meanwhile (a no-op)
  }
}

void uring_driver::finish(worker_ring& w, io_op& op, int res) noexcept {
  if (w.stopping && yields_descriptor(op.code) && res >= 0) {
    ::close(res);  // nobody will resume this task: do not leak what the op produced
    res = -ECANCELED;
  }
  op.result = res;
  if (op.cancel.exchange(cancel_state::done, std::memory_order_acq_rel) ==
      cancel_state::requested) {
    // A request from another thread is still queued: remove it before the
    // wake lets the frame go. (Requests are taken only on this thread.)
    std::lock_guard lock(w.remote_mutex);
    w.unlink_cancel(&op);
  }
  if (spindle::detail::trace_active()) [[unlikely]] {
    spindle::detail::trace_io(op.task, spindle::detail::trace_kind::io_complete, op_name(op.code),
                              res);
  }
  if (!w.stopping) host_->wake(op.task);  // op may be freed from here on
}

void uring_driver::finish_multishot(worker_ring& w, io_op& op, int res, bool more) noexcept {
  if (w.stopping && res >= 0) {
    // Nobody takes what the op produces once the worker stops.
    if (yields_descriptor(op.code)) ::close(res);
    res = -ECANCELED;
  }
  if (more) {
    if (!w.stopping) op.on_cqe(op, res, true, false);
    return;
  }
  // The last CQE: the op leaves the ring and may be submitted again (or
  // freed by its handler).
  w.untrack(&op);
  if (op.cancel.exchange(cancel_state::done, std::memory_order_acq_rel) ==
      cancel_state::requested) {
    std::lock_guard lock(w.remote_mutex);
    w.unlink_cancel(&op);
  }
  op.on_cqe(op, res, false, w.stopping);
}

void uring_driver::request_cancel(io_op& op) noexcept {
  worker_ring& w = rings_[op.home];
  bool withdrawn = false;
  {
    std::lock_guard lock(w.remote_mutex);
    if (w.take_remote(&op)) {
      // Never reached the ring: it ends here, as its last CQE would.
      withdrawn = true;
      op.cancel.store(cancel_state::done, std::memory_order_relaxed);
    } else {
      if (w.remote_closed) return;       // the stopping worker cancels it
      if (!w.queue_cancel(&op)) return;  // asked already, or ended
    }
  }
  if (withdrawn) {
    op.on_cqe(op, -ECANCELED, false, false);
    return;
  }
  host_->unpark(op.home);  // its next poll/park issues the cancel
}

std::size_t uring_driver::reap(worker_ring& w) noexcept {
  unsigned head = 0;
  unsigned seen = 0;
  std::size_t completed = 0;
  bool rearm = false;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(&w.ring, head, cqe) {
    ++seen;
    std::uint64_t const data = cqe->user_data;
    int const res = cqe->res;
    if (data == wake_tag) {
      w.wake_armed = false;
      rearm = true;
      continue;
    }
    if (data == cancel_tag || data == LIBURING_UDATA_TIMEOUT || data == 0) continue;
    auto* op = reinterpret_cast<io_op*>(static_cast<std::uintptr_t>(data));
    ++completed;
    if (op->multishot) {
      finish_multishot(w, *op, res, (cqe->flags & IORING_CQE_F_MORE) != 0);
      continue;
    }
    w.untrack(op);
    if (op->select_buffer) take_provided_buffer(w, *op, res, cqe->flags);
    finish(w, *op, res);
  }
  io_uring_cq_advance(&w.ring, seen);
  if (rearm && !w.stopping) arm_wake(w);
  return completed;
}

void uring_driver::flush(worker_ring& w) noexcept {
  if (io_uring_sq_ready(&w.ring) != 0 || w.in_flight.load(std::memory_order_relaxed) != 0) {
    io_uring_submit_and_get_events(&w.ring);
  }
}

std::size_t uring_driver::poll(std::size_t index) noexcept {
  worker_ring& w = rings_[index];
  if (!w.enabled || w.stopped) return 0;
  drain_remote(w);
  drain_cancels(w);  // after drain_remote: a cancel follows its op in the ring
  flush(w);
  return reap(w);
}

bool uring_driver::park_in_driver(std::size_t index) const noexcept {
  worker_ring const& w = rings_[index];
  return w.in_flight.load(std::memory_order_relaxed) != 0 ||
         w.remote_pending.load(std::memory_order_relaxed);
}

void uring_driver::park(std::size_t index, std::uint64_t deadline_ns) noexcept {
  worker_ring& w = rings_[index];
  if (!w.enabled || w.stopped) return;
  drain_remote(w);
  drain_cancels(w);
  if (io_uring_cq_ready(&w.ring) != 0) {
    flush(w);
    return;  // completions are waiting: poll() reaps them
  }
  // Blocks until a completion (an op's, or the eventfd read's after unpark),
  // or the deadline. Errors (EINTR, EBUSY, ETIME) just end the park; poll()
  // follows.
  if (deadline_ns == spindle::detail::no_deadline) {
    io_uring_submit_and_wait(&w.ring, 1);
    return;
  }
  std::uint64_t const now = spindle::detail::steady_now_ns();
  if (deadline_ns <= now) {
    flush(w);
    return;
  }
  std::uint64_t left = deadline_ns - now;
  __kernel_timespec ts{static_cast<long long>(left / 1'000'000'000),
                       static_cast<long long>(left % 1'000'000'000)};
  io_uring_cqe* cqe = nullptr;
  io_uring_submit_and_wait_timeout(&w.ring, &cqe, 1, &ts, nullptr);
}

void uring_driver::unpark(std::size_t index) noexcept {
  std::uint64_t const one = 1;
  ssize_t r;
  do {
    r = ::write(rings_[index].event_fd, &one, sizeof one);
  } while (r < 0 && errno == EINTR);
}

void uring_driver::cancel_all(worker_ring& w) noexcept {
  // acquire_sqe may reap (only when the kernel reports an overflow), which
  // unlinks ops while this walks the list: a walk cut short is completed by
  // the next round.
  for (io_op* op = w.tracked; op != nullptr; op = op->next) {
    io_uring_sqe* sqe = acquire_sqe(w);
    if (sqe == nullptr) return;
    prep_cancel_of(sqe, op);
  }
  if (w.wake_armed) {
    if (io_uring_sqe* sqe = acquire_sqe(w)) {
      io_uring_prep_cancel64(sqe, wake_tag, 0);
      io_uring_sqe_set_data64(sqe, cancel_tag);
    }
  }
}

void uring_driver::close_remote(worker_ring& w) noexcept {
  // Refuse further remote submissions; ops still queued were never
  // submitted: they complete as cancelled.
  io_op* list = nullptr;
  {
    std::lock_guard lock(w.remote_mutex);
    w.remote_closed = true;
    list = w.remote_head;
    w.remote_head = w.remote_tail = nullptr;
    w.remote_pending.store(false, std::memory_order_relaxed);
    w.clear_cancels();
  }
  cancel_unsubmitted(list);
}

void uring_driver::on_worker_stop(std::size_t index) noexcept {
  worker_ring& w = rings_[index];
  if (w.stopped) return;

  close_remote(w);

  if (w.enabled && w.ring_open) {
    w.stopping = true;  // reap() completes ops without waking their tasks
    auto last_issue = std::chrono::steady_clock::now() - 2 * cancel_retry;
    while (w.in_flight.load(std::memory_order_relaxed) != 0 || w.wake_armed) {
      auto const now = std::chrono::steady_clock::now();
      if (now - last_issue >= cancel_retry) {
        // (Re-)issue the cancellations: an op the kernel could not cancel
        // yet (-EALREADY, e.g. a blocking read in an io-wq thread) is asked
        // again until it completes.
        cancel_all(w);
        last_issue = now;
      }
      __kernel_timespec ts{};
      ts.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(cancel_retry).count();
      io_uring_cqe* cqe = nullptr;
      io_uring_submit_and_wait_timeout(&w.ring, &cqe, 1, &ts, nullptr);
      reap(w);
    }
  }
  if (w.ring_open) {
    io_uring_queue_exit(&w.ring);
    w.ring_open = false;
  }
  w.free_buffers();
  w.stopped = true;
}

void uring_driver::shutdown() noexcept {
  // Workers that never stopped (never started, or the runtime failed half
  // way): refuse and cancel queued remote ops, release their rings.
  for (std::size_t i = 0; i < worker_count_; ++i) {
    worker_ring& w = rings_[i];
    if (w.stopped) continue;
    close_remote(w);
    if (w.ring_open) {
      io_uring_queue_exit(&w.ring);
      w.ring_open = false;
    }
    w.free_buffers();
    w.stopped = true;
  }
}

}  // namespace spindle::io::detail
