//! The HTTP side: GET `<url>/metrics`, parse, extract signals, and a loop
//! that does so at an interval into a bounded channel.

use std::error::Error as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{OnceCell, mpsc};
use tokio::task::JoinHandle;

use super::engine_info::{self, EngineInfo};
use super::error::ScrapeError;
use super::mapping::{self, ServerKind, SignalOptions, Signals};
use super::prom_text::{self, Exposition, LineError};
use crate::tls::{ConnectError, TlsConnector, TlsOptions};

/// Where and how to scrape.
#[derive(Debug, Clone)]
pub struct ScrapeConfig {
    /// `http://host:port` (then `/metrics` is appended) or a full URL with a path.
    pub url: String,
    /// Time between scrapes.
    pub interval: Duration,
    /// Limit for one whole request, connect to last body byte.
    pub timeout: Duration,
    /// Largest body accepted, in bytes.
    pub body_limit: usize,
    /// Facts the exposition does not carry.
    pub options: SignalOptions,
    /// Whom an `https://` endpoint's certificate must come from (`--ca-file`, `--insecure`).
    pub tls: TlsOptions,
}

impl ScrapeConfig {
    /// Defaults: 1 s interval, 2 s timeout, 16 MiB body limit.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            body_limit: 16 << 20,
            options: SignalOptions::default(),
            tls: TlsOptions::default(),
        }
    }
}

/// The outcome of one scrape, as sent by [`spawn`].
#[derive(Debug)]
pub struct Scrape {
    /// Wall-clock time the request was sent.
    pub at: SystemTime,
    /// Monotonic time the request was sent (use this for rates).
    pub instant: Instant,
    /// How long the request took.
    pub took: Duration,
    /// The signals, or why there are none.
    pub signals: Result<Signals, ScrapeError>,
    /// Lines of the exposition that could not be parsed (the rest was used).
    pub line_errors: Vec<LineError>,
}

/// A reusable HTTP/1 scraper for one URL (`http://` or `https://`).
#[derive(Debug, Clone)]
pub struct Scraper {
    client: Client<TlsConnector<HttpConnector>, Empty<Bytes>>,
    uri: Uri,
    config: ScrapeConfig,
    info: Arc<OnceCell<EngineInfo>>,
}

