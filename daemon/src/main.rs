//! The `inferscope` binary: one subcommand per file under `cli/`.
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

mod cli;

/// Stress AI inference services and explain, from kernel evidence, why latency rose.
#[derive(Parser)]
#[command(name = "inferscope", version, about)]
struct Cli {
    /// Log lines on stderr as text or JSON (one object per event); `RUST_LOG` filters them.
    #[arg(long, global = true, value_enum, default_value_t)]
    log_format: cli::logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run-queue latency per process, like bcc's runqlat (needs root).
    Runqlat(cli::runqlat::Args),
    /// Node-level mode: watch inference servers and serve their time line (needs root).
    Daemon(cli::daemon::Args),
    /// Simulated OpenAI-compatible inference server with vLLM metrics (no GPU needed).
    Sim(cli::sim::Args),
    /// Load an inference service: open-loop, coordinated-omission correct, LLM-aware.
    Stress(Box<cli::stress::Args>),
    /// Work with stress reports: `report merge a.json b.json ... --out merged.json`.
    Report(cli::report::Args),
    /// Build workloads: `workload build --from queries.jsonl --out dataset.jsonl`.
    Workload(cli::workload::Args),
    /// Print a shell completion script: `completions bash`, zsh, fish, elvish, powershell.
    Completions(cli::completions::Args),
    /// Write the manual pages into a folder (`cargo xtask man`).
    #[command(hide = true)]
    Man(cli::completions::ManArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The daemon says what it attaches and watches; one-shot commands only what went wrong.
    let default_filter = match cli.command {
        Command::Daemon(_) => "warn,inferscope=info",
        _ => "warn",
    };
    cli::logging::init(cli.log_format, default_filter);
    // Every connection (load generator) and watched process's file (daemon) is a descriptor.
    if let Err(e) = inferscope::dial::raise_fd_limit() {
        eprintln!("inferscope: cannot raise the open-file limit: {e}");
    }
    let result = match cli.command {
        Command::Runqlat(args) => cli::runqlat::run(&args),
        Command::Daemon(args) => cli::daemon::run(&args),
        Command::Sim(args) => cli::sim::run(&args),
        Command::Stress(args) => cli::stress::run(&args),
        Command::Report(args) => cli::report::run(&args),
        Command::Workload(args) => cli::workload::run(&args),
        Command::Completions(args) => Ok(cli::completions::run(&args, &mut Cli::command())),
        Command::Man(args) => cli::completions::man(&args, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("inferscope: {}", cli::one_line(&err));
            ExitCode::FAILURE
        }
    }
}
