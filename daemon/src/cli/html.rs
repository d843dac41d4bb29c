//! `stress --html PATH`: the report page of the run's load (latency over time per endpoint,
//! waterfalls, phases) without `--explain`, which writes its own into `--report-dir`.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use inferscope::loadgen;
use inferscope::{atomic, export::report::load_only};

/// The `--html` flag.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct HtmlArgs {
    /// Write an HTML page of the run's load metrics here (latency over time per endpoint,
    /// request waterfalls, phases); with --explain, report.html is in --report-dir.
    #[arg(long, value_name = "PATH")]
    html: Option<PathBuf>,
}

impl HtmlArgs {
    /// Refuses what cannot make a page, before the run: `--explain` (it writes one),
    /// `--no-records` (the page is drawn from the records), a knee search, a path that cannot
    /// be written.
    pub fn check(&self, explain: bool, no_records: bool, search: bool) -> anyhow::Result<()> {
        let Some(path) = &self.html else {
            return Ok(());
        };
        if explain {
            bail!("--explain writes report.html into --report-dir: drop --html");
        }
        if no_records {
            bail!("--html draws the page from the per-request records: drop --no-records");
        }
        if search {
            bail!("--html does not apply to --find-max: its steps are written with --out");
        }
        atomic::check_output_file(path)
            .with_context(|| format!("--html {} cannot be written", path.display()))
    }

    /// Writes the page of `report` when asked for.
    pub fn write(&self, report: &loadgen::StressReport) -> anyhow::Result<()> {
        let Some(path) = &self.html else {
            return Ok(());
        };
        let page = load_only::report(report).html()?;
        atomic::write_bytes(path, page.as_bytes())
            .with_context(|| format!("writing the HTML report to {}", path.display()))?;
        eprintln!("HTML report written to {}", path.display());
        Ok(())
    }
}
