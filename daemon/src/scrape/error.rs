//! Why a scrape failed, each reason a one-line message that names the URL.

use std::time::Duration;

/// Why a scrape produced no exposition. Every message is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScrapeError {
    /// The configured URL is unusable.
    #[error("invalid metrics URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Nothing listens at the address.
    #[error("{url}: connection refused (is the inference server running and listening there?)")]
    ConnectionRefused {
        /// The metrics URL.
        url: String,
    },
    /// Any other failure to connect or to speak HTTP.
    #[error("{url}: {reason}")]
    Http {
        /// The metrics URL.
        url: String,
        /// The innermost cause.
        reason: String,
    },
    /// The TLS configuration or handshake of an `https://` endpoint failed.
    #[error("{url}: {reason}")]
    Tls {
        /// The metrics URL.
        url: String,
        /// The handshake's or the configuration's one-line error, with what to do.
        reason: String,
    },
    /// The request did not complete in time.
    #[error("{url}: no complete response within {timeout:?}")]
    Timeout {
        /// The metrics URL.
        url: String,
        /// The limit.
        timeout: Duration,
    },
    /// The server answered with a status other than 200.
    #[error("{url}: HTTP status {status}, expected 200")]
    Status {
        /// The metrics URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// The body exceeded the configured limit.
    #[error("{url}: response body larger than {limit} bytes")]
    TooLarge {
        /// The metrics URL.
        url: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// The body is not the Prometheus text format.
    #[error("{url}: not Prometheus text: {reason}")]
    NotPrometheus {
        /// The metrics URL.
        url: String,
        /// Why (content type or first parse error).
        reason: String,
    },
}
