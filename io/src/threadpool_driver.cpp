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

namespace spindle::io::detail {

threadpool_driver::threadpool_driver(spindle::detail::scheduler& /*sched*/, std::size_t workers,
                                     std::size_t threads) {
  if (threads == 0) threads = std::max<std::size_t>(4, 2 * workers);
  cancel_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (cancel_fd_ < 0) {
    throw std::system_error(errno, std::system_category(), "spindle: eventfd for the I/O pool");
  }
  threads_.reserve(threads);
  try {
    for (std::size_t i = 0; i < threads; ++i)
      threads_.emplace_back([this] { run(); });
  } catch (...) {
    shutdown();
    ::close(cancel_fd_);
    throw;
  }
}

threadpool_driver::~threadpool_driver() {
  shutdown();
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
void threadpool_driver::park(std::size_t) noexcept {}
void threadpool_driver::unpark(std::size_t) noexcept {}

bool threadpool_driver::submit(io_op& op) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (stopping_.load(std::memory_order_relaxed)) {
      op.result = -ECANCELED;
      return false;
    }
    op.next = nullptr;
    if (tail_ != nullptr) {
      tail_->next = &op;
    } else {
      head_ = &op;
    }
    tail_ = &op;
  }
  // From here on `op` may complete and its frame resume at any time.
  work_cv_.notify_one();
  return true;
}

void threadpool_driver::run() noexcept {
  // Signals are for the application's threads, not for the pool's.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  pthread_setname_np(pthread_self(), "spindle-io");

  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [this] { return head_ != nullptr || stop_threads_; });
    if (head_ == nullptr) return;  // stop_threads_ and nothing left
    io_op* op = head_;
    head_ = op->next;
    if (head_ == nullptr) tail_ = nullptr;
    ++running_;
    lock.unlock();
    complete(*op, execute(*op));
    lock.lock();
    --running_;
    if (running_ == 0 && head_ == nullptr) idle_cv_.notify_all();
  }
}

int threadpool_driver::execute(io_op& op) noexcept {
  long r = 0;
  switch (op.code) {
    case op_code::openat:
      do {
        r = ::openat(AT_FDCWD, op.path, op.flags, op.mode);
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
      if (r < 0 && errno == ESPIPE) return stream_io(op);
      break;
    case op_code::write:
      do {
        r = ::pwrite(op.fd, op.buffer, op.length, static_cast<off_t>(op.offset));
      } while (r < 0 && errno == EINTR);
      if (r < 0 && errno == ESPIPE) return stream_io(op);
      break;
    case op_code::close:
      r = ::close(op.fd);
      if (r < 0 && errno == EINTR) r = 0;  // Linux has released the descriptor anyway
      break;
  }
  return r < 0 ? -errno : static_cast<int>(r);
}

int threadpool_driver::stream_io(io_op& op) noexcept {
  // Like io_uring: try the transfer on a non-blocking descriptor first (a
  // FIFO without writer reads 0 at once), otherwise wait for readiness
  // together with the cancellation eventfd, then transfer.
  bool const reading = op.code == op_code::read;
  int const fl = ::fcntl(op.fd, F_GETFL);
  bool const nonblocking = fl >= 0 && (fl & O_NONBLOCK) != 0;
  auto transfer = [&]() -> ssize_t {
    return reading ? ::read(op.fd, op.buffer, op.length) : ::write(op.fd, op.buffer, op.length);
  };
  pollfd fds[2] = {
      {op.fd, static_cast<short>(reading ? POLLIN : POLLOUT), 0},
      {cancel_fd_, POLLIN, 0},
  };
  for (;;) {
    if (nonblocking) {
      ssize_t const r = transfer();
      if (r >= 0) return static_cast<int>(r);
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return -errno;
    }
    int const n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (fds[1].revents != 0) return -ECANCELED;
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
  wakes_in_progress_.fetch_add(1, std::memory_order_seq_cst);
  if (!stopping_.load(std::memory_order_seq_cst)) {
    spindle::detail::wake(task);  // op may be freed from here on
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
