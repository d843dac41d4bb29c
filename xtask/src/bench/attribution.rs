//! `cargo xtask bench attribution`: the verdict matrix. Each bottleneck produced by a different
//! mechanism (simulator profiles, a Python server without `/metrics`, nftables packet loss on
//! loopback and in a namespace, a vector index rebuild, a failing peak) and healthy runs at
//! several loads, each fault at several strengths and two faults at once, each with `inferscope
//! stress --explain`; prints expected vs verdict, share and score, the weakest strength found
//! per fault with the windows to the first right verdict, the confusion matrix and precision
//! and recall per cause, and publishes the tables in docs/explain.md. The cases live in
//! `tests/src/cases.rs`, shared with the root e2e tests (the sweeps in `tests/src/sweeps.rs`);
//! the runner is the `attribution` binary of the tests crate.
use crate::run;

/// Builds the binary under test and runs every case (needs root).
pub fn run() -> anyhow::Result<()> {
    println!("\n== attribution: expected vs verdict per mechanism (root; a few minutes)");
    run::status(&mut run::cargo(&["build", "-p", "inferscope"]))?;
    run::status(&mut run::cargo(&[
        "run",
        "-q",
        "-p",
        "inferscope-tests",
        "--bin",
        "attribution",
    ]))
}
