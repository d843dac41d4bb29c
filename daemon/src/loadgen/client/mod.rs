//! The HTTP client shared by every request of a run: hyper 1 over a pooled connector
//! with keep-alive and `TCP_NODELAY`, TLS for `https://` targets (`crate::tls`), plus
//! plain-HTTP requests (health checks, benchmarks).

mod h1;
pub mod openai;
mod propagate;
pub mod rag;
pub mod sse;

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{
    Method, Request, Response, Uri, body::Incoming, client::conn::http1, header::HeaderValue,
};
use hyper_util::{
    client::legacy::{Client, connect::HttpInfo},
    rt::{TokioExecutor, TokioIo},
};

use crate::dial::{self, GuardedConnector};
use crate::measure::record::{ErrorClass, RequestRecord};
use crate::tls::{self, ConnectError, TlsConnector, TlsError, TlsOptions};

type Hyper = Client<TlsConnector<GuardedConnector>, Full<Bytes>>;

/// The client of a run: a keep-alive pool, and a pool-less twin for the one resend of a request
/// whose reused connection the server had closed (see [`HttpClient::send`]).
#[derive(Clone)]
pub struct HttpClient {
    pooled: Hyper,
    fresh: Hyper,
    /// New connections' open times, until the first answer on each takes its own.
    opened: Arc<dial::Opened>,
}

/// A client for `target` with keep-alive, `TCP_NODELAY`, a connect timeout (the TLS
/// handshake of an `https://` target gets as long again) and an unbounded idle pool (the
/// engine's in-flight caps bound the number of connections). Every connection goes through
/// the loopback guardrail ([`dial`]); `allow_remote` lifts it.
#[must_use]
pub fn build_client(target: &Target, connect_timeout: Duration, allow_remote: bool) -> HttpClient {
    let conn = GuardedConnector {
        allow_remote,
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

/// The same request again (method, URI, version, headers, body).
fn copy_request(req: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut copy = Request::new(req.body().clone());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}

/// Whether `e` says the connection ended before any byte of the answer: hyper's "connection
/// closed before message completed", a request canceled or a channel closed because the
/// connection went away before it was written, or a reset/broken pipe while it was written.
fn closed_before_answer(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_incomplete_message() || h.is_canceled() || h.is_closed())
        {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionAborted
            )
        {
            return true;
        }
        cur = c.source();
    }
    false
}

/// Where requests go: scheme and authority of the target, its TLS configuration
/// (`https://`), plus default headers.
#[derive(Debug, Clone)]
pub struct Target {
    https: bool,
    authority: hyper::http::uri::Authority,
    host: String,
    port: u16,
    headers: Vec<(hyper::header::HeaderName, HeaderValue)>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// A target that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Not an absolute `http://host:port` URL.
    #[error("bad target URL {0:?}: write e.g. http://127.0.0.1:8000")]
    Url(String),
    /// A scheme other than `http` and `https`.
    #[error("target {0:?}: write an http:// or https:// URL")]
    Scheme(String),
    /// The TLS configuration of an `https://` target cannot be built.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A pipeline step's URL with another scheme than the target's.
    #[error(
        "pipeline service {0:?}: use the target's scheme (all http:// or all https://) for every service of a pipeline"
    )]
    MixedScheme(String),
    /// A header name or value is not valid HTTP.
    #[error("bad header {0:?}")]
    Header(String),
    /// A request path that is not an absolute path (it could name another host).
    #[error("bad path {0:?}: a path must start with `/`, e.g. /v1/chat/completions")]
    Path(String),
}

/// Checks a request path: absolute (`/...`) and valid in a request line. A path such as
/// `@host/` would otherwise turn the target into userinfo when glued to the base URL.
pub fn check_path(path: &str) -> Result<hyper::http::uri::PathAndQuery, TargetError> {
    if !path.starts_with('/') || path.starts_with("//") {
        return Err(TargetError::Path(path.into()));
    }
    path.parse().map_err(|_| TargetError::Path(path.into()))
}

