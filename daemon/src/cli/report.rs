//! `inferscope report merge a.json b.json ... [--out merged.json]`: one exact report from the
//! reports of several shards or hosts (histograms added, never percentiles averaged).

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use inferscope::loadgen::merge;

/// Arguments of `inferscope report`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Merge stress reports (e.g. of `--shard i/N` pods) exactly into one.
    Merge {
        /// Reports written by `inferscope stress --out`.
        #[arg(required = true, num_args = 1..)]
        reports: Vec<PathBuf>,
        /// Write the merged report here (default: print it as JSON on stdout).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Merge an incomplete shard set (missing shards, or shards of different N) as it is.
        #[arg(long)]
        allow_partial: bool,
    },
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let Command::Merge {
        reports,
        out,
        allow_partial,
    } = &args.command;
    let loaded = reports
        .iter()
        .map(|p| merge::read(p).map(|r| (p.display().to_string(), r)))
        .collect::<Result<Vec<_>, _>>()?;
    let merged = if *allow_partial {
        merge::merge_partial(&loaded)?
    } else {
        merge::merge(&loaded)?
    };
    if let Some(path) = out {
        merged
            .write(path)
            .with_context(|| format!("writing the merged report to {}", path.display()))?;
        print!("{}", merged.table());
        eprintln!("merged {} reports into {}", loaded.len(), path.display());
    } else {
        eprint!("{}", merged.table());
        println!("{}", serde_json::to_string(&merged)?);
    }
    Ok(ExitCode::SUCCESS)
}
