//! Coordinated omission: a 1 s server stall must show in the tail latency and in send lag.

use crate::loadgen_support;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use inferscope::loadgen::{self, Options, Plan};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_pause_shows_in_p99_and_send_lag() {
    let (addr, stamps) = loadgen_support::start().await;
    // 200 req/s for 5 s with at most 20 in flight: during the stall the cap fills, and
    // the requests behind it wait (send lag) with their latency clock already running.
    let yaml = format!(
        "target: http://{addr}\nseed: 1\nphases:\n  - name: stall\n    duration: 5s\n    load: {{shape: constant, rate: 200}}\n    max_in_flight: 20\n    request: {{endpoint: http}}\n    slo: [\"e2e_p99 < 100ms\"]\n"
    );
    let scenario = Plan::from_yaml(&yaml, "<test>", Path::new(".")).unwrap();
    let pause_from = Instant::now() + Duration::from_secs(2);
    *stamps.pause.lock().unwrap() = Some((pause_from, pause_from + Duration::from_secs(1)));
    let report = loadgen::run(&scenario, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let p = &report.phases[0];
    let e2e = &p.latency_ms["e2e"];
    let lag = &p.latency_ms["send_lag"];
    eprintln!(
        "e2e p50 {:.1} p99 {:.1} max {:.1} ms; send lag p99 {:.1} max {:.1} ms",
        e2e.p50, e2e.p99, e2e.max, lag.p99, lag.max
    );
    assert_eq!(p.counts.ok, 1000, "{:?}", p.counts);
    // Requests intended during the stall see up to ~1 s; about 20% of all are affected.
    assert!(
        e2e.p99 > 800.0,
        "p99 {} ms must include the 1 s pause",
        e2e.p99
    );
    assert!(e2e.max > 900.0 && e2e.max < 2500.0, "max {}", e2e.max);
    assert!(
        e2e.p50 < 100.0,
        "median {} ms should be unaffected",
        e2e.p50
    );
    assert!(
        lag.p99 > 500.0,
        "send lag p99 {} ms must show the stall",
        lag.p99
    );
    // The SLO gate sees it too.
    assert!(!report.slo_pass);
    assert!(!p.slo[0].pass);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_policy_counts_dropped_requests_during_a_pause() {
    let (addr, stamps) = loadgen_support::start().await;
    let yaml = format!(
        "target: http://{addr}\nseed: 2\nphases:\n  - name: drop\n    duration: 3s\n    load: {{shape: constant, rate: 100}}\n    max_in_flight: 5\n    when_capped: drop\n    request: {{endpoint: http}}\n    slo: [\"drop_rate < 1%\"]\n"
    );
    let scenario = Plan::from_yaml(&yaml, "<test>", Path::new(".")).unwrap();
    let pause_from = Instant::now() + Duration::from_secs(1);
    *stamps.pause.lock().unwrap() = Some((pause_from, pause_from + Duration::from_secs(1)));
    let report = loadgen::run(&scenario, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let c = &report.phases[0].counts;
    eprintln!("{c:?}");
    // About 95 of the 100 requests due during the pause find the cap full.
    assert_eq!(c.scheduled, 300);
    assert_eq!(c.scheduled, c.ok + c.dropped);
    assert!(c.dropped > 70 && c.dropped < 100, "{c:?}");
    // Nothing waited: no send lag, and the drop-rate SLO fails.
    assert!(report.phases[0].latency_ms["send_lag"].max < 50.0);
    assert!(!report.slo_pass);
}