impl Target {
    /// Parses the base URL and the default headers.
    pub fn new<'a>(
        url: &str,
        headers: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<Self, TargetError> {
        let uri: Uri = url.parse().map_err(|_| TargetError::Url(url.into()))?;
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| TargetError::Url(url.into()))?;
        let https = match scheme {
            "http" => false,
            "https" => true,
            _ => return Err(TargetError::Scheme(url.into())),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| TargetError::Url(url.into()))?
            .clone();
        let host = uri.host().unwrap_or_default().to_string();
        let port = uri.port_u16().unwrap_or(dial::default_port(&uri));
        let headers = headers
            .into_iter()
            .map(|(k, v)| {
                Ok((
                    k.parse().map_err(|_| TargetError::Header(k.clone()))?,
                    v.parse().map_err(|_| TargetError::Header(k.clone()))?,
                ))
            })
            .collect::<Result<_, TargetError>>()?;
        Ok(Target {
            https,
            authority,
            host,
            port,
            headers,
            tls: None,
        })
    }

    /// The same target with the TLS configuration `opts` describe, built when the target is
    /// `https://` (a plain target needs none and reads no file).
    pub fn with_tls(mut self, opts: &TlsOptions) -> Result<Self, TargetError> {
        if self.https {
            self.tls = Some(opts.client_config()?);
        }
        Ok(self)
    }

    /// The same headers and TLS configuration at another base URL: a pipeline step's service.
    /// It must use the target's scheme (the run's client holds the target's TLS settings).
    pub fn at(&self, url: &str) -> Result<Self, TargetError> {
        let mut t = Target::new(url, std::iter::empty())?;
        if t.https != self.https {
            return Err(TargetError::MixedScheme(url.into()));
        }
        t.headers.clone_from(&self.headers);
        t.tls.clone_from(&self.tls);
        Ok(t)
    }

    /// The host of the base URL (no brackets around an IPv6 address).
    #[must_use]
    pub fn host(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// Whether the target is `https://`.
    #[must_use]
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// The path part of the URL, when one was given (`/` counts as none).
    #[must_use]
    pub fn url_path(url: &str) -> Option<String> {
        let uri: Uri = url.parse().ok()?;
        let p = uri.path_and_query()?.as_str();
        (p != "/" && !p.is_empty()).then(|| p.to_string())
    }

    /// The absolute URI of `path`, built from parts so that the path can never change
    /// the authority.
    pub fn uri(&self, path: &str) -> Result<Uri, TargetError> {
        Uri::builder()
            .scheme(if self.https { "https" } else { "http" })
            .authority(self.authority.clone())
            .path_and_query(check_path(path)?)
            .build()
            .map_err(|_| TargetError::Path(path.into()))
    }

    /// Builds a request to `path` with the default and extra headers.
    pub fn request(
        &self,
        method: &Method,
        path: &str,
        body: Bytes,
        extra: &[(hyper::header::HeaderName, HeaderValue)],
    ) -> Result<Request<Full<Bytes>>, TargetError> {
        Ok(self.request_to(method, self.uri(path)?, body, extra))
    }

    /// Builds a request to a prepared URI (saves parsing it per request).
    pub fn request_to(
        &self,
        method: &Method,
        uri: Uri,
        body: Bytes,
        extra: &[(hyper::header::HeaderName, HeaderValue)],
    ) -> Request<Full<Bytes>> {
        let has_body = !body.is_empty();
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method.clone();
        *req.uri_mut() = uri;
        let h = req.headers_mut();
        if has_body {
            h.insert(
                hyper::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        for (k, v) in self.headers.iter().chain(extra) {
            h.insert(k.clone(), v.clone());
        }
        req
    }
}

/// Microseconds since `t0`.
#[must_use]
pub fn us_since(t0: Instant) -> u64 {
    t0.elapsed().as_micros() as u64
}

/// Microseconds since `start`, as a connect time (saturating at `u32::MAX`, 71 minutes).
fn micros(start: Instant) -> u32 {
    u32::try_from(us_since(start)).unwrap_or(u32::MAX)
}

/// How a request reaches the server.
pub enum Via<'a> {
    /// The shared keep-alive pool (open loop: any free connection).
    Pool(&'a HttpClient),
    /// A connection owned by one closed-loop user, as `wrk`/`oha` connections are:
    /// no pool bookkeeping per request; reconnected when the server closes it.
    Own(&'a mut OwnConn),
}

/// A single HTTP/1.1 connection owned by one virtual user.
pub struct OwnConn {
    host_name: String,
    port: u16,
    allow_remote: bool,
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
    /// A not-yet-connected connection to the target; `allow_remote` lifts the loopback
    /// guardrail.
    #[must_use]
    pub fn new(target: &Target, connect_timeout: Duration, allow_remote: bool) -> Self {
        OwnConn {
            host: HeaderValue::from_str(target.authority.as_str())
                .unwrap_or(HeaderValue::from_static("localhost")),
            host_name: target.host.clone(),
            port: target.port,
            allow_remote,
            connect_timeout,
            tls: target.tls.clone().map(tokio_rustls::TlsConnector::from),
            conn: None,
            opened_us: None,
            raw: None,
        }
    }

    /// A new TCP connection to the target, or the failure's class and text.
    async fn dial(&self) -> Result<tokio::net::TcpStream, (ErrorClass, String)> {
        dial::dial(
            &self.host_name,
            self.port,
            self.allow_remote,
            self.connect_timeout,
        )
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

/// A response and how it came.
#[derive(Debug)]
pub struct Sent {
    /// The response (headers; the body is still to read).
    pub resp: Response<Incoming>,
    /// The connection's local and remote address, when known.
    pub addrs: Option<(SocketAddr, SocketAddr)>,
    /// Sent a second time on a fresh connection: the kept-alive one was closed by the server.
    pub reconnected: bool,
    /// The request waited for its connection to open: this long, µs.
    pub connect_us: Option<u32>,
}

impl Via<'_> {
    /// Sends `req` and returns the response with the connection's local and remote address.
    pub async fn request(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> Result<Sent, (ErrorClass, String)> {
        match self {
            Via::Pool(client) => match client.send(req).await {
                Ok((resp, reconnected)) => {
                    let addrs = resp
                        .extensions()
                        .get::<HttpInfo>()
                        .map(|i| (i.local_addr(), i.remote_addr()));
                    let connect_us = addrs.and_then(|(local, _)| client.opened.take(local));
                    Ok(Sent {
                        resp,
                        addrs,
                        reconnected,
                        connect_us,
                    })
                }
                Err(e) => {
                    if let Some(h) = ConnectError::tls_in(&e) {
                        // The handshake's own line says it all; hyper's wrapping adds nothing.
                        return Err((ErrorClass::Tls, h.to_string()));
                    }
                    let class = if fd_limit_in(&e) {
                        ErrorClass::ClientFdLimit
                    } else if e.is_connect() {
                        ErrorClass::Connect
                    } else {
                        ErrorClass::Transport
                    };
                    Err((class, error_chain(&e)))
                }
            },
            Via::Own(conn) => conn
                .request(req)
                .await
                .map(|(resp, l, a, reconnected)| Sent {
                    resp,
                    addrs: Some((l, a)),
                    reconnected,
                    connect_us: conn.opened_us.take(),
                }),
        }
    }
}

/// Sends `req` with `rec`'s trace headers (`traceparent`, `x-request-id`), fills `actual_us`,
/// `first_byte_us`, `status`, `reconnected`, `connect_us` and the socket addresses.
pub async fn send(
    via: &mut Via<'_>,
    mut req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Result<Response<Incoming>, ()> {
    propagate::stamp(req.headers_mut(), rec);
    rec.actual_us = us_since(t0);
    match via.request(req).await {
        Ok(Sent {
            resp,
            addrs,
            reconnected,
            connect_us,
        }) => {
            rec.first_byte_us = Some(us_since(t0));
            rec.status = Some(resp.status().as_u16());
            rec.reconnected = reconnected;
            rec.connect_us = connect_us;
            if let Some((local, remote)) = addrs {
                rec.local_addr = Some(local);
                rec.remote_addr = Some(remote);
            }
            Ok(resp)
        }
        Err((class, msg)) => {
            rec.fail(class, msg);
            rec.end_us = us_since(t0);
            Err(())
        }
    }
}

/// Largest non-streamed response body read, bytes.
pub const MAX_BODY: usize = 32 << 20;

/// Reads a whole body, at most [`MAX_BODY`] bytes, or classifies the failure.
pub async fn read_body(
    resp: Response<Incoming>,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Option<Bytes> {
    // By hand rather than `Limited` + `collect`: a body of one chunk (most answers) is kept as
    // it came, without the list of chunks `collect` allocates per request.
    let mut body = resp.into_body();
    let mut first = Bytes::new();
    let mut joined: Option<bytes::BytesMut> = None;
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let data = match frame.map(hyper::body::Frame::into_data) {
            Ok(Ok(data)) => data,
            // Trailers: not part of the body.
            Ok(Err(_)) => continue,
            Err(e) => {
                rec.fail(ErrorClass::Transport, error_chain(&e));
                rec.end_us = us_since(t0);
                return None;
            }
        };
        if data.is_empty() {
            continue;
        }
        len += data.len();
        if len > MAX_BODY {
            rec.fail(
                ErrorClass::MalformedStream,
                format!("response body larger than {} MiB", MAX_BODY >> 20),
            );
            rec.end_us = us_since(t0);
            return None;
        }
        match &mut joined {
            Some(all) => all.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut all = bytes::BytesMut::with_capacity(len);
                all.extend_from_slice(&first);
                all.extend_from_slice(&data);
                joined = Some(all);
            }
        }
    }
    Some(joined.map_or(first, bytes::BytesMut::freeze))
}

/// Marks a non-2xx answer as failed with the server's `error.message` when present.
pub fn fail_status(rec: &mut RequestRecord, status: u16, body: &[u8]) {
    let msg = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(|m| m.as_str().map(str::to_string))
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    rec.fail(ErrorClass::HttpStatus, format!("HTTP {status}: {msg}"));
}

/// A plain HTTP request: success is any 2xx. A closed-loop user's own `http://` connection
/// speaks HTTP/1.1 on the socket itself ([`h1`]: the same timestamps, half of hyper's user
/// CPU per request); the pool and TLS go through hyper.
///
/// Not an `async fn`: the future returned holds no copy of `req`, and hyper's large one is
/// boxed. The engine moves a request's future several times per request; this keeps it small.
pub fn plain<'a>(
    via: &'a mut Via<'_>,
    mut req: Request<Full<Bytes>>,
    rec: &'a mut RequestRecord,
    t0: Instant,
) -> impl Future<Output = ()> + Send + 'a {
    use futures_util::future::Either;
    if matches!(via, Via::Own(conn) if conn.tls.is_none())
        && let Via::Own(conn) = via
    {
        // Hyper's path stamps the trace headers in `send`.
        propagate::stamp(req.headers_mut(), rec);
        return Either::Left(h1::plain(conn, req, rec, t0));
    }
    Either::Right(Box::pin(plain_hyper(via, req, rec, t0)))
}

/// [`plain`] through hyper.
async fn plain_hyper(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
) {
    let Ok(resp) = send(via, req, rec, t0).await else {
        return;
    };
    let status = resp.status();
    let Some(body) = read_body(resp, rec, t0).await else {
        return;
    };
    rec.end_us = us_since(t0);
    if !status.is_success() {
        fail_status(rec, status.as_u16(), &body);
    }
}

/// The class of a failed connect: the client's own descriptor limit, or the server's side.
fn connect_class(e: &dial::DialError) -> ErrorClass {
    if e.is_fd_limit() {
        ErrorClass::ClientFdLimit
    } else {
        ErrorClass::Connect
    }
}

/// Whether EMFILE/ENFILE is anywhere in the chain of `e`.
fn fd_limit_in(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(d) = c.downcast_ref::<dial::DialError>()
            && d.is_fd_limit()
        {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && dial::is_fd_limit(io)
        {
            return true;
        }
        cur = c.source();
    }
    false
}

/// `error: cause: cause` of an error and its sources.
#[must_use]
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests;
