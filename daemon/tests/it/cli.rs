//! The `inferscope` binary for the tests that run it: one way to start it and to read what a
//! `stress` run wrote.

use std::process::{Command, Output};

/// The binary under test, not yet started.
pub fn inferscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_inferscope"))
}

/// Runs the binary with `args` to its end.
pub fn run(args: &[&str]) -> Output {
    inferscope().args(args).output().expect("run inferscope")
}

/// Runs `cmd` (an `inferscope stress` that writes its report to `out`): (exit code, stderr,
/// report). Its output is printed for the test log; a missing report fails with the stderr.
pub fn stress_report(
    cmd: &mut Command,
    out: &std::path::Path,
) -> (Option<i32>, String, inferscope::loadgen::StressReport) {
    let o = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    println!("{}{stderr}", String::from_utf8_lossy(&o.stdout));
    let text = std::fs::read(out).unwrap_or_else(|e| panic!("no report ({e}): {stderr}"));
    (
        o.status.code(),
        stderr,
        serde_json::from_slice(&text).unwrap(),
    )
}
