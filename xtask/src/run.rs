//! Running commands with clear errors.
use std::{
    path::PathBuf,
    process::{Command, Output},
};

use anyhow::{Context as _, bail};

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent")
        .to_path_buf()
}

/// `cargo <args>` in the workspace root, with the cargo that runs xtask.
pub fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(args).current_dir(root());
    cmd
}

/// Runs `cmd`, failing with the command line when it does not succeed.
pub fn status(cmd: &mut Command) -> anyhow::Result<()> {
    let st = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !st.success() {
        bail!("{cmd:?} failed ({st})");
    }
    Ok(())
}

/// Runs `cmd` and returns its output; an error if it cannot start.
pub fn output(cmd: &mut Command) -> anyhow::Result<Output> {
    cmd.output()
        .with_context(|| format!("could not start {cmd:?}"))
}

/// stdout of a successful `cmd`, trimmed; an error otherwise.
pub fn stdout(cmd: &mut Command) -> anyhow::Result<String> {
    let out = output(cmd)?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether the effective user is root.
pub fn is_root() -> bool {
    stdout(Command::new("id").arg("-u")).is_ok_and(|s| s == "0")
}

/// Waits up to 60 s until `url` answers 2xx (`curl -sf`).
pub fn wait_for_http(url: &str) -> anyhow::Result<()> {
    for _ in 0..600 {
        if Command::new("curl")
            .args(["-sf", "-o", "/dev/null", url])
            .status()
            .is_ok_and(|s| s.success())
        {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bail!("{url} did not answer within 60 s")
}

/// Prints what a step did.
pub fn done(step: &str, what: &str) {
    println!("setup: {step}: {what}");
}
