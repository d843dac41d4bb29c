//! Helpers shared by the `sim_*` integration tests: start a simulator on an ephemeral port and
//! talk HTTP/1.1 to it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use inferscope::sim::{self, SimConfig, SimServer};

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub async fn start(cfg: SimConfig) -> SimServer {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    sim::start(cfg, l).await.unwrap()
}

/// A profile with a small vector corpus so tests start fast.
pub fn profile(name: &str) -> SimConfig {
    let mut c = sim::profile(name).unwrap();
    c.vector.corpus_size = 500;
    c
}

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub async fn post(c: &HttpClient, url: &str, body: impl Into<Bytes>) -> (u16, String) {
    let req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

pub async fn post_json(
    c: &HttpClient,
    url: &str,
    v: &serde_json::Value,
) -> (u16, serde_json::Value) {
    let (s, b) = post(c, url, v.to_string()).await;
    (
        s,
        serde_json::from_str(&b).unwrap_or(serde_json::Value::Null),
    )
}

pub async fn get(c: &HttpClient, url: &str) -> (u16, String) {
    let resp = c.get(url.parse().unwrap()).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// A streamed response: each SSE `data:` payload with its arrival time.
pub struct Streamed {
    pub status: u16,
    pub events: Vec<(Instant, String)>,
}

/// Streams `body` to `url`, stopping after `stop_after` events (None = to the end).
pub async fn stream(
    c: &HttpClient,
    url: &str,
    body: &serde_json::Value,
    stop_after: Option<usize>,
) -> Streamed {
    let req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut buf = String::new();
    let mut events = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.unwrap().into_data() else {
            continue;
        };
        let now = Instant::now();
        buf.push_str(std::str::from_utf8(&data).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let ev: String = buf.drain(..end + 2).collect();
            if let Some(d) = ev.trim_end().strip_prefix("data: ") {
                events.push((now, d.to_owned()));
            }
        }
        if stop_after.is_some_and(|n| events.len() >= n) {
            // Dropping the body closes the connection mid-stream.
            return Streamed { status, events };
        }
    }
    Streamed { status, events }
}

/// Polls `f` until it is true or `timeout` passes.
pub async fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}

pub fn metric(text: &str, name: &str) -> f64 {
    sim::exposition::sample(text, name).unwrap_or_else(|| panic!("{name} missing from /metrics"))
}
