// One file operation in flight, the awaiter that submits it, and the
// submission interface both I/O drivers implement.
//
// Shape: an io_op is a plain record (opcode, arguments, result, the waiting
// task, list links, cancellation state) that lives in the awaiting
// coroutine's frame: drivers never allocate per operation. `op_awaiter` fills
// it, records the task with detail::suspend_current, installs the task's
// cancel hook, then hands it to the driver of the current runtime through
// driver::submit (runtime/src/driver.hpp, which declares io_op opaque). A
// driver completes the op by storing its result (>= 0, or -errno as the
// kernel reports it) and calling io_host::wake(op->task); the task then
// resumes in await_resume and reads the result.
//
// Cancellation (join_handle::abort of a task suspended here): the scheduler
// calls the hook, which calls driver::cancel(op) on the aborting thread.
// An op no driver thread has taken yet (still queued) is unlinked and the
// task's frame is destroyed at once. An op already in the kernel or on a pool
// thread is asked to stop (IORING_OP_ASYNC_CANCEL; for a pipe or socket wait
// on the thread pool, that op's wait ends) and its completion (-ECANCELED, or
// the real result when it finished first) comes through the normal path; the
// frame (and the buffer the op uses) is destroyed at that completion instead
// of being resumed. A regular-file read or write, an open or a close that is
// already running simply finishes. A descriptor opened by an openat whose
// task never resumed is closed when the awaiter is destroyed.
//
// Thread-safety: after submit() the op belongs to the driver until the wake;
// the submitting thread must not touch it again (with the thread pool the
// completion, and even the resumption, can happen before await_suspend has
// returned). The cancel hook runs while the aborting thread holds the task,
// after the poll that submitted the op has returned, so the fields written
// before and during submit() are visible to it; `cancel` is the only field a
// driver thread and the aborting thread write concurrently.
// Design source: docs/design.md "I/O driver"; the in-frame operation state follows
// the io_uring user_data convention of Tokio's and Glommio's drivers; the
// cancel-then-wait-for-the-completion rule is io_uring's (a buffer stays in
// use until the CQE).
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <system_error>

#include "driver.hpp"
#include "intrusive_list.hpp"
#include "spindle/detail/task_header.hpp"
#include "trace.hpp"

