//! The run report: `report.json` (versioned schema), a terminal summary and a self-contained
//! `report.html`.
//!
//! ```no_run
//! use inferscope::collect::timeline::Timeline;
//! use inferscope::export::report::{Report, RunMeta};
//!
//! let timeline = Timeline::new(0, 1000); // filled by collect
//! let run = RunMeta::new("example", "http://127.0.0.1:8000", 0, 60_000, 1000);
//! let report = Report::new(run, timeline).with_missing_evidence(["no root: kernel probes off"]);
//! print!("{}", report.terminal());
//! report.write_files(std::path::Path::new(".")).unwrap();
//! ```

pub mod colour;
mod hops;
pub use hops::CallsSeen;
mod html;
pub mod load_only;
mod of_run;
mod terminal;
pub mod waterfall;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::attribute::{self, Baselines, PhaseLatency, PhaseSummary, WindowVerdict};
use crate::collect::timeline::Timeline;

pub use html::{escape_script_json, render as render_html};
pub use terminal::{render as render_terminal, render_with as render_terminal_with};
pub use waterfall::Waterfall;

/// Version of the `report.json` schema; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 2;

/// Errors writing or reading a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The report could not be (de)serialised.
    #[error("report JSON")]
    Json(#[from] serde_json::Error),
    /// A file could not be written or read.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A `report.json` of another schema version.
    #[error(
        "report schema version {found}, this build reads {SCHEMA_VERSION}: write it again with this build's stress --explain"
    )]
    Schema {
        /// The version found.
        found: u32,
    },
}

/// What was run, against what, when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunMeta {
    /// Scenario name.
    pub scenario: String,
    /// Target URL.
    pub target: String,
    /// Run start, Unix ms.
    pub start_unix_ms: u64,
    /// Run end, Unix ms.
    pub end_unix_ms: u64,
    /// Window length, ms.
    pub window_ms: u64,
    /// inferscope version that wrote the report.
    pub inferscope_version: String,
    /// What the load ran against and on (engine, GPUs, CPU, kernel, scenario hash, seed, trace
    /// id), as in the load's own report; none of it for a daemon's report.
    #[serde(flatten)]
    pub provenance: crate::measure::provenance::Provenance,
}

impl RunMeta {
    /// Run metadata stamped with this build's version.
    #[must_use]
    pub fn new(
        scenario: &str,
        target: &str,
        start_unix_ms: u64,
        end_unix_ms: u64,
        window_ms: u64,
    ) -> Self {
        Self {
            scenario: scenario.to_owned(),
            target: target.to_owned(),
            start_unix_ms,
            end_unix_ms,
            window_ms,
            inferscope_version: env!("CARGO_PKG_VERSION").to_owned(),
            provenance: crate::measure::provenance::Provenance::default(),
        }
    }
}

/// Everything a run produced, as written to `report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Run metadata.
    pub run: RunMeta,
    /// The joined time line.
    pub timeline: Timeline,
    /// What the windows were compared against, one baseline per workload.
    pub baselines: Baselines,
    /// One verdict per window.
    pub verdicts: Vec<WindowVerdict>,
    /// One summary per phase.
    pub phases: Vec<PhaseSummary>,
    /// Sampled requests' waterfalls.
    pub waterfalls: Vec<Waterfall>,
    /// Evidence the run lacked, e.g. `no root: kernel probes off`.
    pub missing_evidence: Vec<String>,
    /// Trigger rules that fired during the run, with their actions' outcomes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<crate::triggers::Firing>,
}

impl Report {
    /// Attributes `timeline` and wraps the result. Sources absent from every window are listed
    /// in `missing_evidence`.
    #[must_use]
    pub fn new(run: RunMeta, timeline: Timeline) -> Self {
        let a = attribute::attribute(&timeline);
        let missing_evidence = absent_sources(&timeline);
        Self {
            schema_version: SCHEMA_VERSION,
            run,
            timeline,
            baselines: a.baselines,
            verdicts: a.windows,
            phases: a.phases,
            waterfalls: Vec::new(),
            missing_evidence,
            triggers: Vec::new(),
        }
    }

    /// Adds the trigger firings of the run.
    #[must_use]
    pub fn with_triggers(mut self, triggers: Vec<crate::triggers::Firing>) -> Self {
        self.triggers = triggers;
        self
    }

    /// Adds sampled requests' waterfalls.
    #[must_use]
    pub fn with_waterfalls(mut self, waterfalls: Vec<Waterfall>) -> Self {
        self.waterfalls = waterfalls;
        self
    }

