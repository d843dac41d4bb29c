//! A plain request of a closed-loop user over its own `http://` connection, as HTTP/1.1 on the
//! socket itself: the request written with one `write`, the answer read and parsed in the
//! user's task. Through hyper, every request crosses to the connection's task and back (a
//! request channel, a response channel, a body channel: four task switches); measured here on
//! a pinned plain GET, this path halves the client's user CPU per request (about 6 us to 3 us)
//! and raises its requests/s by a third. The timestamps are taken where hyper's path takes
//! them: `actual_us` when handed to the connection, `first_byte_us` when the answer's head is
//! parsed, `end_us` after its body.

use std::{io::Write as _, net::SocketAddr};

use bytes::{Buf as _, Bytes, BytesMut};
use http_body_util::Full;
use hyper::{Request, header};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

mod head;

use head::{Framing, Head, parse_head};

use super::{MAX_BODY, OwnConn, fail_status, us_since};
use crate::measure::record::{ErrorClass, RequestRecord};

/// Longest answer head read, bytes (hyper's default buffer limit is about as large).
const MAX_HEAD: usize = 64 << 10;

/// An open connection and what was read past the last answer.
pub(super) struct Raw {
    stream: TcpStream,
    local: SocketAddr,
    remote: SocketAddr,
    buf: BytesMut,
    out: Vec<u8>,
}

/// How an exchange failed: its class and text, and whether it failed before any byte of the
/// answer on a connection the server may have closed under it (the one resend applies).
#[derive(Debug)]
struct Failed {
    class: ErrorClass,
    msg: String,
    before_answer: bool,
}

impl Failed {
    fn io(what: &str, e: &std::io::Error, before_answer: bool) -> Self {
        let closed = matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof
        );
        Failed {
            class: ErrorClass::Transport,
            msg: format!("{what}: {e}"),
            before_answer: before_answer && closed,
        }
    }

    fn parse(msg: impl Into<String>) -> Self {
        Failed {
            class: ErrorClass::Transport,
            msg: msg.into(),
            before_answer: false,
        }
    }
}

/// Sends `req` as [`super::via::plain`] does, on `conn`'s raw connection: fills the same fields of
/// `rec` (`actual_us`, `first_byte_us`, `status`, `reconnected`, the addresses, `end_us`, a
/// failure). A reused connection that turns out closed before any byte of the answer gets the
/// request once more on a fresh one (`reconnected`), as hyper's path does.
///
/// The request is encoded before the future is made: the future holds its bytes, not the
/// request (a small future: the engine moves it several times per request).
pub(super) fn plain<'a>(
    conn: &'a mut OwnConn,
    req: Request<Full<Bytes>>,
    rec: &'a mut RequestRecord,
    t0: std::time::Instant,
) -> impl Future<Output = ()> + Send + 'a {
    let head_only = req.method() == hyper::Method::HEAD;
    let (parts, body) = req.into_parts();
    let body = body_bytes(body);
    let mut out = conn
        .raw
        .as_mut()
        .map(|r| std::mem::take(&mut r.out))
        .unwrap_or_default();
    encode(&mut out, conn, &parts, &body);
    send(conn, out, head_only, rec, t0)
}

/// Sends the encoded request `out` (see [`plain`]).
async fn send(
    conn: &mut OwnConn,
    out: Vec<u8>,
    head_only: bool,
    rec: &mut RequestRecord,
    t0: std::time::Instant,
) {
    rec.actual_us = us_since(t0);
    // Taken out for the exchange: a request cut by its timeout leaves no half-read connection.
    let mut raw = conn.raw.take();
    let reused = raw.is_some();
    let mut resent = false;
    loop {
        let mut r = match raw.take() {
            Some(r) => r,
            // Boxed: a dial is a large future that runs once per connection.
            None => match Box::pin(connect(conn)).await {
                Ok((r, took)) => {
                    rec.connect_us = Some(took);
                    Box::new(r)
                }
                Err(fail) => {
                    rec.fail(fail.class, fail.msg);
                    rec.end_us = us_since(t0);
                    return;
                }
            },
        };
        match exchange(&mut r, &out, head_only, rec, t0).await {
            Ok((head, answer)) => {
                rec.end_us = us_since(t0);
                rec.reconnected = resent;
                if !(200..300).contains(&head.status) {
                    fail_status(rec, head.status, &answer);
                }
                if head.keep_alive {
                    r.out = out;
                    conn.raw = Some(r);
                }
                return;
            }
            Err(f) if f.before_answer && reused && !resent => {
                resent = true;
                rec.first_byte_us = None;
            }
            Err(f) => {
                rec.fail(f.class, f.msg);
                rec.end_us = us_since(t0);
                return;
            }
        }
    }
}

