// The trace file (trace.hpp): Chrome / Perfetto trace-event JSON.
#include "trace.hpp"

#include <cerrno>
#include <cinttypes>
#include <system_error>

#include "scheduler.hpp"

namespace spindle::detail {

tracer::tracer(std::string const& path, std::size_t workers, std::size_t capacity,
               std::uint64_t epoch_ns)
    : path_(path), epoch_ns_(epoch_ns), external_(capacity) {
  if (capacity == 0) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: runtime_config::trace_buffer_events must be at least 1");
  }
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    throw std::system_error(errno, std::generic_category(),
                            "spindle: cannot open the trace file '" + path + "'");
  }
  rings_.reserve(workers);
  for (std::size_t i = 0; i < workers; ++i)
    rings_.emplace_back(capacity);
  tracing_runtimes.fetch_add(1, std::memory_order_relaxed);
}

tracer::~tracer() {
  tracing_runtimes.fetch_sub(1, std::memory_order_relaxed);
  if (file_ != nullptr) std::fclose(file_);
}

void tracer::push_external(trace_record const& r) noexcept {
  std::lock_guard lock(external_mutex_);
  external_.push(r);
}

namespace {

char const* name_of(trace_kind k) noexcept {
  switch (k) {
    case trace_kind::poll:
      return "poll";
    case trace_kind::park:
      return "park";
    case trace_kind::unpark:
      return "unpark";
    case trace_kind::steal:
      return "steal";
    case trace_kind::io_submit:
      return "io_submit";
    case trace_kind::io_complete:
      return "io_complete";
    case trace_kind::timer_fire:
      return "timer";
  }
  return "event";
}

// ns as µs with three decimals ("12.345").
void put_us(std::FILE* f, std::uint64_t ns) {
  std::fprintf(f, "%" PRIu64 ".%03" PRIu64, ns / 1000, ns % 1000);
}

void put_record(std::FILE* f, trace_record const& r, std::size_t tid, std::uint64_t epoch_ns) {
  std::uint64_t const ts = r.ts_ns > epoch_ns ? r.ts_ns - epoch_ns : 0;
  bool const span = r.kind == trace_kind::poll || r.kind == trace_kind::park;
  std::fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%s\",\"pid\":1,\"tid\":%zu,\"ts\":",
               name_of(r.kind),
               r.kind == trace_kind::io_submit || r.kind == trace_kind::io_complete ? "io"
               : r.kind == trace_kind::poll                                         ? "task"
                                                                                    : "sched",
               span ? "X" : "i", tid);
  put_us(f, ts);
  if (span) {
    std::fputs(",\"dur\":", f);
    put_us(f, r.dur_ns);
  } else {
    std::fputs(",\"s\":\"t\"", f);
  }
  switch (r.kind) {
    case trace_kind::poll:
    case trace_kind::timer_fire:
      std::fprintf(f, ",\"args\":{\"task\":%" PRIu64 "}}", r.a);
      break;
    case trace_kind::park:
      std::fputs("}", f);
      break;
    case trace_kind::unpark:
      std::fprintf(f, ",\"args\":{\"runs\":%s}}", r.b != 0 ? "true" : "false");
      break;
    case trace_kind::steal:
      std::fprintf(f, ",\"args\":{\"victim\":%" PRIu64 ",\"tasks\":%" PRId64 "}}", r.a, r.b);
      break;
    case trace_kind::io_submit:
      std::fprintf(f, ",\"args\":{\"task\":%" PRIu64 ",\"op\":\"%s\"}}", r.a,
                   r.name != nullptr ? r.name : "?");
      break;
    case trace_kind::io_complete:
      std::fprintf(f, ",\"args\":{\"task\":%" PRIu64 ",\"op\":\"%s\",\"result\":%" PRId64 "}}", r.a,
                   r.name != nullptr ? r.name : "?", r.b);
      break;
  }
}

}  // namespace

void tracer::write() noexcept {
  if (file_ == nullptr) return;
  std::FILE* f = file_;
  std::size_t const n = rings_.size();
  std::fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f);
  std::fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"spindle\"}}",
             f);
  for (std::size_t i = 0; i <= n; ++i) {
    if (i < n) {
      std::fprintf(f,
                   ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%zu,\"args\":{"
                   "\"name\":\"worker %zu\"}}",
                   i, i);
    } else {
      std::fprintf(f,
                   ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%zu,\"args\":{"
                   "\"name\":\"other threads\"}}",
                   i);
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    rings_[i].for_each([&](trace_record const& r) { put_record(f, r, i, epoch_ns_); });
  {
    std::lock_guard lock(external_mutex_);
    external_.for_each([&](trace_record const& r) { put_record(f, r, n, epoch_ns_); });
  }
  std::fputs("\n],\"otherData\":{\"overwritten_events\":[", f);
  for (std::size_t i = 0; i <= n; ++i) {
    std::fprintf(f, "%s%" PRIu64, i == 0 ? "" : ",",
                 i < n ? rings_[i].overwritten() : external_.overwritten());
  }
  std::fputs("]}}\n", f);
  bool const failed = std::ferror(f) != 0;
  int const rc = std::fclose(f);
  file_ = nullptr;
  if (failed || rc != 0) {
    std::fprintf(stderr, "spindle: could not write the trace file '%s'\n", path_.c_str());
  }
}

void trace_io(task_header* task, trace_kind kind, char const* op, std::int64_t result) noexcept {
  scheduler* sched = scheduler_of(task);
  if (sched == nullptr) return;
  trace_record const r{steady_now_ns(), 0, task_id(task), result, op, kind};
  thread_context const& ctx = this_thread_context();
  if (ctx.sched == sched && ctx.trace != nullptr) {
    ctx.trace->push(r);
  } else if (tracer* t = sched->trace()) {
    t->push_external(r);
  }
}

}  // namespace spindle::detail
