// spindle step processes: the Go process scheduler's Init/Step/Close state machines, run as
// processes (spindle/process.hpp), with commands dispatched to named async
// handlers.
//
//   struct counter {
//     void init(std::string_view method, spindle::payload input);  // throws for an unknown method
//     void step(std::span<const spindle::step_event> events, spindle::step_output& out);
//     void close();
//   };
//   spindle::step_handlers h;
//   h.add("fetch", [](spindle::payload args) -> spindle::task<spindle::payload> { ... });
//   auto p = rt.spawn_step_process<counter>(h, "main", spindle::payload{3});
//   spindle::send(p, spindle::payload{std::string("hello")});   // a message event
//
// Shape: the process calls init(method, input) once, then step({}, out)
// with no events, then step(events, out) each time events arrived: messages
// sent to its pid (step_event::kind::message) and completions of the
// commands it yielded (kind::yield_complete, with the tag step_output::yield
// returned, and the handler's result in `data` or its exception in
// `error`). Every command written into `out` goes to the handler registered
// under its name, spawned as a task on the runtime; its result comes back as
// an event, in completion order (not yield order). A command nobody handles
// comes back at once as a yield_complete event whose error is a
// std::system_error(std::errc::function_not_supported) naming it. The
// process ends when a step calls out.complete() (or init/step throws: then
// monitor rethrows it); close() is called exactly once after init
// returned, however the process ends (also at runtime shutdown). While it
// waits for yields with none of its events pending, state_of reports it
// blocked; waiting for messages only, idle.
//
// Errors: as spawn_process. init's exception ends the process (an unknown
// method is the process's own error: throw from init). Handlers that throw
// deliver the exception in the event.
//
// Thread-safety: init/step/close run on the process only (one at a time);
// step_handlers may be shared by many processes once built (add() is not
// thread-safe, lookups are).
// Design source: the Go process scheduler (Process interface, Event, StepOutput, command
// dispatch with correlation tags).
#pragma once

#include <any>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "spindle/process.hpp"

namespace spindle {

/// A value carried by messages, command arguments and results.
using payload = std::any;

/// One event handed to step().
struct step_event {
  /// What the event reports.
  enum class kind : std::uint8_t {
    message,         ///< sent to the process's pid; `data` is the message
    yield_complete,  ///< a yielded command finished; `tag` says which
  };
  kind type = kind::message;  ///< a message or a command's completion
  std::uint64_t tag = 0;      ///< yield_complete: the tag step_output::yield returned
  payload data;               ///< the message, or the command's result
  std::exception_ptr error;   ///< yield_complete: what the handler threw (or unknown command)
};

/// What a step writes: commands to dispatch, and whether the process is done.
class step_output {
 public:
  /// One yielded command, as dispatched to its handler.
  struct command {
    std::string name;   ///< the handler's name (step_handlers::add)
    payload args;       ///< handed to the handler
    std::uint64_t tag;  ///< returned with the result (step_event::tag)
  };
  /// Yields command `name` with `args`; returns its correlation tag (unique
  /// within the process, increasing).
  std::uint64_t yield(std::string name, payload args = {}) {
    std::uint64_t const tag = ++last_tag_;
    commands_.push_back(command{std::move(name), std::move(args), tag});
    return tag;
  }
  /// Ends the process after this step (its commands are still dispatched;
  /// their results are dropped).
  void complete() noexcept { complete_ = true; }
  /// True once complete() was called.
  [[nodiscard]] bool is_complete() const noexcept { return complete_; }
  /// The commands yielded since the last clear_commands(), in order.
  [[nodiscard]] std::span<command const> commands() const noexcept { return commands_; }
  /// Forgets the yielded commands (the runtime calls it after dispatching).
  void clear_commands() noexcept { commands_.clear(); }

 private:
  std::vector<command> commands_;
  std::uint64_t last_tag_ = 0;
  bool complete_ = false;
};

/// Command handlers by name: each an async function payload -> payload.
class step_handlers {
 public:
  /// An async command handler: its argument payload in, its result out (an
  /// exception becomes the event's `error`).
  using handler = std::function<task<payload>(payload)>;
  /// Registers (or replaces) the handler of `name`.
  step_handlers& add(std::string name, handler h) {
    map_[std::move(name)] = std::move(h);
    return *this;
  }
  /// The handler registered as `name`, or nullptr.
  [[nodiscard]] handler const* find(std::string_view name) const {
    auto it = map_.find(std::string(name));
    return it == map_.end() ? nullptr : &it->second;
  }

