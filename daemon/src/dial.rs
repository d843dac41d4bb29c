//! The loopback guardrail where it cannot be bypassed: at the address actually dialled.
//!
//! Checking the scenario's `target` string is not enough: a URL is text, and a path, a
//! redirect or a resolver can all move the connection elsewhere. Every connection the load
//! generator opens (pooled requests, events, recall queries, closed-loop users) goes through
//! [`dial`], which resolves the host itself, refuses any non-loopback address unless remote
//! targets are allowed, and connects to the checked address only, so no packet leaves
//! loopback unasked. The pool's connector is [`GuardedConnector`].

use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Why a connection was not opened.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// Every address of the host is outside loopback and the reach is [`Reach::Loopback`].
    #[error(
        "refusing to connect to {host} ({addrs}): not a loopback address; pass --allow-remote to reach a remote service"
    )]
    Remote {
        /// The host as written.
        host: String,
        /// What it resolved to.
        addrs: String,
    },
    /// The URI names no host.
    #[error("no host in {0}")]
    NoHost(String),
    /// Name resolution or the connect itself failed.
    #[error("connect to {host}: {source}")]
    Io {
        /// The host as written.
        host: String,
        /// The cause (its `raw_os_error` tells EMFILE from a refused connection).
        #[source]
        source: io::Error,
    },
    /// The connect did not finish in time.
    #[error("connect to {0} timed out")]
    Timeout(String),
}

impl DialError {
    /// Whether the process ran out of file descriptors (EMFILE/ENFILE): the client's own
    /// limit, not the server's fault.
    #[must_use]
    pub fn is_fd_limit(&self) -> bool {
        matches!(self, DialError::Io { source, .. } if is_fd_limit(source))
    }
}

/// Whether `e` is EMFILE or ENFILE.
#[must_use]
pub fn is_fd_limit(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (every connection of a run
/// is a descriptor; the default soft limit of 1024 is a load generator's first ceiling).
/// Returns the (old, new) soft limits.
pub fn raise_fd_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid, initialised struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let old = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((old, lim.rlim_cur))
}

/// Where the load generator and trigger webhooks may connect: loopback only (the default), or
/// anywhere (`--allow-remote`). Read from the flag once ([`Reach::from_flag`]) and asked at
/// every dial ([`Reach::allows`]) and of every URL before a run sends anything
/// ([`Reach::admits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reach {
    /// Loopback addresses only.
    #[default]
    Loopback,
    /// Any address (`--allow-remote`).
    Anywhere,
}

impl Reach {
    /// The reach the `--allow-remote` flag asks for: its one conversion.
    #[must_use]
    pub const fn from_flag(allow_remote: bool) -> Self {
        if allow_remote {
            Reach::Anywhere
        } else {
            Reach::Loopback
        }
    }

    /// Whether `addr` may be dialled.
    #[must_use]
    pub fn allows(self, addr: &SocketAddr) -> bool {
        self == Reach::Anywhere || addr.ip().is_loopback() || addr.ip().to_canonical().is_loopback()
    }

    /// Whether `url`, whose host (without an IPv6 address's brackets) is `host`, may be loaded:
    /// the one decision a run, a posted run and the model list make before sending anything.
    /// It reads the host as written (`localhost`, `127.0.0.0/8`, `::1`); [`dial`] checks the
    /// address each connection actually reaches.
    pub fn admits(self, host: &str, url: &str) -> Result<(), OutOfReach> {
        if self == Reach::Anywhere || is_loopback(host) {
            Ok(())
        } else {
            Err(OutOfReach {
                url: url.to_owned(),
            })
        }
    }
}

/// A URL outside loopback where only loopback may be reached ([`Reach::admits`]); each caller
/// words the refusal for its user (`RunError::Remote`, `LaunchError::Remote`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfReach {
    /// The URL as written.
    pub url: String,
}

/// Resolves `host:port` and keeps only the addresses the guardrail allows.
pub async fn resolve(host: &str, port: u16, reach: Reach) -> Result<Vec<SocketAddr>, DialError> {
    let all: Vec<SocketAddr> = match literal(host) {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => tokio::net::lookup_host((bare(host), port))
            .await
            .map_err(|source| DialError::Io {
                host: host.to_string(),
                source,
            })?
            .collect(),
    };
    screen(host, &all, reach)
}

