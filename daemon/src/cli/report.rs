//! `inferscope report merge a.json b.json ... [--out merged.json]`: one exact report from the
//! reports of several shards or hosts (histograms added, never percentiles averaged).
//! `inferscope report explain report.json [--report-dir DIR]`: the time line of an explained
//! run attributed again with this build's rules.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use inferscope::{export::report::Report, measure::merge};

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
        /// Merge shards whose phases did not start together (more than a tenth of a phase
        /// apart), which the merged report then describes as if they had.
        #[arg(long)]
        allow_skew: bool,
    },
    /// Attribute the time line of an explained run's report.json again with this build's rules
    /// and print the summary (e.g. after an upgrade, or to compare rule changes).
    Explain {
        /// report.json written by `stress --explain`.
        report: PathBuf,
        /// Also write report.json and report.html of the new attribution here.
        #[arg(long, value_name = "DIR")]
        report_dir: Option<PathBuf>,
    },
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let (reports, out, allow) = match &args.command {
        Command::Merge {
            reports,
            out,
            allow_partial,
            allow_skew,
        } => (
            reports,
            out,
            merge::Allow {
                partial: *allow_partial,
                skew: *allow_skew,
            },
        ),
        Command::Explain { report, report_dir } => return explain(report, report_dir.as_deref()),
    };
    let loaded = reports
        .iter()
        .map(|p| merge::read(p).map(|r| (p.display().to_string(), r)))
        .collect::<Result<Vec<_>, _>>()?;
    let merged = merge::merge(&loaded, allow)?;
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

fn explain(path: &std::path::Path, dir: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading {} (give a report.json of stress --explain)",
            path.display()
        )
    })?;
    let old = Report::from_json(&text).with_context(|| format!("{}", path.display()))?;
    let again = Report::new(old.run, old.timeline)
        .with_waterfalls(old.waterfalls)
        .with_missing_evidence(old.missing_evidence);
    print!(
        "{}",
        again.terminal_with(inferscope::export::report::colour::for_stdout())
    );
    if let Some(dir) = dir {
        let (json, html) = again.write_files(dir)?;
        eprintln!("written to {} and {}", json.display(), html.display());
    }
    Ok(ExitCode::SUCCESS)
}
