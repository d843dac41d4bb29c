//! `stress --otlp-endpoint URL` (or `--otlp`, or `OTEL_EXPORTER_OTLP_ENDPOINT`): the run's
//! requests exported live over OTLP as they finish (`export::otlp::live`), with the daemon's
//! OTLP flags and `--otlp-sample` for the share of requests sent as spans.

use std::sync::Arc;

use anyhow::bail;
use inferscope::export::otlp::{
    OtlpExporter, Sampler,
    live::{self, DEFAULT_SAMPLE},
};
use inferscope::loadgen::{Options, Plan};

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
}

impl LiveOtlpArgs {
    /// Whether an export is asked for (flag or environment).
    pub fn wanted(&self) -> bool {
        self.otlp.wanted()
    }

    /// Refuses what cannot be exported, before anything runs: a knee search (each step is a
    /// run of its own load level), a bad sample ratio.
    pub fn check(&self, find_max: bool) -> anyhow::Result<()> {
        if !self.otlp.wanted() {
            if self.otlp_sample.is_some() {
                bail!("--otlp-sample needs an OTLP export: add --otlp-endpoint URL");
            }
            return Ok(());
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
    /// (`opts.provenance`, when gathered) as resource attributes. Call inside the run's tokio
    /// runtime.
    pub fn start(&self, plan: &Plan, opts: &mut Options) -> anyhow::Result<Option<Live>> {
        let sampler = self.sampler()?;
        let extra = opts
            .provenance
            .as_ref()
            .map(inferscope::measure::provenance::Provenance::resource_attributes)
            .unwrap_or_default();
        let Some(exporter) = self.otlp.start(&extra)? else {
            return Ok(None);
        };
        let exporter = Arc::new(exporter);
        let export = live::attach(exporter.clone(), plan, sampler, opts);
        Ok(Some(Live { exporter, export }))
    }
}

impl Live {
    /// Exports the explained phases as traces (see [`OtlpExporter::trace_phase`]).
    pub fn trace_phases(&self, phases: &[inferscope::attribute::PhaseSummary]) {
        for p in phases {
            self.exporter.trace_phase(p);
        }
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
            counts.traced,
            stats.spans_exported,
            stats.spans_dropped(),
            stats.metric_exports_ok,
            stats.metric_exports_failed
        );
        Ok(())
    }
}
