//! OpenTelemetry (OTLP) export of the time line and of sampled load-generator requests.
//!
//! ```no_run
//! # async fn demo() -> Result<(), inferscope::export::otlp::OtlpError> {
//! use inferscope::export::otlp::{OtlpConfig, OtlpExporter, OtlpOptions, resource_attributes};
//! use inferscope::collect::catalog::Labels;
//! let env = |k: &str| std::env::var(k).ok();
//! let config = OtlpConfig::resolve(&OtlpOptions::default(), &env)?;
//! // Inside a tokio runtime (gRPC connections live on it).
//! let exporter = OtlpExporter::start(&config, &resource_attributes(&env))?;
//! let labels = Labels { scenario: Some("burst".into()), ..Labels::default() };
//! # let window = inferscope::collect::timeline::Window::default();
//! exporter.record_window(&window, &labels); // once per closed window
//! // Per request: exporter.record_request(&req, &labels); sampled: exporter.trace_request(..)
//! // (a load-generator run does both through live::attach)
//! let stats = tokio::task::spawn_blocking(move || exporter.shutdown()).await.unwrap()?;
//! println!("dropped {} spans", stats.spans_dropped());
//! # Ok(()) }
//! ```
//!
//! Memory is bounded when the collector is down: spans wait in the SDK's batch queue (capacity
//! `max_queue_size`; more are dropped and counted), metrics are aggregated in place (bounded
//! attribute sets) and a failed push is counted, not retried forever. Recording never blocks.

mod accounting;
pub mod config;
pub mod explained;
mod ids;
mod instruments;
pub mod live;
pub mod phases;
pub mod spans;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
use opentelemetry_otlp::{
    MetricExporter, SpanExporter, WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};

pub use accounting::ExportStats;
pub use config::{OtlpConfig, OtlpOptions, Protocol};
pub use instruments::{
    GEN_AI_OPERATION_DURATION, GEN_AI_TIME_PER_OUTPUT_CHUNK, GEN_AI_TIME_TO_FIRST_CHUNK,
    GEN_AI_TOKENS, GEN_AI_TPOT, GEN_AI_TTFT, HOP_CALLS_PER_REQUEST, HOP_HOLDS, HOP_PART,
    HTTP_CLIENT_DURATION, PIPELINE_STEP_CALLS, PIPELINE_STEP_FALLBACKS, PIPELINE_TOOL_DEPTH,
    VERDICT, VERDICT_CONFIDENCE,
};
pub use live::{LiveCounts, LiveExport, Sampler};
pub use spans::{
    GenAiCall, LAST_TOKEN_EVENT, PipelineTask, REQUEST_SPAN, SampledRequest, Stage, StepCount,
};

use crate::collect::catalog::Labels;
use crate::collect::timeline::Window;
use accounting::{Counters, CountingMetricExporter, CountingProcessor, CountingSpanExporter};
use instruments::Instruments;

/// Errors of the OTLP exporter.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// A setting or environment variable is invalid.
    #[error("OTLP configuration: {0}")]
    Config(String),
    /// The CA file could not be read or parsed.
    #[error("OTLP CA file {path}: {reason}")]
    CaFile {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The exporter crate refused the configuration.
    #[error("building the OTLP exporter: {0}")]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
    /// Flushing or shutting down failed (e.g. timed out against an unreachable collector).
    #[error("OTLP {0}")]
    Sdk(String),
}

/// Resource attributes from the downward-API environment: `k8s.node.name` (`K8S_NODE_NAME`),
/// `k8s.pod.name` (`K8S_POD_NAME`), `k8s.namespace.name` (`K8S_NAMESPACE_NAME`), `k8s.pod.uid`
/// (`K8S_POD_UID`), and `host.name` (the node name under Kubernetes, else the host name).
#[must_use]
pub fn resource_attributes(env: &dyn Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut attrs = Vec::new();
    let host = env("K8S_NODE_NAME")
        .filter(|v| !v.is_empty())
        .or_else(hostname);
    if let Some(h) = host {
        attrs.push(("host.name".to_owned(), h));
    }
    for (var, key) in [
        ("K8S_NODE_NAME", "k8s.node.name"),
        ("K8S_POD_NAME", "k8s.pod.name"),
        ("K8S_NAMESPACE_NAME", "k8s.namespace.name"),
        ("K8S_POD_UID", "k8s.pod.uid"),
    ] {
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
            attrs.push((key.to_owned(), v));
        }
    }
    attrs
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec())
        .ok()
        .filter(|s| !s.is_empty())
}

/// The running OTLP export: two SDK providers, their instruments, and the drop accounting.
pub struct OtlpExporter {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    tracer: SdkTracer,
    instruments: Instruments,
    counters: Arc<Counters>,
}

