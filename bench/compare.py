#!/usr/bin/env python3
"""Side-by-side benchmarks of spindle and its peers.

    bench/compare.py [--workers N] [--quick] [--out DIR] [--only SECTION ...]
                     [--libfork DIR]

Builds spindle (Meson, release, into build-bench/), the peers that can be
built (Tokio with Debian's packaged crates, oneTBB, Boost.Asio, Boost.Fiber,
Go; for the net section also hyper; nginx and Redis are Debian's) and runs
every workload on every system with the same worker count (default 2):

  runtime  spawn_many_local, spawn_many_remote_idle, spawn_many_remote_busy,
           yield_many, ping_pong, chained_spawn, spawn_await, fib_30, fib_35,
           memory_per_task (spindle, Tokio, oneTBB, Boost.Asio; each peer
           the workloads it can express), fib_fold_30 and fib_fold_35 (spindle
           alone: the same fib as a spindle::fold over its call tree, no
           coroutine frame per node: spindle's fork-join path); spindle runs them with
           placement::p2c (`spindle`, the default) and again with
           placement::global (`spindle-global`, SPINDLE_PLACEMENT=global),
           each with its own default idle tiers, and the
           spawn_many_*_batch variants (the same spawns with one
           spawn_batch call) on both. With --libfork DIR (a libfork
           checkout: header-only, not in Debian), libfork's lazy_pool runs
           fib_30 and fib_35 too (bench/peers/libfork). The section ends with
           the scheduler targets: each workload oneTBB expresses, chained_spawn
           against Tokio, fib against libfork (spindle::fold, and spawn/join
           for reference). oneTBB runs twice: `onetbb`, its measuring thread
           entering the arena and running tasks (oneTBB's usual
           task_arena::execute), and `onetbb-outside`, started and waited for
           from outside the arena as spindle's and Tokio's runs are (the
           target stays against `onetbb`). The section runs workload by
           workload, every system in turn, so that a row's systems run
           seconds apart; before each system's run of a workload
           bench/xcore_latency measures the round trip of a cache line
           between the first two CPUs: the row <workload>.xcore. A virtual
           machine's host may move its CPUs between cores that share a cache
           and cores that do not during a run, and the workloads that move
           tasks between workers follow it (README, spawn_many_local); a
           ratio far from 1 in that row says the two systems were not
           measured on the same placement, and the target lines say so
  io       4 KiB random reads at queue depth 1 and 32, 128 KiB sequential
           reads at depth 8, warm (page cache) and cold (the file dropped
           from the cache with posix_fadvise where the kernel allows it):
           spindle's io_uring and thread-pool backends with cached reads on
           (spindle, spindle-threadpool: page-cache data copied in the task's
           poll, no driver) and off (spindle-ring-only, spindle-pool-only:
           every read through the driver), fio's io_uring engine (one job per
           worker, depth reads in flight in all, batched submission) and psync
           engine (depth threads)
  scan     spindle-scan, ripgrep (rg -c -F -uuu -a) and GNU grep (grep -rca -F)
           over /usr/include /usr/share, warm: files/s and GB/s
  fiber    stackful fibers: fiber_spawn_join (a root spawns 10,000 empty
           fibers, then joins each: ns/fiber; fiber_spawn_join.stacks_mapped:
           the share of spindle's stacks mapped afresh rather than taken from
           its pools, since all 10,000 may be alive at once), fiber_yield
           (200 fibers x 1,000 yields: ns/yield), fiber_ping_pong (two fibers,
           10,000 round trips over two rendezvous channels: ns/round trip),
           fiber_park_memory and fiber_park_time (100,000 fibers parked in a
           1-hour sleep, in a fresh process per repetition: VmRSS growth in
           bytes/fiber, and ms until the last one has run) on spindle (fibers,
           default 64 KiB stacks; bench/bench_fiber.cpp), spindle-task (the
           same workloads with coroutine tasks and co_await), boost-fiber
           (Boost.Fiber 1.74, default 128 KiB stacks), boost-fiber-64k (64 KiB
           fixedsize_stack: Boost's 128 KiB default crosses glibc's mmap
           threshold) and go (goroutines). After the table, one line per
           target of the fiber issue: met or NOT met, from the medians.
  process  spindle processes (spindle/process.hpp; bench/bench_process.cpp)
           vs caf (CAF 0.17 event-based actors, bench/peers/caf), go
           (goroutines with chan int mailboxes) and tokio-mpsc (Tokio tasks
           with unbounded mpsc channels, bench/peers/tokio): process_ring (10,000
           processes pass one token 10^6 hops: ns/hop), process_fan_in (1,000
           senders x 1,000 messages into one process: msgs/s), process_skynet
           (10^6 leaves of a 10-ary tree, sums sent to parents: ms),
           process_idle_memory (100,000 processes parked in receive, a fresh
           process per repetition: RSS growth in bytes/process). After the
           table, one line per target of the process issue.
  net      servers on loopback, each on a free port with --workers threads,
           started, waited for (connect retries) and stopped by this script:
           http_get (wrk -t1 -c64 -d5s, HTTP/1.1 keep-alive GET / answered
           "Hello, World!\n": requests/s; socket errors or non-2xx responses
           fail the row) on spindle-http (examples/http), nginx (nginx-light,
           a generated nginx.conf: worker_processes N, return 200), tokio
           (hyper 0.14 on Tokio, bench/peers/tokio-net) and boost-asio
           (C++20 coroutines with a Boost.Beast parser,
           bench/peers/asio/asio_net_peer.cpp); resp.<test>.p1 / .p16
           (redis-benchmark -t ping,set,get -n 200000 -c 50 -P 1 / -P 16:
           requests/s per test) on spindle-resp (examples/resp) and
           redis-server 7 (no persistence); echo_64b.p50 / .p99 / .rate (64
           connections, one 64-byte message in flight on each, round trips in
           us and messages/s, from bench/peers/net_echo_client: one epoll
           thread) on spindle (bench/net_echo_server.cpp), tokio and
           boost-asio. One run per server. spindle-http and spindle-resp are
           built when the tree has them; otherwise their rows read "n/a: not
           built". About 1.5 minutes once built (the first hyper build takes
           about one more).

  tracing  what tracing costs (runtime_config::trace_path, SPINDLE_TRACE):
           the runtime workloads but fib_35 and memory_per_task, and 4 KiB
           random reads at depth 1 and 32 through the io_uring driver
           (SPINDLE_CACHED_READS=0, warm), as tracing.<workload>, on
           spindle (this build: the event sites compiled in, tracing off),
           spindle-no-trace-sites (build-bench-no-trace-sites/, meson
           -Dtrace_sites=false: every site compiled out) and spindle-traced
           (this build, SPINDLE_TRACE set: tracing on). Rounds alternate
           the three (rotating who goes first), each round a median of 3
           repetitions; the table has the medians over the rounds (9, or 3
           with --quick). After the table: per workload, the median over
           the rounds of each round's cost ratio (paired: both builds ran
           within seconds of each other) of the sites with tracing off
           (met when at most 1.02x the build without them) and of tracing
           on. Then instructions per operation of both builds
           (bench/icount, callgrind: deterministic) as
           tracing.instructions.<workload>. A 2% bound needs a quiet machine: on a shared one, run
           compare.py as root under `chrt -f 10` (every program it starts
           inherits the real-time class, so other processes cannot preempt
           them; both builds alike). Every round's values go to
           DIR/tracing-rounds.json.

  fold     a bottom-up fold (each node's value a hash after ~20 ns or ~20 us
           of work; a node's result the sum over its subtree) on three
           synthetic trees (bench/fold_trees.hpp): fold_wide_light (fan-out
           100, depth 3: 1,010,101 nodes, ~20 ns each), fold_deep_narrow
           (binary, depth 22: 8,388,607 nodes, ~20 ns each), fold_heavy
           (fan-out 100, depth 2: 10,101 nodes, ~20 us each), ms per fold, on
           sequential (a recursive fold on one thread), spindle (runtime::fold
           on N workers), spindle-fold-pool (fold_pool: N-1 threads + the
           caller), spindle-spawn (a spawned task per node, each child
           awaited; bench/bench_fold.cpp), onetbb (task_group per node in an
           N-slot arena) and openmp (omp task per child + taskwait, g++
           -fopenmp; bench/peers/fold). Every program does the same work per
           node: bench_fold calibrates the rounds, the peers get them through
           SPINDLE_FOLD_ROUNDS. Then du_usr: `spindle-du -s /usr` (-j N; as
           spindle, its default --stat=auto, spindle-sync-stat and
           spindle-uring-stat) and `du -sb /usr`, warm (one run of each first), seconds; the totals
           must agree. After the table, one line per target of the fold
           issue: met or NOT met.

Who does the work, per runtime workload: every system runs N worker threads
and the measuring thread only waits (spindle and Tokio: the workload's root
is a spawned task and the thread sleeps on a channel or a join handle, never
inside block_on, where spindle's thread would run queued tasks and Tokio's
would poll the workload's future: a third thread; oneTBB: the measuring
thread is one of the arena's N slots; Asio: a pool of N threads).
spawn_many_local: a task on a worker spawns 10,000 (local queues);
spawn_many_remote_*: the measuring thread spawns 10,000 (inject queue), a
task on the workers joins them; yield_many: a task spawns 200 yielders;
fib: the root runs on a worker (fib_fold: a task on a worker awaits
spindle::fold, whose walk runs on the workers).
Per fiber workload: spindle's root is a fiber (runtime::spawn_fiber;
spindle-task: a task) and the thread waits on an atomic; Boost.Fiber runs
algo::work_stealing on N threads, the measuring thread being one of them (its
main fiber joins the root fiber; an idle thread spins on stealing,
work_stealing's default suspend = false, as with suspend = true it would sleep
and never steal); Go runs with GOMAXPROCS=N, the root in a goroutine and main
blocked on a channel (holding no P).

What each peer measures and how, for the fiber section:
  spawn_join  spindle: spawn_fiber + this_fiber::await(join_handle) on each;
              spindle-task: spawn + co_await; Boost: boost::fibers::fiber
              (launch::post) + join(); Go: `go f()` + one sync.WaitGroup
              (Go has no join handle: the WaitGroup is its idiom).
  yield       spindle: this_fiber::yield(); spindle-task: co_await
              yield_now; Boost: boost::this_fiber::yield(); Go:
              runtime.Gosched() (which puts the goroutine on the global run
              queue).
  ping_pong   spindle and spindle-task: spindle::channel<int> of capacity 0
              (a rendezvous, as Go's unbuffered chan); Boost:
              boost::fibers::unbuffered_channel<int>; Go: unbuffered chan int.
              The root is the pinging side and spawns the ponging one.
  park        spindle: this_fiber::sleep_for(1 h) (spindle-task: co_await
              sleep_for); Boost: boost::this_fiber::sleep_for (the peer
              leaves with _Exit, the fibers still asleep); Go: time.Sleep.
              Memory is VmRSS after the last fiber ran minus VmRSS before the
              first spawn, over 100,000; it includes stacks' touched pages,
              frames and schedulers' bookkeeping.

Prints one table and writes DIR/compare.json (a list of {"workload",
"system", "value", "unit"} records; lower is better unless the unit ends in
"/s"), DIR/compare.md and DIR/compare.png (gnuplot). DIR defaults to
bench-results/. A peer that cannot be built or run is reported, not fatal.
Medians over repeated runs: Google Benchmark's --benchmark_repetitions for
spindle, the same number of samples for the peers.

--quick: 3 repetitions of short runs, no fib_35, a 256 MiB file instead of
1 GiB, one 1-second fio run per case, the scan over /usr/include only, one
fresh process per system for the parked fibers, 2-second wrk and echo runs
and 50,000 requests per redis-benchmark run.
The Go peer is built with `go build` into build-bench/peers/go (GOCACHE
there, no network: no modules but the standard library); without `go` it is
skipped with a message.
Python 3 standard library only.
"""

import argparse
import contextlib
import csv
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build-bench"
NO_TRACE_SITES_BUILD = ROOT / "build-bench-no-trace-sites"

