//! Servers that close kept-alive connections: a request written into a connection the server
//! already gave up is sent once more on a fresh one, and is not an error.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::Method;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
};

use super::via::{Via, plain, send};
use super::*;
use crate::dial::Reach;
use crate::measure::record::{Endpoint, RequestRecord};

/// A raw HTTP/1.1 server that announces `Keep-Alive: timeout=5, max=100` but answers only
/// `answers` requests per connection: it reads the next request and closes without a word,
/// as llama.cpp's server does after a stream (it announces keep-alive, then closes).
async fn closing_server(answers: usize) -> std::net::SocketAddr {
    server(answers, false).await
}

/// Like [`closing_server`], but the connection closes right after the last answer, without
/// waiting for the next request: the client finds it closed, or races the close.
async fn eager_closing_server(answers: usize) -> std::net::SocketAddr {
    server(answers, true).await
}

async fn server(answers: usize, eager: bool) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            tokio::spawn(serve(s, answers, eager));
        }
    });
    addr
}

async fn serve(mut s: TcpStream, answers: usize, eager: bool) {
    for _ in 0..answers {
        if !read_request(&mut s).await {
            return;
        }
        let body = "data: {\"x\":1}\n\n";
        let head = format!(
            "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5, max=100\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        );
        if s.write_all(head.as_bytes()).await.is_err() {
            return;
        }
    }
    // The next request is read (unless eager), then the connection closes unanswered.
    if !eager {
        let _ = read_request(&mut s).await;
    }
}

/// Reads one request head and its `Content-Length` body; false at EOF.
async fn read_request(s: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            return true;
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Sends `n` requests one after the other through `via`; returns (failures, reconnected).
async fn run(via: &mut Via<'_>, target: &Target, n: usize) -> (Vec<String>, usize) {
    let t0 = Instant::now();
    let (mut failed, mut reconnected) = (Vec::new(), 0);
    for i in 0..n {
        let req = target
            .request(
                &Method::POST,
                "/v1/chat/completions",
                Bytes::from_static(b"{}"),
                &[],
            )
            .unwrap();
        let mut rec = RequestRecord::new(i as u64, 0, Endpoint::Chat, 0);
        if let Ok(resp) = send(via, req, &mut rec, t0).await {
            resp.into_body().collect().await.unwrap();
        }
        if let Some(msg) = rec.error_message {
            failed.push(msg);
        }
        reconnected += usize::from(rec.reconnected);
    }
    (failed, reconnected)
}

async fn both_ways(answers: usize, n: usize) -> [(Vec<String>, usize); 2] {
    ways(closing_server(answers).await, n).await
}

async fn ways(addr: std::net::SocketAddr, n: usize) -> [(Vec<String>, usize); 2] {
    let target = Target::new(&format!("http://{addr}"), []).unwrap();
    let timeout = Duration::from_secs(5);
    let client = build_client(&target, timeout, Reach::Loopback);
    let pooled = run(&mut Via::Pool(&client), &target, n).await;
    let mut own = OwnConn::new(&target, timeout, Reach::Loopback);
    let owned = run(&mut Via::Own(&mut own), &target, n).await;
    [pooled, owned]
}

#[tokio::test]
async fn a_server_closing_after_every_answer_costs_no_request() {
    for (way, (failed, reconnected)) in ["pool", "own"].iter().zip(both_ways(1, 12).await) {
        assert!(failed.is_empty(), "{way}: {failed:?}");
        // Requests that found their kept-alive connection closed were resent (how many
        // depends on when the pool takes a connection back).
        assert!(
            reconnected >= 1,
            "{way}: no request met a closed connection"
        );
    }
}

#[tokio::test]
async fn a_server_honouring_max_n_costs_no_request() {
    for (way, (failed, reconnected)) in ["pool", "own"].iter().zip(both_ways(3, 12).await) {
        assert!(failed.is_empty(), "{way}: {failed:?}");
        assert!(
            reconnected >= 1,
            "{way}: no request met a closed connection"
        );
    }
}

#[tokio::test]
async fn a_server_closing_right_after_every_answer_costs_no_request() {
    let addr = eager_closing_server(1).await;
    for (way, (failed, _)) in ["pool", "own"].iter().zip(ways(addr, 50).await) {
        assert!(failed.is_empty(), "{way}: {failed:?}");
    }
}

#[tokio::test]
async fn a_server_that_never_answers_is_still_an_error() {
    // Closes every connection unanswered: the resend fails too, and the request with it.
    let addr = closing_server(0).await;
    let target = Target::new(&format!("http://{addr}"), []).unwrap();
    let client = build_client(&target, Duration::from_secs(5), Reach::Loopback);
    let (failed, _) = run(&mut Via::Pool(&client), &target, 3).await;
    assert_eq!(failed.len(), 3, "{failed:?}");
}

/// Sends `n` plain GETs one after the other through `via` ([`plain`]: the own connection
/// speaks HTTP/1.1 itself, the pool goes through hyper); returns the records.
async fn run_plain(via: &mut Via<'_>, target: &Target, n: usize) -> Vec<RequestRecord> {
    let t0 = Instant::now();
    let mut recs = Vec::new();
    for i in 0..n {
        let req = target
            .request(&Method::GET, "/", Bytes::new(), &[])
            .unwrap();
        let mut rec = RequestRecord::new(i as u64, 0, Endpoint::Http, 0);
        plain(via, req, &mut rec, t0).await;
        recs.push(rec);
    }
    recs
}

async fn plain_both_ways(addr: std::net::SocketAddr, n: usize) -> [Vec<RequestRecord>; 2] {
    let target = Target::new(&format!("http://{addr}"), []).unwrap();
    let timeout = Duration::from_secs(5);
    let client = build_client(&target, timeout, Reach::Loopback);
    let pooled = run_plain(&mut Via::Pool(&client), &target, n).await;
    let mut own = OwnConn::new(&target, timeout, Reach::Loopback);
    let owned = run_plain(&mut Via::Own(&mut own), &target, n).await;
    [pooled, owned]
}

/// A server answering every request on a connection with `answer`, for as long as it stays.
async fn answering_server(answer: &'static str) -> std::net::SocketAddr {
    serve_answer(answer, false).await
}

/// A server answering `answer` to each request (only the first of a connection when `once`,
/// then closing it).
async fn serve_answer(answer: &'static str, once: bool) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                while read_request(&mut s).await {
                    if s.write_all(answer.as_bytes()).await.is_err() || once {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn plain_requests_on_a_closing_server_cost_no_request_either_way() {
    for (answers, eager) in [(1, false), (3, false), (1, true)] {
        let addr = server(answers, eager).await;
        for (way, recs) in ["pool", "own"].iter().zip(plain_both_ways(addr, 12).await) {
            let failed: Vec<_> = recs
                .iter()
                .filter_map(|r| r.error_message.clone())
                .collect();
            assert!(failed.is_empty(), "{way} {answers} {eager}: {failed:?}");
            for r in &recs {
                assert_eq!(r.status, Some(200), "{way}");
                let first = r.first_byte_us.unwrap();
                assert!(r.actual_us <= first && first <= r.end_us, "{way}: {r:?}");
                assert!(
                    r.local_addr.is_some() && r.remote_addr == Some(addr),
                    "{way}"
                );
            }
            if !eager {
                let resent = recs.iter().filter(|r| r.reconnected).count();
                assert!(resent >= 1, "{way}: no request met a closed connection");
            }
        }
    }
}

#[tokio::test]
async fn plain_requests_read_answers_as_hyper_does() {
    let answers = [
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy",
        "HTTP/1.1 429 Too Many\r\ntransfer-encoding: chunked\r\n\r\n3;x=1\r\nslo\r\n4\r\nw do\r\n4\r\nwn!!\r\n0\r\nx-trailer: 1\r\n\r\n",
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 26\r\n\r\n{\"error\":{\"message\":\"no\"}}",
        "HTTP/1.1 204 No Content\r\n\r\n",
    ];
    for answer in answers {
        let addr = answering_server(answer).await;
        let [pooled, owned] = plain_both_ways(addr, 3).await;
        for (p, o) in pooled.iter().zip(&owned) {
            assert_eq!(
                (p.status, &p.error, &p.error_message),
                (o.status, &o.error, &o.error_message),
                "{answer:?}"
            );
            assert!(!o.reconnected, "{answer:?}");
        }
    }
    // A body closed by the connection's end: read to the end, the connection not reused.
    let addr = server_once("HTTP/1.0 500 Oops\r\n\r\nto the end").await;
    let [pooled, owned] = plain_both_ways(addr, 2).await;
    for (p, o) in pooled.iter().zip(&owned) {
        assert_eq!(p.error_message.as_deref(), Some("HTTP 500: to the end"));
        assert_eq!(p.error_message, o.error_message);
    }
}

/// A server answering one request per connection with `answer`, then closing.
async fn server_once(answer: &'static str) -> std::net::SocketAddr {
    serve_answer(answer, true).await
}

#[tokio::test]
async fn plain_requests_to_a_server_that_never_answers_fail_either_way() {
    let addr = server(0, false).await;
    for (way, recs) in ["pool", "own"].iter().zip(plain_both_ways(addr, 3).await) {
        for r in &recs {
            assert_eq!(r.error, Some(ErrorClass::Transport), "{way}: {r:?}");
            assert!(r.first_byte_us.is_none() && !r.reconnected, "{way}");
        }
    }
}

#[tokio::test]
async fn hostile_chunked_bodies_fail_both_ways_without_a_panic() {
    let endless_line: &'static str = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{}",
            "a".repeat(100 << 10)
        )
        .into_boxed_str(),
    );
    for answer in [
        // A chunk size past any body limit (and past usize::MAX when added to one).
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\nffffffffffffffff\r\nx\r\n",
        // Not a size at all.
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nx\r\n0\r\n\r\n",
        // A size line that never ends.
        endless_line,
    ] {
        let addr = server_once(answer).await;
        for (way, recs) in ["pool", "own"].iter().zip(plain_both_ways(addr, 1).await) {
            let r = &recs[0];
            assert!(r.error.is_some(), "{way}: {r:?} from {answer:.60}");
            assert!(r.error_message.is_some(), "{way}");
        }
    }
}

#[tokio::test]
async fn a_request_that_waited_for_its_connection_carries_the_connect_time() {
    let ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    for once in [false, true] {
        let addr = serve_answer(ok, once).await;
        let target = Target::new(&format!("http://{addr}"), []).unwrap();
        let timeout = Duration::from_secs(5);
        // The own connection through hyper (an LLM request's way), then plain requests.
        let mut own = OwnConn::new(&target, timeout, Reach::Loopback);
        let mut hyper_own = Vec::new();
        for i in 0..6 {
            let req = target
                .request(&Method::POST, "/v1/chat/completions", Bytes::new(), &[])
                .unwrap();
            let mut rec = RequestRecord::new(i, 0, Endpoint::Chat, 0);
            if let Ok(resp) = send(&mut Via::Own(&mut own), req, &mut rec, Instant::now()).await {
                resp.into_body().collect().await.unwrap();
            }
            hyper_own.push(rec);
        }
        let [pooled, raw_own] = plain_both_ways(addr, 6).await;
        for (way, recs) in [("pool", pooled), ("own", hyper_own), ("raw", raw_own)] {
            let opened: Vec<bool> = recs.iter().map(|r| r.connect_us.is_some()).collect();
            // Kept alive: the first request opens the connection, the others reuse it; closed
            // after each answer: every request waits for a new one.
            let want: Vec<bool> = (0..6).map(|i| once || i == 0).collect();
            assert_eq!(opened, want, "{way}, closed after each answer: {once}");
            for r in &recs {
                assert_eq!(r.error, None, "{way}: {r:?}");
                let waited = r.first_byte_us.unwrap() - r.actual_us;
                assert!(
                    r.connect_us.is_none_or(|c| u64::from(c) <= waited),
                    "{way}: connect longer than the wait for the answer: {r:?}"
                );
            }
        }
    }
}