namespace spindle::io::detail {

/// What an io_op asks for.
enum class op_code : std::uint8_t {
  openat,  ///< openat(dir_fd, path, flags, mode); result: new fd
  statx,   ///< statx(fd, "", AT_EMPTY_PATH, mask, stx); result: 0
  read,    ///< pread(fd, buffer, length, offset); result: bytes read
  write,   ///< pwrite(fd, buffer, length, offset); result: bytes written
  close,   ///< close(fd); result: 0
  // Sockets (io/src/net.cpp). The io_uring driver runs them as SQEs when
  // its kernel has the opcode (uring_driver::supports); otherwise net.cpp
  // makes the non-blocking system call itself and waits with `poll`.
  accept,   ///< accept4(fd, addr, addr_len, flags); result: new fd
  connect,  ///< connect(fd, addr, length); result: 0
  recv,     ///< recv(fd, buffer, length, flags); result: bytes received
  send,     ///< send(fd, buffer, length, flags); result: bytes sent
  recvmsg,  ///< recvmsg(fd, buffer = msghdr*, flags); result: bytes received
  sendmsg,  ///< sendmsg(fd, buffer = msghdr*, flags); result: bytes sent
  /// Waits until fd is ready for `flags` (POLLIN/POLLOUT bits); result: the
  /// revents (POLLERR/POLLHUP included). io_uring: IORING_OP_POLL_ADD; the
  /// thread pool: its epoll reactor.
  poll,
  /// statx(dir_fd, path, flags, statx_mask(), buffer = struct statx*);
  /// result: 0. `path` and the buffer live in the awaiting frame until the
  /// completion (kernels of 5.x+ copy the path when they take the SQE, but
  /// nothing relies on that).
  /// io_uring: IORING_OP_STATX (always available: make() requires it).
  statx_at,
};

/// The op's name in a trace file ("read", "accept", ...).
[[nodiscard]] constexpr char const* op_name(op_code code) noexcept {
  switch (code) {
    case op_code::openat:
      return "openat";
    case op_code::statx:
      return "statx";
    case op_code::statx_at:
      return "statx_at";
    case op_code::read:
      return "read";
    case op_code::write:
      return "write";
    case op_code::close:
      return "close";
    case op_code::accept:
      return "accept";
    case op_code::connect:
      return "connect";
    case op_code::recv:
      return "recv";
    case op_code::send:
      return "send";
    case op_code::recvmsg:
      return "recvmsg";
    case op_code::sendmsg:
      return "sendmsg";
    case op_code::poll:
      return "poll";
  }
  return "op";
}

/// True for the ops that yield a new descriptor the waiting task owns (a
/// driver that completes one for a task nobody resumes closes it).
constexpr bool yields_descriptor(op_code code) noexcept {
  return code == op_code::openat || code == op_code::accept;
}

/// Largest byte count a single read or write asks the kernel for (Linux's
/// MAX_RW_COUNT: INT_MAX rounded down to a page). Longer buffers get short
/// counts, as with pread/pwrite.
inline constexpr std::uint32_t max_rw_count = 0x7ffff000u;

/// Where an op's cancellation stands (io_op::cancel). Moves forward only.
enum class cancel_state : std::uint8_t {
  none,       ///< not asked to cancel
  requested,  ///< asked; the driver thread that owns the op has not acted yet
  sent,       ///< the owning driver thread issued the cancellation
  done,       ///< completed (result stored): nothing left to cancel
};

}  // namespace spindle::io::detail

namespace spindle::detail {

/// One operation. Lives in the awaiting coroutine frame until it completes.
/// Not copyable or movable: drivers hold its address. Declared (opaque) by
/// the runtime's driver interface, defined here by the I/O layer.
struct io_op {
  using op_code = io::detail::op_code;
  using cancel_state = io::detail::cancel_state;

  op_code code = op_code::read;
  int fd = -1;
  int dir_fd = AT_FDCWD;          ///< openat, statx_at: the directory `path` is relative to
  int flags = 0;                  ///< openat/statx_at flags, socket msg/accept4 flags, poll events
  ::mode_t mode = 0;              ///< openat mode
  char const* path = nullptr;     ///< openat, statx_at path
  void* buffer = nullptr;         ///< read/write buffer, statx/statx_at: struct statx*
  std::uint32_t length = 0;       ///< read/write bytes (<= max_rw_count); statx_at: statx_mask()
  std::uint64_t offset = 0;       ///< read/write file offset
  void* addr = nullptr;           ///< accept: sockaddr out; connect: sockaddr in
  socklen_t* addr_len = nullptr;  ///< accept: in/out length of *addr
  int result = 0;                 ///< >= 0 success, -errno failure
  spindle::detail::task_header* task = nullptr;  ///< woken on completion
  driver* owner = nullptr;                       ///< the driver it was submitted to
  /// uring: the worker whose ring (or remote list) took the op, set by
  /// submit. Thread pool: the pool thread running it (under the pool mutex).
  std::uint32_t home = 0;
  bool queued = false;  ///< thread pool: in the job queue (guarded by its mutex)
  /// io_uring only: a multishot SQE (accept: IORING_ACCEPT_MULTISHOT). Each
  /// of its CQEs goes to on_cqe instead of waking `task` (unused); the last
  /// one (no IORING_CQE_F_MORE) ends it, after which the op may be submitted
  /// again. Cancelled like any op (cancel()): the final CQE still comes.
  bool multishot = false;
  /// io_uring only, recv: let the kernel pick a buffer from the worker's
  /// provided-buffer ring (IOSQE_BUFFER_SELECT) when the data arrives; the
  /// driver copies the bytes into `buffer` at the completion and gives the
  /// ring buffer back. Receives at most uring_driver::provided_buffer_size
  /// bytes. A ring without provided buffers receives into `buffer` directly.
  bool select_buffer = false;
  /// A multishot op's completion handler, called on the thread that owns
  /// the ring: `res` is the CQE's result, `more` false for the op's last CQE.
  /// `stopping`: the worker is shutting down (res is -ECANCELED or an error:
  /// descriptors it accepted were closed); wake no task then. The op may be
  /// freed by the handler of the last CQE.
  void (*on_cqe)(io_op& op, int res, bool more, bool stopping) noexcept = nullptr;
  /// A cancel_state. Written by the aborting thread and the completing one.
  std::atomic<cancel_state> cancel{cancel_state::none};
  io_op* next = nullptr;  ///< driver list links (queues, in-flight list)
  io_op* prev = nullptr;
  io_op* cancel_next = nullptr;  ///< uring: a worker's list of cancellation requests
  io_op* cancel_prev = nullptr;

