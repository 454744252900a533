//! Shared by the servers of the net section of spindle's `bench/compare.py`
//! (src/bin/hyper.rs, src/bin/echo.rs): the command line and the runtime.

use tokio::runtime::{Builder, Runtime};

/// `--port P --workers N` (defaults 7000 and 2); exits with status 2 on
/// anything else.
pub fn args(program: &str) -> (u16, usize) {
    let mut port: u16 = 7000;
    let mut workers: usize = 2;
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: {program} [--port P] [--workers N]");
        std::process::exit(2)
    };
    let mut i = 0;
    while i < argv.len() {
        let value = argv.get(i + 1).unwrap_or_else(|| usage());
        match argv[i].as_str() {
            "--port" => port = value.parse().unwrap_or_else(|_| usage()),
            "--workers" => workers = value.parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
        i += 2;
    }
    if workers == 0 {
        usage();
    }
    (port, workers)
}

/// A multi-thread runtime of `workers` threads with the I/O and time drivers.
pub fn runtime(workers: usize) -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("building the Tokio runtime")
}
