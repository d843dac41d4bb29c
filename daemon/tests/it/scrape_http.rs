//! End to end: a local HTTP server serves a changing vLLM exposition; the
//! scraper, signal mapping and windowing must produce the rates and window
//! quantiles that follow from it. Also: servers that answer badly.

// Compared values are exact binary fractions.
#![allow(clippy::float_cmp)]

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use inferscope::scrape::{ScrapeConfig, ScrapeError, Scraper, ServerKind, WindowBuilder, spawn};

/// Starts `app` on 127.0.0.1:0 and returns its base URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// The exposition at scrape number `step` (1-based): every scrape adds 1000
/// prompt tokens and 10 fast TTFT observations (0.2 s); from step 2 on, also
/// 20 slow ones (2 s).
fn exposition(step: u64) -> String {
    let fast = 10 * step;
    let slow = 20 * step.saturating_sub(1);
    let lab = r#"engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct""#;
    let mut s = String::new();
    writeln!(
        s,
        "# HELP vllm:num_requests_running Number of requests in model execution batches."
    )
    .unwrap();
    writeln!(
        s,
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{lab}}} {}.0",
        5 + step
    )
    .unwrap();
    writeln!(
        s,
        "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{lab}}} {}",
        step as f64 / 10.0
    )
    .unwrap();
    writeln!(
        s,
        "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{{lab}}} {}.0",
        1000 * step
    )
    .unwrap();
    writeln!(
        s,
        "# TYPE vllm:prompt_tokens_created gauge\nvllm:prompt_tokens_created{{{lab}}} 1.73e+09"
    )
    .unwrap();
    writeln!(s, "# TYPE vllm:time_to_first_token_seconds histogram").unwrap();
    for (le, count) in [
        ("0.1", 0),
        ("0.25", fast),
        ("1.0", fast),
        ("2.5", fast + slow),
        ("+Inf", fast + slow),
    ] {
        writeln!(
            s,
            "vllm:time_to_first_token_seconds_bucket{{{lab},le=\"{le}\"}} {count}.0"
        )
        .unwrap();
    }
    writeln!(
        s,
        "vllm:time_to_first_token_seconds_count{{{lab}}} {}.0",
        fast + slow
    )
    .unwrap();
    writeln!(
        s,
        "vllm:time_to_first_token_seconds_sum{{{lab}}} {}",
        0.2 * fast as f64 + 2.0 * slow as f64
    )
    .unwrap();
    s
}

#[tokio::test]
async fn rates_and_window_quantiles_end_to_end() {
    let step = Arc::new(AtomicU64::new(0));
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let n = step.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    exposition(n),
                )
            }
        }),
    );
    let url = serve(app).await;
    let mut config = ScrapeConfig::new(url);
    config.interval = Duration::from_millis(100);
    let mut task = spawn(config, 8).unwrap();

    let mut window = WindowBuilder::new();
    for _ in 0..3 {
        let scrape = tokio::time::timeout(Duration::from_secs(5), task.rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(scrape.line_errors.is_empty(), "{:?}", scrape.line_errors);
        let signals = scrape.signals.unwrap();
        assert_eq!(signals.server, ServerKind::Vllm);
        window.push(scrape.instant, signals);
    }
    let w = window.finish().unwrap();
    assert_eq!(task.dropped(), 0);
    let secs = w.elapsed.as_secs_f64();
    assert!(secs >= 0.15, "two 100 ms intervals, got {secs}");
    // Scrapes 1 -> 3: 2000 prompt tokens.
    let prompt = w.prompt_tokens_per_s.unwrap();
    assert!(
        (prompt * secs - 2000.0).abs() < 1e-6,
        "{prompt}/s over {secs}s"
    );
    assert_eq!(w.running.unwrap().last, 8.0);
    assert_eq!(w.kv_usage.unwrap().max, 0.3);
    // In the window: 20 observations in (0.1, 0.25] and 40 in (1.0, 2.5].
    let ttft = w.ttft.unwrap();
    assert_eq!(ttft.count, 60.0);
    assert!(
        (ttft.mean - (20.0 * 0.2 + 40.0 * 2.0) / 60.0).abs() < 1e-9,
        "{ttft:?}"
    );
    assert!((ttft.p50 - 1.375).abs() < 1e-9, "{ttft:?}");
    assert!((ttft.p95 - 2.3875).abs() < 1e-9, "{ttft:?}");
    // The fast-only baseline would have put p50 near 0.175 s: the window must not.
    assert!(ttft.p50 > 1.0);
}

#[tokio::test]
async fn full_channel_counts_dropped_scrapes() {
    let app = Router::new().route("/metrics", get(|| async { exposition(1) }));
    let mut config = ScrapeConfig::new(serve(app).await);
    config.interval = Duration::from_millis(10);
    let task = spawn(config, 1).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(task.dropped() >= 5, "dropped {}", task.dropped());
}

