//! `cargo xtask setup | test | demo`: orchestration only. The eBPF object is built by
//! `daemon/build.rs`; this crate installs what that build and the tests need, and runs them.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod demo;
mod engine;
mod gpu_check;
mod run;
mod setup;

#[derive(Parser)]
#[command(name = "xtask", about = "inferscope's developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install everything the build and the tests need (idempotent).
    Setup,
    /// Run setup, then every test of the workspace, root-only integration tests included.
    Test {
        /// Extra arguments for `cargo test` (e.g. a test name filter).
        #[arg(trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// Build inferscope and run the demo.
    Demo {
        /// The server under load: `sim` (the embedded simulator, the default) or `llama.cpp`
        /// (the real engine setup builds: the seed matrix's LLM phases, rates scaled to it).
        #[arg(long, default_value = "sim")]
        engine: String,
    },
    /// Write the manual pages: target/man/inferscope.1 and one per subcommand.
    Man,
    /// Benchmarks that print side-by-side comparisons: probes, sim, loadgen, attribution (all when
    /// omitted).
    Bench {
        /// Which benchmark; all when omitted.
        which: Option<String>,
    },
    /// Lay out a GPU check in target/gpu-check (release binary, truth workload, engine, scenario,
    /// run.sh) and print how to run it; `--read DIR` prints that run's truth table.
    GpuCheck {
        /// The folder a GPU run wrote ($OUT).
        #[arg(long)]
        read: Option<std::path::PathBuf>,
    },
    /// A workload for the benchmarks (pipe, tcp), run in its own process.
    #[command(hide = true)]
    Workload {
        /// pipe | tcp | pipe-echo
        kind: String,
        /// Seconds to run.
        #[arg(default_value_t = 5.0)]
        secs: f64,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Setup => setup::all(),
        Task::Test { args } => setup::build().and_then(|()| test(&args)),
        Task::Demo { engine } => setup::all().and_then(|()| demo::run(&engine)),
        Task::Man => man(),
        Task::GpuCheck { read } => match read {
            Some(dir) => gpu_check::read(&dir),
            None => gpu_check::prepare(),
        },
        Task::Bench { which } => setup::all().and_then(|()| bench::run(which.as_deref())),
        Task::Workload { kind, secs } => bench::workload::run(&kind, secs),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The binary writes its own pages (`clap_mangen` over its own CLI definitions), so they cannot
/// drift from the flags.
fn man() -> anyhow::Result<()> {
    let out = run::root().join("target/man");
    let mut cmd = run::cargo(&["run", "--quiet", "-p", "inferscope", "--bin", "inferscope"]);
    cmd.args(["--", "man", "--out"]).arg(&out);
    run::status(&mut cmd)?;
    println!("man: {}", out.join("inferscope.1").display());
    Ok(())
}

/// What a test that needs the engine (llama.cpp's server) has in its name: `cargo xtask test`
/// runs those after the engine is built, and every other test while it builds.
const ENGINE_TESTS: &str = "llama";

fn test(args: &[String]) -> anyhow::Result<()> {
    // The Python venv and the deploy checks' tools (a minute or more of pip each when cold) are
    // installed while cargo compiles the tests. The engine (a C++ build of many CPU-minutes when
    // cold) builds at idle priority from now until the tests that need it, on what cargo and the
    // other tests leave free.
    let venv = std::thread::spawn(setup::python_venv);
    let engine = std::thread::spawn(engine::server);
    let filtered = !args.is_empty();
    let tools = std::thread::spawn(move || {
        if !filtered {
            // A failed install is tried again, and reported, by the deploy checks below.
            let _ = deploy_tools();
        }
    });
    let compiled = run::status(&mut run::cargo(&[
        "test",
        "--workspace",
        "--exclude",
        "probe-ebpf",
        "--no-run",
    ]));
    let venv = venv
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the venv setup panicked")));
    let _ = tools.join();
    compiled?;
    venv?;
    // The engine's model is written with the venv's Python, once the server is built.
    let engine_ready = move || {
        engine
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the engine build panicked")))
            .and_then(|()| engine::write_model())
    };
    // --no-fail-fast: one CI run reports every failing test binary, not just the first.
    let tests = |filter: &[&str]| {
        let mut cmd = run::cargo(&[
            "test",
            "--workspace",
            "--exclude",
            "probe-ebpf",
            "--no-fail-fast",
        ]);
        run::status(cmd.arg("--").args(filter))
    };
    if filtered {
        println!("xtask: deploy/validate.sh skipped: a test filter was given");
        engine_ready()?;
        let filter: Vec<&str> = args.iter().map(String::as_str).collect();
        return tests(&filter);
    }
    // The deploy checks (a minute or two) run first and the tests after them whatever their
    // outcome, so one run reports both and the tests' failures are the last thing it prints
    // (CI shows the run's tail).
    let deploy = deploy_checks();
    let without_engine = tests(&["--skip", ENGINE_TESTS]);
    println!("xtask: the tests that need the engine (named {ENGINE_TESTS:?}), once it is built");
    let with_engine = engine_ready().and_then(|()| tests(&[ENGINE_TESTS]));
    without_engine.and(with_engine).and(deploy)
}

/// `deploy/validate.sh --install-only`: the manifests' checkers into `target/venv-deploy`.
fn deploy_tools() -> anyhow::Result<()> {
    let script = run::root().join("deploy/validate.sh");
    run::status(
        std::process::Command::new("bash")
            .arg(script)
            .arg("--install-only")
            .current_dir(run::root()),
    )
}

/// `deploy/validate.sh`, in full: the dashboard's and the alert rules' metric names, `promtool
/// check rules` / `test rules`, the kustomization, and the manifests against the Kubernetes
/// schemas (`kubernetes-validate --strict`) and the policy checks (checkov), both from `PyPI` in
/// `target/venv-deploy` (the script installs them once). Needs promtool (setup installs it).
fn deploy_checks() -> anyhow::Result<()> {
    if std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_err()
    {
        let why =
            "promtool is not installed (Debian package prometheus; cargo xtask setup installs it)";
        // CI checks every part: a missing tool is a failure there, not a skip.
        anyhow::ensure!(
            std::env::var_os("CI").is_none_or(|v| v != "true"),
            "deploy/validate.sh cannot run: {why}"
        );
        println!("xtask: deploy/validate.sh skipped: {why}");
        return Ok(());
    }
    let script = run::root().join("deploy/validate.sh");
    run::status(
        std::process::Command::new("bash")
            .arg(script)
            .current_dir(run::root()),
    )
}