/// The request's body as one buffer (a `Full` holds one, or none once taken).
fn body_bytes(mut body: Full<Bytes>) -> Bytes {
    use hyper::body::Body as _;
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match std::pin::Pin::new(&mut body).poll_frame(&mut cx) {
        std::task::Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        _ => Bytes::new(),
    }
}

/// The request line and headers as hyper writes them (names as stored, lower case), a `Host`
/// when the request has none and a `content-length` for a body (none for an empty one).
fn encode(out: &mut Vec<u8>, conn: &OwnConn, parts: &hyper::http::request::Parts, body: &[u8]) {
    out.clear();
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(pq.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut line = |k: &[u8], v: &[u8]| {
        out.extend_from_slice(k);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    };
    if !parts.headers.contains_key(header::HOST) {
        line(b"host", conn.host.as_bytes());
    }
    for (k, v) in &parts.headers {
        line(k.as_str().as_bytes(), v.as_bytes());
    }
    if !body.is_empty() && !parts.headers.contains_key(header::CONTENT_LENGTH) {
        // Formatted into the buffer itself: no `String` per request.
        let _ = write!(out, "content-length: {}\r\n", body.len());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// A new raw connection, and how long it took to open (µs).
async fn connect(conn: &OwnConn) -> Result<(Raw, u32), Failed> {
    let start = std::time::Instant::now();
    let stream = conn.dial().await.map_err(|(class, msg)| Failed {
        class,
        msg,
        before_answer: false,
    })?;
    let (Ok(local), Ok(remote)) = (stream.local_addr(), stream.peer_addr()) else {
        return Err(Failed {
            class: ErrorClass::Connect,
            msg: "no local address on the new connection".into(),
            before_answer: false,
        });
    };
    let raw = Raw {
        stream,
        local,
        remote,
        buf: BytesMut::with_capacity(8 << 10),
        out: Vec::new(),
    };
    Ok((raw, super::micros(start)))
}

/// Writes the request, reads the answer's head (then `first_byte_us`, `status`) and its body.
async fn exchange(
    r: &mut Raw,
    out: &[u8],
    head_only: bool,
    rec: &mut RequestRecord,
    t0: std::time::Instant,
) -> Result<(Head, Bytes), Failed> {
    r.stream
        .write_all(out)
        .await
        .map_err(|e| Failed::io("writing the request", &e, true))?;
    let head = loop {
        if let Some(head) = parse_head(&r.buf)? {
            r.buf.advance(head.len);
            // An interim answer (100 Continue, 103 Early Hints): the real one follows.
            if (100..200).contains(&head.status) && head.status != 101 {
                continue;
            }
            break head;
        }
        if r.buf.len() > MAX_HEAD {
            return Err(Failed::parse(format!(
                "answer head larger than {} KiB",
                MAX_HEAD >> 10
            )));
        }
        let nothing_yet = r.buf.is_empty();
        let n = fill(r)
            .await
            .map_err(|e| Failed::io("reading the answer", &e, nothing_yet))?;
        if n == 0 {
            let e = std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed before message completed",
            );
            return Err(Failed::io("reading the answer", &e, nothing_yet));
        }
    };
    rec.first_byte_us = Some(us_since(t0));
    rec.status = Some(head.status);
    rec.local_addr = Some(r.local);
    rec.remote_addr = Some(r.remote);
    let no_body = head_only || matches!(head.status, 101 | 204 | 304);
    let body = match head.framing {
        _ if no_body => Bytes::new(),
        Framing::Length(n) => {
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= super::MAX_BODY)
                .ok_or_else(too_large)?;
            while r.buf.len() < n {
                r.buf.reserve(n - r.buf.len());
                if fill(r)
                    .await
                    .map_err(|e| Failed::io("reading the body", &e, false))?
                    == 0
                {
                    return Err(Failed::parse(
                        "reading the body: connection closed before message completed",
                    ));
                }
            }
            r.buf.split_to(n).freeze()
        }
        // Boxed: rare here, and the exchange's future stays small.
        Framing::Chunked => Box::pin(chunked(r)).await?,
        Framing::UntilClose => {
            while fill(r)
                .await
                .map_err(|e| Failed::io("reading the body", &e, false))?
                > 0
            {
                if r.buf.len() > MAX_BODY {
                    return Err(too_large());
                }
            }
            r.buf.split().freeze()
        }
    };
    Ok((
        Head {
            // A body read to the connection's end leaves none to reuse; a bodiless answer
            // (HEAD, 204, 304) without a length does not end it.
            keep_alive: head.keep_alive
                && head.status != 101
                && (no_body || head.framing != Framing::UntilClose),
            ..head
        },
        body,
    ))
}

fn too_large() -> Failed {
    Failed {
        class: ErrorClass::MalformedStream,
        msg: format!("response body larger than {} MiB", MAX_BODY >> 20),
        before_answer: false,
    }
}

/// Reads more into the connection's buffer; 0 at the end of the stream.
async fn fill(r: &mut Raw) -> std::io::Result<usize> {
    if r.buf.capacity() - r.buf.len() < 1024 {
        r.buf.reserve(8 << 10);
    }
    r.stream.read_buf(&mut r.buf).await
}

/// A chunked body, decoded.
async fn chunked(r: &mut Raw) -> Result<Bytes, Failed> {
    let mut body = BytesMut::new();
    loop {
        // The size line (extensions after `;` ignored).
        let size_line = next_line(r).await?;
        let text = std::str::from_utf8(&size_line).map_err(|_| bad_chunk())?;
        let hex = text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(hex, 16).map_err(|_| bad_chunk())?;
        if size == 0 {
            // Trailers up to the empty line.
            loop {
                if next_line(r).await?.iter().all(u8::is_ascii_whitespace) {
                    return Ok(body.freeze());
                }
            }
        }
        // `body` holds at most MAX_BODY: no overflow, whatever size the server wrote.
        if size > MAX_BODY - body.len() {
            return Err(too_large());
        }
        // The data and its CRLF.
        while r.buf.len() < size + 2 {
            more(r).await?;
        }
        body.extend_from_slice(&r.buf[..size]);
        if &r.buf[size..size + 2] != b"\r\n" {
            return Err(bad_chunk());
        }
        r.buf.advance(size + 2);
    }
}

/// The next line of a chunked body (a size line or a trailer), at most [`MAX_HEAD`] long.
async fn next_line(r: &mut Raw) -> Result<BytesMut, Failed> {
    loop {
        if let Some(i) = r.buf.iter().position(|&b| b == b'\n') {
            return Ok(r.buf.split_to(i + 1));
        }
        if r.buf.len() > MAX_HEAD {
            return Err(Failed::parse(format!(
                "a line of a chunked body longer than {} KiB",
                MAX_HEAD >> 10
            )));
        }
        more(r).await?;
    }
}

async fn more(r: &mut Raw) -> Result<(), Failed> {
    match fill(r).await {
        Ok(0) => Err(Failed::parse(
            "reading the body: connection closed before message completed",
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(Failed::io("reading the body", &e, false)),
    }
}

fn bad_chunk() -> Failed {
    Failed::parse("invalid chunk in a chunked body")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_request_is_a_small_future() {
        // The engine moves a request's future several times per request: a large one is a
        // large memcpy each time (issue 30: 7 KB, 8% of a plain-HTTP run's CPU).
        let target = super::super::Target::new("http://127.0.0.1:9", []).unwrap();
        let mut conn = OwnConn::new(
            &target,
            std::time::Duration::from_secs(1),
            crate::dial::Reach::Loopback,
        );
        let mut via = super::super::via::Via::Own(&mut conn);
        let req = target
            .request(&hyper::Method::GET, "/", Bytes::new(), &[])
            .unwrap();
        let mut rec = RequestRecord::new(0, 0, crate::measure::record::Endpoint::Http, 0);
        let fut = super::super::via::plain(&mut via, req, &mut rec, std::time::Instant::now());
        let size = std::mem::size_of_val(&fut);
        assert!(size < 1024, "a plain request's future is {size} bytes");
    }

    #[test]
    fn a_body_gets_its_length_and_the_host_its_header() {
        let target = super::super::Target::new("http://127.0.0.1:9", []).unwrap();
        let conn = OwnConn::new(
            &target,
            std::time::Duration::from_secs(1),
            crate::dial::Reach::Loopback,
        );
        for n in [7usize, 1234] {
            let body = vec![b'x'; n];
            let req = target
                .request(
                    &hyper::Method::POST,
                    "/p?q=1",
                    Bytes::from(body.clone()),
                    &[],
                )
                .unwrap();
            let (parts, _) = req.into_parts();
            let mut out = Vec::new();
            encode(&mut out, &conn, &parts, &body);
            let text = String::from_utf8(out).unwrap();
            assert!(text.starts_with("POST /p?q=1 HTTP/1.1\r\n"), "{text}");
            let lower = text.to_ascii_lowercase();
            assert_eq!(
                lower.matches(&format!("content-length: {n}\r\n")).count(),
                1,
                "one content-length: {text}"
            );
            assert!(
                text.ends_with(&format!("\r\n\r\n{}", "x".repeat(n))),
                "{text}"
            );
        }
    }
}
