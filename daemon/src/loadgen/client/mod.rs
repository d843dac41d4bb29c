//! The HTTP client shared by every request of a run: hyper 1 over a pooled connector
//! with keep-alive and `TCP_NODELAY`, TLS for `https://` targets (`crate::tls`), plus
//! plain-HTTP requests (health checks, benchmarks). This file holds the connection a
//! closed-loop user owns.

mod body;
mod elapsed;
mod errors;
mod h1;
pub mod openai;
mod pool;
mod propagate;
pub mod rag;
mod resend;
pub mod sse;
mod target;
pub mod via;

pub use body::{MAX_BODY, fail_status, read_body};
pub use elapsed::us_since;
pub use errors::error_chain;
pub use pool::{HttpClient, build_client};
pub use target::{Target, TargetError, check_path};

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, Uri, body::Incoming, client::conn::http1, header::HeaderValue};
use hyper_util::rt::TokioIo;

use crate::dial;
use crate::measure::record::ErrorClass;
use crate::tls;
use elapsed::micros;
use errors::connect_class;
use resend::{closed_before_answer, copy_request};

/// A single HTTP/1.1 connection owned by one virtual user.
pub struct OwnConn {
    host_name: String,
    port: u16,
    reach: dial::Reach,
    host: HeaderValue,
    connect_timeout: Duration,
    tls: Option<tokio_rustls::TlsConnector>,
    conn: Option<(http1::SendRequest<Full<Bytes>>, SocketAddr, SocketAddr)>,
    /// How long the open connection took to open, until the first answer on it takes it.
    opened_us: Option<u32>,
    /// The connection of plain requests to an `http://` target ([`h1`]).
    raw: Option<Box<h1::Raw>>,
}

impl OwnConn {
    /// A not-yet-connected connection to the target, dialled within `reach` (the loopback
    /// guardrail).
    #[must_use]
    pub fn new(target: &Target, connect_timeout: Duration, reach: dial::Reach) -> Self {
        OwnConn {
            host: HeaderValue::from_str(target.authority.as_str())
                .unwrap_or(HeaderValue::from_static("localhost")),
            host_name: target.host.clone(),
            port: target.port,
            reach,
            connect_timeout,
            tls: target.tls.clone().map(tokio_rustls::TlsConnector::from),
            conn: None,
            opened_us: None,
            raw: None,
        }
    }

    /// A new TCP connection to the target, or the failure's class and text.
    async fn dial(&self) -> Result<tokio::net::TcpStream, (ErrorClass, String)> {
        dial::dial(&self.host_name, self.port, self.reach, self.connect_timeout)
            .await
            .map_err(|e| (connect_class(&e), e.to_string()))
    }

    async fn connect(&mut self) -> Result<(), (ErrorClass, String)> {
        let start = Instant::now();
        let stream = self.dial().await?;
        let (local, remote) = (stream.local_addr(), stream.peer_addr());
        let stream = match &self.tls {
            Some(tls) => tls::stream::handshake(
                tls,
                &self.host_name,
                self.port,
                stream,
                self.connect_timeout,
            )
            .await
            .map_err(|e| (ErrorClass::Tls, e.to_string()))?,
            None => tls::Stream::Plain(stream),
        };
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| (ErrorClass::Connect, error_chain(&e)))?;
        tokio::spawn(conn);
        if let (Ok(l), Ok(r)) = (local, remote) {
            self.conn = Some((sender, l, r));
            self.opened_us = Some(micros(start));
        }
        Ok(())
    }

    /// Sends on this connection, connecting first when needed. When the kept-alive connection
    /// turns out closed before any byte of the answer, the request goes once more on a fresh
    /// one (see [`HttpClient::send`]); the `bool` says it did.
    async fn request(
        &mut self,
        mut req: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, SocketAddr, SocketAddr, bool), (ErrorClass, String)> {
        // A connection-level client writes the URI as is: use origin form plus Host.
        if let Some(pq) = req.uri().path_and_query().cloned() {
            *req.uri_mut() = Uri::from(pq);
        }
        req.headers_mut()
            .entry(hyper::header::HOST)
            .or_insert_with(|| self.host.clone());
        // Only a reused connection can have been closed under the request: keep a copy then.
        let reused = self.conn.as_ref().is_some_and(|c| !c.0.is_closed());
        let copy = reused.then(|| copy_request(&req));
        let (sent, resent) = match (self.send_once(req).await, copy) {
            (Err((_, Some(e))), Some(copy)) if closed_before_answer(&e) => {
                (self.send_once(copy).await, true)
            }
            (first, _) => (first, false),
        };
        sent.map(|(resp, l, r)| (resp, l, r, resent))
            .map_err(|(fail, _)| fail)
    }

    /// One send, connecting when there is no open connection. A failed send drops the
    /// connection and returns hyper's error besides its class and text.
    async fn send_once(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> Result<
        (Response<Incoming>, SocketAddr, SocketAddr),
        ((ErrorClass, String), Option<hyper::Error>),
    > {
        if self.conn.as_ref().is_none_or(|c| c.0.is_closed()) {
            // Boxed: a connect (and a TLS handshake) is a large future that runs once per
            // connection; inline it would make every request's future that large.
            Box::pin(self.connect())
                .await
                .map_err(|fail| (fail, None))?;
        }
        let Some((sender, local, remote)) = self.conn.as_mut() else {
            return Err((
                (
                    ErrorClass::Connect,
                    "no local address on the new connection".into(),
                ),
                None,
            ));
        };
        let (local, remote) = (*local, *remote);
        let sent = match sender.ready().await {
            Ok(()) => sender.send_request(req).await,
            Err(e) => Err(e),
        };
        sent.map(|resp| (resp, local, remote)).map_err(|e| {
            self.conn = None;
            ((ErrorClass::Transport, error_chain(&e)), Some(e))
        })
    }
}

#[cfg(test)]
mod tests;