 private:
  std::unordered_map<std::string, handler> map_;
};

/// A type spawn_step_process runs.
template <class P>
concept step_process = requires(P& p, std::string_view method, payload input,
                                std::span<step_event const> events, step_output& out) {
  p.init(method, input);
  p.step(events, out);
  p.close();
};

namespace detail {

/// A finished command, travelling back through the process's mailbox.
struct step_completion {
  std::uint64_t tag;
  payload data;
  std::exception_ptr error;
};

inline step_event to_event(payload&& m) {
  if (auto* c = std::any_cast<step_completion>(&m)) {
    return step_event{step_event::kind::yield_complete, c->tag, std::move(c->data),
                      std::move(c->error)};
  }
  return step_event{step_event::kind::message, 0, std::move(m), nullptr};
}

SPINDLE_COROUTINE_TEMPLATE inline task<void> run_command(step_handlers::handler h, payload args,
                                                         std::uint64_t tag, pid<payload> reply_to) {
  step_completion done{tag, {}, nullptr};
  try {
    done.data = co_await h(std::move(args));
  } catch (...) {
    done.error = std::current_exception();
  }
  (void)send(reply_to, payload{std::move(done)});
}

template <class P>
SPINDLE_COROUTINE_TEMPLATE task<void> step_main(process_context<payload>& ctx, std::shared_ptr<P> p,
                                                std::shared_ptr<step_handlers const> handlers,
                                                std::string method, payload input) {
  p->init(method, std::move(input));
  struct close_guard {
    P* p;
    ~close_guard() { p->close(); }
  } closer{p.get()};
  std::vector<step_event> events;
  step_output out;
  std::uint64_t outstanding = 0;
  process_base* const self = ctx.detail_block();
  for (;;) {
    out.clear_commands();
    p->step(std::span<step_event const>(events), out);
    events.clear();
    for (auto const& c : out.commands()) {
      step_handlers::handler const* h = handlers->find(c.name);
      if (h == nullptr) {
        events.push_back(step_event{step_event::kind::yield_complete,
                                    c.tag,
                                    {},
                                    std::make_exception_ptr(std::system_error(
                                        std::make_error_code(std::errc::function_not_supported),
                                        "spindle: unknown command '" + c.name + "'"))});
        continue;
      }
      ++outstanding;
      auto task_handle = spawn(run_command(*h, c.args, c.tag, ctx.self()));
      (void)task_handle;  // detached: its result comes back as a message
    }
    if (out.is_complete()) co_return;
    if (events.empty()) {
      self->awaiting_yields.store(outstanding != 0, std::memory_order_relaxed);
      payload m = co_await ctx.receive();
      self->awaiting_yields.store(false, std::memory_order_relaxed);
      events.push_back(to_event(std::move(m)));
      if (events.back().type == step_event::kind::yield_complete) --outstanding;
    }
    // Whatever else is already there goes into the same step.
    for (;;) {
      std::optional<payload> more = co_await ctx.receive_for(std::chrono::nanoseconds(0));
      if (!more) break;
      events.push_back(to_event(std::move(*more)));
      if (events.back().type == step_event::kind::yield_complete) --outstanding;
    }
  }
}

template <class P, class... A>
pid<payload> spawn_step_on(scheduler* sched, step_handlers const& handlers, std::string method,
                           payload input, A&&... ctor_args) {
  auto proc = std::make_shared<P>(std::forward<A>(ctor_args)...);
  auto h = std::make_shared<step_handlers const>(handlers);
  return detail_spawn_process<payload>(
      sched,
      [proc = std::move(proc), h = std::move(h), method = std::move(method),
       input = std::move(input)](process_context<payload>& ctx) mutable {
        return step_main<P>(ctx, proc, h, std::move(method), std::move(input));
      },
      process_options{}, spawn_location{});
}

}  // namespace detail

/// Spawns a step process: a P (constructed from `ctor_args`) started with
/// init(method, input), on the runtime of the calling thread (as
/// spawn_process). `handlers` is copied. Its pid takes payload messages.
template <step_process P, class... A>
pid<payload> spawn_step_process(step_handlers const& handlers, std::string method, payload input,
                                A&&... ctor_args) {
  detail::scheduler* sched = detail::current_scheduler();
  if (sched == nullptr) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle::spawn_step_process called outside a spindle runtime");
  }
  return detail::spawn_step_on<P>(sched, handlers, std::move(method), std::move(input),
                                  std::forward<A>(ctor_args)...);
}

/// The same from any thread, on `rt`.
template <step_process P, class... A>
pid<payload> spawn_step_process(runtime& rt, step_handlers const& handlers, std::string method,
                                payload input, A&&... ctor_args) {
  return detail::spawn_step_on<P>(rt.scheduler_handle(), handlers, std::move(method),
                                  std::move(input), std::forward<A>(ctor_args)...);
}

}  // namespace spindle
