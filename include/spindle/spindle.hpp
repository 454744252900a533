// Umbrella header: everything a spindle user needs, runtime and io. It sits
// above both (include/, not runtime/include): the runtime's headers include
// nothing of io/, io/'s include the runtime's.
//
//   #include <spindle/spindle.hpp>
//   spindle::runtime rt{{.workers = 4}};
//   int v = rt.block_on(compute());
//
// Design source: docs/design.md "Public contract".
#pragma once

#include "spindle/barrier.hpp"
#include "spindle/broadcast.hpp"
#include "spindle/channel.hpp"
#include "spindle/errors.hpp"
#include "spindle/event.hpp"
#include "spindle/fiber.hpp"
#include "spindle/fold.hpp"
#include "spindle/io.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/latch.hpp"
#include "spindle/mutex.hpp"
#include "spindle/net.hpp"
#include "spindle/notify.hpp"
#include "spindle/oneshot.hpp"
#include "spindle/process.hpp"
#include "spindle/runtime.hpp"
#include "spindle/rwlock.hpp"
#include "spindle/semaphore.hpp"
#include "spindle/stats.hpp"
#include "spindle/stop_token.hpp"
#include "spindle/task.hpp"
#include "spindle/task_group.hpp"
#include "spindle/time.hpp"
#include "spindle/version.hpp"
#include "spindle/watch.hpp"
#include "spindle/when_all.hpp"
#include "spindle/when_any.hpp"

/// \namespace spindle
/// spindle's public API: the runtime, tasks, spawning, timers, synchronisation
/// primitives and channels. Names under spindle::detail are internal.
///
/// \namespace spindle::io
/// Asynchronous file I/O (spindle/io.hpp): spindle::io::file, read_file.
///
/// \namespace spindle::net
/// Sockets (spindle/net.hpp): endpoints, TCP streams and listeners, UDP and
/// Unix-domain sockets.
///
/// \namespace spindle::this_fiber
/// What code running in a fiber calls about itself (spindle/fiber.hpp):
/// await an awaitable by parking the fiber, yield, sleep.
