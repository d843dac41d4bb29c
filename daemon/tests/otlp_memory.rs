//! OTLP export with the collector down costs bounded memory and counts what it drops. A binary
//! of its own: it measures this process's memory, which other tests would share.

#[path = "it/otlp_fixtures.rs"]
mod otlp_fixtures;

use std::time::{Duration, Instant};

use inferscope::export::otlp::{OtlpExporter, Protocol};
use otlp_fixtures::{config, labels, request, resource, window};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_down_costs_bounded_memory_and_counts_drops() {
    // A port that was just free: connections are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = config(&format!("http://127.0.0.1:{port}"), Protocol::Grpc);
    cfg.max_queue_size = 256;
    cfg.max_export_batch_size = 256;
    cfg.timeout = Duration::from_millis(500);
    let exporter = OtlpExporter::start(&cfg, &resource()).unwrap();

    let warm = 2_000;
    let total = 30_000;
    for i in 0..warm {
        exporter.trace_request(&request(i), &labels());
    }
    let before = rss_kib();
    let t0 = Instant::now();
    for i in warm..total {
        exporter.record_request(&request(i), &labels());
        exporter.trace_request(&request(i), &labels());
        if i % 1000 == 0 {
            exporter.record_window(&window(u64::from(i / 1000)), &labels());
        }
    }
    let recording = t0.elapsed();
    let after = rss_kib();
    // 140,000 spans of ~1 KiB each would be >100 MiB if queued without a cap.
    let growth_kib = after.saturating_sub(before);
    let t1 = Instant::now();
    let stats = tokio::task::spawn_blocking(move || exporter.shutdown())
        .await
        .unwrap()
        .unwrap();
    let shutdown = t1.elapsed();
    eprintln!(
        "collector down: {total} requests recorded in {recording:?}, RSS {before} -> {after} KiB, \
         shutdown {shutdown:?}, {stats:?}"
    );
    assert_eq!(stats.spans_submitted, u64::from(total) * 5);
    assert_eq!(stats.spans_exported, 0);
    assert_eq!(stats.spans_dropped(), stats.spans_submitted);
    assert!(
        stats.spans_queue_dropped > stats.spans_submitted / 2,
        "{stats:?}"
    );
    assert!(stats.metric_exports_failed >= 1, "{stats:?}");
    assert_eq!(stats.metric_exports_ok, 0);
    assert!(growth_kib < 24 * 1024, "RSS grew by {growth_kib} KiB");
    // And in absolute terms: a queue sized for the flood would have been allocated up front.
    assert!(after < 96 * 1024, "RSS {after} KiB");
    // The run goes on: recording never waited for the collector.
    assert!(recording < Duration::from_secs(20), "{recording:?}");
    assert!(shutdown < Duration::from_secs(30), "{shutdown:?}");
}