#[tokio::test]
async fn garbage_is_a_clear_error() {
    let app = Router::new()
        .route(
            "/metrics",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain")],
                    "\u{1}\u{0}{{{ ]]] garbage\n<<<>>>\n",
                )
            }),
        )
        .route(
            "/html/metrics",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html")],
                    "<html><body>hi</body></html>",
                )
            }),
        )
        .route(
            "/fail/metrics",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response() }),
        )
        // 4 bytes a line: 400 KB.
        .route("/big/metrics", get(|| async { "x 1\n".repeat(100_000) }))
        .route(
            "/slow/metrics",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "x 1\n"
            }),
        );
    let url = serve(app).await;
    let fetch = |path: &str, tweak: fn(&mut ScrapeConfig)| {
        let mut config = ScrapeConfig::new(format!("{url}{path}"));
        tweak(&mut config);
        async move { Scraper::new(config).unwrap().fetch().await }
    };

    let err = fetch("/metrics", |_| {}).await.unwrap_err();
    assert!(matches!(err, ScrapeError::NotPrometheus { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("not Prometheus text: line 1: invalid metric name"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");

    let err = fetch("/html/metrics", |_| {}).await.unwrap_err();
    assert!(
        err.to_string().contains("content type \"text/html\""),
        "{err}"
    );

    let err = fetch("/fail/metrics", |_| {}).await.unwrap_err();
    assert!(
        matches!(err, ScrapeError::Status { status: 500, .. }),
        "{err}"
    );

    let err = fetch("/big/metrics", |c| c.body_limit = 256 << 10)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ScrapeError::TooLarge { limit: 262_144, .. }),
        "{err}"
    );
    // Under the limit the same body parses.
    assert_eq!(
        fetch("/big/metrics", |_| {}).await.unwrap().sample_count(),
        100_000
    );

    let err = fetch("/slow/metrics", |c| c.timeout = Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, ScrapeError::Timeout { .. }), "{err}");
}

#[tokio::test]
async fn connection_refused_is_one_line() {
    // A port that was just free: bind, note it, close.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let scraper = Scraper::new(ScrapeConfig::new(format!("http://{addr}"))).unwrap();
    let scrape = scraper.scrape().await;
    let err = scrape.signals.unwrap_err();
    assert_eq!(
        err,
        ScrapeError::ConnectionRefused {
            url: format!("http://{addr}/metrics")
        }
    );
    assert!(
        err.to_string()
            .starts_with(&format!("http://{addr}/metrics: connection refused")),
        "{err}"
    );
}

#[tokio::test]
async fn tgi_kv_usage_from_info_endpoint() {
    const TGI: &str = include_str!("../fixtures/tgi_metrics.txt");
    let info_requests = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&info_requests);
    let with_info = Router::new()
        .route("/metrics", get(|| async { TGI }))
        .route(
            "/info",
            get(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async { r#"{"model_id":"bigscience/bloom-560m","max_batch_total_tokens":204800}"# }
            }),
        );
    let scraper = Scraper::new(ScrapeConfig::new(serve(with_info).await)).unwrap();
    for _ in 0..3 {
        let signals = scraper.scrape().await.signals.unwrap();
        assert_eq!(signals.server, ServerKind::Tgi);
        // tgi_batch_current_max_tokens 51200 of 204800.
        assert_eq!(signals.kv_usage, Some(0.25));
    }
    assert_eq!(
        info_requests.load(Ordering::SeqCst),
        1,
        "/info is asked once"
    );

    // Without /info and without the option there is no KV usage, and no error.
    let without = Router::new().route("/metrics", get(|| async { TGI }));
    let scraper = Scraper::new(ScrapeConfig::new(serve(without).await)).unwrap();
    let signals = scraper.scrape().await.signals.unwrap();
    assert_eq!((signals.kv_usage, signals.waiting), (None, Some(9.0)));
}

/// A raw TCP server that answers every connection with `reply` (after
/// reading the request head), for responses axum would not produce.
async fn raw_server(reply: &'static [u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(reply).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn not_http_and_streamed_oversize_bodies() {
    // Not HTTP at all.
    let url = raw_server(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff garbage\r\n\r\n").await;
    let err = Scraper::new(ScrapeConfig::new(url))
        .unwrap()
        .fetch()
        .await
        .unwrap_err();
    assert!(matches!(err, ScrapeError::Http { .. }), "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");

    // Chunked, no Content-Length: the limit applies while streaming.
    let chunked: &'static [u8] = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n\
             {len:x}\r\n{body}\r\n0\r\n\r\n",
            len = 8000,
            body = "x 1\n".repeat(2000)
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let url = raw_server(chunked).await;
    let mut config = ScrapeConfig::new(url.clone());
    config.body_limit = 4096;
    let err = Scraper::new(config).unwrap().fetch().await.unwrap_err();
    assert!(
        matches!(err, ScrapeError::TooLarge { limit: 4096, .. }),
        "{err}"
    );
    let exp = Scraper::new(ScrapeConfig::new(url))
        .unwrap()
        .fetch()
        .await
        .unwrap();
    assert_eq!(exp.sample_count(), 2000);
}
