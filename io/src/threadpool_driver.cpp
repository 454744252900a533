// The thread-pool driver (see threadpool_driver.hpp for the protocol).
#include "threadpool_driver.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "spindle/runtime.hpp"

namespace spindle::io::detail {

threadpool_driver::threadpool_driver(spindle::detail::io_host& host, std::size_t workers,
                                     std::size_t threads)
    : host_(&host) {
  if (threads == 0) threads = std::max<std::size_t>(4, 2 * workers);
  auto close_fds = [this] {
    for (int fd : thread_fds_)
      ::close(fd);
    thread_fds_.clear();
    if (cancel_fd_ >= 0) ::close(cancel_fd_);
    cancel_fd_ = -1;
  };
  cancel_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (cancel_fd_ < 0) {
    throw std::system_error(errno, std::system_category(), "spindle: eventfd for the I/O pool");
  }
  try {
    thread_fds_.reserve(threads);
    for (std::size_t i = 0; i < threads; ++i) {
      int const fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (fd < 0) {
        throw std::system_error(errno, std::system_category(), "spindle: eventfd for the I/O pool");
      }
      thread_fds_.push_back(fd);
    }
  } catch (...) {
    close_fds();
    throw;
  }
  threads_.reserve(threads);
  try {
    for (std::size_t i = 0; i < threads; ++i)
      threads_.emplace_back([this, i] { run(i); });
  } catch (...) {
    shutdown();
    close_fds();
    throw;
  }
}

threadpool_driver::~threadpool_driver() {
  shutdown();
  for (int fd : thread_fds_)
    ::close(fd);
  if (cancel_fd_ >= 0) ::close(cancel_fd_);
}

io_backend threadpool_driver::backend() const noexcept {
  return io_backend::threadpool;
}

void threadpool_driver::on_worker_start(std::size_t) {}
std::size_t threadpool_driver::poll(std::size_t) noexcept {
  return 0;
}
bool threadpool_driver::park_in_driver(std::size_t) const noexcept {
  return false;
}
void threadpool_driver::park(std::size_t, std::uint64_t) noexcept {}
void threadpool_driver::unpark(std::size_t) noexcept {}

bool threadpool_driver::submit(io_op& op) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (stopping_.load(std::memory_order_relaxed)) {
      op.result = -ECANCELED;
      return false;
    }
    op_links::push_back(head_, tail_, &op);
    op.queued = true;
  }
  // From here on `op` may complete and its frame resume at any time.
  work_cv_.notify_one();
  return true;
}

bool threadpool_driver::cancel(io_op& op) noexcept {
  bool unlinked = false;
  {
    std::lock_guard lock(mutex_);
    if (op.queued) {
      op_links::unlink(head_, tail_, &op);
      op.queued = false;
      unlinked = true;
      if (running_ == 0 && head_ == nullptr) idle_cv_.notify_all();
    }
  }
  if (unlinked) {
    // Never run: nothing will complete it. A close op still owns the
    // descriptor the file gave up.
    if (op.code == op_code::close) ::close(op.fd);
    op.result = -ECANCELED;
    return true;
  }
  // Taken by pool thread op.home (read after the mutex: it was set under it),
  // or completed already. Only a stream wait can be interrupted.
  cancel_state expected = cancel_state::none;
  if ((op.code == op_code::read || op.code == op_code::write) &&
      op.cancel.compare_exchange_strong(expected, cancel_state::requested,
                                        std::memory_order_acq_rel)) {
    std::uint64_t const one = 1;
    [[maybe_unused]] ssize_t const r = ::write(thread_fds_[op.home], &one, sizeof one);
  }
  return false;  // the op's completion wakes the task
}

void threadpool_driver::run(std::size_t index) noexcept {
  // Signals are for the application's threads, not for the pool's.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  pthread_setname_np(pthread_self(), "spindle-io");

  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [this] { return head_ != nullptr || stop_threads_; });
    if (head_ == nullptr) return;  // stop_threads_ and nothing left
    io_op* op = op_links::pop_front(head_, tail_);
    op->queued = false;
    op->home = static_cast<std::uint32_t>(index);
    ++running_;
    lock.unlock();
    complete(*op, execute(*op, thread_fds_[index]));
    lock.lock();
    --running_;
    if (running_ == 0 && head_ == nullptr) idle_cv_.notify_all();
  }
}

