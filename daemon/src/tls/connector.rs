//! A hyper connector that adds TLS to any TCP connector: `https://` URIs get a handshake
//! (the host from the URI is the server name), `http://` URIs stay plain. The load
//! generator wraps its loopback-guarded dialler in it, the scraper hyper's own connector.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::stream::{self, HandshakeError, Stream};

/// Any error of the inner (TCP) connector.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a connection was not opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The TCP connect failed (the inner connector's error, as it was).
    #[error(transparent)]
    Tcp(BoxError),
    /// The TLS handshake failed.
    #[error(transparent)]
    Tls(#[from] HandshakeError),
    /// An `https://` URI, but this client was built without TLS.
    #[error("{0}: https:// needs TLS, which this client was built without")]
    NoTls(String),
}

impl ConnectError {
    /// The failed handshake, when that is what this is.
    #[must_use]
    pub fn tls(&self) -> Option<&HandshakeError> {
        match self {
            ConnectError::Tls(h) => Some(h),
            _ => None,
        }
    }

    /// The failed handshake anywhere in the source chain of `e` (a hyper client error wraps
    /// the connector's).
    #[must_use]
    pub fn tls_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a HandshakeError> {
        let mut cur = Some(e);
        while let Some(c) = cur {
            if let Some(h) = c
                .downcast_ref::<ConnectError>()
                .and_then(ConnectError::tls)
                .or_else(|| c.downcast_ref::<HandshakeError>())
            {
                return Some(h);
            }
            cur = c.source();
        }
        None
    }
}

/// TLS over the connections of `C` for `https://` URIs.
#[derive(Clone)]
pub struct TlsConnector<C> {
    tcp: C,
    tls: Option<tokio_rustls::TlsConnector>,
    handshake_timeout: Duration,
    /// Where each new connection's open time goes, when kept.
    opened: Option<Arc<crate::dial::Opened>>,
}

impl<C> std::fmt::Debug for TlsConnector<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnector")
            .field("tls", &self.tls.is_some())
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl<C> TlsConnector<C> {
    /// Wraps `tcp`; without `config`, `https://` URIs are refused with
    /// [`ConnectError::NoTls`].
    #[must_use]
    pub fn new(
        tcp: C,
        config: Option<Arc<rustls::ClientConfig>>,
        handshake_timeout: Duration,
    ) -> Self {
        Self {
            tcp,
            tls: config.map(tokio_rustls::TlsConnector::from),
            handshake_timeout,
            opened: None,
        }
    }

    /// Keeps each new connection's open time (TCP and TLS) in `opened`.
    #[must_use]
    pub fn timed(mut self, opened: Arc<crate::dial::Opened>) -> Self {
        self.opened = Some(opened);
        self
    }
}

impl<C> tower_service::Service<Uri> for TlsConnector<C>
where
    C: tower_service::Service<Uri, Response = TokioIo<TcpStream>> + Send,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = TokioIo<Stream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        self.tcp
            .poll_ready(cx)
            .map_err(|e| ConnectError::Tcp(e.into()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let https = uri.scheme_str() == Some("https");
        let tls = self.tls.clone();
        let timeout = self.handshake_timeout;
        let opened = self.opened.clone();
        let start = std::time::Instant::now();
        let connecting = self.tcp.call(uri.clone());
        Box::pin(async move {
            let tcp = connecting
                .await
                .map_err(|e| ConnectError::Tcp(e.into()))?
                .into_inner();
            let s = if https {
                let tls = tls.ok_or_else(|| ConnectError::NoTls(uri.to_string()))?;
                let host = uri.host().unwrap_or_default();
                let port = uri.port_u16().unwrap_or(443);
                stream::handshake(&tls, host, port, tcp, timeout).await?
            } else {
                Stream::Plain(tcp)
            };
            if let (Some(o), Ok(local)) = (opened, s.tcp().local_addr()) {
                o.put(local, start.elapsed().as_micros() as u64);
            }
            Ok(TokioIo::new(s))
        })
    }
}
