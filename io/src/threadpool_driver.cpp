// The thread-pool driver (see threadpool_driver.hpp for the protocol).
#include "threadpool_driver.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <utility>
#include <vector>

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
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    epoll_fd_ = -1;
    if (reactor_fd_ >= 0) ::close(reactor_fd_);
    reactor_fd_ = -1;
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
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  reactor_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || reactor_fd_ < 0) {
    int const err = errno;
    close_fds();
    throw std::system_error(err, std::system_category(), "spindle: epoll for the I/O pool");
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = reactor_fd_;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, reactor_fd_, &ev) < 0) {
    int const err = errno;
    close_fds();
    throw std::system_error(err, std::system_category(), "spindle: epoll for the I/O pool");
  }
  threads_.reserve(threads);
  try {
    for (std::size_t i = 0; i < threads; ++i)
      threads_.emplace_back([this, i] { run(i); });
    reactor_ = std::thread([this] { run_reactor(); });
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
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (reactor_fd_ >= 0) ::close(reactor_fd_);
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
  if (op.code == op_code::poll) return submit_poll(op);
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
  if (op.code == op_code::poll) return cancel_poll(op);
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
    case op_code::statx_at:
      r = ::statx(op.dir_fd, op.path, op.flags, op.statx_mask(),
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
    default:  // socket calls: socket.cpp makes them itself, never submits them here
      return -ENOSYS;
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
  host_->count_completions(spindle::detail::not_a_worker, 1);
  wakes_in_progress_.fetch_add(1, std::memory_order_seq_cst);
  if (!stopping_.load(std::memory_order_seq_cst)) {
    if (spindle::detail::trace_active()) [[unlikely]] {
      spindle::detail::trace_io(task, spindle::detail::trace_kind::io_complete, op_name(code),
                                result);
    }
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
    // Poll ops still waiting complete as cancelled, waking nobody. (An op
    // the reactor already took completes through complete(), which sees
    // stopping_.) submit_poll checks stopping_ under the same mutex.
    std::lock_guard lock(reactor_mutex_);
    for (auto& [fd, head] : waiters_) {
      while (head != nullptr) {
        io_op* const op = op_links::pop_front(head);
        op->queued = false;
        op->result = -ECANCELED;
        op->cancel.store(cancel_state::done, std::memory_order_release);
      }
    }
    waiters_.clear();
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
  reactor_exit_.store(true, std::memory_order_release);
  if (reactor_.joinable()) {
    std::uint64_t const one = 1;
    [[maybe_unused]] ssize_t r = ::write(reactor_fd_, &one, sizeof one);
    reactor_.join();
  }
}

// ------------------------------------------------------------ epoll reactor

int threadpool_driver::rearm(int fd) noexcept {
  // Under reactor_mutex_. The union of the waiters' events, one-shot.
  auto it = waiters_.find(fd);
  std::uint32_t events = 0;
  if (it != waiters_.end()) {
    for (io_op* op = it->second; op != nullptr; op = op->next)
      events |= static_cast<std::uint32_t>(op->flags);
  }
  if (events == 0) {
    if (it != waiters_.end()) waiters_.erase(it);
    return 0;  // stays registered and disarmed (one-shot) until the next wait
  }
  epoll_event ev{};
  ev.events = events | EPOLLONESHOT;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev) == 0) return 0;
  if (errno != ENOENT) return errno;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0) return 0;
  return errno;
}

bool threadpool_driver::submit_poll(io_op& op) noexcept {
  std::lock_guard lock(reactor_mutex_);
  if (stopping_.load(std::memory_order_seq_cst)) {
    op.result = -ECANCELED;
    return false;
  }
  auto const it = waiters_.try_emplace(op.fd).first;
  op_links::push_front(it->second, &op);
  op.queued = true;
  // op.flags is never 0, so rearm keeps the entry: `it` stays valid.
  if (int const err = rearm(op.fd); err != 0) {
    // EBADF, EPERM (a regular file), ENOMEM, ENOSPC (max_user_watches).
    op_links::unlink(it->second, &op);
    op.queued = false;
    if (it->second == nullptr) waiters_.erase(it);
    op.result = -err;
    return false;
  }
  return true;  // from here on `op` may complete at any time
}

bool threadpool_driver::cancel_poll(io_op& op) noexcept {
  std::lock_guard lock(reactor_mutex_);
  if (!op.queued) return false;  // the reactor took it: its completion wakes the task
  auto it = waiters_.find(op.fd);
  op_links::unlink(it->second, &op);
  op.queued = false;
  rearm(op.fd);  // an error leaves the others armed as before: at worst a spurious wake
  op.result = -ECANCELED;
  return true;
}

void threadpool_driver::run_reactor() noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  pthread_setname_np(pthread_self(), "spindle-epoll");
  constexpr int batch = 128;
  epoll_event events[batch];
  std::vector<std::pair<io_op*, int>> ready;
  for (;;) {
    int const n = ::epoll_wait(epoll_fd_, events, batch, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // EBADF/EINVAL: the driver is gone
    }
    ready.clear();
    {
      std::lock_guard lock(reactor_mutex_);
      for (int i = 0; i < n; ++i) {
        int const fd = events[i].data.fd;
        std::uint32_t const revents = events[i].events;
        if (fd == reactor_fd_) continue;
        auto it = waiters_.find(fd);
        if (it == waiters_.end()) continue;  // every waiter was withdrawn
        bool const all_waiters = (revents & (EPOLLERR | EPOLLHUP)) != 0;
        for (io_op* op = it->second; op != nullptr;) {
          io_op* const next = op->next;
          if (all_waiters || (static_cast<std::uint32_t>(op->flags) & revents) != 0) {
            op_links::unlink(it->second, op);
            op->queued = false;
            ready.emplace_back(op, static_cast<int>(revents));
          }
          op = next;
        }
        rearm(fd);  // may erase the entry
      }
    }
    for (auto [op, revents] : ready)
      complete(*op, revents);  // op may be freed from here on
    if (reactor_exit_.load(std::memory_order_acquire)) return;
  }
}

}  // namespace spindle::io::detail
