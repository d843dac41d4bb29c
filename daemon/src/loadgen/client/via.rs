//! How a request reaches the server (the shared pool or a user's own connection), sending it
//! with its trace headers into its record, and a plain HTTP request (success is any 2xx).

use std::{net::SocketAddr, time::Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming};
use hyper_util::client::legacy::connect::HttpInfo;

use super::body::{fail_status, read_body};
use super::elapsed::us_since;
use super::errors::{error_chain, fd_limit_in};
use super::pool::HttpClient;
use super::propagate;
use super::{OwnConn, h1};
use crate::measure::record::{ErrorClass, RequestRecord};
use crate::tls::ConnectError;

/// How a request reaches the server.
pub enum Via<'a> {
    /// The shared keep-alive pool (open loop: any free connection).
    Pool(&'a HttpClient),
    /// A connection owned by one closed-loop user, as `wrk`/`oha` connections are:
    /// no pool bookkeeping per request; reconnected when the server closes it.
    Own(&'a mut OwnConn),
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

/// A plain HTTP request: success is any 2xx. A closed-loop user's own `http://` connection
/// speaks HTTP/1.1 on the socket itself (`h1`: the same timestamps, half of hyper's user
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
