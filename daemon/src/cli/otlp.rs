//! OpenTelemetry export flags shared by `daemon` and `stress`; each unset flag falls back to the
//! standard `OTEL_EXPORTER_OTLP_*` variables.

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use inferscope::export::otlp::{
    OtlpConfig, OtlpExporter, OtlpOptions, Protocol, resource_attributes,
};

/// OTLP flags.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OtlpArgs {
    /// Export metrics and traces over OTLP (also on when `OTEL_EXPORTER_OTLP_ENDPOINT` is set).
    #[arg(long)]
    otlp: bool,
    /// Collector endpoint (default from `OTEL_EXPORTER_OTLP_ENDPOINT`, else localhost).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// `grpc` or `http/protobuf`.
    #[arg(long, value_name = "PROTOCOL")]
    otlp_protocol: Option<String>,
    /// Extra header `key=value` (repeatable), e.g. an API key.
    #[arg(long = "otlp-header", value_name = "K=V")]
    otlp_headers: Vec<String>,
    /// PEM file of CA certificates to trust instead of the system's.
    #[arg(long, value_name = "PATH")]
    otlp_ca_file: Option<PathBuf>,
    /// `service.name` of the exported resource.
    #[arg(long, value_name = "NAME")]
    service_name: Option<String>,
    /// How often metrics are pushed.
    #[arg(long, value_parser = super::args::positive_duration, value_name = "DURATION")]
    otlp_metric_interval: Option<Duration>,
    /// Span queue capacity; spans beyond it are dropped and counted.
    #[arg(long, value_name = "N")]
    otlp_queue: Option<usize>,
}

impl OtlpArgs {
    /// Whether an export is asked for: `--otlp`, `--otlp-endpoint` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn wanted(&self) -> bool {
        self.otlp
            || self.otlp_endpoint.is_some()
            || std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
    }

    /// Starts the exporter when asked for (flag or environment), its resource carrying `extra`
    /// attributes besides the environment's; `None` otherwise.
    pub fn start(&self, extra: &[(String, String)]) -> anyhow::Result<Option<OtlpExporter>> {
        let env = |k: &str| std::env::var(k).ok();
        if !self.wanted() {
            return Ok(None);
        }
        let cfg = self.config()?;
        // stderr: `stress` prints its table on stdout.
        eprintln!(
            "OTLP: exporting to {} ({:?})",
            cfg.metrics_endpoint, cfg.protocol
        );
        let mut resource = resource_attributes(&env);
        resource.extend_from_slice(extra);
        Ok(Some(OtlpExporter::start(&cfg, &resource)?))
    }

    /// The configuration the flags and the environment resolve to (checks them).
    pub fn config(&self) -> anyhow::Result<OtlpConfig> {
        let env = |k: &str| std::env::var(k).ok();
        let headers = self
            .otlp_headers
            .iter()
            .map(|h| {
                h.split_once('=')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .with_context(|| format!("--otlp-header `{h}`: expected key=value"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let protocol = self
            .otlp_protocol
            .as_deref()
            .map(Protocol::parse)
            .transpose()?;
        let opts = OtlpOptions {
            endpoint: self.otlp_endpoint.clone(),
            protocol,
            headers,
            ca_file: self.otlp_ca_file.clone(),
            service_name: self.service_name.clone(),
            timeout: None,
            metric_interval: self.otlp_metric_interval,
            max_queue_size: self.otlp_queue,
        };
        Ok(OtlpConfig::resolve(&opts, &env)?)
    }
}