# workload -> (unit, systems that can run it besides spindle)
RUNTIME_WORKLOADS = {
    "spawn_many_local": "us",
    "spawn_many_remote_idle": "us",
    "spawn_many_remote_busy": "us",
    "spawn_many_local_batch": "us",
    "spawn_many_remote_idle_batch": "us",
    "spawn_many_remote_busy_batch": "us",
    "yield_many": "ms",
    "ping_pong": "us",
    "chained_spawn": "us",
    "spawn_await": "ns/pair",
    "fib_30": "ms",
    "fib_35": "ms",
    # spindle alone: the same fib as a spindle::fold over its call tree
    # (fold.hpp: no coroutine frame per node), spindle's fork-join path.
    "fib_fold_30": "ms",
    "fib_fold_35": "ms",
    "memory_per_task": "bytes/task",
}
PEER_WORKLOADS = {
    # The *_batch workloads are spindle's spawn_batch alone (no peer has one).
    "tokio": [w for w in RUNTIME_WORKLOADS
              if not w.endswith("_batch") and not w.startswith("fib_fold")],
    "onetbb": ["spawn_many_local", "spawn_many_remote_idle", "chained_spawn", "spawn_await",
               "fib_30", "fib_35"],
    # The same peer started and waited for from outside its arena (the shape
    # of spindle's and Tokio's versions); spawn_many_remote_idle is the same
    # in both.
    "onetbb-outside": ["spawn_many_local", "chained_spawn", "spawn_await", "fib_30", "fib_35"],
    "boost-asio": ["spawn_many_local", "spawn_many_remote_idle", "spawn_many_remote_busy",
                   "yield_many", "ping_pong", "chained_spawn", "spawn_await"],
    # Only with --libfork DIR (libfork is not in Debian): fork-join fib.
    "libfork": ["fib_30", "fib_35"],
}
# Google Benchmark name of each runtime workload in bench_runtime.
GB_NAMES = {w: w for w in RUNTIME_WORKLOADS}
GB_NAMES.update({"fib_30": "fib_fork_join", "fib_35": "fib_fork_join",
                 "fib_fold_30": "fib_fold", "fib_fold_35": "fib_fold"})
TIME_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

# I/O cases: name -> (spindle benchmark stem, depth, block bytes, fio rw)
IO_CASES = {
    "read_4k_rand_qd1": ("random_4k", 1, 4096, "randread"),
    "read_4k_rand_qd32": ("random_4k", 32, 4096, "randread"),
    "read_128k_seq_qd8": ("sequential_128k", 8, 131072, "read"),
}

# Fiber workloads: name -> unit. fiber_park_* come from one fresh process
# per repetition (RSS growth).
FIBER_WORKLOADS = {
    "fiber_spawn_join": "ns/fiber",
    "fiber_yield": "ns/yield",
    "fiber_ping_pong": "ns/round trip",
    "fiber_park_memory": "bytes/fiber",
    "fiber_park_time": "ms",
}
FIBER_TIMED = ["fiber_spawn_join", "fiber_yield", "fiber_ping_pong"]
# The targets of the fiber issue: (label, workload, peer, largest spindle/peer
# cost ratio that meets it).
FIBER_TARGETS = [
    ("spawn_join", "fiber_spawn_join", "go", 1.0),
    ("spawn_join", "fiber_spawn_join", "boost-fiber", 0.5),
    ("spawn_join", "fiber_spawn_join", "boost-fiber-64k", 0.5),
    ("yield", "fiber_yield", "boost-fiber", 1.0),
    ("yield", "fiber_yield", "boost-fiber-64k", 1.0),
    ("yield", "fiber_yield", "spindle-task", 2.0),
    ("ping_pong", "fiber_ping_pong", "go", 1.0),
    ("park_memory", "fiber_park_memory", "go", 3.0),
]

# Process workloads (spindle/process.hpp vs Go goroutines with channels,
# CAF event-based actors, Tokio tasks with mpsc): name -> unit.
# process_idle_memory comes from one fresh process per repetition.
PROCESS_WORKLOADS = {
    "process_ring": "ns/hop",
    "process_fan_in": "msgs/s",
    "process_skynet": "ms",
    "process_idle_memory": "bytes/process",
}
PROCESS_TIMED = ["process_ring", "process_fan_in", "process_skynet"]
# The targets of the process issue: (label, workload, peer, largest
# spindle/peer cost ratio), and an absolute bound on the idle memory.
PROCESS_TARGETS = [
    ("ring", "process_ring", "caf", 0.5),
    ("ring", "process_ring", "go", 1.0),
    ("fan_in", "process_fan_in", "caf", 0.5),
    ("skynet", "process_skynet", "go", 1.0),
]
PROCESS_IDLE_BYTES_TARGET = 256

PROCESS_TIMEOUT = 1800


def log(msg):
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


def is_rate(unit):
    return unit.endswith("/s")


def run(cmd, env=None, cwd=None, timeout=PROCESS_TIMEOUT, check=True, discard=False):
    """Runs cmd; returns (returncode, stdout, stderr). discard: stdout goes to
    /dev/null (the scans: their output is not wanted and piping it costs)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        p = subprocess.run(cmd, env=full_env, cwd=cwd, text=True, errors="replace",
                           stdout=subprocess.DEVNULL if discard else subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        if check:
            raise RuntimeError(f"timed out after {timeout} s: {' '.join(map(str, cmd))}")
        return 124, "", f"timed out after {timeout} s"
    except OSError as e:
        if check:
            raise RuntimeError(f"cannot run {cmd[0]}: {e}")
        return 127, "", str(e)
    if check and p.returncode != 0:
        tail = "\n".join((p.stderr or p.stdout or "").strip().splitlines()[-15:])
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{tail}")
    return p.returncode, p.stdout, p.stderr


class Results:
    def __init__(self):
        self.records = []      # {"workload", "system", "value", "unit"}
        self.missing = {}      # (workload, system) -> reason
        self.notes = []
        self.xcore = []        # (system, workload, ns): probe_xcore

    def add(self, workload, system, value, unit):
        self.records.append({"workload": workload, "system": system,
                             "value": round(float(value), 6), "unit": unit})

    def miss(self, workload, system, reason):
        self.missing[(workload, system)] = reason

    def value(self, workload, system):
        for r in self.records:
            if r["workload"] == workload and r["system"] == system:
                return r["value"], r["unit"]
        return None, None


# --------------------------------------------------------------------------
# Building

def build_spindle(sections):
    if not (BUILD / "build.ninja").exists():
        log("configuring spindle (meson, release) in build-bench/")
        run(["meson", "setup", str(BUILD), "-Dbuildtype=release", "-Dtests=disabled",
             "-Dbenchmarks=enabled", "-Dexamples=enabled"], cwd=ROOT)
    else:
        # Reconfigure every time (a few seconds): peers whose libraries were
        # installed since the first run (tools/install-bench-deps) are found.
        log("reconfiguring build-bench/ (finds peers installed since)")
        run(["meson", "setup", "--reconfigure", str(BUILD)], cwd=ROOT)
    if not set(sections) - {"net"}:
        return  # the net section builds its own programs (net())
    log("building spindle's benchmarks and spindle-scan")
    targets = ["bench/bench_runtime", "bench/bench_io", "examples/spindle-scan",
               "bench/xcore_latency"]
    if "bench/bench_fiber" in ninja_targets():  # spindle with fibers
        targets.append("bench/bench_fiber")
    if "fold" in sections:
        targets += [t for t in ("bench/bench_fold", "examples/spindle-du")
                    if t + ":" in ninja_targets()]
    if "process" in sections:
        targets.append("bench/bench_process")
    if "tracing" in sections:
        targets.append("bench/bench_icount")
    run(["ninja", "-C", str(BUILD), *targets])


def ninja_targets():
    _, out, _ = run(["ninja", "-C", str(BUILD), "-t", "targets", "all"], check=False)
    return out


def build_cxx_peer(name, target, status):
    """Builds the Meson target `target` of build-bench/ (a C++ peer, or a
    spindle program of the net section); None with the reason in
    status[name] when this tree or configuration does not have it."""
    if target + ":" not in ninja_targets():
        status[name] = (f"not built: no Meson target {target} (a peer's library not found: "
                        "see tools/install-bench-deps)")
        return None
    try:
        run(["ninja", "-C", str(BUILD), target])
    except RuntimeError as e:
        status[name] = f"build failed: {e}"
        return None
    status[name] = "built"
    return BUILD / target


def cargo_offline_build(crate, label, status_key, status):
    """cargo build --offline --release of bench/peers/<crate> with Debian's
    packaged crates only (/usr/share/cargo/registry), into
    build-bench/peers/<crate>. Returns its target/release directory, or None
    with the reason in status[status_key]."""
    cargo = "/usr/bin/cargo" if Path("/usr/bin/cargo").exists() else shutil.which("cargo")
    registry = Path("/usr/share/cargo/registry")
    work = BUILD / "peers" / crate
    src = work / "src-copy"  # cargo writes Cargo.lock next to the manifest
    home = work / "cargo-home"
    (src / "src").mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    peer = ROOT / "bench" / "peers" / crate
    shutil.copyfile(peer / "Cargo.toml", src / "Cargo.toml")
    shutil.copytree(peer / "src", src / "src", dirs_exist_ok=True)
    (home / "config.toml").write_text(
        "# Written by bench/compare.py: crates come from Debian's packages only.\n"
        "[source.crates-io]\nreplace-with = \"debian-packages\"\n\n"
        f"[source.debian-packages]\ndirectory = \"{registry}\"\n\n"
        "[net]\noffline = true\n")
    env = {"CARGO_HOME": str(home), "CARGO_TARGET_DIR": str(work / "target")}
    if Path("/usr/bin/rustc").exists() and cargo == "/usr/bin/cargo":
        env["RUSTC"] = "/usr/bin/rustc"
    log(f"building {label} (cargo --offline --release, Debian's crates)")
    try:
        run([cargo, "build", "--offline", "--release", "--manifest-path",
             str(src / "Cargo.toml")], env=env)
    except RuntimeError as e:
        status[status_key] = f"build failed: {e}"
        return None
    status[status_key] = "built"
    return work / "target" / "release"


def have_cargo_and(crate_glob, name, package, status_key, status):
    """True when cargo and a crate matching crate_glob (`name`) are in
    Debian's registry; else False with the reason in status[status_key]."""
    cargo = "/usr/bin/cargo" if Path("/usr/bin/cargo").exists() else shutil.which("cargo")
    if cargo is None:
        status[status_key] = "not built: cargo not found (apt-get install cargo)"
        return False
    if not any(Path("/usr/share/cargo/registry").glob(crate_glob)):
        status[status_key] = f"not built: no {name} in /usr/share/cargo/registry " \
                             f"(apt-get install {package})"
        return False
    return True


def build_tokio(status):
    if not have_cargo_and("tokio-1.*", "tokio", "librust-tokio-dev", "tokio", status):
        return None
    release = cargo_offline_build("tokio", "the Tokio peer", "tokio", status)
    return release / "spindle-peer-tokio" if release else None


def build_tokio_net(status):
    """bench/peers/tokio-net: the hyper 0.14 HTTP server and the Tokio echo
    server of the net section. Returns (hyper exe, echo exe) or Nones."""
    if not have_cargo_and("hyper-0.14.*", "hyper 0.14", "librust-hyper-dev", "tokio-net",
                          status):
        return None, None
    release = cargo_offline_build("tokio-net", "the Tokio net peers (hyper, echo)",
                                  "tokio-net", status)
    if release is None:
        return None, None
    return release / "spindle-peer-hyper", release / "spindle-peer-tokio-echo"


