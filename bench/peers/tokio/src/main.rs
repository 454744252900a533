//! Tokio side of spindle's `bench/compare.py`: the runtime workloads with the
//! parameters of Tokio's own benches/rt_multi_threaded.rs (10,000 spawns,
//! 200 tasks x 1,000 yields, 1,000 ping-pong rounds, a chain of 1,000 spawns,
//! a 10 µs stall in the busy tasks), plus spawn+await, fork-join fib and the
//! memory of 1,000,000 suspended tasks. For the process section, tasks
//! with unbounded mpsc channels as mailboxes: process_ring (10,000 tasks
//! pass one token 10^6 hops: ns/hop, counting the stop's 10,000),
//! process_fan_in (1,000 tasks x 1,000 messages into one: msgs/s),
//! process_skynet (10^6 leaves of a 10-ary tree of tasks, sums sent to the
//! parent's channel: ms) and process_idle (100,000 tasks waiting in recv:
//! process_idle_memory, RSS growth per task and its channel, bytes). Ring and
//! fan-in count the spawns in the time, as the Go and CAF peers do.
//!
//! Usage: spindle-peer-tokio --workers N [--reps R] [--min-time SECONDS]
//!                           [--workload NAME]...
//! Prints one JSON object on stdout:
//!   {"system": "tokio", "workers": N, "results": [
//!      {"workload": NAME, "unit": UNIT, "samples": [v, ...]}, ...]}
//! Each sample is the mean over enough iterations to last --min-time.
//!
//! As in spindle's bench_runtime, the measuring thread only waits: every
//! workload's root runs in a spawned task on the workers (its spawns go to
//! that worker's local queue) and the thread sleeps on a channel or in
//! block_on of the root's JoinHandle, so that the workers alone do the work
//! (block_on of the workload itself would poll it on a third thread).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::runtime::{Builder, Runtime};
use tokio::sync::mpsc as tmpsc;
use tokio::sync::oneshot;

const NUM_SPAWN: usize = 10_000;
const STALL: Duration = Duration::from_micros(10);

fn runtime(workers: usize) -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(workers)
        .build()
        .expect("building the Tokio runtime")
}

/// Runs `body` once to warm up, then `reps` samples, each the mean over as many
/// iterations as fill `min_time`; returns the samples in `scale` units per
/// iteration (1e-3: µs, 1e-6: ms, ...) divided by `per`.
fn measure<F: FnMut()>(reps: usize, min_time: f64, scale: f64, per: f64, mut body: F) -> Vec<f64> {
    let start = Instant::now();
    body();
    let once = start.elapsed().as_secs_f64().max(1e-9);
    let iters = ((min_time / once).ceil() as usize).max(1);
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        for _ in 0..iters {
            body();
        }
        let ns = start.elapsed().as_nanos() as f64 / iters as f64;
        samples.push(ns * scale / per);
    }
    samples
}

fn stall() {
    let start = Instant::now();
    while start.elapsed() < STALL {
        std::thread::yield_now();
    }
}

fn spawn_many_local(rt: &Runtime) {
    let (tx, rx) = mpsc::sync_channel(1);
    let rem = Arc::new(AtomicUsize::new(NUM_SPAWN));
    // The spawns come from a task on a worker: its local run queue (spawns
    // from block_on's future would all go through the inject queue).
    rt.spawn(async move {
        for _ in 0..NUM_SPAWN {
            let tx = tx.clone();
            let rem = rem.clone();
            tokio::spawn(async move {
                if rem.fetch_sub(1, Relaxed) == 1 {
                    tx.send(()).unwrap();
                }
            });
        }
    });
    rx.recv().unwrap();
}

fn spawn_many_remote(rt: &Runtime) {
    let mut handles = Vec::with_capacity(NUM_SPAWN);
    for _ in 0..NUM_SPAWN {
        handles.push(rt.spawn(async {}));
    }
    // The joins run in a task on the workers; this thread only waits.
    let (tx, rx) = mpsc::sync_channel(1);
    rt.spawn(async move {
        for handle in handles.drain(..) {
            handle.await.unwrap();
        }
        tx.send(()).unwrap();
    });
    rx.recv().unwrap();
}

