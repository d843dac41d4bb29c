//! `cargo xtask setup`: everything a fresh machine needs, idempotently. Each step prints what it
//! did or that it was already done; each failure says what to do by hand.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::run::{self, done};

/// Debian packages the tests and benchmarks use as real peers.
const DEBIAN_PACKAGES: [(&str, &str); 10] = [
    ("curl", "curl"),
    ("nft", "nftables"),
    ("python3", "python3"),
    ("promtool", "prometheus"),
    ("wrk", "wrk"),
    ("bpftrace", "bpftrace"),
    ("ip", "iproute2"),
    ("chromium", "chromium"),
    // llama.cpp's server is built from source (`engine.rs`).
    ("cmake", "cmake"),
    ("g++", "g++"),
];

/// Python packages for tests with third-party clients and servers, in a venv under
/// `target/venv`, as pip names them and as Python imports them: `openai` (client), `chromadb`
/// (a real vector database: `chroma run`), `numpy` (the engine's model writer),
/// `opentelemetry-proto` (the OTLP collector's decoder, `tests/servers/otlp_collector.py`).
const PYTHON_PACKAGES: [(&str, &str); 4] = [
    ("openai", "openai"),
    ("chromadb", "chromadb"),
    ("numpy", "numpy"),
    ("opentelemetry-proto", "opentelemetry.proto"),
];

/// Everything: what the build needs, then what the tests need (the Python venv, then the
/// engine, whose model writer runs in the venv). `cargo xtask test` runs [`build`] first and
/// the rest beside cargo (xtask/src/main.rs).
pub fn all() -> anyhow::Result<()> {
    build()?;
    python_venv()?;
    crate::engine::setup()
}

/// What the build needs: the eBPF toolchain, the mounts and the Debian packages.
pub fn build() -> anyhow::Result<()> {
    rust_src()?;
    bpf_linker()?;
    mounts();
    debian_packages()
}

fn rust_src() -> anyhow::Result<()> {
    let installed = run::stdout(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]))
    .context(
        "the nightly toolchain is needed for the eBPF build: `rustup toolchain install nightly`",
    )?;
    if installed.lines().any(|l| l.starts_with("rust-src")) {
        done("rust-src (nightly)", "already installed");
        return Ok(());
    }
    run::status(Command::new("rustup").args([
        "component",
        "add",
        "rust-src",
        "--toolchain",
        "nightly",
    ]))
    .context("by hand: `rustup component add rust-src --toolchain nightly`")?;
    done("rust-src (nightly)", "installed");
    Ok(())
}

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cargo"),
        PathBuf::from,
    )
}

/// bpf-linker cannot be downloaded prebuilt here; it is built from crates.io against the
/// nightly toolchain's own libLLVM, exposed through a prefix under `$CARGO_HOME` (its rpath
/// points there, so the prefix must outlive the build).
fn bpf_linker() -> anyhow::Result<()> {
    if run::output(Command::new("bpf-linker").arg("--version")).is_ok_and(|o| o.status.success()) {
        done("bpf-linker", "already installed");
        return Ok(());
    }
    let version = run::stdout(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let major = version
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .context("`rustc +nightly -vV` printed no LLVM version")?
        .to_string();
    let sysroot = PathBuf::from(run::stdout(
        Command::new("rustc").args(["+nightly", "--print", "sysroot"]),
    )?);
    let lib = find_libllvm(&sysroot.join("lib"), &major)?;
    let prefix = cargo_home().join("bpf-linker-llvm");
    let prefix_lib = prefix.join("lib");
    std::fs::create_dir_all(&prefix_lib)?;
    let name = lib.file_name().context("libLLVM has a file name")?;
    for link in [prefix_lib.join("libLLVM.so"), prefix_lib.join(name)] {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link)
            .with_context(|| format!("symlinking {} -> {}", link.display(), lib.display()))?;
    }
    println!("setup: bpf-linker: building from crates.io against LLVM {major} (about 2 minutes)");
    let feature = format!("llvm-{major}");
    run::status(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["install", "bpf-linker", "--no-default-features", "--features", &feature])
            .env("LLVM_PREFIX", &prefix),
    )
    .with_context(|| {
        format!(
            "by hand: LLVM_PREFIX={} cargo install bpf-linker --no-default-features --features {feature}",
            prefix.display()
        )
    })?;
    done("bpf-linker", "installed");
    Ok(())
}

