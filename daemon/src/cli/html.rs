//! `stress --html PATH`: the report page of the run's load (latency over time per endpoint,
//! waterfalls, phases) without `--explain`, which writes its own into `--report-dir`.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use inferscope::{atomic, collect::load_fold::LoadFold, export::report::load_only, loadgen};
use tokio::task::JoinHandle;

/// The `--html` flag.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct HtmlArgs {
    /// Write an HTML page of the run's load metrics here (latency over time per endpoint,
    /// request waterfalls, phases); with --explain, report.html is in --report-dir.
    #[arg(long, value_name = "PATH")]
    html: Option<PathBuf>,
}

impl HtmlArgs {
    /// Refuses what cannot make a page, before the run: `--explain` (it writes one), a knee
    /// search, a path that cannot be written.
    pub fn check(&self, explain: bool, search: bool) -> anyhow::Result<()> {
        let Some(path) = &self.html else {
            return Ok(());
        };
        if explain {
            bail!("--explain writes report.html into --report-dir: drop --html");
        }
        if search {
            bail!("--html does not apply to --find-max: its steps are written with --out");
        }
        atomic::check_output_file(path)
            .with_context(|| format!("--html {} cannot be written", path.display()))
    }

    /// When a page is asked for, folds the run's requests into its windows as they finish
    /// (whatever records the run keeps); the task ends with the run.
    pub fn watch(&self, opts: &mut loadgen::Options) -> Option<JoinHandle<LoadFold>> {
        self.html.as_ref()?;
        Some(LoadFold::watch(opts, load_only::WINDOW_MS))
    }

    /// Writes the page of `report`, its requests folded in `fold`, when asked for.
    pub fn write(&self, report: &loadgen::StressReport, fold: &LoadFold) -> anyhow::Result<()> {
        let Some(path) = &self.html else {
            return Ok(());
        };
        let page = load_only::report(report, fold).html()?;
        atomic::write_bytes(path, page.as_bytes())
            .with_context(|| format!("writing the HTML report to {}", path.display()))?;
        eprintln!("HTML report written to {}", path.display());
        Ok(())
    }
}
