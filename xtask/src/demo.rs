//! `cargo xtask demo`: for now, `inferscope runqlat` while CPU-contention threads compete.
use std::{
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::run;

pub fn run() -> anyhow::Result<()> {
    run::status(&mut run::cargo(&[
        "build",
        "--release",
        "--package",
        "inferscope",
    ]))?;
    let bin = run::root().join("target/release/inferscope");
    if !run::is_root() {
        println!(
            "demo: the run-queue probe needs root (or CAP_BPF+CAP_PERFMON): run `sudo cargo xtask demo`"
        );
    }
    // Two busy threads per CPU plus a sleeper give the scheduler something to delay.
    let stop = Arc::new(AtomicBool::new(false));
    let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    let hogs: Vec<_> = (0..cpus * 2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let sleeper_stop = Arc::clone(&stop);
    let sleeper = std::thread::spawn(move || {
        while !sleeper_stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    println!(
        "demo: {} busy threads on {cpus} CPUs; pid {} is this demo",
        cpus * 2,
        std::process::id()
    );
    let result = run::status(
        Command::new(bin)
            .args(["runqlat", "--interval", "1s", "--count", "5", "--pid"])
            .arg(std::process::id().to_string()),
    );
    stop.store(true, Ordering::Relaxed);
    for h in hogs {
        let _ = h.join();
    }
    let _ = sleeper.join();
    result
}
