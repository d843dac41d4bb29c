//! Where and how to export: explicit options (CLI flags) over the standard
//! `OTEL_EXPORTER_OTLP_*` environment variables over the specification's defaults.
//!
//! Resolved here rather than left to the exporter crate so that the daemon can print what it
//! will use at start and so tests can feed an environment without touching the process's own.
//! Headers from `OTEL_EXPORTER_OTLP_HEADERS` / `..._TRACES_HEADERS` / `..._METRICS_HEADERS` are
//! added by the exporter crate itself after the explicit ones (a variable's header replaces an
//! explicit one of the same name), so secrets in them never pass through this module's `Debug`
//! output.

use std::path::PathBuf;
use std::time::Duration;

use crate::export::otlp::OtlpError;

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (default port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (default port 4318); the specification's default.
    HttpProtobuf,
}

impl Protocol {
    /// Parses `grpc` or `http/protobuf`, the values of `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn parse(s: &str) -> Result<Self, OtlpError> {
        match s.trim() {
            "grpc" => Ok(Self::Grpc),
            "http/protobuf" => Ok(Self::HttpProtobuf),
            other => Err(OtlpError::Config(format!(
                "OTLP protocol {other:?} is not supported; use grpc or http/protobuf"
            ))),
        }
    }
}

/// Explicit settings, e.g. from command-line flags; each `None` falls back to the environment.
#[derive(Debug, Clone, Default)]
pub struct OtlpOptions {
    /// Base endpoint for both signals (`--otlp-endpoint`).
    pub endpoint: Option<String>,
    /// Transport (`--otlp-protocol`).
    pub protocol: Option<Protocol>,
    /// Extra headers, e.g. an API key (`--otlp-header k=v`). Applied before the environment's.
    pub headers: Vec<(String, String)>,
    /// PEM file of CA certificates to trust instead of the system's (`--otlp-ca-file`).
    pub ca_file: Option<PathBuf>,
    /// `service.name` of the resource (`--service-name`); default `inferscope`.
    pub service_name: Option<String>,
    /// Per-export timeout.
    pub timeout: Option<Duration>,
    /// How often metrics are pushed; default 10 s.
    pub metric_interval: Option<Duration>,
    /// Span queue capacity; default 2048. Spans beyond it are dropped and counted.
    pub max_queue_size: Option<usize>,
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// Transport.
    pub protocol: Protocol,
    /// Full traces endpoint (gRPC: scheme://host:port; HTTP: URL ending in `/v1/traces`).
    pub traces_endpoint: String,
    /// Full metrics endpoint.
    pub metrics_endpoint: String,
    /// Explicit headers.
    pub headers: Vec<(String, String)>,
    /// CA file; `None` trusts the system's roots. Certificates are always verified.
    pub ca_file: Option<PathBuf>,
    /// Explicit `service.name`, or `None` to take `OTEL_SERVICE_NAME` / the default.
    pub service_name: Option<String>,
    /// Per-export timeout.
    pub timeout: Duration,
    /// Metric push interval.
    pub metric_interval: Duration,
    /// Span queue capacity.
    pub max_queue_size: usize,
    /// Spans per export request.
    pub max_export_batch_size: usize,
    /// Delay between span exports.
    pub scheduled_delay: Duration,
}

/// `OTEL_EXPORTER_OTLP_<SIGNAL>_<what>` first, then `OTEL_EXPORTER_OTLP_<what>`.
fn signal_env(env: &dyn Fn(&str) -> Option<String>, signal: &str, what: &str) -> Option<String> {
    env(&format!("OTEL_EXPORTER_OTLP_{signal}_{what}"))
        .or_else(|| env(&format!("OTEL_EXPORTER_OTLP_{what}")))
        .filter(|v| !v.trim().is_empty())
}