/// The guardrail's answer for `host:port` now, on the same resolver [`resolve`] asks but
/// blocking: for a check made before anything starts (a trigger rule's webhook), so that a
/// URL the guard will refuse is said at once. A name that does not resolve now passes here;
/// [`dial`] checks it again on every connection.
pub fn check_blocking(host: &str, port: u16, reach: Reach) -> Result<(), DialError> {
    use std::net::ToSocketAddrs as _;
    if reach == Reach::Anywhere {
        return Ok(());
    }
    let all: Vec<SocketAddr> = match literal(host) {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => match (bare(host), port).to_socket_addrs() {
            Ok(addrs) => addrs.collect(),
            Err(_) => return Ok(()),
        },
    };
    screen(host, &all, reach).map(drop)
}

/// The addresses of `all` the guardrail allows; [`DialError::Remote`] when there are none.
pub fn screen(host: &str, all: &[SocketAddr], reach: Reach) -> Result<Vec<SocketAddr>, DialError> {
    let ok: Vec<SocketAddr> = all.iter().copied().filter(|a| reach.allows(a)).collect();
    if ok.is_empty() {
        let addrs = all
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(DialError::Remote {
            host: host.to_string(),
            addrs,
        });
    }
    Ok(ok)
}

/// A host without the brackets of an IPv6 literal.
fn bare(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The address a host names literally (`10.0.0.1`, `[::ffff:10.0.0.1]`); other spellings
/// (`0x7f000001`, `167772161`, names) go to the resolver, which reads them as the rest of
/// the system does.
fn literal(host: &str) -> Option<std::net::IpAddr> {
    bare(host).parse().ok()
}

/// Opens a TCP connection to `host:port` through the guardrail, with `TCP_NODELAY`.
pub async fn dial(
    host: &str,
    port: u16,
    reach: Reach,
    timeout: Duration,
) -> Result<TcpStream, DialError> {
    let addrs = resolve(host, port, reach).await?;
    let attempt = async {
        let mut last = None;
        for a in &addrs {
            match TcpStream::connect(a).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no address to connect to")))
    };
    let stream = tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| DialError::Timeout(format!("{host}:{port}")))?
        .map_err(|source| DialError::Io {
            host: format!("{host}:{port}"),
            source,
        })?;
    // Belt and braces: the peer is the address the kernel actually connected to.
    if let Ok(peer) = stream.peer_addr()
        && !reach.allows(&peer)
    {
        return Err(DialError::Remote {
            host: host.to_string(),
            addrs: peer.to_string(),
        });
    }
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Host and port of an `http://` or `https://` URI (80 or 443 when none is written).
pub fn host_port(uri: &Uri) -> Result<(String, u16), DialError> {
    let host = uri
        .host()
        .ok_or_else(|| DialError::NoHost(uri.to_string()))?;
    Ok((
        host.to_string(),
        uri.port_u16().unwrap_or(default_port(uri)),
    ))
}

/// The port of a scheme when the URI writes none: 443 for `https`, else 80.
#[must_use]
pub fn default_port(uri: &Uri) -> u16 {
    if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    }
}

/// How long each new pooled connection took to open (the dial, and the TLS handshake of an
/// `https://` target), by its local address, until the first answer on it takes the time: that
/// request is the one that waited for the connection, except when hyper's pool handed the
/// waiting request a connection freed meanwhile (the new one then goes to the pool, and its
/// first request carries the time it did not wait). At most [`Opened::MAX`] are held; a
/// connection that failed before any answer leaves its entry until the table is full, and a
/// full table starts over (the times it drops are of connections nobody answered on).
#[derive(Debug, Default)]
pub struct Opened(std::sync::Mutex<std::collections::HashMap<SocketAddr, u32>>);

impl Opened {
    /// Entries held at most.
    pub const MAX: usize = 1 << 16;

    /// The connection from `local` opened in `us` microseconds.
    pub fn put(&self, local: SocketAddr, us: u64) {
        let mut m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if m.len() >= Self::MAX {
            m.clear();
        }
        m.insert(local, u32::try_from(us).unwrap_or(u32::MAX));
    }

    /// The open time of the connection from `local`, once: `None` for a reused connection.
    pub fn take(&self, local: SocketAddr) -> Option<u32> {
        let mut m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if m.is_empty() {
            return None;
        }
        m.remove(&local)
    }
}

/// The pooled client's TCP connector: every new connection goes through [`dial`]
/// (`crate::tls::TlsConnector` adds TLS on top for `https://` targets).
#[derive(Debug, Clone)]
pub struct GuardedConnector {
    /// Where it may connect.
    pub reach: Reach,
    /// Connect timeout.
    pub timeout: Duration,
}

impl tower_service::Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = DialError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, DialError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), DialError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (reach, timeout) = (self.reach, self.timeout);
        Box::pin(async move {
            let (host, port) = host_port(&uri)?;
            let s = dial(&host, port, reach, timeout).await?;
            let _ = socket_keepalive(&s);
            Ok(TokioIo::new(s))
        })
    }
}