    /// Adds notes on missing evidence (e.g. why probes are off), first.
    #[must_use]
    pub fn with_missing_evidence<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        notes: I,
    ) -> Self {
        let mut all: Vec<String> = notes.into_iter().map(Into::into).collect();
        all.append(&mut self.missing_evidence);
        self.missing_evidence = all;
        self
    }

    /// Replaces a phase's window-averaged latencies with the load generator's exact phase
    /// quantiles (marked `exact`); `false` when there is no such phase.
    pub fn set_phase_latency(&mut self, phase: &str, mut latency: PhaseLatency) -> bool {
        latency.exact = true;
        match self.phases.iter_mut().find(|p| p.name == phase) {
            Some(p) => {
                p.latency = latency;
                true
            }
            None => false,
        }
    }

    /// Sets a replayed trace's prefix sharing (from the load generator's report of phase
    /// `phase`) beside the server's hit rate in the phase's windows; `false` when there is no
    /// such phase.
    pub fn set_phase_prefix(
        &mut self,
        phase: &str,
        trace: &crate::measure::prefix::PrefixSharing,
    ) -> bool {
        let prefix = attribute::prefix::PhasePrefix::of_phase(&self.timeline, phase, trace.clone());
        match self.phases.iter_mut().find(|p| p.name == phase) {
            Some(p) => {
                p.prefix = Some(prefix);
                true
            }
            None => false,
        }
    }

    /// The summary of the phase called `name`.
    #[must_use]
    pub fn phase(&self, name: &str) -> Option<&PhaseSummary> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// `report.json` text.
    pub fn to_json(&self) -> Result<String, ReportError> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Reads `report.json` text, refusing other schema versions.
    pub fn from_json(text: &str) -> Result<Self, ReportError> {
        #[derive(Deserialize)]
        struct Version {
            schema_version: u32,
        }
        let v: Version = serde_json::from_str(text)?;
        if v.schema_version != SCHEMA_VERSION {
            return Err(ReportError::Schema {
                found: v.schema_version,
            });
        }
        Ok(serde_json::from_str(text)?)
    }

    /// The terminal summary.
    #[must_use]
    pub fn terminal(&self) -> String {
        terminal::render(self)
    }

    /// The terminal summary with its verdict lines coloured when `colour`
    /// ([`colour::for_stdout`] decides for stdout).
    #[must_use]
    pub fn terminal_with(&self, colour: bool) -> String {
        terminal::render_with(self, colour)
    }

    /// The self-contained `report.html`.
    pub fn html(&self) -> Result<String, ReportError> {
        html::render(self)
    }

    /// Writes `report.json` and `report.html` into `dir`, each atomically (temporary file,
    /// fsync, rename); returns their paths.
    pub fn write_files(&self, dir: &Path) -> Result<(PathBuf, PathBuf), ReportError> {
        let json = dir.join("report.json");
        let html = dir.join("report.html");
        write(&json, &self.to_json()?)?;
        write(&html, &self.html()?)?;
        Ok((json, html))
    }
}

// Atomic: a reader (or a crash) sees the old file or the complete new one, never a torn one.
fn write(path: &Path, text: &str) -> Result<(), ReportError> {
    crate::atomic::write_bytes(path, text.as_bytes()).map_err(|source| ReportError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Sources no window has: the evidence the whole run lacks.
fn absent_sources(t: &Timeline) -> Vec<String> {
    let ws = &t.windows;
    if ws.is_empty() {
        return vec!["the time line is empty".to_owned()];
    }
    let mut out = Vec::new();
    let mut check = |present: bool, what: &str| {
        if !present {
            out.push(what.to_owned());
        }
    };
    check(
        ws.iter().any(|w| w.load.is_some()),
        "no load generator records",
    );
    check(
        ws.iter().any(|w| w.server.is_some()),
        "no server metrics (/metrics not scraped)",
    );
    check(
        ws.iter()
            .any(|w| w.runq.as_ref().is_some_and(|r| r.samples > 0)),
        "no run-queue delay (scheduler probes off: needs root)",
    );
    check(
        ws.iter().any(|w| w.net.is_some()),
        "no socket timings (socket probes off: needs root)",
    );
    check(
        ws.iter().any(|w| w.gpu.is_some()),
        "no GPU signals (CUDA uprobes off, no NVML)",
    );
    out
}

#[cfg(test)]
mod tests;
