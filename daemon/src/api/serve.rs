//! One HTTP/1.1 server loop for the daemon's endpoints (`/metrics`, `/api/v1/timeline`, the
//! control API) that a slow or hostile client cannot tie up: request headers must arrive within
//! a deadline, every request is answered (or cut off) within a deadline, and at most a fixed
//! number of connections are served at once; the rest wait in the kernel's accept queue.
//!
//! ```no_run
//! # async fn demo(router: axum::Router) -> std::io::Result<()> {
//! use inferscope::api::serve::{Limits, serve};
//! let l = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
//! serve(l, router, Limits::default(), std::future::pending()).await
//! # }
//! ```

use std::{convert::Infallible, future::Future, io, sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    http::{Request, Response, StatusCode},
};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, UnixListener},
    sync::Semaphore,
};
use tower_service::Service as _;

/// What one server tolerates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time a client has to send a request's headers (also bounds an idle keep-alive wait).
    pub header_read: Duration,
    /// Time from a request's headers to the end of its answer, body upload included.
    pub request: Duration,
    /// Connections served at once.
    pub connections: usize,
    /// Longest a connection is kept, however busy: a keep-alive client reconnects.
    pub connection_lifetime: Duration,
    /// Largest request head (start line and headers), bytes.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read: Duration::from_secs(10),
            request: Duration::from_secs(30),
            connections: 128,
            connection_lifetime: Duration::from_mins(5),
            max_header_bytes: 16 * 1024,
        }
    }
}

/// A listener [`serve`] accepts from.
pub trait Accept: Send + 'static {
    /// The connection type.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection.
    fn accept(&self) -> impl Future<Output = io::Result<Self::Io>> + Send;
}

impl Accept for TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> io::Result<Self::Io> {
        let (s, _) = TcpListener::accept(self).await?;
        // Small answers: do not hold them back waiting for more to send.
        let _ = s.set_nodelay(true);
        Ok(s)
    }
}

impl Accept for UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> io::Result<Self::Io> {
        UnixListener::accept(self).await.map(|(s, _)| s)
    }
}

/// Serves `router` on `listener` under `limits` until `shutdown` completes; connections in
/// progress then get up to `limits.request` to finish.
pub async fn serve<L: Accept>(
    listener: L,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(limits.max_header_bytes.max(8192));
    tokio::pin!(shutdown);
    loop {
        // Take a slot before accepting: beyond the cap, clients queue in the kernel's backlog
        // instead of costing a task and buffers each.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.map_err(io::Error::other)?,
            () = &mut shutdown => break,
        };
        let io = tokio::select! {
            r = listener.accept() => match r {
                Ok(io) => io,
                // Out of descriptors, a reset before accept: the listener itself is fine.
                Err(e) if transient(&e) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(e) => return Err(e),
            },
            () = &mut shutdown => break,
        };
        let router = router.clone();
        let request_limit = limits.request;
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let mut router = router.clone();
            async move {
                let req = req.map(Body::new);
                let resp = match tokio::time::timeout(request_limit, router.call(req)).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(never)) => match never {},
                    Err(_) => timed_out(request_limit),
                };
                Ok::<_, Infallible>(resp)
            }
        });
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(io), service));
        let lifetime = limits.connection_lifetime;
        tokio::spawn(async move {
            // A connection past its lifetime is dropped; the client sees EOF and reconnects.
            let _ = tokio::time::timeout(lifetime, conn).await;
            drop(permit);
        });
    }
    let _ = tokio::time::timeout(limits.request, graceful.shutdown()).await;
    Ok(())
}

fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

fn timed_out(limit: Duration) -> Response<Body> {
    let mut r = Response::new(Body::from(format!(
        "request not completed within {}s: send the whole request promptly\n",
        limit.as_secs()
    )));
    *r.status_mut() = StatusCode::REQUEST_TIMEOUT;
    r
}