def build_go(status):
    """go build of bench/peers/go into build-bench/peers/go (standard library
    only: no module download, GOPROXY=off)."""
    go = shutil.which("go")
    if go is None:
        status["go"] = "not built: go not found (apt-get install golang-go)"
        log("go not found: the fiber section runs without the Go peer "
            "(apt-get install golang-go)")
        return None
    work = BUILD / "peers" / "go"
    work.mkdir(parents=True, exist_ok=True)
    exe = work / "spindle-peer-go"
    env = {"GOCACHE": str(work / "cache"), "GOPATH": str(work / "gopath"),
           "GOPROXY": "off", "GO111MODULE": "on", "GOFLAGS": "-trimpath", "GOWORK": "off",
           "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    log("building the Go peer (go build, standard library only)")
    try:
        run([go, "build", "-o", str(exe), "."], env=env, cwd=ROOT / "bench" / "peers" / "go")
    except RuntimeError as e:
        status["go"] = f"build failed: {e}"
        return None
    _, version, _ = run([go, "version"], check=False)
    status["go"] = f"built ({version.strip()})"
    return exe


# --------------------------------------------------------------------------
# Runtime workloads

def gb_medians(stdout):
    """Google Benchmark JSON -> {run_name: run} using the median aggregate
    when there are repetitions, else the single run."""
    data = json.loads(stdout)
    runs = {}
    for b in data.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                runs[name] = b
        elif name not in runs:
            runs[name] = b
    return runs


def runtime_record(runs, w, workers):
    """bench_runtime's record of workload w: (record, None) or (None, why)."""
    prefix = f"{GB_NAMES[w]}/{workers}"
    if w.startswith("fib_"):
        prefix += "/" + w.rsplit("_", 1)[1]
    match = [r for n, r in runs.items() if n.startswith(prefix + "/")]
    if not match:
        return None, "no result"
    if match[0].get("error_occurred"):
        return None, match[0].get("error_message", "error")
    return match[0], None


def runtime_value(b, w):
    """A bench_runtime record's time in workload w's unit (RUNTIME_WORKLOADS)."""
    ns = b["real_time"] * TIME_UNITS[b.get("time_unit", "ns")]
    return ns / 100_000 if w == "spawn_await" else ns / TIME_UNITS[RUNTIME_WORKLOADS[w]]


# The spindle systems of the runtime section: name -> runtime_config::placement.
SPINDLE_PLACEMENTS = {"spindle": "p2c", "spindle-global": "global"}


def spindle_runtime(cfg, res, workloads, system="spindle"):
    exe = BUILD / "bench" / "bench_runtime"
    env = {"SPINDLE_BENCH_WORKERS": str(cfg.workers),
           "SPINDLE_PLACEMENT": SPINDLE_PLACEMENTS[system]}
    timed = [w for w in workloads if w != "memory_per_task"]
    # fib_30 and fib_35 are two arguments of one benchmark: name the one.
    names = sorted({GB_NAMES[w] + (f"/{cfg.workers}/{w.rsplit('_', 1)[1]}"
                                   if w.startswith("fib_") else "") for w in timed})
    if names:
        log(f"{system}: {', '.join(timed)}")
        _, out, _ = run([str(exe), f"--benchmark_filter=^({'|'.join(names)})/",
                         f"--benchmark_repetitions={cfg.reps}",
                         f"--benchmark_min_time={cfg.min_time}",
                         "--benchmark_report_aggregates_only=true",
                         "--benchmark_format=json"], env=env)
        runs = gb_medians(out)
        for w in timed:
            b, why = runtime_record(runs, w, cfg.workers)
            if b is None:
                res.miss(w, system, why)
                continue
            res.add(w, system, runtime_value(b, w), RUNTIME_WORKLOADS[w])
            if w == "spawn_await" and "allocs_per_pair" in b:
                res.add("spawn_await.allocs_per_pair", system, b["allocs_per_pair"],
                        "allocs/pair")
    if "memory_per_task" in workloads:
        log(f"{system}: memory_per_task (own process)")
        _, out, _ = run([str(exe), "--benchmark_filter=^memory_per_task/",
                         "--benchmark_format=json"], env=env)
        runs = gb_medians(out)
        match = [r for n, r in runs.items() if n.startswith(f"memory_per_task/{cfg.workers}/")]
        if match and "bytes_per_task" in match[0]:
            res.add("memory_per_task", system, match[0]["bytes_per_task"], "bytes/task")
        else:
            res.miss("memory_per_task", system, "no result")


# Placement and batch targets (issue 19): (label, workload, numerator
# system, denominator system, largest cost ratio that meets it).
PLACEMENT_TARGETS = [
    ("p2c vs global, remote_idle", "spawn_many_remote_idle", "spindle", "spindle-global", 1 / 1.3),
    ("p2c vs global, remote_busy", "spawn_many_remote_busy", "spindle", "spindle-global", 1 / 1.3),
    ("p2c vs Tokio, remote_idle", "spawn_many_remote_idle", "spindle", "tokio", 0.3),
    ("p2c vs Tokio, remote_busy", "spawn_many_remote_busy", "spindle", "tokio", 0.3),
]


# The scheduler targets of issue 19 against the peers: (label, workload,
# peer, largest spindle/peer cost ratio that meets it). oneTBB: every
# workload it can express; libfork (with --libfork DIR): fork-join fib.
RUNTIME_TARGETS = [
    (f"{w} vs oneTBB", w, "onetbb", 1.0) for w in PEER_WORKLOADS["onetbb"]
] + [
    # The same bound against oneTBB in the shape of spindle's own runs (the
    # measuring thread outside the pool): shown beside the target, which
    # stays the line above.
    (f"{w} vs oneTBB from outside (same shape; for reference)", w, "onetbb-outside", 1.0)
    for w in PEER_WORKLOADS["onetbb-outside"]
] + [
    ("chained_spawn vs Tokio", "chained_spawn", "tokio", 0.4),
    # spindle's fork-join path (spindle::fold) against libfork's fib, and
    # the general spawn/join for reference; the same with oneTBB.
    ("fib_30 vs libfork, spindle::fold", "fib_30", "libfork", 1.0, "fib_fold_30"),
    ("fib_35 vs libfork, spindle::fold", "fib_35", "libfork", 1.0, "fib_fold_35"),
    ("fib_30 vs libfork, spawn/join (general path; for reference)", "fib_30", "libfork", 1.0),
    ("fib_35 vs libfork, spawn/join (general path; for reference)", "fib_35", "libfork", 1.0),
    ("fib_30 vs oneTBB, spindle::fold", "fib_30", "onetbb", 1.0, "fib_fold_30"),
    ("fib_35 vs oneTBB, spindle::fold", "fib_35", "onetbb", 1.0, "fib_fold_35"),
]


def build_libfork(cfg, status):
    """Compiles bench/peers/libfork/libfork_peer.cpp against the include/
    directory of the libfork checkout cfg.libfork (header-only, not in
    Debian; fetched by the user, never kept here) into build-bench/peers/.
    None with the reason in status["libfork"] without --libfork or when it
    does not compile."""
    if cfg.libfork is None:
        status["libfork"] = ("not built: no --libfork DIR (a libfork checkout, 3.8 tested; "
                             "not packaged by Debian)")
        return None
    include = Path(cfg.libfork).resolve() / "include"
    if not (include / "libfork.hpp").exists():
        status["libfork"] = f"not built: no {include}/libfork.hpp"
        return None
    exe = BUILD / "peers" / "libfork_peer"
    exe.parent.mkdir(parents=True, exist_ok=True)
    cxx = os.environ.get("CXX", "c++")
    try:
        run([cxx, "-std=c++20", "-O3", "-DNDEBUG", "-pthread", "-Wno-interference-size",
             "-I", str(include), str(ROOT / "bench" / "peers" / "libfork" / "libfork_peer.cpp"),
             "-o", str(exe)])
    except RuntimeError as e:
        status["libfork"] = f"build failed: {e}"
        return None
    status["libfork"] = f"built against {include}"
    return exe


def placement_checks(res):
    """The placement targets, then what spawn_batch saves: each
    spawn_many_*_batch against its one-by-one workload, per placement."""
    lines = []
    for label, workload, num, den, bound in PLACEMENT_TARGETS:
        nv, unit = res.value(workload, num)
        dv, _ = res.value(workload, den)
        target = f"target <= {bound:.2f}x cost"
        if nv is None or dv is None:
            lines.append(f"{label}: {num} {fmt(nv)} vs {den} {fmt(dv)}: not measured ({target})")
            continue
        ratio = nv / dv
        verdict = "met" if ratio <= bound else "NOT met"
        lines.append(f"{label}: {num} {fmt(nv)} {unit} vs {den} {fmt(dv)} {unit}: {verdict} "
                     f"({ratio:.2f}x cost, {dv / nv:.2f}x faster; {target})"
                     + placement_differs(res, workload, num, workload, den))
    for system in SPINDLE_PLACEMENTS:
        for one in ("spawn_many_local", "spawn_many_remote_idle", "spawn_many_remote_busy"):
            bv, unit = res.value(one + "_batch", system)
            ov, _ = res.value(one, system)
            if bv is None or ov is None:
                lines.append(f"spawn_batch, {one} ({system}): not measured")
                continue
            lines.append(f"spawn_batch, {one} ({system}): {fmt(bv)} {unit} batched vs "
                         f"{fmt(ov)} {unit} one by one ({ov / bv:.2f}x faster)")
    return lines


def probe_xcore(res, system, workload):
    """Runs bench/xcore_latency (the round trip of a cache line between the
    first two CPUs, ns) just before `system` runs `workload`, and records
    it as the row `<workload>.xcore` of that system (and in res.xcore). The
    host may move the virtual CPUs between cores that share a cache and
    cores that do not at any time: a probe per workload and system tells
    which rows ran on the same side. None when the probe could not run."""
    exe = BUILD / "bench" / "xcore_latency"
    if not exe.exists():
        return None
    code, out, err = run([str(exe)], check=False)
    if code != 0:
        res.notes.append(f"cross-core probe ({system}, {workload}) failed: "
                         f"{(err.strip().splitlines() or [f'exit status {code}'])[-1]}")
        return None
    value = json.loads(out)["round_trip_ns"]
    res.add(f"{workload}.xcore", system, value, "ns")
    res.xcore.append((system, workload, value))
    return value


def placement_differs(res, workload, system, peer_workload, peer):
    """" (placement differs: ...)" when the probes before the two rows differ
    by more than 2x (one ran near, the other far), else ""."""
    a, _ = res.value(f"{workload}.xcore", system)
    b, _ = res.value(f"{peer_workload}.xcore", peer)
    if a is None or b is None or max(a, b) <= 2 * min(a, b):
        return ""
    return f" (placement differs: {system} {a:.0f} ns, {peer} {b:.0f} ns)"


def note_xcore(res):
    """A note on the probes of the runtime section: their range, and a
    warning when the host moved the virtual CPUs during the run."""
    if not res.xcore:
        return
    values = [v for _, _, v in res.xcore]
    low = min(values)
    far = sum(1 for v in values if v > 2 * low)
    note = ("cross-core round trip of a cache line (bench/xcore_latency, ns), probed "
            f"before each system's run of each workload (the rows <workload>.xcore): "
            f"{low:.0f} to {max(values):.0f} ns.")
    if far:
        note += (f" {far} of {len(values)} probes read more than 2x the lowest: the host moved "
                 "the virtual CPUs between cores that share a cache and cores that do not "
                 "during this run. Workloads that move tasks between workers (spawn_many_*, "
                 "chained_spawn, ping_pong) can take 2-5x longer on the far side (README, "
                 "spawn_many_local): compare rows whose systems saw the same side; the "
                 "target lines say when they did not.")
    res.notes.append(note)


def peer_runtime(cfg, res, system, exe, workloads):
    supported = [w for w in workloads if w in PEER_WORKLOADS[system]]
    for w in workloads:
        if w not in supported:
            res.miss(w, system, "not expressible")
    groups = [[w for w in supported if w != "memory_per_task"]]
    if "memory_per_task" in supported:
        groups.append(["memory_per_task"])  # a fresh process: RSS growth
    for group in groups:
        if not group:
            continue
        log(f"{system}: {', '.join(group)}")
        cmd = [str(exe), "--workers", str(cfg.workers), "--reps", str(cfg.reps),
               "--min-time", str(cfg.min_time)]
        if system == "onetbb-outside":
            cmd += ["--from-outside", "1"]
        for w in group:
            cmd += ["--workload", w]
        code, out, err = run(cmd, check=False)
        if code != 0:
            reason = (err.strip().splitlines() or [f"exit status {code}"])[-1]
            for w in group:
                res.miss(w, system, f"failed: {reason}")
            continue
        for r in json.loads(out)["results"]:
            res.add(r["workload"], system, statistics.median(r["samples"]), r["unit"])


# --------------------------------------------------------------------------
# Fiber workloads

def spindle_fiber(cfg, res):
    """bench_fiber: fiber_* rows are spindle's fibers, task_* rows the same
    workloads with coroutine tasks (system spindle-task)."""
    exe = BUILD / "bench" / "bench_fiber"
    env = {"SPINDLE_BENCH_WORKERS": str(cfg.workers)}
    systems = {"fiber": "spindle", "task": "spindle-task"}
    if not exe.exists():
        for w in FIBER_WORKLOADS:
            for system in systems.values():
                res.miss(w, system, "bench_fiber not built")
        return
    log(f"spindle: {', '.join(FIBER_TIMED)} (fibers and tasks)")
    stems = "|".join(w.removeprefix("fiber_") for w in FIBER_TIMED)
    code, out, err = run([str(exe), f"--benchmark_filter=^(fiber|task)_({stems})/",
                          f"--benchmark_repetitions={cfg.reps}",
                          f"--benchmark_min_time={cfg.min_time}",
                          "--benchmark_report_aggregates_only=true",
                          "--benchmark_format=json"], env=env, check=False)
    try:
        runs = gb_medians(out) if code == 0 else {}
    except ValueError:
        runs = {}
    failure = None if runs else \
        "failed: " + (err.strip().splitlines() or [f"exit status {code}"])[-1]
    for w in FIBER_TIMED:
        for kind, system in systems.items():
            name = f"{kind}_{w.removeprefix('fiber_')}/{cfg.workers}/"
            b = next((r for n, r in runs.items() if n.startswith(name)), None)
            if b is None or b.get("error_occurred") or not b.get("items_per_second"):
                res.miss(w, system, failure or (b or {}).get("error_message", "no result"))
                continue
            # items/s over real time: ns per fiber, yield or round trip.
            res.add(w, system, 1e9 / b["items_per_second"], FIBER_WORKLOADS[w])
            if "stacks_mapped_per_fiber" in b:
                res.add("fiber_spawn_join.stacks_mapped", system, b["stacks_mapped_per_fiber"],
                        "maps/fiber")
    for kind, system in systems.items():
        log(f"{system}: 100,000 parked, {cfg.park_reps} fresh process(es)")
        memory, ms = [], []
        for _ in range(cfg.park_reps):
            code, out, err = run([str(exe), f"--benchmark_filter=^{kind}_park/",
                                  "--benchmark_format=json"], env=env, check=False)
            try:
                b = next(iter(gb_medians(out).values()), None) if code == 0 else None
            except ValueError:
                b = None
            if b is None or "bytes_per_fiber" not in b:
                reason = (err.strip().splitlines() or [f"exit status {code}"])[-1]
                res.miss("fiber_park_memory", system, f"failed: {reason}")
                res.miss("fiber_park_time", system, f"failed: {reason}")
                break
            memory.append(b["bytes_per_fiber"])
            ms.append(b["park_ms"])
        else:
            res.add("fiber_park_memory", system, statistics.median(memory), "bytes/fiber")
            res.add("fiber_park_time", system, statistics.median(ms), "ms")


def peer_timed(cfg, res, system, cmd, workloads, env=None):
    """Runs a peer's timed `workloads` in one process (the peers' JSON
    protocol: --workers/--reps/--min-time/--workload) and records the median
    of each one's samples, or its failure."""
    log(f"{system}: {', '.join(workloads)}")
    timed = cmd + ["--workers", str(cfg.workers), "--reps", str(cfg.reps),
                   "--min-time", str(cfg.min_time)]
    for w in workloads:
        timed += ["--workload", w]
    code, out, err = run(timed, env=env, check=False)
    if code != 0:
        reason = (err.strip().splitlines() or [f"exit status {code}"])[-1]
        for w in workloads:
            res.miss(w, system, f"failed: {reason}")
        return
    for r in json.loads(out)["results"]:
        res.add(r["workload"], system, statistics.median(r["samples"]), r["unit"])


def target_checks(res, targets):
    """One line per (label, workload, peer, bound[, spindle's workload])
    target: spindle's median (of the peer's workload, or of the one named
    last) against the peer's, met when the cost ratio is at most `bound`."""
    lines = []
    for label, workload, peer, bound, *own in targets:
        mine = own[0] if own else workload
        sv, unit = res.value(mine, "spindle")
        pv, _ = res.value(workload, peer)
        target = f"target <= {bound:g}x"
        if sv is None or pv is None:
            why = (res.missing.get((mine, "spindle"), "no result") if sv is None
                   else res.missing.get((workload, peer), "no result"))
            lines.append(f"{label}: spindle {fmt(sv)} vs {peer} {fmt(pv)}: not measured "
                         f"({target}; {why})")
            continue
        ratio = cost_ratio(sv, pv, unit)
        if ratio is None:
            lines.append(f"{label}: spindle {fmt(sv)} vs {peer} {fmt(pv)}: no ratio ({target})")
            continue
        verdict = "met" if ratio <= bound else "NOT met"
        lines.append(f"{label}: spindle {fmt(sv)} {unit} vs {peer} {fmt(pv)} {unit}: "
                     f"{verdict} ({ratio:.2f}x cost; {target})"
                     + placement_differs(res, mine, "spindle", workload, peer))
    return lines


def peer_fiber(cfg, res, system, cmd, env=None):
    """A peer's fiber workloads: the timed ones in one process, then
    cfg.park_reps fresh processes of fiber_park (RSS growth)."""
    peer_timed(cfg, res, system, cmd, FIBER_TIMED, env)
    log(f"{system}: 100,000 parked, {cfg.park_reps} fresh process(es)")
    samples = {}
    for _ in range(cfg.park_reps):
        code, out, err = run(cmd + ["--workers", str(cfg.workers), "--workload", "fiber_park"],
                             env=env, check=False)
        if code != 0:
            reason = (err.strip().splitlines() or [f"exit status {code}"])[-1]
            res.miss("fiber_park_memory", system, f"failed: {reason}")
            res.miss("fiber_park_time", system, f"failed: {reason}")
            return
        for r in json.loads(out)["results"]:
            samples.setdefault((r["workload"], r["unit"]), []).extend(r["samples"])
    for (w, unit), values in samples.items():
        res.add(w, system, statistics.median(values), unit)


def fiber_checks(res):
    """One line per target of the fiber issue, from the medians."""
    return target_checks(res, FIBER_TARGETS)


# --------------------------------------------------------------------------
# Process workloads

def spindle_process(cfg, res):
    """bench_process: the timed workloads in one run with repetitions, then
    cfg.park_reps fresh processes of process_idle_bytes (RSS growth)."""
    exe = BUILD / "bench" / "bench_process"
    env = {"SPINDLE_BENCH_WORKERS": str(cfg.workers)}
    if not exe.exists():
        for w in PROCESS_WORKLOADS:
            res.miss(w, "spindle", "bench_process not built")
        return
    log(f"spindle: {', '.join(PROCESS_TIMED)}")
    code, out, err = run([str(exe), "--benchmark_filter=^process_(ring|fan_in|skynet)",
                          f"--benchmark_repetitions={cfg.reps}",
                          f"--benchmark_min_time={cfg.min_time}",
                          "--benchmark_report_aggregates_only=true",
                          "--benchmark_format=json"], env=env, check=False)
    try:
        runs = gb_medians(out) if code == 0 else {}
    except ValueError:
        runs = {}
    failure = None if runs else \
        "failed: " + (err.strip().splitlines() or [f"exit status {code}"])[-1]
    for w in PROCESS_TIMED:
        b = next((r for n, r in runs.items() if n.startswith(w + "/")), None)
        if b is None or b.get("error_occurred") or not b.get("items_per_second"):
            res.miss(w, "spindle", failure or (b or {}).get("error_message", "no result"))
            continue
        if w == "process_ring":
            res.add(w, "spindle", 1e9 / b["items_per_second"], PROCESS_WORKLOADS[w])
        elif w == "process_fan_in":
            res.add(w, "spindle", b["items_per_second"], PROCESS_WORKLOADS[w])
        else:
            ms = b["real_time"] * TIME_UNITS[b.get("time_unit", "ns")] / 1e6
            res.add(w, "spindle", ms, PROCESS_WORKLOADS[w])
    log(f"spindle: 100,000 idle processes, {cfg.park_reps} fresh process(es)")
    memory = []
    for _ in range(cfg.park_reps):
        code, out, err = run([str(exe), "--benchmark_filter=^process_idle_bytes",
                              "--benchmark_format=json"], env=env, check=False)
        try:
            b = next(iter(gb_medians(out).values()), None) if code == 0 else None
        except ValueError:
            b = None
        if b is None or "bytes_per_process" not in b:
            reason = (err.strip().splitlines() or [f"exit status {code}"])[-1]
            res.miss("process_idle_memory", "spindle", f"failed: {reason}")
            return
        memory.append(b["bytes_per_process"])
    res.add("process_idle_memory", "spindle", statistics.median(memory), "bytes/process")


def peer_process(cfg, res, system, cmd, env=None):
    """A peer's process workloads (the peers' JSON protocol): the timed ones
    in one process, then cfg.park_reps fresh processes of process_idle."""
    peer_timed(cfg, res, system, cmd, PROCESS_TIMED, env)
    log(f"{system}: 100,000 idle processes, {cfg.park_reps} fresh process(es)")
    values = []
    for _ in range(cfg.park_reps):
        code, out, err = run(cmd + ["--workers", str(cfg.workers), "--workload", "process_idle"],
                             env=env, check=False)
        if code != 0:
            reason = (err.strip().splitlines() or [f"exit status {code}"])[-1]
            res.miss("process_idle_memory", system, f"failed: {reason}")
            return
        values += [v for r in json.loads(out)["results"] for v in r["samples"]]
    if values:
        res.add("process_idle_memory", system, statistics.median(values), "bytes/process")


def process_checks(res):
    """One line per target of the process issue, from the medians."""
    lines = target_checks(res, PROCESS_TARGETS)
    sv, _ = res.value("process_idle_memory", "spindle")
    if sv is None:
        lines.append(f"idle_memory: not measured (target <= {PROCESS_IDLE_BYTES_TARGET} bytes)")
    else:
        verdict = "met" if sv <= PROCESS_IDLE_BYTES_TARGET else "NOT met"
        lines.append(f"idle_memory: spindle {fmt(sv)} bytes/process: {verdict} "
                     f"(target <= {PROCESS_IDLE_BYTES_TARGET})")
    return lines


# --------------------------------------------------------------------------
# I/O workloads

def make_io_file(path, mib):
    want = mib * 1024 * 1024
    if path.exists() and path.stat().st_size == want:
        return
    log(f"writing the {mib} MiB I/O test file {path}")
    chunk = bytes((i * 131 + 7) & 0xFF for i in range(1 << 20))
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())