fn yield_many(rt: &Runtime) {
    const TASKS: usize = 200;
    const YIELDS: usize = 1_000;
    let (tx, rx) = mpsc::sync_channel(TASKS);
    // Spawned from a task on a worker, as spindle's root spawns them.
    rt.spawn(async move {
        for _ in 0..TASKS {
            let tx = tx.clone();
            tokio::spawn(async move {
                for _ in 0..YIELDS {
                    tokio::task::yield_now().await;
                }
                tx.send(()).unwrap();
            });
        }
    });
    for _ in 0..TASKS {
        rx.recv().unwrap();
    }
}

fn ping_pong(rt: &Runtime) {
    const ROUNDS: usize = 1_000;
    let (done_tx, done_rx) = mpsc::sync_channel(1);
    let rem = Arc::new(AtomicUsize::new(ROUNDS));
    {
        rt.spawn(async move {
            for _ in 0..ROUNDS {
                let rem = rem.clone();
                let done_tx = done_tx.clone();
                tokio::spawn(async move {
                    let (tx1, rx1) = oneshot::channel::<()>();
                    let (tx2, rx2) = oneshot::channel::<()>();
                    tokio::spawn(async move {
                        rx1.await.unwrap();
                        tx2.send(()).unwrap();
                    });
                    tx1.send(()).unwrap();
                    rx2.await.unwrap();
                    if rem.fetch_sub(1, Relaxed) == 1 {
                        done_tx.send(()).unwrap();
                    }
                });
            }
        });
        done_rx.recv().unwrap();
    }
}

fn chain(done: mpsc::SyncSender<()>, left: usize) {
    if left == 0 {
        done.send(()).unwrap();
    } else {
        tokio::spawn(async move { chain(done, left - 1) });
    }
}

fn chained_spawn(rt: &Runtime) {
    let (done_tx, done_rx) = mpsc::sync_channel(1);
    rt.spawn(async move { chain(done_tx, 1_000) });
    done_rx.recv().unwrap();
}

const SPAWN_AWAIT_PAIRS: usize = 100_000;

fn spawn_await(rt: &Runtime) -> u64 {
    rt.block_on(async {
        tokio::spawn(async {
            let mut sum = 0u64;
            for i in 0..SPAWN_AWAIT_PAIRS as u64 {
                sum += tokio::spawn(async move { i }).await.unwrap();
            }
            sum
        })
        .await
        .unwrap()
    })
}

fn fib(n: u32) -> Pin<Box<dyn Future<Output = u64> + Send>> {
    Box::pin(async move {
        if n < 2 {
            return n as u64;
        }
        let child = tokio::spawn(fib(n - 1));
        let b = fib(n - 2).await;
        let a = child.await.unwrap();
        a + b
    })
}

fn status_kib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix(field) {
            let kib: String = rest.chars().filter(|c| c.is_ascii_digit()).collect();
            return kib.parse::<f64>().unwrap_or(0.0);
        }
    }
    0.0
}

/// Peak RSS growth per task with 1,000,000 spawned tasks suspended forever
/// (run it in a fresh process: the driver does).
fn memory_per_task(workers: usize) -> f64 {
    const TASKS: usize = 1_000_000;
    let rt = runtime(workers);
    let before = status_kib("VmRSS:");
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    rt.block_on(async move {
        for _ in 0..TASKS {
            let s = s.clone();
            drop(tokio::spawn(async move {
                s.fetch_add(1, Relaxed);
                std::future::pending::<()>().await;
            }));
        }
    });
    while started.load(SeqCst) < TASKS {
        std::thread::sleep(Duration::from_millis(1));
    }
    let peak = status_kib("VmHWM:");
    rt.shutdown_background();
    (peak - before) * 1024.0 / TASKS as f64
}

const RING_SIZE: usize = 10_000;
const RING_HOPS: i64 = 1_000_000;
const FAN_SENDERS: usize = 1_000;
const FAN_EACH: usize = 1_000;
const SKYNET_LEAVES: i64 = 1_000_000;
const IDLE_TASKS: usize = 100_000;

