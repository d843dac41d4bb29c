//! `stress --otlp-endpoint URL` (or `--otlp`, or `OTEL_EXPORTER_OTLP_ENDPOINT`): the run's
//! requests exported live over OTLP as they finish (`export::otlp::live`), with the daemon's
//! OTLP flags and `--otlp-sample` for the share of requests sent as spans.

use std::sync::Arc;

use anyhow::bail;
use inferscope::export::otlp::{
    OtlpExporter, Sampler, explained,
    live::{self, DEFAULT_SAMPLE},
};
use inferscope::export::report::Report;
use inferscope::loadgen::{Options, Plan, StressReport};

use super::otlp::OtlpArgs;

/// OTLP flags of `stress`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LiveOtlpArgs {
    #[command(flatten)]
    otlp: OtlpArgs,
    /// Share of requests sent as spans, 0..1 (failed requests always are); default from
    /// `OTEL_TRACES_SAMPLER`/`OTEL_TRACES_SAMPLER_ARG`, else 0.01.
    #[arg(long, value_name = "RATIO")]
    otlp_sample: Option<f64>,
}

/// A started live export: call [`Live::finish`] after the run.
pub struct Live {
    exporter: Arc<OtlpExporter>,
    export: live::LiveExport,
    /// An explained run: its request spans are sent with their verdicts, after it.
    explained_spans: bool,
    /// Requests traced so by [`Live::trace_explained`].
    traced_after: u64,
}

impl LiveOtlpArgs {
    /// Whether an export is asked for (flag or environment).
    pub fn wanted(&self) -> bool {
        self.otlp.wanted()
    }

    /// Refuses what cannot be exported, before anything runs: a knee search (each step is a
    /// run of its own load level), a bad sample ratio.
    pub fn check(&self, find_max: bool, explain: bool) -> anyhow::Result<()> {
        if !self.otlp.wanted() {
            if self.otlp_sample.is_some() {
                bail!("--otlp-sample needs an OTLP export: add --otlp-endpoint URL");
            }
            return Ok(());
        }
        if explain && self.otlp_sample.is_some() {
            bail!(
                "--otlp-sample does not apply to --explain: its request spans are the report's sampled requests (each phase's slowest and an even sample), sent with their verdicts; drop --otlp-sample"
            );
        }
        if find_max {
            bail!(
                "--find-max runs are not exported over OTLP: drop --otlp/--otlp-endpoint (and unset OTEL_EXPORTER_OTLP_ENDPOINT), or run each load level as its own stress run"
            );
        }
        self.otlp.config()?;
        self.sampler().map(|_| ())
    }

    fn sampler(&self) -> anyhow::Result<Sampler> {
        let env = |k: &str| std::env::var(k).ok();
        Ok(match self.otlp_sample {
            Some(r) => Sampler::new(r).map_err(|e| anyhow::anyhow!("--otlp-sample: {e}"))?,
            None => match Sampler::from_env(&env)? {
                Some(s) => s,
                None => Sampler::new(DEFAULT_SAMPLE)?,
            },
        })
    }

    /// Starts the export of `plan`'s run onto `opts` when asked for, the run's provenance
    /// (`opts.provenance`, when gathered) as resource attributes. An `explain`ed run's request
    /// spans wait for its verdicts ([`Live::trace_explained`]). Call inside the run's tokio
    /// runtime.
    pub fn start(
        &self,
        plan: &Plan,
        opts: &mut Options,
        explain: bool,
    ) -> anyhow::Result<Option<Live>> {
        let sampler = self.sampler()?;
        // OTEL_TRACES_SAMPLER=always_off holds for an explained run's spans too.
        let explained_spans = explain && sampler.ratio() > 0.0;
        let extra = opts
            .provenance
            .as_ref()
            .map(inferscope::measure::provenance::Provenance::resource_attributes)
            .unwrap_or_default();
        let Some(exporter) = self.otlp.start(&extra)? else {
            return Ok(None);
        };
        let exporter = Arc::new(exporter);
        let export = live::attach(exporter.clone(), plan, (!explain).then_some(sampler), opts);
        Ok(Some(Live {
            exporter,
            export,
            explained_spans,
            traced_after: 0,
        }))
    }
}

/// Requests traced between two flushes: each is a span and up to ten children, and the SDK's
/// queue holds 2048 spans by default.
const FLUSH_EVERY: usize = 100;

impl Live {
    /// Exports the explained phases as traces (see [`OtlpExporter::trace_phase`]) and the
    /// report's sampled requests as request spans with their kernel stages and verdicts
    /// ([`explained::requests`]).
    pub async fn trace_explained(
        &mut self,
        plan: &Plan,
        lg: &StressReport,
        report: &Report,
    ) -> anyhow::Result<()> {
        for p in &report.phases {
            self.exporter.trace_phase(p);
        }
        if !self.explained_spans {
            return Ok(());
        }
        let requests = explained::requests(plan, lg, report);
        for chunk in requests.chunks(FLUSH_EVERY) {
            for (req, l) in chunk {
                self.exporter.trace_request(req, l);
            }
            let exporter = Arc::clone(&self.exporter);
            // A collector that is down loses spans (counted), never the run.
            let _ = tokio::task::spawn_blocking(move || exporter.flush()).await?;
        }
        self.traced_after = requests.len() as u64;
        Ok(())
    }

    /// Waits for the run's last record, pushes what is left and says what was delivered.
    pub async fn finish(self) -> anyhow::Result<()> {
        let counts = self.export.finish().await;
        let Some(exporter) = Arc::into_inner(self.exporter) else {
            bail!("the OTLP exporter is still in use");
        };
        let stats = tokio::task::spawn_blocking(move || exporter.shutdown()).await??;
        eprintln!(
            "OTLP: {} requests recorded, {} traced; {} spans delivered, {} dropped; {} metric pushes delivered, {} failed",
            counts.requests,
            counts.traced + self.traced_after,
            stats.spans_exported,
            stats.spans_dropped(),
            stats.metric_exports_ok,
            stats.metric_exports_failed
        );
        Ok(())
    }
}