def read_whole(path):
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass


# spindle's I/O systems: (backend, cached reads, system name). With cached
# reads on (the default), a read whose data is in the page cache is copied by
# preadv2(RWF_NOWAIT) in the task's poll and neither driver sees it; off
# (SPINDLE_CACHED_READS=0), every read goes through the driver: the ring
# alone, or the thread pool alone.
SPINDLE_IO_SYSTEMS = [
    ("uring", True, "spindle"),
    ("threadpool", True, "spindle-threadpool"),
    ("uring", False, "spindle-ring-only"),
    ("threadpool", False, "spindle-pool-only"),
]


def spindle_io(cfg, res, path):
    exe = BUILD / "bench" / "bench_io"
    runs_by_cached = {}
    for cached in (True, False):
        env = {"SPINDLE_BENCH_WORKERS": str(cfg.workers), "SPINDLE_BENCH_FILE": str(path),
               "SPINDLE_CACHED_READS": "1" if cached else "0"}
        log(f"spindle: I/O (io_uring and thread-pool backends, warm and cold, cached reads "
            f"{'on' if cached else 'off'})")
        _, out, _ = run([str(exe),
                         "--benchmark_filter=^(random_4k|sequential_128k)_(uring|threadpool)/",
                         f"--benchmark_repetitions={cfg.reps}",
                         f"--benchmark_min_time={cfg.min_time}",
                         "--benchmark_report_aggregates_only=true",
                         "--benchmark_format=json"], env=env)
        runs_by_cached[cached] = gb_medians(out)
    cold_ok = True
    for case, (stem, depth, block, _) in IO_CASES.items():
        for cold in (0, 1):
            workload = f"{case}.{'cold' if cold else 'warm'}"
            unit = "kreads/s" if block == 4096 else "MB/s"
            for backend, cached, system in SPINDLE_IO_SYSTEMS:
                runs = runs_by_cached[cached]
                prefix = f"{stem}_{backend}/depth:{depth}/workers:{cfg.workers}/cold:{cold}/"
                match = [r for n, r in runs.items() if n.startswith(prefix)]
                if not match:
                    res.miss(workload, system, "no result")
                    continue
                b = match[0]
                if b.get("error_occurred"):
                    res.miss(workload, system, b.get("error_message", "error"))
                    if cold:
                        cold_ok = False
                    continue
                if block == 4096:
                    res.add(workload, system, b["items_per_second"] / 1e3, unit)
                else:
                    res.add(workload, system, b["bytes_per_second"] / 1e6, unit)
    return cold_ok