/// TCP keep-alive on a pooled connection (an idle pool must notice a dead peer).
fn socket_keepalive(s: &TcpStream) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let on: libc::c_int = 1;
    // SAFETY: setsockopt on a valid socket with a correctly sized int option.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_KEEPALIVE,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether `host` is loopback (`localhost`, `127.0.0.0/8`, `::1`).
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn non_loopback_addresses_are_refused_before_any_packet() {
        // 192.0.2.0/24 is TEST-NET-1: nothing answers there, so a connect attempt would
        // hang until the timeout; a refusal is immediate.
        let t = std::time::Instant::now();
        let e = dial("192.0.2.7", 80, Reach::Loopback, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(e, DialError::Remote { .. }), "{e}");
        assert!(e.to_string().contains("--allow-remote"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(1));
        for ip in ["[::ffff:10.0.0.1]", "0.0.0.0", "[::]"] {
            assert!(resolve(ip, 1, Reach::Loopback).await.is_err(), "{ip}");
        }
        assert_eq!(resolve("[::1]", 9, Reach::Loopback).await.unwrap().len(), 1);
        assert!(resolve("localhost", 9, Reach::Loopback).await.is_ok());
        assert!(resolve("192.0.2.7", 80, Reach::Anywhere).await.is_ok());
    }

    #[test]
    fn a_name_is_judged_by_what_it_resolves_to() {
        let ten: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:80".parse().unwrap();
        // A DNS name that resolves elsewhere is refused whatever it is called; one with a
        // loopback address among others is dialled on that address only.
        let e = screen("db.internal", &[ten], Reach::Loopback).unwrap_err();
        assert!(e.to_string().contains("db.internal (10.0.0.1:80)"), "{e}");
        assert_eq!(
            screen("db.internal", &[ten, lo], Reach::Loopback).unwrap(),
            [lo]
        );
        assert_eq!(
            screen("db.internal", &[ten], Reach::Anywhere).unwrap(),
            [ten]
        );
        // The same guard before anything starts (the resolver reads hex and decimal too).
        assert!(check_blocking("0x7f000001", 80, Reach::Loopback).is_ok());
        assert!(check_blocking("localhost", 80, Reach::Loopback).is_ok());
        for host in ["167772161", "10.0.0.1", "[::ffff:10.0.0.1]"] {
            assert!(matches!(
                check_blocking(host, 80, Reach::Loopback),
                Err(DialError::Remote { .. })
            ));
            assert!(check_blocking(host, 80, Reach::Anywhere).is_ok());
        }
    }

    #[test]
    fn a_url_is_admitted_by_its_host_as_written() {
        assert_eq!(Reach::from_flag(false), Reach::Loopback);
        assert_eq!(Reach::from_flag(true), Reach::Anywhere);
        assert_eq!(Reach::default(), Reach::Loopback);
        for host in ["localhost", "LocalHost", "127.0.0.1", "127.9.9.9", "::1"] {
            assert_eq!(Reach::Loopback.admits(host, "u"), Ok(()), "{host}");
        }
        for host in ["vllm", "10.0.0.1", "[::1]", "0.0.0.0"] {
            assert_eq!(
                Reach::Loopback.admits(host, "http://x/"),
                Err(OutOfReach {
                    url: "http://x/".into()
                }),
                "{host}"
            );
            assert_eq!(Reach::Anywhere.admits(host, "http://x/"), Ok(()));
        }
    }

    #[tokio::test]
    async fn loopback_connects() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let s = dial("127.0.0.1", port, Reach::Loopback, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(s.peer_addr().unwrap().port(), port);
    }

    #[test]
    fn fd_limit_is_recognised() {
        assert!(is_fd_limit(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(is_fd_limit(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!is_fd_limit(&io::Error::from_raw_os_error(
            libc::ECONNREFUSED
        )));
    }
}
