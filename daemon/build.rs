//! Builds the kernel programs in `probe-ebpf` for bpfel-unknown-none with the nightly toolchain
//! (build-std) and leaves the object in `OUT_DIR/probe`, which `probes::load` embeds.
//!
//! aya-build relays the eBPF build's cargo output as `cargo:warning=` lines, which cargo shows
//! on every build; its stdout is captured into `OUT_DIR/ebpf-build.log` instead, its cargo
//! directives passed on, and the build's output shown only when it fails (`build_relay.rs`).
use std::{
    fs::File,
    io::Write as _,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use anyhow::Context as _;

#[path = "build_relay.rs"]
mod relay;

fn main() -> anyhow::Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../probe-ebpf");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").context("OUT_DIR is not set")?);
    let log = out_dir.join("ebpf-build.log");
    let built = stdout_into(&log, || {
        aya_build::build_ebpf(
            [aya_build::Package {
                name: "probe-ebpf",
                root_dir: root,
                ..Default::default()
            }],
            aya_build::Toolchain::default(),
        )
    })?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let sorted = relay::sort(&text);
    for d in &sorted.directives {
        println!("{d}");
    }
    for n in &sorted.notes {
        println!("cargo:warning={n}");
    }
    if built.is_err() {
        for line in &sorted.relayed {
            println!("cargo:warning={line}");
        }
    }
    built.with_context(|| {
        format!(
            "building the eBPF programs failed (its output: {}); run `cargo xtask setup` (bpf-linker, rust-src)",
            log.display()
        )
    })
}

/// Runs `f` with this process's stdout (fd 1) going into the file `path`, then puts it back.
fn stdout_into<T>(path: &Path, f: impl FnOnce() -> T) -> anyhow::Result<T> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    std::io::stdout().flush()?;
    // SAFETY: dup of fd 1, which is open for the whole process; the result is checked and
    // owned by `saved` from here on.
    let saved = unsafe { libc::dup(1) };
    anyhow::ensure!(saved >= 0, "dup(1): {}", std::io::Error::last_os_error());
    // SAFETY: `saved` is a fresh descriptor that nothing else owns.
    let saved = unsafe { OwnedFd::from_raw_fd(saved) };
    // SAFETY: both descriptors are open; dup2 replaces fd 1 atomically.
    anyhow::ensure!(
        unsafe { libc::dup2(file.as_raw_fd(), 1) } == 1,
        "dup2: {}",
        std::io::Error::last_os_error()
    );
    let out = f();
    let flushed = std::io::stdout().flush();
    // SAFETY: as above; fd 1 gets the original stdout back.
    let restored = unsafe { libc::dup2(saved.as_raw_fd(), 1) } == 1;
    anyhow::ensure!(restored, "dup2: {}", std::io::Error::last_os_error());
    flushed?;
    Ok(out)
}