impl OtlpConfig {
    /// Resolves `opts` over the variables `env` returns (pass `|k| std::env::var(k).ok()`).
    pub fn resolve(
        opts: &OtlpOptions,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, OtlpError> {
        // One protocol for both signals keeps one client stack; a per-signal protocol variable
        // is honoured when the generic one is absent.
        let protocol = match (opts.protocol, signal_env(env, "TRACES", "PROTOCOL")) {
            (Some(p), _) => p,
            (None, Some(p)) => Protocol::parse(&p)?,
            (None, None) => Protocol::HttpProtobuf,
        };
        let insecure = env("OTEL_EXPORTER_OTLP_INSECURE")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let endpoint = |signal: &str, path: &str| -> Result<String, OtlpError> {
            let (base, from_signal_var) = if let Some(e) = &opts.endpoint {
                (e.clone(), false)
            } else if let Some(e) = env(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))
                .filter(|v| !v.trim().is_empty())
            {
                (e, true)
            } else if let Some(e) = env("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|v| !v.is_empty()) {
                (e, false)
            } else {
                let port = if protocol == Protocol::Grpc {
                    4317
                } else {
                    4318
                };
                (format!("http://localhost:{port}"), false)
            };
            let base = with_scheme(base.trim(), insecure)?;
            // Per the specification a signal-specific URL is used as is; a base URL gets the
            // signal's path for OTLP/HTTP. gRPC has no path.
            Ok(match protocol {
                Protocol::HttpProtobuf if !from_signal_var => {
                    format!("{}/{path}", base.trim_end_matches('/'))
                }
                _ => base,
            })
        };
        let timeout = match opts.timeout {
            Some(t) => t,
            None => match signal_env(env, "TRACES", "TIMEOUT") {
                Some(ms) => Duration::from_millis(ms.trim().parse().map_err(|_| {
                    OtlpError::Config(format!("OTEL_EXPORTER_OTLP_TIMEOUT={ms:?} is not ms"))
                })?),
                None => Duration::from_secs(10),
            },
        };
        let ca_file = opts
            .ca_file
            .clone()
            .or_else(|| signal_env(env, "TRACES", "CERTIFICATE").map(PathBuf::from));
        Ok(Self {
            protocol,
            traces_endpoint: endpoint("TRACES", "v1/traces")?,
            metrics_endpoint: endpoint("METRICS", "v1/metrics")?,
            headers: opts.headers.clone(),
            ca_file,
            service_name: opts.service_name.clone(),
            timeout,
            metric_interval: opts.metric_interval.unwrap_or(Duration::from_secs(10)),
            max_queue_size: opts.max_queue_size.unwrap_or(2048).max(1),
            max_export_batch_size: 512.min(opts.max_queue_size.unwrap_or(2048).max(1)),
            scheduled_delay: Duration::from_secs(1),
        })
    }
}

fn with_scheme(endpoint: &str, insecure: bool) -> Result<String, OtlpError> {
    if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
        Ok(endpoint.to_owned())
    } else if endpoint.contains("://") {
        Err(OtlpError::Config(format!(
            "OTLP endpoint {endpoint:?} must be http:// or https://"
        )))
    } else if insecure {
        Ok(format!("http://{endpoint}"))
    } else {
        // No scheme: encrypted and verified unless OTEL_EXPORTER_OTLP_INSECURE=true says not.
        Ok(format!("https://{endpoint}"))
    }
}

/// Parses `k=v` (a `--otlp-header` value), URL-decoding nothing: values are taken literally.
pub fn parse_header(s: &str) -> Result<(String, String), OtlpError> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
        _ => Err(OtlpError::Config(format!("header {s:?} is not key=value"))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn defaults_follow_the_specification() {
        let c = OtlpConfig::resolve(&OtlpOptions::default(), &env(&[])).unwrap();
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
        assert_eq!(c.traces_endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(c.metrics_endpoint, "http://localhost:4318/v1/metrics");
        assert_eq!(c.timeout, Duration::from_secs(10));
    }

    #[test]
    fn environment_then_signal_variables_then_flags() {
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "https://metrics:9000/custom",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/ca.pem"),
        ]);
        let c = OtlpConfig::resolve(&OtlpOptions::default(), &e).unwrap();
        assert_eq!(c.traces_endpoint, "https://collector:4318/v1/traces");
        assert_eq!(c.metrics_endpoint, "https://metrics:9000/custom");
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert_eq!(c.ca_file, Some(PathBuf::from("/etc/ca.pem")));

        let opts = OtlpOptions {
            endpoint: Some("otel:4317".into()),
            protocol: Some(Protocol::Grpc),
            ..OtlpOptions::default()
        };
        let c = OtlpConfig::resolve(&opts, &e).unwrap();
        // No scheme means TLS, verified.
        assert_eq!(c.traces_endpoint, "https://otel:4317");
        assert_eq!(c.metrics_endpoint, "https://otel:4317");

        let g = env(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "otel:4317"),
        ]);
        let c = OtlpConfig::resolve(&OtlpOptions::default(), &g).unwrap();
        assert_eq!(c.protocol, Protocol::Grpc);
        assert_eq!(c.traces_endpoint, "http://otel:4317");
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Protocol::parse("http/json").is_err());
        let e = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://x")]);
        assert!(OtlpConfig::resolve(&OtlpOptions::default(), &e).is_err());
        assert_eq!(
            parse_header("authorization=Bearer x").unwrap().1,
            "Bearer x"
        );
        assert!(parse_header("novalue").is_err());
    }
}