  /// statx_at: the STATX_* mask of the fields asked for. Kept in `length`
  /// (statx_at has no byte count), so that io_op does not grow: set it with
  /// `.length = mask`.
  [[nodiscard]] std::uint32_t statx_mask() const noexcept { return length; }
};

}  // namespace spindle::detail

namespace spindle::io::detail {

using spindle::detail::io_op;
/// The links of a driver's lists of ops (in flight, queued).
using op_links = spindle::detail::intrusive_links<io_op, &io_op::prev, &io_op::next>;
/// The links of the io_uring driver's cancel lists.
using cancel_links =
    spindle::detail::intrusive_links<io_op, &io_op::cancel_prev, &io_op::cancel_next>;

/// Awaits one io_op. `co_await op_awaiter{...}` yields the op's result
/// (>= 0 or -errno). Throws std::system_error(EPERM) when awaited outside a
/// spindle task. When the task is aborted while suspended here, the op is
/// cancelled as described in the file comment.
struct op_awaiter : spindle::detail::cancel_hook {
  io_op op;
  /// Handed to the driver and not resumed yet. When the frame is destroyed
  /// in that state (the task was aborted), what the op produced is released.
  bool pending = false;

  ~op_awaiter() {
    // Only reached after the op completed (or was withdrawn with -ECANCELED):
    // the frame is destroyed at the completion's wake, never before it.
    if (pending && yields_descriptor(op.code) && op.result >= 0) ::close(op.result);
  }

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> caller) {
    spindle::detail::driver* drv = spindle::detail::current_driver();
    spindle::detail::task_header* self =
        spindle::detail::suspend_current(caller, spindle::wait_kind::io);
    if (drv == nullptr || self == nullptr) {
      throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                              "spindle::io: file I/O awaited outside a spindle task");
    }
    op.task = self;
    op.owner = drv;
    pending = true;
    // Before submit: once the driver has the op this awaiter must not touch
    // it, and the hook may run as soon as this poll returns.
    spindle::detail::set_cancel_hook(self, this, &op_awaiter::on_cancel);
    if (spindle::detail::trace_active()) [[unlikely]] {
      spindle::detail::trace_io(self, spindle::detail::trace_kind::io_submit, op_name(op.code), 0);
    }
    if (drv->submit(op)) return true;  // `this` may be gone from here on
    // Completed at once: the task keeps running; this suspension never was.
    spindle::detail::clear_cancel_hook(self);
    return false;
  }
  int await_resume() noexcept {
    pending = false;
    return op.result;
  }

  static bool on_cancel(spindle::detail::cancel_hook* hook) noexcept {
    io_op& op = static_cast<op_awaiter*>(hook)->op;
    return op.owner->cancel(op);
  }
};

}  // namespace spindle::io::detail