impl OtlpExporter {
    /// Builds the exporters and starts the SDK's export threads. With [`Protocol::Grpc`] it must
    /// run inside a multi-threaded tokio runtime, which then carries the connections.
    /// `resource` is usually [`resource_attributes`] of the process environment;
    /// `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME` are honoured too.
    pub fn start(config: &OtlpConfig, resource: &[(String, String)]) -> Result<Self, OtlpError> {
        // rustls needs one process-wide crypto provider; ring builds without a C toolchain.
        // An Err only means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca_pem = match &config.ca_file {
            Some(p) => Some(std::fs::read(p).map_err(|e| OtlpError::CaFile {
                path: p.display().to_string(),
                reason: e.to_string(),
            })?),
            None => None,
        };
        let counters = Arc::new(Counters::default());
        let (span_exporter, metric_exporter) = build_exporters(config, ca_pem.as_deref())?;

        let resource = build_resource(config, resource);
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(config.max_queue_size)
            .with_max_export_batch_size(config.max_export_batch_size)
            .with_scheduled_delay(config.scheduled_delay)
            .build();
        let processor = BatchSpanProcessor::builder(CountingSpanExporter {
            inner: span_exporter,
            counters: counters.clone(),
        })
        .with_batch_config(batch)
        .build();
        let tracer_provider = SdkTracerProvider::builder()
            // Which requests become spans is decided before a span is made (`live::Sampler`,
            // which reads OTEL_TRACES_SAMPLER itself): the SDK must not sample them again.
            .with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOn)
            // A request span takes the ids its request's `traceparent` carried.
            .with_id_generator(ids::PresetIds::default())
            .with_span_processor(CountingProcessor {
                inner: processor,
                counters: counters.clone(),
            })
            .with_resource(resource.clone())
            .build();
        let reader = PeriodicReader::builder(CountingMetricExporter {
            inner: metric_exporter,
            counters: counters.clone(),
        })
        .with_interval(config.metric_interval)
        .build();
        let meter_provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource)
            .build();

        let scope = InstrumentationScope::builder("inferscope")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = tracer_provider.tracer_with_scope(scope.clone());
        let instruments = Instruments::new(&meter_provider.meter_with_scope(scope));
        Ok(Self {
            tracer_provider,
            meter_provider,
            tracer,
            instruments,
            counters,
        })
    }

    /// Records one closed time-line window (call once per window).
    pub fn record_window(&self, window: &Window, labels: &Labels) {
        self.instruments.record_window(window, labels);
    }

    /// Records the verdict of the window just closed (`inferscope.verdict{cause}`, 1 for its
    /// cause and 0 for the others, and `inferscope.verdict.confidence`), with `labels`'
    /// server identity (`server`, `k8s.*`); a gateway's hops too (`inferscope.hop.part`,
    /// `.holds`, `.calls_per_request`, by `inferscope.hop`).
    pub fn record_verdict(&self, verdict: &crate::attribute::WindowVerdict, labels: &Labels) {
        self.instruments.record_verdict(verdict, labels);
    }

    /// Records one request into the latency and token histograms (every request, not only
    /// sampled ones: histograms cost the same either way).
    pub fn record_request(&self, req: &SampledRequest, labels: &Labels) {
        self.instruments.record_request(req, labels);
    }

    /// Emits a sampled request as a span with its waterfall stages, with the request's own
    /// trace id and span id when it has them ([`SampledRequest::ids`]). Never blocks: a full
    /// queue drops the span and counts it.
    pub fn trace_request(&self, req: &SampledRequest, labels: &Labels) {
        spans::emit(&self.tracer, req, labels);
    }

    /// Emits an explained phase as an `inferscope.phase` span with its verdict, and a child per
    /// decomposition of its latency rise whose children are the parts, end to end
    /// ([`phases`]). Never blocks.
    pub fn trace_phase(&self, phase: &crate::attribute::PhaseSummary) {
        phases::emit(
            &self.tracer,
            &phases::plan(phase),
            &opentelemetry::Context::new(),
        );
    }

    /// Emits a trigger firing as an `inferscope.trigger` span with a `trigger.fired` event at
    /// `at`, carrying `attributes` (e.g. `inferscope.trigger.rule`). Never blocks.
    pub fn record_trigger(&self, at: std::time::SystemTime, attributes: &[(String, String)]) {
        spans::emit_trigger(&self.tracer, at, attributes);
    }

    /// Deliveries and losses so far.
    #[must_use]
    pub fn stats(&self) -> ExportStats {
        self.counters.stats()
    }

    /// Pushes everything recorded so far. Blocks (call it from `spawn_blocking`).
    pub fn flush(&self) -> Result<(), OtlpError> {
        let t = self.tracer_provider.force_flush();
        let m = self.meter_provider.force_flush();
        t.and(m).map_err(|e| OtlpError::Sdk(format!("flush: {e}")))
    }

    /// Exports what is left, stops the export threads and returns the final, exact counts.
    /// Blocks for at most about the export timeout per signal (call it from `spawn_blocking`).
    /// A collector that stays down makes the result an error only in the sense that the counts
    /// show the loss; the returned stats are always produced.
    pub fn shutdown(self) -> Result<ExportStats, OtlpError> {
        // Errors here mean "could not deliver"; the counters already say how much.
        let t = self.tracer_provider.shutdown();
        let m = self.meter_provider.shutdown();
        if let Err(e) = t.and(m) {
            tracing::warn!("OTLP shutdown: {e}");
        }
        Ok(self.counters.stats())
    }
}