fn process_ring(rt: &Runtime) {
    rt.block_on(rt.spawn(async {
        let mut txs = Vec::with_capacity(RING_SIZE);
        let mut rxs = Vec::with_capacity(RING_SIZE);
        for _ in 0..RING_SIZE {
            let (tx, rx) = tmpsc::unbounded_channel::<i64>();
            txs.push(tx);
            rxs.push(rx);
        }
        let mut handles = Vec::with_capacity(RING_SIZE);
        for (i, mut rx) in rxs.into_iter().enumerate() {
            let next = txs[(i + 1) % RING_SIZE].clone();
            handles.push(tokio::spawn(async move {
                while let Some(v) = rx.recv().await {
                    if v <= 0 {
                        let _ = next.send(0); // the last finds the first gone
                        return;
                    }
                    let _ = next.send(v - 1);
                }
            }));
        }
        txs[0].send(RING_HOPS).unwrap();
        drop(txs);
        for h in handles {
            h.await.unwrap();
        }
    }))
    .unwrap();
}

fn process_fan_in(rt: &Runtime) {
    rt.block_on(rt.spawn(async {
        let (tx, mut rx) = tmpsc::unbounded_channel::<i64>();
        for _ in 0..FAN_SENDERS {
            let tx = tx.clone();
            drop(tokio::spawn(async move {
                for _ in 0..FAN_EACH {
                    let _ = tx.send(1);
                }
            }));
        }
        drop(tx);
        let mut got = 0i64;
        while got < (FAN_SENDERS * FAN_EACH) as i64 {
            got += rx.recv().await.unwrap();
        }
    }))
    .unwrap();
}

fn skynet_node(
    parent: tmpsc::UnboundedSender<i64>,
    num: i64,
    size: i64,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        if size == 1 {
            let _ = parent.send(num);
            return;
        }
        let (tx, mut rx) = tmpsc::unbounded_channel::<i64>();
        for i in 0..10 {
            drop(tokio::spawn(skynet_node(
                tx.clone(),
                num + i * (size / 10),
                size / 10,
            )));
        }
        drop(tx);
        let mut sum = 0;
        for _ in 0..10 {
            sum += rx.recv().await.unwrap();
        }
        let _ = parent.send(sum);
    })
}

fn process_skynet(rt: &Runtime) {
    let v = rt
        .block_on(rt.spawn(async {
            let (tx, mut rx) = tmpsc::unbounded_channel::<i64>();
            drop(tokio::spawn(skynet_node(tx, 0, SKYNET_LEAVES)));
            rx.recv().await.unwrap()
        }))
        .unwrap();
    assert_eq!(v, 499_999_500_000);
}

/// RSS growth per task waiting in recv on its own channel (fresh process).
fn process_idle(workers: usize) -> f64 {
    let rt = runtime(workers);
    let before = status_kib("VmRSS:");
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    let senders = rt.block_on(async move {
        let mut v = Vec::with_capacity(IDLE_TASKS);
        for _ in 0..IDLE_TASKS {
            let (tx, mut rx) = tmpsc::unbounded_channel::<i64>();
            let s = s.clone();
            drop(tokio::spawn(async move {
                s.fetch_add(1, Relaxed);
                let _ = rx.recv().await;
            }));
            v.push(tx);
        }
        v
    });
    while started.load(SeqCst) < IDLE_TASKS {
        std::thread::sleep(Duration::from_millis(1));
    }
    let after = status_kib("VmRSS:");
    rt.shutdown_background();
    std::mem::forget(senders);
    (after - before) * 1024.0 / IDLE_TASKS as f64
}

