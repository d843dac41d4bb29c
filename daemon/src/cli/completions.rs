//! `inferscope completions SHELL`: a completion script on stdout (`clap_complete`); and the
//! hidden `inferscope man --out DIR` behind `cargo xtask man`: `inferscope.1` and one page per
//! subcommand (`inferscope-stress.1`, ...), made by `clap_mangen` from the same definitions.

use std::{io::Write as _, path::PathBuf, process::ExitCode};

use anyhow::Context as _;

/// Arguments of `inferscope completions`.
#[derive(clap::Args)]
pub struct Args {
    /// bash, zsh, fish, elvish or powershell, e.g. `inferscope completions bash >
    /// /etc/bash_completion.d/inferscope`.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Arguments of `inferscope man`.
#[derive(clap::Args)]
pub struct ManArgs {
    /// Folder the pages are written to (made when missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Prints the completion script of `cmd` (the whole CLI) for the shell asked for.
pub fn run(args: &Args, cmd: &mut clap::Command) -> ExitCode {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, cmd, "inferscope", &mut out);
    // A closed pipe (`| head`) is not an error worth a message.
    let _ = std::io::stdout().lock().write_all(&out);
    ExitCode::SUCCESS
}

/// Writes the manual pages of `cmd` into `--out`.
pub fn man(args: &ManArgs, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("--out {}: cannot create it", args.out.display()))?;
    clap_mangen::generate_to(cmd, &args.out)
        .with_context(|| format!("writing manual pages into {}", args.out.display()))?;
    eprintln!("manual pages written to {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}