fn build_resource(config: &OtlpConfig, extra: &[(String, String)]) -> Resource {
    let attrs = extra
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()));
    // Resource::builder() applies OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; an explicit
    // name wins, and "inferscope" replaces the SDK's "unknown_service" default.
    let builder = Resource::builder().with_attributes(attrs);
    let env_names_service = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    match (&config.service_name, env_names_service) {
        (Some(name), _) => builder.with_service_name(name.clone()).build(),
        (None, false) => builder.with_service_name("inferscope").build(),
        (None, true) => builder.build(),
    }
}

fn build_exporters(
    config: &OtlpConfig,
    ca_pem: Option<&[u8]>,
) -> Result<(SpanExporter, MetricExporter), OtlpError> {
    match config.protocol {
        Protocol::Grpc => {
            let metadata = metadata(&config.headers)?;
            let tls = |endpoint: &str| -> Option<ClientTlsConfig> {
                endpoint.starts_with("https://").then(|| match ca_pem {
                    Some(pem) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
                    None => ClientTlsConfig::new().with_native_roots(),
                })
            };
            let mut spans = SpanExporter::builder()
                .with_tonic()
                .with_endpoint(config.traces_endpoint.clone())
                .with_timeout(config.timeout)
                .with_metadata(metadata.clone());
            if let Some(t) = tls(&config.traces_endpoint) {
                spans = spans.with_tls_config(t);
            }
            let mut metrics = MetricExporter::builder()
                .with_tonic()
                .with_endpoint(config.metrics_endpoint.clone())
                .with_timeout(config.timeout)
                .with_metadata(metadata);
            if let Some(t) = tls(&config.metrics_endpoint) {
                metrics = metrics.with_tls_config(t);
            }
            Ok((spans.build()?, metrics.build()?))
        }
        Protocol::HttpProtobuf => {
            let client = http_client(config.timeout, ca_pem)?;
            let headers: std::collections::HashMap<String, String> =
                config.headers.iter().cloned().collect();
            let spans = SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(config.traces_endpoint.clone())
                .with_timeout(config.timeout)
                .with_headers(headers.clone())
                .with_http_client(client.clone())
                .build()?;
            let metrics = MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(config.metrics_endpoint.clone())
                .with_timeout(config.timeout)
                .with_headers(headers)
                .with_http_client(client)
                .build()?;
            Ok((spans, metrics))
        }
    }
}

fn metadata(headers: &[(String, String)]) -> Result<MetadataMap, OtlpError> {
    let mut map = MetadataMap::new();
    for (k, v) in headers {
        let key = MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .map_err(|_| OtlpError::Config(format!("header name {k:?} is not valid")))?;
        let value = MetadataValue::try_from(v.as_str())
            .map_err(|_| OtlpError::Config(format!("header {k:?} has an invalid value")))?;
        map.insert(key, value);
    }
    Ok(map)
}

/// A blocking client for the SDK's export threads. Built on its own thread because reqwest's
/// blocking client must not be created inside an async runtime.
fn http_client(
    timeout: Duration,
    ca_pem: Option<&[u8]>,
) -> Result<reqwest::blocking::Client, OtlpError> {
    let certs = match ca_pem {
        Some(pem) => {
            Some(
                reqwest::Certificate::from_pem_bundle(pem).map_err(|e| OtlpError::CaFile {
                    path: "(pem)".into(),
                    reason: e.to_string(),
                })?,
            )
        }
        None => None,
    };
    std::thread::spawn(move || {
        let mut b = reqwest::blocking::Client::builder().timeout(timeout);
        if let Some(certs) = certs {
            // Only the given CAs: a private collector's CA should not widen trust to the world.
            b = b.tls_certs_only(certs);
        }
        b.build()
    })
    .join()
    .map_err(|_| OtlpError::Sdk("HTTP client thread panicked".into()))?
    .map_err(|e| OtlpError::Config(format!("HTTP client: {e}")))
}
