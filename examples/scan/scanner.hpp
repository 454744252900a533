// scan::scanner: spindle-scan's scan of a tree, on the spindle runtime.
//
// Shape (the scanner executor's file-scanning consumer, docs/design.md):
//   - discovery: one task (walk_and_wait, run with block_on, so on a
//     worker) walks the operands (scan::walker) and, for each regular file,
//     takes a permit from a scan::window (suspending while the window is
//     full; the window wakes it once per half window), takes a free scan
//     slot (read buffer, PCRE2 scratch, output batch, counters, the file's
//     job) and spawns one spindle task; the join handle is dropped
//     (detached). The walk shares the workers with the scans, as ripgrep's
//     threads walk and search: no third thread takes the cores, and every
//     spawn is local to a worker. Permits <= slots, so memory stays bounded
//     however large the tree is, and a spawned task always finds its slot.
//   - each task opens the file through spindle::io relative to its directory
//     (open_at on the walker's shared descriptor, so no PATH_MAX; O_NOFOLLOW
//     below the command line, O_NONBLOCK so that a FIFO swapped in cannot
//     block), lets the directory go, checks with fstat that it is a regular
//     file, reads it in chunks with read_at into the slot's buffer, counts
//     the complete lines of each chunk on the worker that resumed it
//     (carrying the partial last line), closes it (inline, see scan_file),
//     appends its result to the slot's batch, returns the slot and the
//     permit. The task owns the slot for its whole life, across every
//     co_await, whichever worker it resumes on.
//   - out of descriptors (EMFILE/ENFILE from the open) while other scans are
//     in flight, a task puts its job on a retry list, returns its slot and
//     gives its permit up for good (the window shrinks by one); the walk
//     task resubmits retries before new files. Only a scan that runs out
//     of descriptors with nothing else in flight (after one more try)
//     reports the error. The walker waits for scans to finish when it is
//     short of descriptors itself (walk_sink::wait_for_descriptors).
//   - the walk task then takes every permit back (all tasks done, no retry
//     left); the main thread, which only waited, writes the remaining
//     batches and reports.
// Output order is completion order; sort it to compare with grep.
//
// Thread-safety: walk_sink calls come from the walk task; scan tasks run on
// any worker; sum() and window_size() from any thread (relaxed counters).
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <spindle/spindle.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "line_buffer.hpp"
#include "matcher.hpp"
#include "output.hpp"
#include "walker.hpp"
#include "window.hpp"

