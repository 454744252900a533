// One file operation in flight, the awaiter that submits it, and the
// submission interface both I/O drivers implement.
//
// Shape: an io_op is a plain record (opcode, arguments, result, the waiting
// task, list links) that lives in the awaiting coroutine's frame: drivers
// never allocate per operation. `op_awaiter` fills it, records the task with
// detail::suspend_current, then hands it to the driver of the current
// scheduler through io_driver::submit. A driver completes the op by storing
// its result (>= 0, or -errno as the kernel reports it) and calling
// detail::wake(op->task); the task then resumes in await_resume and reads the
// result.
//
// Thread-safety: after submit() the op belongs to the driver until the wake;
// the submitting thread must not touch it again (with the thread pool the
// completion, and even the resumption, can happen before await_suspend has
// returned). Nothing else about an op is shared.
// Design source: DESIGN.md "I/O driver"; the in-frame operation state follows
// the io_uring user_data convention of Tokio's and Glommio's drivers.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <coroutine>
#include <cstdint>
#include <system_error>

#include "spindle/detail/driver.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/runtime.hpp"

namespace spindle::io::detail {

/// What an io_op asks for.
enum class op_code : std::uint8_t {
  openat,  ///< openat(AT_FDCWD, path, flags, mode); result: new fd
  statx,   ///< statx(fd, "", AT_EMPTY_PATH, mask, stx); result: 0
  read,    ///< pread(fd, buffer, length, offset); result: bytes read
  write,   ///< pwrite(fd, buffer, length, offset); result: bytes written
  close,   ///< close(fd); result: 0
};

/// Largest byte count a single read or write asks the kernel for (Linux's
/// MAX_RW_COUNT: INT_MAX rounded down to a page). Longer buffers get short
/// counts, as with pread/pwrite.
inline constexpr std::uint32_t max_rw_count = 0x7ffff000u;

/// One operation. Lives in the awaiting coroutine frame until it completes.
struct io_op {
  op_code code = op_code::read;
  int fd = -1;
  int flags = 0;                                 ///< openat flags
  ::mode_t mode = 0;                             ///< openat mode
  char const* path = nullptr;                    ///< openat path
  void* buffer = nullptr;                        ///< read/write buffer, statx: struct statx*
  std::uint32_t length = 0;                      ///< read/write bytes (<= max_rw_count)
  std::uint64_t offset = 0;                      ///< read/write file offset
  int result = 0;                                ///< >= 0 success, -errno failure
  spindle::detail::task_header* task = nullptr;  ///< woken on completion
  io_op* next = nullptr;                         ///< driver list links (queues, in-flight list)
  io_op* prev = nullptr;
};

/// The submission side every io/ driver offers on top of detail::driver.
class io_driver : public spindle::detail::driver {
 public:
  /// Takes `op` (fully set up, op.task set). Returns true when the op will
  /// complete later by waking op.task; after that the caller must not touch
  /// the op. Returns false when it completed at once (op.result holds the
  /// result, e.g. -ECANCELED during shutdown); the caller resumes directly.
  virtual bool submit(io_op& op) noexcept = 0;
};

/// Awaits one io_op. `co_await op_awaiter{...}` yields the op's result
/// (>= 0 or -errno). Throws std::system_error(EPERM) when awaited outside a
/// spindle task.
struct op_awaiter {
  io_op op;

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> caller) {
    spindle::detail::scheduler* sched = spindle::detail::current_scheduler();
    spindle::detail::task_header* self = spindle::detail::suspend_current(caller);
    if (sched == nullptr || self == nullptr) {
      throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                              "spindle::io: file I/O awaited outside a spindle task");
    }
    op.task = self;
    auto& drv = static_cast<io_driver&>(spindle::detail::scheduler_driver(sched));
    return drv.submit(op);  // `this` may be gone once submit has handed the op over
  }
  int await_resume() const noexcept { return op.result; }
};

}  // namespace spindle::io::detail