fn main() {
    let mut workers = 2usize;
    let mut reps = 5usize;
    let mut min_time = 0.2f64;
    let mut wanted: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{} needs a value", arg));
        match arg.as_str() {
            "--workers" => workers = value().parse().expect("--workers N"),
            "--reps" => reps = value().parse().expect("--reps R"),
            "--min-time" => min_time = value().parse().expect("--min-time SECONDS"),
            "--workload" => wanted.push(value()),
            _ => {
                eprintln!("spindle-peer-tokio: unknown argument {}", arg);
                std::process::exit(2);
            }
        }
    }
    let all = [
        "spawn_many_local",
        "spawn_many_remote_idle",
        "spawn_many_remote_busy",
        "yield_many",
        "ping_pong",
        "chained_spawn",
        "spawn_await",
        "fib_30",
        "fib_35",
        "memory_per_task",
    ];
    if wanted.is_empty() {
        wanted = all.iter().map(|s| s.to_string()).collect();
    }
    let mut out: Vec<String> = Vec::new();
    for name in &wanted {
        let (unit, samples): (&str, Vec<f64>) = match name.as_str() {
            "spawn_many_local" => {
                let rt = runtime(workers);
                ("us", measure(reps, min_time, 1e-3, 1.0, || spawn_many_local(&rt)))
            }
            "spawn_many_remote_idle" => {
                let rt = runtime(workers);
                ("us", measure(reps, min_time, 1e-3, 1.0, || spawn_many_remote(&rt)))
            }
            "spawn_many_remote_busy" => {
                let rt = runtime(workers);
                let flag = Arc::new(AtomicBool::new(true));
                for _ in 0..2 * workers {
                    let flag = flag.clone();
                    rt.spawn(async move {
                        while flag.load(Relaxed) {
                            tokio::task::yield_now().await;
                            stall();
                        }
                    });
                }
                let s = measure(reps, min_time, 1e-3, 1.0, || spawn_many_remote(&rt));
                flag.store(false, Relaxed);
                ("us", s)
            }
            "yield_many" => {
                let rt = runtime(workers);
                ("ms", measure(reps, min_time, 1e-6, 1.0, || yield_many(&rt)))
            }
            "ping_pong" => {
                let rt = runtime(workers);
                ("us", measure(reps, min_time, 1e-3, 1.0, || ping_pong(&rt)))
            }
            "chained_spawn" => {
                let rt = runtime(workers);
                ("us", measure(reps, min_time, 1e-3, 1.0, || chained_spawn(&rt)))
            }
            "spawn_await" => {
                let rt = runtime(workers);
                let expect = (SPAWN_AWAIT_PAIRS as u64) * (SPAWN_AWAIT_PAIRS as u64 - 1) / 2;
                let s = measure(reps, min_time, 1.0, SPAWN_AWAIT_PAIRS as f64, || {
                    assert_eq!(spawn_await(&rt), expect);
                });
                ("ns/pair", s)
            }
            "fib_30" | "fib_35" => {
                let n: u32 = if name == "fib_30" { 30 } else { 35 };
                let rt = runtime(workers);
                let s = measure(reps, min_time, 1e-6, 1.0, || {
                    // The root on a worker (block_on(fib) would run it on
                    // this thread: 3 threads computing on 2 workers).
                    let v = rt.block_on(rt.spawn(fib(n))).unwrap();
                    assert!(v > 0);
                });
                ("ms", s)
            }
            "memory_per_task" => ("bytes/task", vec![memory_per_task(workers)]),
            "process_ring" => {
                let rt = runtime(workers);
                let per = (RING_HOPS as usize + RING_SIZE) as f64;
                ("ns/hop", measure(reps, min_time, 1.0, per, || process_ring(&rt)))
            }
            "process_fan_in" => {
                let rt = runtime(workers);
                let per = (FAN_SENDERS * FAN_EACH) as f64;
                let ns = measure(reps, min_time, 1.0, per, || process_fan_in(&rt));
                ("msgs/s", ns.iter().map(|v| 1e9 / v).collect())
            }
            "process_skynet" => {
                let rt = runtime(workers);
                ("ms", measure(reps, min_time, 1e-6, 1.0, || process_skynet(&rt)))
            }
            "process_idle" => ("bytes/process", vec![process_idle(workers)]),
            _ => {
                eprintln!("spindle-peer-tokio: unknown workload {}", name);
                std::process::exit(2);
            }
        };
        let list: Vec<String> = samples.iter().map(|v| format!("{:.6}", v)).collect();
        out.push(format!(
            "{{\"workload\": \"{}\", \"unit\": \"{}\", \"samples\": [{}]}}",
            if name == "process_idle" { "process_idle_memory" } else { name },
            unit,
            list.join(", ")
        ));
    }
    println!(
        "{{\"system\": \"tokio\", \"workers\": {}, \"results\": [\n  {}\n]}}",
        workers,
        out.join(",\n  ")
    );
}