impl Scraper {
    /// Validates the URL and builds the client (with its TLS configuration for an
    /// `https://` URL: the system's roots plus `config.tls`).
    pub fn new(config: ScrapeConfig) -> Result<Self, ScrapeError> {
        let uri = metrics_uri(&config.url)?;
        let tls = if uri.scheme_str() == Some("https") {
            Some(config.tls.client_config().map_err(|e| ScrapeError::Tls {
                url: uri.to_string(),
                reason: e.to_string(),
            })?)
        } else {
            None
        };
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.timeout));
        // The TLS layer above takes https:// URIs; the TCP connector only connects.
        connector.enforce_http(false);
        let client = Client::builder(TokioExecutor::new()).build(TlsConnector::new(
            connector,
            tls,
            config.timeout,
        ));
        Ok(Self {
            client,
            uri,
            config,
            info: Arc::default(),
        })
    }

    /// The URL actually requested.
    #[must_use]
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// GETs and parses the exposition once.
    pub async fn fetch(&self) -> Result<Exposition, ScrapeError> {
        let url = self.uri.to_string();
        let accept = "text/plain;version=0.0.4;q=1,*/*;q=0.1";
        let (content_type, bytes) = self.get(&self.uri, accept, self.config.body_limit).await?;
        if let Some(ct) = &content_type
            && !is_text_exposition(ct)
        {
            return Err(ScrapeError::NotPrometheus {
                url,
                reason: format!("content type {ct:?}"),
            });
        }
        let text = String::from_utf8_lossy(&bytes);
        let exposition = prom_text::parse(&text);
        if exposition.sample_count() == 0
            && let Some(first) = exposition.errors().first()
        {
            return Err(ScrapeError::NotPrometheus {
                url,
                reason: first.to_string(),
            });
        }
        Ok(exposition)
    }

    /// GET with the configured timeout: the content type and the whole body.
    async fn get(
        &self,
        uri: &Uri,
        accept: &str,
        limit: usize,
    ) -> Result<(Option<String>, Bytes), ScrapeError> {
        let url = uri.to_string();
        let timeout = self.config.timeout;
        match tokio::time::timeout(timeout, self.get_inner(uri, &url, accept, limit)).await {
            Ok(result) => result,
            Err(_) => Err(ScrapeError::Timeout { url, timeout }),
        }
    }

    async fn get_inner(
        &self,
        uri: &Uri,
        url: &str,
        accept: &str,
        limit: usize,
    ) -> Result<(Option<String>, Bytes), ScrapeError> {
        let request = Request::get(uri.clone())
            .header(ACCEPT, accept)
            .body(Empty::new())
            .map_err(|e| ScrapeError::InvalidUrl {
                url: url.to_owned(),
                reason: e.to_string(),
            })?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| connect_error(url, &e))?;
        let status = response.status();
        if status != hyper::StatusCode::OK {
            return Err(ScrapeError::Status {
                url: url.to_owned(),
                status: status.as_u16(),
            });
        }
        let too_large = || ScrapeError::TooLarge {
            url: url.to_owned(),
            limit,
        };
        let declared = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = Limited::new(response.into_body(), limit)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    too_large()
                } else {
                    ScrapeError::Http {
                        url: url.to_owned(),
                        reason: innermost(e.as_ref()),
                    }
                }
            })?;
        Ok((content_type, body.to_bytes()))
    }

    /// The engine's own limits from its info endpoint (`engine_info::path`), asked once: an
    /// engine that does not answer says nothing, and is not asked again.
    async fn engine_info(&self, engine: ServerKind) -> EngineInfo {
        // Nothing to ask (vLLM, a server not recognised yet): the cell stays empty.
        let Some(uri) = engine_info::path(engine).and_then(|p| sibling_uri(&self.uri, p)) else {
            return EngineInfo::default();
        };
        *self
            .info
            .get_or_init(|| async {
                match self.get(&uri, "application/json", 1 << 20).await {
                    Ok((_, body)) => engine_info::parse(engine, &body),
                    Err(e) => {
                        tracing::debug!("{uri}: {e}");
                        EngineInfo::default()
                    }
                }
            })
            .await
    }

    /// Scrapes once and extracts the signals.
    pub async fn scrape(&self) -> Scrape {
        let at = SystemTime::now();
        let instant = Instant::now();
        let (signals, line_errors) = match self.fetch().await {
            Ok(exp) => {
                let mut options = self.config.options;
                let mut signals = mapping::extract(&exp, &options);
                let info = self.engine_info(signals.server).await;
                // TGI has no KV gauge; its batch token cap makes one when
                // the user did not give it.
                if signals.server == ServerKind::Tgi
                    && options.tgi_max_batch_total_tokens.is_none()
                    && info.max_batch_total_tokens.is_some()
                {
                    options.tgi_max_batch_total_tokens = info.max_batch_total_tokens;
                    signals = mapping::extract(&exp, &options);
                }
                signals.max_running = info.max_running;
                (Ok(signals), exp.errors().to_vec())
            }
            Err(e) => (Err(e), Vec::new()),
        };
        Scrape {
            at,
            instant,
            took: instant.elapsed(),
            signals,
            line_errors,
        }
    }
}

/// A running scrape loop.
#[derive(Debug)]
pub struct ScrapeTask {
    /// Scrapes, oldest first.
    pub rx: mpsc::Receiver<Scrape>,
    dropped: Arc<AtomicU64>,
    handle: JoinHandle<()>,
}

impl ScrapeTask {
    /// Scrapes not delivered because the channel was full.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Stops the loop.
    pub fn abort(&self) {
        self.handle.abort();
    }
}

impl Drop for ScrapeTask {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Starts scraping `config.url` every `config.interval` into a channel of
/// `capacity` scrapes (at least 1). Must be called inside a tokio runtime.
pub fn spawn(config: ScrapeConfig, capacity: usize) -> Result<ScrapeTask, ScrapeError> {
    let scraper = Scraper::new(config)?;
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let dropped = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&dropped);
    let handle = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(scraper.config.interval);
        // A slow server must not cause a burst of catch-up scrapes.
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let scrape = scraper.scrape().await;
            match tx.try_send(scrape) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => break,
            }
        }
    });
    Ok(ScrapeTask {
        rx,
        dropped,
        handle,
    })
}