/// `libLLVM.so.<major>.<minor>-rust-<version>` in the nightly sysroot.
fn find_libllvm(dir: &Path, major: &str) -> anyhow::Result<PathBuf> {
    let prefix = format!("libLLVM.so.{major}.");
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&prefix))
        {
            return Ok(path);
        }
    }
    bail!(
        "no {prefix}* in {}: reinstall the nightly toolchain (`rustup toolchain install nightly`)",
        dir.display()
    )
}

/// tracefs and bpffs may be missing on a fresh machine; only root can mount them.
fn mounts() {
    for (target, fstype, probe) in [
        ("/sys/kernel/tracing", "tracefs", "events"),
        ("/sys/fs/bpf", "bpf", ""),
    ] {
        let mounted = std::fs::read_to_string("/proc/mounts")
            .is_ok_and(|m| m.lines().any(|l| l.split(' ').nth(1) == Some(target)));
        let usable = probe.is_empty() || Path::new(target).join(probe).exists();
        if mounted && usable {
            done(fstype, &format!("already mounted at {target}"));
        } else if !run::is_root() {
            done(
                fstype,
                &format!("not mounted; as root: mount -t {fstype} {fstype} {target}"),
            );
        } else if run::status(Command::new("mount").args(["-t", fstype, fstype, target])).is_ok() {
            done(fstype, &format!("mounted at {target}"));
        } else {
            done(
                fstype,
                &format!("could not mount; by hand: mount -t {fstype} {fstype} {target}"),
            );
        }
    }
}

fn debian_packages() -> anyhow::Result<()> {
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .filter(|(bin, _)| {
            !run::output(Command::new("which").arg(bin)).is_ok_and(|o| o.status.success())
        })
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        done("debian packages", "already installed");
        return Ok(());
    }
    if !run::is_root() {
        bail!(
            "missing Debian packages; as root: apt-get install -y {}",
            missing.join(" ")
        );
    }
    println!("setup: debian packages: installing {}", missing.join(" "));
    let apt = |args: &[&str]| {
        let mut c = Command::new("apt-get");
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    run::status(&mut apt(&["update", "-qq"]))?;
    let mut install = apt(&["install", "-y", "-qq", "--no-install-recommends"]);
    install.args(&missing);
    run::status(&mut install)
        .with_context(|| format!("by hand: apt-get install -y {}", missing.join(" ")))?;
    done("debian packages", "installed");
    Ok(())
}

/// The venv whose interpreter the tests run: `target/venv/bin/python`.
pub fn python_venv() -> anyhow::Result<()> {
    let venv = run::root().join("target/venv");
    let python = venv.join("bin/python");
    let have = |pkg: &str| {
        run::output(Command::new(&python).args(["-c", &format!("import {pkg}")]))
            .is_ok_and(|o| o.status.success())
    };
    let names: Vec<&str> = PYTHON_PACKAGES.iter().map(|(pip, _)| *pip).collect();
    if python.exists() && PYTHON_PACKAGES.iter().all(|(_, import)| have(import)) {
        done(
            "python venv",
            &format!("already has {} in {}", names.join(", "), venv.display()),
        );
        return Ok(());
    }
    if !python.exists() {
        run::status(Command::new("python3").args(["-m", "venv"]).arg(&venv)).context(
            "by hand: python3 -m venv target/venv (Debian: apt-get install python3-venv)",
        )?;
    }
    run::status(
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q"])
            .args(&names),
    )
    .with_context(|| format!("by hand: target/venv/bin/pip install {}", names.join(" ")))?;
    done("python venv", &format!("installed {}", names.join(", ")));
    Ok(())
}