int threadpool_driver::execute(io_op& op, int wake_fd) noexcept {
  long r = 0;
  switch (op.code) {
    case op_code::openat:
      do {
        r = ::openat(op.dir_fd, op.path, op.flags, op.mode);
      } while (r < 0 && errno == EINTR);
      break;
    case op_code::statx:
      r = ::statx(op.fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS,
                  static_cast<struct statx*>(op.buffer));
      break;
    case op_code::read:
      do {
        r = ::pread(op.fd, op.buffer, op.length, static_cast<off_t>(op.offset));
      } while (r < 0 && errno == EINTR);
      if (r < 0 && errno == ESPIPE) return stream_io(op, wake_fd);
      break;
    case op_code::write:
      do {
        r = ::pwrite(op.fd, op.buffer, op.length, static_cast<off_t>(op.offset));
      } while (r < 0 && errno == EINTR);
      if (r < 0 && errno == ESPIPE) return stream_io(op, wake_fd);
      break;
    case op_code::close:
      r = ::close(op.fd);
      if (r < 0 && errno == EINTR) r = 0;  // Linux has released the descriptor anyway
      break;
  }
  return r < 0 ? -errno : static_cast<int>(r);
}

int threadpool_driver::stream_io(io_op& op, int wake_fd) noexcept {
  // Like io_uring: try the transfer on a non-blocking descriptor first (a
  // FIFO without writer reads 0 at once), otherwise wait for readiness
  // together with the shutdown eventfd and this thread's abort eventfd, then
  // transfer.
  bool const reading = op.code == op_code::read;
  int const fl = ::fcntl(op.fd, F_GETFL);
  bool const nonblocking = fl >= 0 && (fl & O_NONBLOCK) != 0;
  auto transfer = [&]() -> ssize_t {
    return reading ? ::read(op.fd, op.buffer, op.length) : ::write(op.fd, op.buffer, op.length);
  };
  pollfd fds[3] = {
      {op.fd, static_cast<short>(reading ? POLLIN : POLLOUT), 0},
      {cancel_fd_, POLLIN, 0},
      {wake_fd, POLLIN, 0},
  };
  auto const aborted = [&op] {
    return op.cancel.load(std::memory_order_acquire) == cancel_state::requested;
  };
  for (;;) {
    if (aborted()) return -ECANCELED;
    if (nonblocking) {
      ssize_t const r = transfer();
      if (r >= 0) return static_cast<int>(r);
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return -errno;
    }
    int const n = ::poll(fds, 3, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (fds[1].revents != 0) return -ECANCELED;
    if (fds[2].revents != 0) {
      // Consume the signal, then look at this op's flag: the signal may be
      // meant for an op this thread ran before.
      std::uint64_t value = 0;
      [[maybe_unused]] ssize_t const r = ::read(wake_fd, &value, sizeof value);
      if (aborted()) return -ECANCELED;
      if (fds[0].revents == 0) continue;
    }
    if (fds[0].revents & POLLNVAL) return -EBADF;
    if (!nonblocking && fds[0].revents != 0) {
      ssize_t const r = transfer();
      if (r >= 0) return static_cast<int>(r);
      if (errno != EINTR && errno != EAGAIN) return -errno;
    }
  }
}

void threadpool_driver::complete(io_op& op, int result) noexcept {
  op_code const code = op.code;
  spindle::detail::task_header* const task = op.task;
  op.result = result;
  op.cancel.store(cancel_state::done, std::memory_order_release);
  wakes_in_progress_.fetch_add(1, std::memory_order_seq_cst);
  if (!stopping_.load(std::memory_order_seq_cst)) {
    host_->wake(task);  // op may be freed from here on
  } else if (code == op_code::openat && result >= 0) {
    ::close(result);  // nobody will resume the task to take the descriptor
    op.result = -ECANCELED;
  }
  wakes_in_progress_.fetch_sub(1, std::memory_order_release);
}

void threadpool_driver::begin_stop() noexcept {
  if (!stopping_.exchange(true, std::memory_order_seq_cst)) {
    io_op* list = nullptr;
    {
      std::lock_guard lock(mutex_);
      list = head_;
      head_ = tail_ = nullptr;
      for (io_op* op = list; op != nullptr; op = op->next)
        op->queued = false;  // cancel() reads it under the mutex
      if (running_ == 0) idle_cv_.notify_all();
    }
    for (; list != nullptr; list = list->next) {
      if (list->code == op_code::close) ::close(list->fd);  // the file gave it up already
      list->result = -ECANCELED;
    }
    std::uint64_t const one = 1;
    [[maybe_unused]] ssize_t r = ::write(cancel_fd_, &one, sizeof one);  // ends stream waits
  }
  // A pool thread that saw `stopping_` false may still be inside wake().
  while (wakes_in_progress_.load(std::memory_order_seq_cst) != 0)
    std::this_thread::yield();
}

void threadpool_driver::on_worker_stop(std::size_t) noexcept {
  begin_stop();
}

void threadpool_driver::shutdown() noexcept {
  if (shut_down_) return;
  shut_down_ = true;
  begin_stop();
  {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [this] { return head_ == nullptr && running_ == 0; });
    stop_threads_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace spindle::io::detail