/// `http://host:port` -> `http://host:port/metrics`; a URL with a path is kept.
fn metrics_uri(url: &str) -> Result<Uri, ScrapeError> {
    let invalid = |reason: &str| ScrapeError::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: Uri = url
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| invalid(&e.to_string()))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(invalid("expected http://host:port[/path] or https://...")),
    }
    if uri.authority().is_none() {
        return Err(invalid("no host"));
    }
    if uri.path() == "/" && uri.query().is_none() {
        let full = format!("{}/metrics", url.trim_end_matches('/'));
        return full
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| invalid(&e.to_string()));
    }
    Ok(uri)
}

/// `http://host:port/anything` -> `http://host:port{path}` (same scheme).
fn sibling_uri(metrics: &Uri, path: &str) -> Option<Uri> {
    let authority = metrics.authority()?;
    let scheme = metrics.scheme_str().unwrap_or("http");
    format!("{scheme}://{authority}{path}").parse().ok()
}

fn is_text_exposition(content_type: &str) -> bool {
    let ct = content_type.trim_start().to_ascii_lowercase();
    ct.starts_with("text/plain") || ct.starts_with("application/openmetrics-text")
}

fn connect_error(url: &str, e: &hyper_util::client::legacy::Error) -> ScrapeError {
    if let Some(h) = ConnectError::tls_in(e) {
        return ScrapeError::Tls {
            url: url.to_owned(),
            reason: h.to_string(),
        };
    }
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return ScrapeError::ConnectionRefused {
                url: url.to_owned(),
            };
        }
        source = s.source();
    }
    ScrapeError::Http {
        url: url.to_owned(),
        reason: innermost(e),
    }
}

/// The innermost cause of an error chain, on one line.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string().replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_gets_metrics_path_only_when_it_has_none() {
        assert_eq!(
            metrics_uri("http://127.0.0.1:8000").unwrap().to_string(),
            "http://127.0.0.1:8000/metrics"
        );
        assert_eq!(
            metrics_uri("http://127.0.0.1:8000/").unwrap().to_string(),
            "http://127.0.0.1:8000/metrics"
        );
        assert_eq!(
            metrics_uri("http://h:9/custom/path").unwrap().to_string(),
            "http://h:9/custom/path"
        );
        assert_eq!(
            metrics_uri("https://h:9").unwrap().to_string(),
            "https://h:9/metrics"
        );
        assert_eq!(
            sibling_uri(&metrics_uri("https://h:9").unwrap(), "/info")
                .unwrap()
                .to_string(),
            "https://h:9/info"
        );
        assert!(matches!(
            metrics_uri("localhost:8000"),
            Err(ScrapeError::InvalidUrl { .. })
        ));
        assert!(matches!(
            metrics_uri("not a url"),
            Err(ScrapeError::InvalidUrl { .. })
        ));
    }

    #[test]
    fn engine_info_is_asked_beside_the_metrics() {
        let uri = metrics_uri("http://10.0.0.5:3000").unwrap();
        assert_eq!(
            sibling_uri(&uri, "/info").unwrap().to_string(),
            "http://10.0.0.5:3000/info"
        );
        let tgi =
            br#"{"model_id":"m","max_batch_total_tokens":102400,"max_concurrent_requests":128}"#;
        assert_eq!(
            engine_info::parse(ServerKind::Tgi, tgi).max_batch_total_tokens,
            Some(102_400)
        );
        for zero in [
            &br#"{"max_batch_total_tokens":null}"#[..],
            br#"{"max_batch_total_tokens":0}"#,
            b"<html>",
        ] {
            assert_eq!(
                engine_info::parse(ServerKind::Tgi, zero).max_batch_total_tokens,
                None
            );
        }
    }

    #[test]
    fn content_types() {
        assert!(is_text_exposition(
            "text/plain; version=0.0.4; charset=utf-8"
        ));
        assert!(is_text_exposition(
            "application/openmetrics-text; version=1.0.0"
        ));
        assert!(!is_text_exposition("text/html; charset=utf-8"));
        assert!(!is_text_exposition("application/json"));
    }
}