namespace scan {

// One file to scan: its directory (kept open until the file is), its whole
// path for the output, where its name (relative to `dir`) starts in `path`.
struct job {
  scan::dir_ref dir;
  std::string path;
  std::size_t name_at = 0;
  bool command_line = false;
};

// Everything one file scan needs; owned by one task at a time.
struct slot {
  slot(std::size_t buffer_size, scan::matcher const& m)
      : buffer(buffer_size), scratch(m.make_scratch()) {}
  scan::line_buffer buffer;
  scan::matcher::scratch scratch;
  std::string out;
  job work;  // the file being scanned
  // Written by the owning task only (relaxed load + store); summed by the
  // progress thread and at the end.
  std::atomic<std::uint64_t> files{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> lines{0};
  std::atomic<std::uint64_t> matched_files{0};
  std::atomic<std::uint64_t> retries{0};

  static void bump(std::atomic<std::uint64_t>& counter, std::uint64_t by) noexcept {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
};

struct totals {
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  std::uint64_t lines = 0;
  std::uint64_t matched_files = 0;
  std::uint64_t retries = 0;
};

class scanner final : public scan::walk_sink {
 public:
  scanner(scan::matcher const& matcher, std::size_t buffer_size, scan::console& console,
          scan::result_format format, bool print_zero, bool quiet, std::size_t in_flight)
      : matcher_(matcher),
        console_(console),
        format_(format),
        print_zero_(print_zero),
        quiet_(quiet),
        permits_(static_cast<std::uint32_t>(in_flight)) {
    slots_.reserve(in_flight);
    free_.reserve(in_flight);
    for (std::size_t k = 0; k < in_flight; ++k) {
      slots_.push_back(std::make_unique<slot>(buffer_size, matcher));
      free_.push_back(slots_.back().get());
    }
  }

  void attach(spindle::runtime& rt) noexcept { rt_ = &rt; }

  // walk_sink: called from the walk task.
  spindle::task<void> file(scan::dir_ref const& dir, std::string_view name, std::string_view path,
                           bool command_line) override {
    if (has_retries_.load(std::memory_order_acquire)) {
      co_await drain_retries();  // files that ran out of descriptors go first
    }
    // Backpressure: at most `in_flight` files at once; the walk suspends
    // (and its worker scans) while the window is full.
    if (!permits_.try_acquire()) co_await permits_.acquire();
    slot* s = take_slot();
    s->work.dir = dir;
    s->work.path.assign(path);
    s->work.name_at = path.size() - name.size();  // `name` ends `path`
    s->work.command_line = command_line;
    spawn(s);
  }
  void error(std::string_view path, int err) override { report(path, err, {}); }
  void failure(std::string_view path, std::string_view message) override {
    report(path, 0, message);
  }
  void warning(std::string_view path, std::string_view message) override {
    if (quiet_) return;
    std::string text = "warning: ";
    text.append(path);
    text += ": ";
    text.append(message);
    console_.message(text);
  }
  spindle::task<bool> wait_for_descriptors() override {
    for (;;) {
      co_await drain_retries();  // they hold directories open: let them run
      bool const released = co_await permits_.wait_release();
      if (released) co_return true;
      if (!has_retries()) co_return false;
    }
  }

  /// Waits until every scan has finished, retries included.
  spindle::task<void> wait_all() {
    for (;;) {
      co_await drain_retries();
      bool const all_free = co_await permits_.wait_all([this] { return has_retries(); });
      if (all_free && !has_retries()) co_return;
    }
  }

  /// Writes what the slots still hold (after wait_all).
  void flush_all() {
    for (auto& s : slots_)
      note_write(console_.write_out(s->out));
  }

  [[nodiscard]] totals sum() const noexcept {
    totals t;
    for (auto const& s : slots_) {
      t.files += s->files.load(std::memory_order_relaxed);
      t.bytes += s->bytes.load(std::memory_order_relaxed);
      t.lines += s->lines.load(std::memory_order_relaxed);
      t.matched_files += s->matched_files.load(std::memory_order_relaxed);
      t.retries += s->retries.load(std::memory_order_relaxed);
    }
    return t;
  }
  [[nodiscard]] bool had_error() const noexcept { return failed_.load(); }
  /// Files scanned at once now (the window shrinks when descriptors run out).
  [[nodiscard]] std::uint32_t window_size() const noexcept { return permits_.size(); }

 private:
  static spindle::task<void> scan_file(scanner* self, slot* s);

  slot* take_slot() {
    std::lock_guard lock(free_mutex_);
    slot* s = free_.back();
    free_.pop_back();
    return s;
  }
  void return_slot(slot* s) {
    s->work.dir.reset();
    std::lock_guard lock(free_mutex_);
    free_.push_back(s);
  }
  // Starts the scan of s->work (a permit is held).
  void spawn(slot* s) {
    active_.fetch_add(1, std::memory_order_seq_cst);
    try {
      (void)rt_->spawn(scan_file(this, s));  // detached
    } catch (std::exception const& e) {
      active_.fetch_sub(1, std::memory_order_seq_cst);
      report(s->work.path, 0, e.what());
      give_back(s);
    }
  }
  [[nodiscard]] bool has_retries() {
    std::lock_guard lock(retry_mutex_);
    return !retries_.empty();
  }
  spindle::task<void> drain_retries() {
    for (;;) {
      job next;
      {
        std::lock_guard lock(retry_mutex_);
        if (retries_.empty()) {
          has_retries_.store(false, std::memory_order_relaxed);
          co_return;
        }
        next = std::move(retries_.front());
        retries_.pop_front();
      }
      co_await permits_.acquire();
      slot* s = take_slot();
      s->work = std::move(next);
      spawn(s);
    }
  }
  // Called by a task that ran out of descriptors while others are in
  // flight: its job waits on the retry list, its permit leaves the window.
  void defer(slot* s) {
    slot::bump(s->retries, 1);
    {
      std::lock_guard lock(retry_mutex_);
      retries_.push_back(std::move(s->work));
      has_retries_.store(true, std::memory_order_release);
    }
    return_slot(s);
    permits_.shrink();  // wakes the walk task; `this` must not be touched after
  }

  void report(std::string_view path, int err, std::string_view what) {
    failed_.store(true);
    if (quiet_) return;
    if (err != 0) {
      console_.error(path, scan::errno_text(err));
    } else {
      console_.error(path, what);
    }
  }
  void note_write(int err) {
    if (err != 0 && !write_failed_.exchange(true)) {
      failed_.store(true);
      console_.message("write error: " + scan::errno_text(err));
    }
  }
  void finish(slot* s, std::string_view path, std::uint64_t count, std::uint64_t bytes) {
    slot::bump(s->files, 1);
    slot::bump(s->bytes, bytes);
    slot::bump(s->lines, count);
    if (count > 0) slot::bump(s->matched_files, 1);
    if (count > 0 || print_zero_) {
      scan::append_result(s->out, format_, path, count);
      if (s->out.size() >= flush_at_) note_write(console_.write_out(s->out));
    }
  }
  void give_back(slot* s) {
    return_slot(s);
    permits_.release();  // after this the task must not touch `this`
  }

  scan::matcher const& matcher_;
  scan::console& console_;
  scan::result_format format_;
  bool print_zero_;
  bool quiet_;  // -s: no messages about unreadable files
  // Batches go out at 32 KiB; line by line when a person watches stdout.
  std::size_t flush_at_ = ::isatty(STDOUT_FILENO) != 0 ? 1 : 32 * 1024;
  spindle::runtime* rt_ = nullptr;
  scan::window permits_;                // one place per slot at first; shrinks on EMFILE
  std::atomic<std::size_t> active_{0};  // scans spawned and not finished
  std::mutex free_mutex_;
  std::vector<slot*> free_;
  std::vector<std::unique_ptr<slot>> slots_;
  std::mutex retry_mutex_;
  std::deque<job> retries_;
  std::atomic<bool> has_retries_{false};  // retries_ is not empty (set under retry_mutex_)
  std::atomic<bool> failed_{false};
  std::atomic<bool> write_failed_{false};
};

/// The main job: walks every operand (or "." when there is none) and waits
/// until every file scan it started has finished.
spindle::task<void> walk_and_wait(walker& walk, scanner& sc, std::vector<std::string> const& paths);

}  // namespace scan
