//! A client connection that is plain TCP or TLS over TCP, and the client handshake whose
//! failures are one line with what to do ([`HandshakeError`]).

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use hyper_util::client::legacy::connect::{Connected, Connection};
use rustls::{CertificateError, pki_types::ServerName};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};
use tokio_rustls::client::TlsStream;

/// One client connection: plain TCP (`http://`) or TLS over TCP (`https://`).
#[derive(Debug)]
pub enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP (boxed: the TLS state is large).
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// The TCP socket underneath (addresses, socket options).
    #[must_use]
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The pool learns the connection's addresses (`HttpInfo`) from the TCP socket, TLS or not:
/// records join kernel events by that 4-tuple.
impl Connection for Stream {
    fn connected(&self) -> Connected {
        self.tcp().connected()
    }
}

/// What a failed handshake most likely means, for the advice on the error's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// The certificate chains to no trusted root.
    UnknownCa,
    /// The certificate does not name the host of the URL.
    WrongName,
    /// The certificate is expired or not yet valid.
    Validity,
    /// The server presents a CA certificate as its own (basicConstraints `CA:TRUE`, what
    /// `openssl req -x509` makes by default).
    CaAsEndEntity,
    /// The peer does not seem to speak TLS at all.
    NotTls,
    /// Nothing specific to advise.
    None,
}

impl Hint {
    fn advice(self) -> &'static str {
        match self {
            Hint::UnknownCa => {
                "; the certificate is not signed by a CA trusted here: pass --ca-file PEM with the server's CA (or --insecure for a test server)"
            }
            Hint::WrongName => {
                "; the certificate does not name this host: use a host name it was issued for in the URL (or --insecure for a test server)"
            }
            Hint::Validity => {
                "; the certificate is outside its validity period: check the server's certificate and this host's clock (or --insecure for a test server)"
            }
            Hint::CaAsEndEntity => {
                "; the server presents a CA certificate (basicConstraints CA:TRUE, the default of `openssl req -x509`) as its own, which TLS clients refuse even when it is the one given with --ca-file: re-issue it with `-addext basicConstraints=critical,CA:FALSE` (or --insecure for a test server)"
            }
            Hint::NotTls => {
                "; the server does not seem to speak TLS on this port (for plain HTTP use http://)"
            }
            Hint::None => "",
        }
    }
}

/// A TLS handshake that failed: one line naming the host, the cause and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("TLS handshake with {host} failed: {reason}{}", hint.advice())]
pub struct HandshakeError {
    /// `host:port` as written in the URL.
    pub host: String,
    /// The cause, on one line.
    pub reason: String,
    /// What it most likely means.
    pub hint: Hint,
}

/// Runs the client handshake on `tcp` for `host` (from the URL: the SNI and the name the
/// certificate must carry), within `timeout`.
pub async fn handshake(
    tls: &tokio_rustls::TlsConnector,
    host: &str,
    port: u16,
    tcp: TcpStream,
    timeout: Duration,
) -> Result<Stream, HandshakeError> {
    let at = format!("{host}:{port}");
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(bare.to_owned()).map_err(|_| HandshakeError {
        host: at.clone(),
        reason: format!("{bare:?} is not a host name or IP address TLS can check"),
        hint: Hint::None,
    })?;
    match tokio::time::timeout(timeout, tls.connect(name, tcp)).await {
        Ok(Ok(s)) => Ok(Stream::Tls(Box::new(s))),
        Ok(Err(e)) => {
            let (reason, hint) = describe(&e);
            Err(HandshakeError {
                host: at,
                reason,
                hint,
            })
        }
        Err(_) => Err(HandshakeError {
            host: at,
            reason: format!("no answer within {}", humantime::format_duration(timeout)),
            hint: Hint::NotTls,
        }),
    }
}

/// The cause of a failed handshake and what it most likely means.
fn describe(e: &io::Error) -> (String, Hint) {
    if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        let hint = match tls {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer
                | CertificateError::BadSignature
                | CertificateError::UnknownRevocationStatus => Hint::UnknownCa,
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => Hint::WrongName,
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => Hint::Validity,
                // webpki's own error, which rustls passes through as `Other`.
                CertificateError::Other(o) if format!("{o:?}").contains("CaUsedAsEndEntity") => {
                    Hint::CaAsEndEntity
                }
                _ => Hint::None,
            },
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
                Hint::NotTls
            }
            _ => Hint::None,
        };
        return (tls.to_string().replace('\n', " "), hint);
    }
    match e.kind() {
        io::ErrorKind::UnexpectedEof => (
            "the server closed the connection during the handshake".into(),
            Hint::NotTls,
        ),
        _ => (e.to_string().replace('\n', " "), Hint::None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_map_to_advice() {
        let wrap = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        let (_, h) = describe(&wrap(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        )));
        assert_eq!(h, Hint::UnknownCa);
        let (_, h) = describe(&wrap(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName,
        )));
        assert_eq!(h, Hint::WrongName);
        let (_, h) = describe(&wrap(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        )));
        assert_eq!(h, Hint::NotTls);
        let (_, h) = describe(&io::Error::from(io::ErrorKind::UnexpectedEof));
        assert_eq!(h, Hint::NotTls);
        let e = HandshakeError {
            host: "h:1".into(),
            reason: "invalid peer certificate: UnknownIssuer".into(),
            hint: Hint::UnknownCa,
        }
        .to_string();
        assert!(
            e.starts_with("TLS handshake with h:1 failed: invalid peer"),
            "{e}"
        );
        assert!(e.contains("--ca-file"), "{e}");
        assert!(!e.contains('\n'));
    }
}