def fio_io(cfg, res, path, size_bytes, cold_ok):
    fio = shutil.which("fio")
    if fio is None:
        for case in IO_CASES:
            for temp in ("warm", "cold"):
                for system in ("fio-io_uring", "fio-psync"):
                    res.miss(f"{case}.{temp}", system, "fio not installed")
        return
    for case, (_, depth, block, rw) in IO_CASES.items():
        for cold in (0, 1):
            workload = f"{case}.{'cold' if cold else 'warm'}"
            for engine in ("io_uring", "psync"):
                system = f"fio-{engine}"
                if cold and not cold_ok:
                    res.miss(workload, system, "cold cache not available here")
                    continue
                log(f"fio: {workload} ({engine})")
                cmd = [fio, f"--name={case}", f"--filename={path}", f"--rw={rw}", f"--bs={block}", f"--ioengine={engine}", "--thread",
                       "--group_reporting", "--norandommap", "--randrepeat=0",
                       f"--invalidate={cold}", "--output-format=json"]
                if engine == "io_uring":
                    # As spindle's: one ring per worker (a job per worker),
                    # `depth` reads in flight in all, submitted in batches.
                    jobs = min(cfg.workers, depth)
                    per_job = max(1, depth // jobs)
                    cmd += [f"--numjobs={jobs}", f"--iodepth={per_job}"]
                    if per_job > 1:
                        cmd += [f"--iodepth_batch_submit={per_job}",
                                "--iodepth_batch_complete_min=1",
                                f"--iodepth_batch_complete_max={per_job}"]
                else:  # synchronous: one job (thread) per read in flight
                    jobs = depth
                if rw == "read" and jobs > 1:  # each job over its own part of the file
                    cmd += [f"--size={size_bytes // jobs}",
                            f"--offset_increment={size_bytes // jobs}"]
                else:
                    cmd.append(f"--size={size_bytes}")
                if cold:
                    # As spindle's cold iterations: 2048 reads in all right
                    # after the file left the cache (longer runs warm it up).
                    cmd.append(f"--number_ios={2048 // jobs}")
                else:
                    cmd += ["--time_based", f"--runtime={cfg.fio_runtime}"]
                if not cold:
                    read_whole(path)  # into the page cache
                samples_rate = []
                for _ in range(cfg.fio_reps + 2 if cold else cfg.fio_reps):
                    code, out, err = run(cmd, check=False)
                    if code != 0:
                        res.miss(workload, system, f"fio failed: {err.strip()[-200:]}")
                        break
                    try:
                        job = json.loads(out[out.index("{"):])["jobs"][0]["read"]
                    except (ValueError, KeyError, IndexError) as e:
                        res.miss(workload, system, f"fio output unreadable: {e}")
                        break
                    samples_rate.append(job["iops"] / 1e3 if block == 4096
                                        else job["bw_bytes"] / 1e6)
                else:
                    res.add(workload, system, statistics.median(samples_rate),
                            "kreads/s" if block == 4096 else "MB/s")


# --------------------------------------------------------------------------
# Scan workload

def scan(cfg, res):
    paths = ["/usr/include"] if cfg.quick else ["/usr/include", "/usr/share"]
    paths = [p for p in paths if Path(p).is_dir()]
    pattern = "include"
    spindle_scan = BUILD / "examples" / "spindle-scan"
    log(f"scan: counting its files and bytes ({' '.join(paths)})")
    _, _, err = run([str(spindle_scan), "--stats", "--json", "-j", str(cfg.workers), "-F",
                     "-e", pattern, "--no-progress", *paths], check=False)
    stats = json.loads(err[err.index("{"):err.rindex("}") + 1])
    files, size = stats["files"], stats["bytes"]
    res.notes.append(f"scan: {' '.join(paths)}, fixed string \"{pattern}\", {files} files, "
                     f"{size / 1e9:.2f} GB (as counted by spindle-scan); files/s and GB/s "
                     "are those totals over each program's wall time")
    systems = {
        "spindle": [str(spindle_scan), "-j", str(cfg.workers), "-F", "-e", pattern,
                    "--no-progress", *paths],
    }
    if shutil.which("rg"):
        systems["ripgrep"] = ["rg", "-c", "-F", "-uuu", "-a", "-j", str(cfg.workers),
                              pattern, *paths]
    else:
        res.miss("scan.files", "ripgrep", "rg not installed")
        res.miss("scan.bytes", "ripgrep", "rg not installed")
    if shutil.which("grep"):
        systems["grep"] = ["grep", "-rca", "-F", pattern, *paths]
    else:
        res.miss("scan.files", "grep", "grep not installed")
        res.miss("scan.bytes", "grep", "grep not installed")
    for system, cmd in systems.items():
        log(f"scan: {system}")
        env = {"LC_ALL": "C"}
        run(cmd, env=env, check=False, discard=True)  # warm-up
        times = []
        for _ in range(cfg.scan_reps):
            start = time.perf_counter()
            code, _, _ = run(cmd, env=env, check=False, discard=True)
            times.append(time.perf_counter() - start)
            if code not in (0, 1):
                res.notes.append(f"scan: {system} exited with status {code}")
        t = statistics.median(times)
        res.add("scan.files", system, files / t, "files/s")
        res.add("scan.bytes", system, size / t / 1e9, "GB/s")


# --------------------------------------------------------------------------
# Net workloads: servers on loopback ports, loaded by wrk, redis-benchmark and
# bench/peers/net_echo_client.

def free_port():
    """A loopback TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_server(proc):
    """SIGTERM to the server's process group (nginx: master and workers),
    SIGKILL after 5 s."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def serving(cmd, port, log_path, deadline=15.0):
    """Starts cmd (its own process group, output to log_path), waits until
    127.0.0.1:port accepts a connection (retrying until `deadline` seconds)
    and yields the process; stops it on the way out, also on errors. Raises
    RuntimeError when it exits or does not listen in time."""
    with open(log_path, "w") as out:
        proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            end = time.monotonic() + deadline
            while True:
                if proc.poll() is not None:
                    tail = " / ".join(Path(log_path).read_text(errors="replace")
                                      .strip().splitlines()[-3:])
                    raise RuntimeError(f"exited with status {proc.returncode} before "
                                       f"listening: {tail or 'no output'}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > end:
                        raise RuntimeError(f"not listening on port {port} after {deadline:.0f} s")
                    time.sleep(0.05)
            yield proc
        finally:
            stop_server(proc)


def still_up(proc):
    if proc.poll() is not None:
        raise RuntimeError(f"the server died during the run (status {proc.returncode})")


def nginx_conf(directory, port, workers):
    """A self-contained nginx.conf in `directory` (pid, logs, temp files
    there); `user root;` when run as root, where nginx would otherwise switch
    its workers to an account that cannot read the directory."""
    (directory / "tmp").mkdir(parents=True, exist_ok=True)
    temp = "\n".join(f"    {kind}_temp_path {directory / 'tmp' / kind};"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = directory / "nginx.conf"
    conf.write_text(f"""# Written by bench/compare.py (net section).
{"user root;" if os.geteuid() == 0 else ""}
worker_processes {workers};
daemon off;
master_process on;
pid {directory / 'nginx.pid'};
error_log {directory / 'error.log'} warn;
events {{
    worker_connections 1024;
}}
http {{
    access_log off;
    keepalive_requests 1000000;
{temp}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            default_type text/plain;
            return 200 "Hello, World!\\n";
        }}
    }}
}}
""")
    return conf


def parse_wrk(out):
    """wrk's report -> (requests/s, problems): problems lists socket errors and
    non-2xx/3xx responses (empty when there were none)."""
    m = re.search(r"^Requests/sec:\s*([\d.]+)", out, re.M)
    if not m:
        raise ValueError("no Requests/sec line")
    problems = []
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                       out)
    if errors and any(int(x) for x in errors.groups()):
        problems.append("socket errors: connect {}, read {}, write {}, timeout {}"
                        .format(*errors.groups()))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", out)
    if non2xx and int(non2xx.group(1)):
        problems.append(f"{non2xx.group(1)} non-2xx/3xx responses")
    return float(m.group(1)), problems


def net_http(cfg, res, servers, out_dir):
    """HTTP/1.1 keep-alive GET /: wrk -t1 -c64 against each server. servers:
    system -> launcher (port -> command line) or the reason it cannot run."""
    if not shutil.which("wrk"):
        for system in servers:
            res.miss("http_get", system, "wrk not installed (apt-get install wrk)")
        return
    for system, launch in servers.items():
        if isinstance(launch, str):
            res.miss("http_get", system, launch)
            continue
        port = free_port()
        log(f"net: http_get on {system} (wrk -t1 -c64 -d{cfg.net_seconds}s)")
        try:
            with serving(launch(port), port, out_dir / f"http-{system}.log") as proc:
                code, out, err = run(["wrk", "-t1", "-c64", f"-d{cfg.net_seconds}s",
                                      f"http://127.0.0.1:{port}/"],
                                     timeout=cfg.net_seconds + 60, check=False)
                still_up(proc)
            if code != 0:
                raise RuntimeError(f"wrk exited with status {code}: {err.strip()[-200:]}")
            rate, problems = parse_wrk(out)
            (out_dir / f"http-{system}.wrk.txt").write_text(out)
            if problems:
                raise RuntimeError("; ".join(problems))
            res.add("http_get", system, rate, "req/s")
        except (RuntimeError, ValueError) as e:
            res.miss("http_get", system, f"failed: {e}")


RESP_TESTS = {"PING_INLINE": "ping_inline", "PING_MBULK": "ping_mbulk", "SET": "set",
              "GET": "get"}


def net_resp(cfg, res, servers, out_dir):
    """redis-benchmark -t ping,set,get -c 50, pipelines 1 and 16."""
    workloads = [f"resp.{t}.p{p}" for p in (1, 16) for t in RESP_TESTS.values()]
    if not shutil.which("redis-benchmark"):
        for system in servers:
            for w in workloads:
                res.miss(w, system, "redis-benchmark not installed (apt-get install redis-tools)")
        return
    for system, launch in servers.items():
        if isinstance(launch, str):
            for w in workloads:
                res.miss(w, system, launch)
            continue
        port = free_port()
        try:
            with serving(launch(port), port, out_dir / f"resp-{system}.log") as proc:
                for pipeline in (1, 16):
                    log(f"net: redis-benchmark -P {pipeline} on {system} (-n {cfg.resp_requests})")
                    code, out, err = run(
                        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t",
                         "ping,set,get", "-n", str(cfg.resp_requests), "-c", "50",
                         "-P", str(pipeline), "--csv"],
                        timeout=180, check=False)
                    still_up(proc)
                    errors = [ln for ln in err.splitlines() if "error" in ln.lower()]
                    rates = {}
                    for row in csv.reader(out.splitlines()):
                        if len(row) >= 2 and row[0] in RESP_TESTS:
                            rates[RESP_TESTS[row[0]]] = float(row[1])
                    for test in RESP_TESTS.values():
                        w = f"resp.{test}.p{pipeline}"
                        if code != 0:
                            res.miss(w, system, f"failed: redis-benchmark exited with status "
                                                f"{code}: {err.strip()[-200:]}")
                        elif errors:
                            res.miss(w, system, f"failed: {errors[0][:200]}")
                        elif test not in rates:
                            res.miss(w, system, "failed: no result in redis-benchmark's output")
                        else:
                            res.add(w, system, rates[test], "req/s")
        except RuntimeError as e:
            for w in workloads:
                if res.value(w, system)[0] is None:
                    res.miss(w, system, f"failed: {e}")


def net_echo(cfg, res, client, servers, out_dir):
    """64-byte echo round trips over 64 connections: p50, p99 and messages/s."""
    workloads = {"echo_64b.p50": "us", "echo_64b.p99": "us", "echo_64b.rate": "msgs/s"}
    for system, launch in servers.items():
        reason = launch if isinstance(launch, str) else \
            None if client else "the load client bench/peers/net_echo_client was not built"
        if reason:
            for w in workloads:
                res.miss(w, system, reason)
            continue
        port = free_port()
        log(f"net: echo_64b on {system} (64 connections, {cfg.net_seconds} s)")
        try:
            with serving(launch(port), port, out_dir / f"echo-{system}.log") as proc:
                code, out, err = run([client, "--port", str(port), "--connections", "64",
                                      "--size", "64", "--duration", str(cfg.net_seconds),
                                      "--warmup", "1"],
                                     timeout=cfg.net_seconds + 60, check=False)
                still_up(proc)
            if code != 0:
                raise RuntimeError(f"net_echo_client exited with status {code}: "
                                   f"{err.strip()[-200:]}")
            r = json.loads(out)
            res.add("echo_64b.p50", system, r["p50_us"], "us")
            res.add("echo_64b.p99", system, r["p99_us"], "us")
            res.add("echo_64b.rate", system, r["messages_per_s"], "msgs/s")
        except (RuntimeError, ValueError, KeyError) as e:
            for w in workloads:
                res.miss(w, system, f"failed: {e}")


def launcher(exe, status_key, status, *args):
    """port -> the command line of a built server (exe args... --port P), or,
    when exe is None, the reason it was not built (status[status_key])."""
    if exe is None:
        return status.get(status_key, "not built")
    return lambda port: [exe, *args, "--port", port]


def nginx_launcher(out_dir, workers, status):
    """port -> nginx with a generated nginx.conf, or why nginx cannot run."""
    if not shutil.which("nginx"):
        status["nginx"] = "not installed (apt-get install nginx-light)"
        return status["nginx"]
    status["nginx"] = "found"
    return lambda port: ["nginx", "-p", out_dir, "-e", out_dir / "nginx-error.log",
                         "-c", nginx_conf(out_dir / "nginx", port, workers)]


def redis_launcher(out_dir, status):
    """port -> redis-server without persistence, or why it cannot run."""
    if not shutil.which("redis-server"):
        status["redis"] = "not installed (apt-get install redis-server)"
        return status["redis"]
    _, version, _ = run(["redis-server", "--version"], check=False)
    status["redis"] = f"found ({' '.join(version.split()[:3])})"
    return lambda port: ["redis-server", "--port", port, "--bind", "127.0.0.1",
                         "--save", "", "--appendonly", "no", "--dir", out_dir]


def net(cfg, res, status, out_dir):
    """The net section: builds its servers and the load client, runs the
    three workloads. A server that is missing gives "n/a" rows."""
    out_dir = out_dir / "net"
    out_dir.mkdir(parents=True, exist_ok=True)
    w = str(cfg.workers)
    http_exe = build_cxx_peer("spindle-http", "examples/spindle-http", status)
    resp_exe = build_cxx_peer("spindle-resp", "examples/spindle-resp", status)
    echo_exe = build_cxx_peer("spindle-echo", "bench/net_echo_server", status)
    asio = build_cxx_peer("boost-asio-net", "bench/peers/asio_net_peer", status)
    client = build_cxx_peer("net_echo_client", "bench/peers/net_echo_client", status)
    hyper, tokio_echo = build_tokio_net(status)

    net_http(cfg, res, {
        "spindle": launcher(http_exe, "spindle-http", status, "--workers", w),
        "tokio": launcher(hyper, "tokio-net", status, "--workers", w),
        "boost-asio": launcher(asio, "boost-asio-net", status, "http", "--threads", w),
        "nginx": nginx_launcher(out_dir, w, status),
    }, out_dir)
    net_resp(cfg, res, {
        "spindle": launcher(resp_exe, "spindle-resp", status, "--workers", w),
        "redis": redis_launcher(out_dir, status),
    }, out_dir)
    echo = {
        "spindle": launcher(echo_exe, "spindle-echo", status, "--workers", w),
        "tokio": launcher(tokio_echo, "tokio-net", status, "--workers", w),
        "boost-asio": launcher(asio, "boost-asio-net", status, "echo", "--threads", w),
    }
    net_echo(cfg, res, client and str(client), echo, out_dir)
    res.notes.append(
        f"net: every server on 127.0.0.1 with {cfg.workers} workers (redis-server: its one "
        "event-loop thread), the load generator on the same cores. http_get: wrk -t1 -c64 "
        f"-d{cfg.net_seconds}s, keep-alive GET / -> 'Hello, World!\\n' (nginx: return 200, "
        "keepalive_requests 1000000); a run with socket errors or non-2xx responses fails. "
        f"resp.*: redis-benchmark -t ping,set,get -n {cfg.resp_requests} -c 50, -P 1 and -P 16. "
        f"echo_64b: bench/peers/net_echo_client (one epoll thread), 64 connections each with "
        f"one 64-byte message in flight, {cfg.net_seconds} s after 1 s of warm-up; p50/p99 of "
        f"the round trips. One run per server (no repetitions). Logs in {out_dir}")


# --------------------------------------------------------------------------
# Output

SYSTEM_ORDER = ["spindle", "spindle-global", "spindle-task", "spindle-fold-pool", "spindle-spawn",
                "spindle-sync-stat", "spindle-uring-stat", "spindle-no-trace-sites",
                "spindle-traced", "sequential",
                "tokio", "onetbb", "onetbb-outside", "libfork", "openmp", "gnu-du", "boost-asio", "boost-fiber",
                "boost-fiber-64k", "go", "spindle-threadpool",
                "spindle-ring-only", "spindle-pool-only",
                "fio-io_uring", "fio-psync", "ripgrep", "grep", "nginx", "redis"]


# --------------------------------------------------------------------------
# Fold workloads

FOLD_TREES = {0: "fold_wide_light", 1: "fold_deep_narrow", 2: "fold_heavy"}
FOLD_NODES = {"fold_wide_light": 1_010_101, "fold_deep_narrow": 8_388_607, "fold_heavy": 10_101}
FOLD_SYSTEMS = {"BM_fold_sequential": "sequential", "BM_fold_spawn": "spindle-spawn",
                "BM_fold_pool": "spindle-fold-pool", "BM_fold_runtime": "spindle"}


def spindle_fold(cfg, res):
    """bench_fold: the tree's preset policy for the folds. Returns the
    calibrated rounds as "LIGHT,HEAVY" for the peers, or None."""
    exe = BUILD / "bench" / "bench_fold"
    log("spindle: fold (sequential, spawn, fold_pool, runtime::fold)")
    _, out, _ = run([str(exe),
                     "--benchmark_filter=^BM_fold_(sequential|spawn)/|^BM_fold_(pool|runtime)/[0-9]/-1/",
                     f"--benchmark_repetitions={cfg.reps}",
                     f"--benchmark_min_time={cfg.min_time}",
                     "--benchmark_report_aggregates_only=true",
                     "--benchmark_format=json"], env={"SPINDLE_BENCH_WORKERS": str(cfg.workers)})
    rounds = {}
    for name, b in gb_medians(out).items():
        parts = name.split("/")
        system = FOLD_SYSTEMS.get(parts[0])
        if system is None:
            continue
        workload = FOLD_TREES[int(parts[1])]
        if b.get("error_occurred"):
            res.miss(workload, system, b.get("error_message", "error"))
            continue
        res.add(workload, system, b["real_time"] * TIME_UNITS[b.get("time_unit", "ns")] / 1e6, "ms")
        if system == "sequential" and "rounds" in b:
            rounds[int(parts[1])] = int(b["rounds"])
    if 0 in rounds and 2 in rounds:
        return f"{rounds[0]},{rounds[2]}"
    return None


def fold_du(cfg, res):
    """spindle-du -s /usr vs du -sb /usr, warm; seconds (median)."""
    spindle_du = BUILD / "examples" / "spindle-du"
    if not spindle_du.exists() or not shutil.which("du"):
        res.miss("du_usr", "spindle", "spindle-du or du missing")
        return
    # spindle: --stat=auto (the default: direct statx while fast, io_uring
    # batches once one is slow); spindle-sync-stat: direct statx calls inside
    # the fold (--sync-stat); spindle-uring-stat: every statx in io_uring
    # batches (--stat=uring).
    cmds = {"spindle": [str(spindle_du), "-s", "-j", str(cfg.workers), "/usr"],
            "spindle-sync-stat": [str(spindle_du), "--sync-stat", "-s", "-j", str(cfg.workers),
                                  "/usr"],
            "spindle-uring-stat": [str(spindle_du), "--stat=uring", "-s", "-j",
                                   str(cfg.workers), "/usr"],
            "gnu-du": ["du", "-sb", "/usr"]}
    totals = {}
    times = {k: [] for k in cmds}
    for name, cmd in cmds.items():  # warm the cache
        _, out, _ = run(cmd, check=False)
        totals[name] = out.split("\t")[0] if out else None
    for _ in range(cfg.reps):  # a run is well under a second
        for name, cmd in cmds.items():
            t0 = time.perf_counter()
            run(cmd, check=False)
            times[name].append(time.perf_counter() - t0)
    for name in cmds:
        res.add("du_usr", name, statistics.median(times[name]), "s")
    for name in ("spindle", "spindle-sync-stat", "spindle-uring-stat"):
        if totals[name] != totals["gnu-du"]:
            res.notes.append(f"du_usr: totals differ: {name} {totals[name]}, "
                             f"du {totals['gnu-du']}")


def peer_runtime_fold(cfg, res, system, exe, rounds):
    log(f"{system}: fold")
    code, out, err = run([str(exe), "--workers", str(cfg.workers), "--reps", str(cfg.reps),
                          "--min-time", str(cfg.min_time)],
                         env={"SPINDLE_FOLD_ROUNDS": rounds}, check=False)
    if code != 0:
        reason = (err.strip().splitlines() or [f"exit status {code}"])[-1]
        for w in FOLD_TREES.values():
            res.miss(w, system, f"failed: {reason}")
        return
    for r in json.loads(out)["results"]:
        res.add(r["workload"], system, statistics.median(r["samples"]), r["unit"])


def fold_checks(cfg, res):
    """One line per target of the fold issue, from the medians."""
    lines = []
    for w in FOLD_TREES.values():
        sv, _ = res.value(w, "spindle")
        for peer in ("onetbb", "openmp"):
            pv, _ = res.value(w, peer)
            if sv is None or pv is None:
                lines.append(f"{w}: spindle {fmt(sv)} ms vs {peer} {fmt(pv)} ms: not measured")
                continue
            verdict = "met" if sv <= pv else "NOT met"
            lines.append(f"{w}: spindle {fmt(sv)} ms vs {peer} {fmt(pv)} ms: {verdict} "
                         f"({sv / pv:.2f}x; target <= 1x)")
    sv, _ = res.value("fold_wide_light", "spindle")
    qv, _ = res.value("fold_wide_light", "sequential")
    if sv is not None and qv is not None:
        nodes = FOLD_NODES["fold_wide_light"]
        over = (sv * cfg.workers - qv) * 1e6 / nodes
        lines.append(f"fold_wide_light overhead: {over:.1f} ns/node of thread time over the "
                     f"sequential fold ({qv * 1e6 / nodes:.1f} ns/node): "
                     f"{'met' if over <= 15 else 'NOT met'} (target <= 15 ns)")
    sv, _ = res.value("fold_heavy", "spindle")
    qv, _ = res.value("fold_heavy", "sequential")
    if sv is not None and qv is not None:
        lines.append(f"fold_heavy speedup: {qv / sv:.2f}x the sequential fold: "
                     f"{'met' if qv / sv >= 1.9 else 'NOT met'} (target >= 1.9x)")
    dv, _ = res.value("du_usr", "gnu-du")
    for name, how in (("spindle", "--stat=auto"), ("spindle-sync-stat", "--sync-stat"),
                      ("spindle-uring-stat", "--stat=uring")):
        sv, _ = res.value("du_usr", name)
        if sv is not None and dv is not None:
            lines.append(f"du_usr ({how}): spindle-du {sv:.3f} s vs du {dv:.3f} s: "
                         f"{dv / sv:.2f}x: {'met' if dv / sv >= 1.7 else 'NOT met'} "
                         f"(target >= 1.7x)")
    return lines


# --------------------------------------------------------------------------
# Tracing: what the event sites cost while tracing is off, and tracing on

TRACING_RUNTIME = [w for w in RUNTIME_WORKLOADS if w not in ("fib_35", "memory_per_task")]
TRACING_IO = ["read_4k_rand_qd1", "read_4k_rand_qd32"]
TRACING_SYSTEMS = ["spindle", "spindle-no-trace-sites", "spindle-traced"]
TRACING_BOUND = 1.02  # the issue's bound: no workload more than 2% slower
ICOUNT_WORKLOADS = ["spawn_await", "yield", "chain", "remote_spawn", "tcp_ping_pong"]


def build_no_trace_sites():
    """build-bench-no-trace-sites/: release, -Dtrace_sites=false."""
    if not (NO_TRACE_SITES_BUILD / "build.ninja").exists():
        log("configuring spindle without trace sites in build-bench-no-trace-sites/")
        run(["meson", "setup", str(NO_TRACE_SITES_BUILD), "-Dbuildtype=release",
             "-Dtests=disabled", "-Dbenchmarks=enabled", "-Dexamples=disabled",
             "-Dtrace_sites=false"], cwd=ROOT)
    log("building bench_runtime, bench_io and bench_icount without trace sites")
    run(["ninja", "-C", str(NO_TRACE_SITES_BUILD), "bench/bench_runtime", "bench/bench_io",
         "bench/bench_icount"])


def tracing_round(cfg, system, io_path, trace_path):
    """One round of one system: {workload: value} (medians of 3 repetitions)."""
    build = NO_TRACE_SITES_BUILD if system == "spindle-no-trace-sites" else BUILD
    env = {"SPINDLE_BENCH_WORKERS": str(cfg.workers)}
    if system == "spindle-traced":
        env["SPINDLE_TRACE"] = str(trace_path)
    common = ["--benchmark_repetitions=3", f"--benchmark_min_time={cfg.min_time}",
              "--benchmark_report_aggregates_only=true", "--benchmark_format=json"]
    values = {}
    names = sorted({GB_NAMES[w] for w in TRACING_RUNTIME})
    _, out, _ = run([str(build / "bench" / "bench_runtime"),
                     f"--benchmark_filter=^({'|'.join(names)})/", *common], env=env)
    runs = gb_medians(out)
    for w in TRACING_RUNTIME:
        b, _ = runtime_record(runs, w, cfg.workers)
        if b is not None:
            values[w] = runtime_value(b, w)
    env.update({"SPINDLE_BENCH_FILE": str(io_path), "SPINDLE_CACHED_READS": "0"})
    _, out, _ = run([str(build / "bench" / "bench_io"),
                     f"--benchmark_filter=^random_4k_uring/depth:(1|32)/workers:{cfg.workers}"
                     "/cold:0/", *common], env=env)
    runs = gb_medians(out)
    for case in TRACING_IO:
        prefix = f"random_4k_uring/depth:{IO_CASES[case][1]}/workers:{cfg.workers}/cold:0/"
        match = [r for n, r in runs.items() if n.startswith(prefix)]
        if match and not match[0].get("error_occurred"):
            values[case] = match[0]["items_per_second"] / 1e3
    return values


def tracing(cfg, res, out_dir):
    """The three systems in alternating rounds; medians over the rounds."""
    io_path = out_dir / "tracing-io-file"
    make_io_file(io_path, 256)
    trace_path = out_dir / "tracing-bench-trace.json"
    rounds = 3 if cfg.quick else 9
    samples = {s: {} for s in TRACING_SYSTEMS}
    for i in range(rounds):
        order = TRACING_SYSTEMS[i % 3:] + TRACING_SYSTEMS[:i % 3]
        got = {}
        for system in order:
            log(f"tracing: round {i + 1}/{rounds}: {system}")
            got[system] = tracing_round(cfg, system, io_path, trace_path)
        for system, values in got.items():
            for w in TRACING_RUNTIME + TRACING_IO:
                # None where this round has no value, so rounds stay paired.
                samples[system].setdefault(w, []).append(values.get(w))
    res.tracing_rounds = samples
    (out_dir / "tracing-rounds.json").write_text(json.dumps(samples, indent=1) + "\n")
    for system, by_workload in samples.items():
        for w in TRACING_RUNTIME + TRACING_IO:
            unit = RUNTIME_WORKLOADS.get(w, "kreads/s")
            values = [v for v in by_workload.get(w, []) if v is not None]
            if values:
                res.add(f"tracing.{w}", system, statistics.median(values), unit)
            else:
                res.miss(f"tracing.{w}", system, "no result")
    res.notes.append(f"tracing: {rounds} alternating rounds of the three builds/settings; "
                     "spindle-traced wrote its trace to " + trace_path.name)
    # Instructions per operation (bench/icount: callgrind, deterministic):
    # what the sites add, whatever the machine's load.
    if shutil.which("valgrind") is None:
        res.notes.append("tracing: valgrind not installed: no instruction counts")
        return
    for system, build in (("spindle", BUILD), ("spindle-no-trace-sites", NO_TRACE_SITES_BUILD)):
        log(f"tracing: instructions per operation (callgrind), {system}")
        code, out, err = run([str(ROOT / "bench" / "icount"), str(build)], check=False)
        if code != 0:
            res.notes.append(f"tracing: bench/icount {build.name} failed: {err.strip()[-200:]}")
            continue
        for line in out.splitlines()[1:]:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                res.add(f"tracing.instructions.{parts[0]}", system, int(parts[1]),
                        "instructions/op")
    with contextlib.suppress(OSError):
        io_path.unlink()


def paired_ratio(res, w, system, unit):
    """Median over the rounds of system's cost over the build without sites."""
    rounds = getattr(res, "tracing_rounds", {})
    ratios = [cost_ratio(a, b, unit) for a, b in
              zip(rounds.get(system, {}).get(w, []),
                  rounds.get("spindle-no-trace-sites", {}).get(w, []))]
    ratios = [r for r in ratios if r is not None]
    return (statistics.median(ratios), len(ratios)) if ratios else (None, 0)


def tracing_checks(res):
    """The sites' cost with tracing off (bound 1.02x), and tracing on's:
    medians of the per-round (paired) cost ratios."""
    lines = []
    for w in TRACING_RUNTIME + TRACING_IO:
        sv, unit = res.value(f"tracing.{w}", "spindle")
        nv, _ = res.value(f"tracing.{w}", "spindle-no-trace-sites")
        off, n = paired_ratio(res, w, "spindle", unit)
        on, _ = paired_ratio(res, w, "spindle-traced", unit)
        if off is None:
            lines.append(f"tracing.{w}: not measured")
            continue
        verdict = "met" if off <= TRACING_BOUND else "NOT met"
        on_text = f"; tracing on: {on:.2f}x" if on is not None else ""
        lines.append(f"tracing.{w}: sites in, tracing off: {fmt(sv)} {unit} vs {fmt(nv)} {unit} "
                     f"without the sites; paired ratio, median of {n} rounds: {off:.3f}x: "
                     f"{verdict} (target <= {TRACING_BOUND}x){on_text}")
    for w in ICOUNT_WORKLOADS:
        sv, _ = res.value(f"tracing.instructions.{w}", "spindle")
        nv, _ = res.value(f"tracing.instructions.{w}", "spindle-no-trace-sites")
        if sv is not None and nv:
            lines.append(f"tracing.instructions.{w}: {int(sv)} vs {int(nv)} instructions/op without the "
                         f"sites: {int(sv - nv):+d} ({(sv / nv - 1) * 100:+.1f}%)")
    return lines


def canonical_workloads():
    names = []
    for w in RUNTIME_WORKLOADS:
        names.append(w)
        if w == "spawn_await":
            names.append("spawn_await.allocs_per_pair")
    for case in IO_CASES:
        names += [f"{case}.warm", f"{case}.cold"]
    fiber = list(FIBER_WORKLOADS)
    fiber.insert(1, "fiber_spawn_join.stacks_mapped")
    fiber += list(PROCESS_WORKLOADS)
    resp = [f"resp.{t}.p{p}" for p in (1, 16) for t in RESP_TESTS.values()]
    return names + ["scan.files", "scan.bytes"] + fiber + ["http_get"] + resp + \
        ["echo_64b.p50", "echo_64b.p99", "echo_64b.rate"] + list(FOLD_TREES.values()) + \
        ["du_usr"] + [f"tracing.{w}" for w in TRACING_RUNTIME + TRACING_IO] + \
        [f"tracing.instructions.{w}" for w in ICOUNT_WORKLOADS]


def rank(order, name):
    return order.index(name) if name in order else len(order)


def ordered_workloads(res):
    seen = {r["workload"] for r in res.records} | {w for (w, _) in res.missing}
    order = canonical_workloads()
    return sorted(seen, key=lambda w: (rank(order, w), w))


def peers_of(res, workload):
    seen = {r["system"] for r in res.records if r["workload"] == workload}
    seen |= {s for (w, s) in res.missing if w == workload}
    seen.discard("spindle")
    return sorted(seen, key=lambda s: (rank(SYSTEM_ORDER, s), s))


def fmt(v):
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def cost_ratio(spindle_value, peer_value, unit):
    """spindle cost / peer cost: > 1 means spindle is slower."""
    if spindle_value is None or peer_value is None or spindle_value == 0 or peer_value == 0:
        return None
    return peer_value / spindle_value if is_rate(unit) else spindle_value / peer_value


def table_rows(res):
    rows = []
    for w in ordered_workloads(res):
        sv, unit = res.value(w, "spindle")
        spindle_cell = fmt(sv) if sv is not None else \
            "n/a: " + res.missing.get((w, "spindle"), "no result")
        peers = peers_of(res, w)
        unit = unit or next((r["unit"] for r in res.records if r["workload"] == w),
                            FIBER_WORKLOADS.get(w, ""))
        if not peers:
            rows.append([w, unit, spindle_cell, "", "", ""])
        for p in peers:
            pv, _ = res.value(w, p)
            if pv is None:
                rows.append([w, unit, spindle_cell, p, "n/a: " + res.missing.get((w, p), ""), ""])
            else:
                ratio = cost_ratio(sv, pv, unit)
                rows.append([w, unit, spindle_cell, p, fmt(pv),
                             f"{ratio:.2f}" if ratio is not None else "-"])
    return rows


HEADER = ["workload", "unit", "spindle", "peer", "peer value",
          "spindle/peer (cost; >1 = spindle slower)"]


def print_table(rows):
    widths = [max(len(str(r[i])) for r in rows + [HEADER]) for i in range(len(HEADER))]
    widths = [min(w, 60) for w in widths]

    def line(cells):
        return "  ".join(str(c)[:60].ljust(widths[i]) for i, c in enumerate(cells)).rstrip()

    print(line(HEADER))
    print("  ".join("-" * w for w in widths))
    last = None
    for r in rows:
        cells = list(r)
        if r[0] == last:
            cells[0] = cells[1] = cells[2] = ""
        last = r[0]
        print(line(cells))


def write_markdown(path, rows, res, cfg, status, checks):
    out = ["# spindle vs peers", ""]
    out.append(f"{datetime.datetime.now().isoformat(timespec='seconds')}, "
               f"{platform.node()}, {os.cpu_count()} CPUs, kernel {platform.release()}, "
               f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
               f"workers: {cfg.workers} for every system; "
               f"{'--quick' if cfg.quick else 'full run'} "
               f"({cfg.reps} repetitions, medians).")
    out.append("")
    out.append("Lower is better unless the unit ends in /s. The last column is spindle's "
               "cost over the peer's (time ratio, or the inverse rate ratio): above 1 "
               "spindle is slower, below 1 faster.")
    out.append("")
    out.append("| " + " | ".join(HEADER) + " |")
    out.append("|" + "---|" * len(HEADER))
    for r in rows:
        out.append("| " + " | ".join(str(c).replace("|", "/") for c in r) + " |")
    out.append("")
    if checks:
        out.append("## Targets (the issues of the sections run: fiber, process, fold, tracing)")
        out.append("")
        for c in checks:
            out.append(f"- {c}")
        out.append("")
    out.append("## Peers")
    out.append("")
    for name, state in status.items():
        out.append(f"- {name}: {state}")
    if res.notes:
        out.append("")
        out.append("## Notes")
        out.append("")
        for n in res.notes:
            out.append(f"- {n}")
    path.write_text("\n".join(out) + "\n")


def write_chart(path, res, out_dir):
    """Bars of the table's ratio, spindle's cost over each peer's (log scale)."""
    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        return "gnuplot not installed (apt-get install gnuplot-nox): no chart"
    workloads = [w for w in ordered_workloads(res)
                 if res.value(w, "spindle")[0] and not w.endswith("allocs_per_pair")]
    systems = sorted({r["system"] for r in res.records if r["system"] != "spindle"},
                     key=lambda s: (rank(SYSTEM_ORDER, s), s))
    if not workloads or not systems:
        return "nothing to chart"
    data = out_dir / "compare.dat"
    with open(data, "w") as f:
        f.write("workload " + " ".join(systems) + "\n")
        for w in workloads:
            sv, unit = res.value(w, "spindle")
            cells = []
            for s in systems:
                pv, _ = res.value(w, s)
                ratio = cost_ratio(sv, pv, unit)
                cells.append(f"{ratio:.6g}" if ratio else "?")
            f.write(w.replace("_", "-") + " " + " ".join(cells) + "\n")
    plots = ", ".join(
        f"'{data}' using {i + 2}:xtic(1) title columnheader({i + 2})" for i in range(len(systems)))
    script = f"""
set terminal pngcairo size 1400,700 font ',10'
set output '{path}'
set title "spindle cost / peer cost (log scale; above 1: spindle is slower, below 1: faster)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set datafile missing '?'
set logscale y
set grid ytics
set xtics rotate by -40 noenhanced
set key outside right noenhanced
set ylabel 'spindle cost / peer cost'
set arrow from graph 0, first 1 to graph 1, first 1 nohead lw 2 lc rgb 'black'
plot {plots}
"""
    p = subprocess.run([gnuplot], input=script, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return f"gnuplot failed: {p.stderr.strip()[-300:]}"
    return None


# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(
        description="Build spindle and its peers, run the comparison workloads, "
                    "print one table and write DIR/compare.{json,md,png}.")
    ap.add_argument("--workers", type=int, default=2,
                    help="worker threads for every system (default 2)")
    ap.add_argument("--quick", action="store_true", help="a short run (under two minutes)")
    ap.add_argument("--out", default=str(ROOT / "bench-results"),
                    help="output directory (default bench-results/)")
    ap.add_argument("--only", action="append",
                    choices=["runtime", "io", "scan", "fiber", "process", "net", "fold",
                             "tracing"],
                    help="run only this section (repeatable)")
    ap.add_argument("--libfork", metavar="DIR",
                    help="a libfork checkout (header-only, not in Debian; 3.8 tested): the "
                         "runtime section builds it as a fork-join fib peer")
    cfg = ap.parse_args()
    if cfg.workers < 1:
        ap.error("--workers must be at least 1")
    cfg.reps = 3 if cfg.quick else 5
    cfg.min_time = 0.02 if cfg.quick else 0.2
    cfg.fio_runtime = 1 if cfg.quick else 3
    cfg.fio_reps = 1 if cfg.quick else 3  # cold runs: 3 / 5 (they are short)
    cfg.scan_reps = 1 if cfg.quick else 3
    cfg.io_mib = 256 if cfg.quick else 1024
    cfg.park_reps = 1 if cfg.quick else cfg.reps  # fresh processes of 100,000 parked fibers
    cfg.net_seconds = 2 if cfg.quick else 5  # each wrk and echo run
    cfg.resp_requests = 50_000 if cfg.quick else 200_000  # each redis-benchmark run
    sections = cfg.only or ["runtime", "io", "scan", "fiber", "process", "net", "fold",
                            "tracing"]
    out_dir = Path(cfg.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()

    try:
        build_spindle(sections)
    except RuntimeError as e:
        log(f"cannot build spindle: {e}")
        return 2

    status = {}
    res = Results()
    if "runtime" in sections:
        peers = {
            "tokio": build_tokio(status),
            "onetbb": build_cxx_peer("onetbb", "bench/peers/tbb_peer", status),
            "onetbb-outside": build_cxx_peer("onetbb-outside", "bench/peers/tbb_peer", status),
            "boost-asio": build_cxx_peer("boost-asio", "bench/peers/asio_peer", status),
            "libfork": build_libfork(cfg, status),
        }
        workloads = [w for w in RUNTIME_WORKLOADS
                     if not (cfg.quick and w in ("fib_35", "fib_fold_35"))]
        if cfg.quick:
            res.notes.append("--quick: fib_35 and fib_fold_35 skipped")
        for system, exe in peers.items():
            if exe is None:
                for w in workloads:
                    if w in PEER_WORKLOADS[system]:
                        res.miss(w, system, "peer not built")
        built = {system: exe for system, exe in peers.items() if exe is not None}
        # Workload by workload, every system in turn, each after a probe of
        # the host's placement: the systems of a row ran seconds apart.
        for w in workloads:
            if w == "memory_per_task":
                continue  # below: RSS growth, a fresh process each
            for system in SPINDLE_PLACEMENTS:
                probe_xcore(res, system, w)
                spindle_runtime(cfg, res, [w], system)
            for system, exe in built.items():
                if w in PEER_WORKLOADS[system]:
                    probe_xcore(res, system, w)
                    peer_runtime(cfg, res, system, exe, [w])
        # memory_per_task spawns from a worker: the placement plays no part.
        if "memory_per_task" in workloads:
            spindle_runtime(cfg, res, ["memory_per_task"], "spindle")
            for system, exe in built.items():
                if "memory_per_task" in PEER_WORKLOADS[system]:
                    peer_runtime(cfg, res, system, exe, ["memory_per_task"])
        for system, exe in built.items():
            for w in workloads:
                if w not in PEER_WORKLOADS[system]:
                    res.miss(w, system, "not expressible")
        note_xcore(res)
    if "io" in sections:
        status["fio"] = "found" if shutil.which("fio") else "not installed"
        path = out_dir / "io-test-file"
        make_io_file(path, cfg.io_mib)
        cold_ok = spindle_io(cfg, res, path)
        if not cold_ok:
            res.notes.append("cold cache: the kernel kept the file's pages after "
                             "POSIX_FADV_DONTNEED; cold cases skipped")
        fio_io(cfg, res, path, cfg.io_mib * 1024 * 1024, cold_ok)
        res.notes.append(
            f"I/O: a {cfg.io_mib} MiB file in {out_dir}; spindle reads 2048 blocks per iteration "
            f"with one task per read in flight on {cfg.workers} workers. spindle and "
            "spindle-threadpool: cached reads on (page-cache data copied by preadv2(RWF_NOWAIT) "
            "in the task's poll, neither driver involved); spindle-ring-only and "
            "spindle-pool-only: SPINDLE_CACHED_READS=0, every read through the io_uring "
            "driver or the thread pool. fio io_uring: min(workers, depth) jobs, depth reads in "
            "flight in all, batched submission; fio psync: depth jobs (threads) of one read each")
    if "scan" in sections:
        status["ripgrep"] = "found" if shutil.which("rg") else "not installed"
        status["grep"] = "found" if shutil.which("grep") else "not installed"
        scan(cfg, res)
    checks = []
    if "runtime" in sections:
        checks += placement_checks(res)
        checks += target_checks(res, RUNTIME_TARGETS)
    if "fiber" in sections:
        boost_fiber = build_cxx_peer("boost-fiber", "bench/peers/boost_fiber_peer", status)
        go = build_go(status)
        spindle_fiber(cfg, res)
        if boost_fiber is None:
            for system in ("boost-fiber", "boost-fiber-64k"):
                for w in FIBER_WORKLOADS:
                    res.miss(w, system, "peer not built")
        else:
            peer_fiber(cfg, res, "boost-fiber", [str(boost_fiber)])
            peer_fiber(cfg, res, "boost-fiber-64k", [str(boost_fiber), "--stack-size", "65536"])
        if go is None:
            for w in FIBER_WORKLOADS:
                res.miss(w, "go", "peer not built")
        else:
            peer_fiber(cfg, res, "go", [str(go)], env={"GOMAXPROCS": str(cfg.workers)})
        checks = fiber_checks(res)
    if "process" in sections:
        go = build_go(status) if "go" not in status else \
            (BUILD / "peers" / "go" / "spindle-peer-go" if status["go"].startswith("built")
             else None)
        caf = build_cxx_peer("caf", "bench/peers/caf_peer", status)
        tokio = build_tokio(status)
        spindle_process(cfg, res)
        for system, exe, env in (("caf", caf, None),
                                 ("go", go, {"GOMAXPROCS": str(cfg.workers)}),
                                 ("tokio-mpsc", tokio, None)):
            if exe is None:
                for w in PROCESS_WORKLOADS:
                    res.miss(w, system, "peer not built")
            else:
                peer_process(cfg, res, system, [str(exe)], env=env)
        checks += process_checks(res)
    if "net" in sections:
        net(cfg, res, status, out_dir)
    if "fold" in sections:
        peers = {
            "onetbb": build_cxx_peer("onetbb-fold", "bench/peers/fold_tbb_peer", status),
            "openmp": build_cxx_peer("openmp-fold", "bench/peers/fold_openmp_peer", status),
        }
        rounds = spindle_fold(cfg, res)
        for system, exe in peers.items():
            if exe is None or rounds is None:
                for w in FOLD_TREES.values():
                    res.miss(w, system, "peer not built" if exe is None else "no calibration")
                continue
            peer_runtime_fold(cfg, res, system, exe, rounds)
        fold_du(cfg, res)
        checks += fold_checks(cfg, res)
    if "tracing" in sections:
        build_no_trace_sites()
        tracing(cfg, res, out_dir)
        checks += tracing_checks(res)

    rows = table_rows(res)
    print()
    print(f"workers: {cfg.workers} for every system; medians of {cfg.reps} repetitions; "
          "lower is better unless the unit ends in /s")
    print_table(rows)
    print()
    for c in checks:
        print(c)
    if checks:
        print()
    for name, state in status.items():
        print(f"peer {name}: {state}")
    for n in res.notes:
        print(f"note: {n}")

    (out_dir / "compare.json").write_text(json.dumps(res.records, indent=1) + "\n")
    write_markdown(out_dir / "compare.md", rows, res, cfg, status, checks)
    problem = write_chart(out_dir / "compare.png", res, out_dir)
    if problem:
        print(f"chart: {problem}")
    print(f"\nwrote {out_dir}/compare.json, compare.md"
          f"{'' if problem else ', compare.png'} in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
