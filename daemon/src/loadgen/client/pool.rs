//! The keep-alive pool every open-loop request of a run shares, and its pool-less twin for the
//! one resend of a request whose reused connection the server had closed.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};

use super::resend::{closed_before_answer, copy_request};
use super::target::Target;
use crate::dial::{self, GuardedConnector, Reach};
use crate::tls::TlsConnector;

type Hyper = Client<TlsConnector<GuardedConnector>, Full<Bytes>>;

/// The client of a run: a keep-alive pool, and a pool-less twin for the one resend of a request
/// whose reused connection the server had closed (see [`HttpClient::send`]).
#[derive(Clone)]
pub struct HttpClient {
    pooled: Hyper,
    fresh: Hyper,
    /// New connections' open times, until the first answer on each takes its own.
    pub(super) opened: Arc<dial::Opened>,
}

/// A client for `target` with keep-alive, `TCP_NODELAY`, a connect timeout (the TLS
/// handshake of an `https://` target gets as long again) and an unbounded idle pool (the
/// engine's in-flight caps bound the number of connections). Every connection goes through
/// the loopback guardrail ([`dial`]) within `reach`.
#[must_use]
pub fn build_client(target: &Target, connect_timeout: Duration, reach: Reach) -> HttpClient {
    let conn = GuardedConnector {
        reach,
        timeout: connect_timeout,
    };
    let opened = Arc::new(dial::Opened::default());
    let tls = TlsConnector::new(conn, target.tls.clone(), connect_timeout).timed(opened.clone());
    HttpClient {
        pooled: Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(usize::MAX)
            .build(tls.clone()),
        // No idle connection is kept: every request dials.
        fresh: Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(tls),
        opened,
    }
}

impl HttpClient {
    /// Sends `req` (see [`HttpClient::send`]).
    pub async fn request(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
        self.send(req).await.map(|(resp, _)| resp)
    }

    /// Sends `req` on a pooled connection. A server may close a kept-alive connection after an
    /// answer without saying so (llama.cpp's server does after every stream; proxies do when
    /// idle): a request written into that race fails before any byte of its answer. Such a
    /// request is sent once more on a fresh connection, as hyper's pool and curl do; the
    /// `bool` says it was (the report counts these apart, they are not the server's errors).
    pub async fn send(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, bool), hyper_util::client::legacy::Error> {
        let copy = copy_request(&req);
        match self.pooled.request(req).await {
            Err(e) if !e.is_connect() && closed_before_answer(&e) => {
                self.fresh.request(copy).await.map(|resp| (resp, true))
            }
            other => other.map(|resp| (resp, false)),
        }
    }
}
