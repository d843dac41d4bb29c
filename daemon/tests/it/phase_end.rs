//! Phase end is enforced: with `when_capped: wait` a phase held back by its in-flight cap
//! stops dispatching at its planned end, the arrivals it could not send count as dropped,
//! its `elapsed` is not stretched, and the next phase starts on time (no catch-up burst).

use crate::hung_support;
use hung_support::hung_server;

use std::{path::Path, time::Duration};

use inferscope::loadgen::{self, Options, Plan, engine::END_SLACK};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_phase_stops_at_its_end_and_counts_the_rest_as_dropped() {
    let yaml = format!(
        "target: {}\ntimeout: 3s\ngrace: 0s\nphases:\n\
         \x20 - name: held\n    duration: 1s\n    load: {{shape: constant, rate: 20}}\n\
         \x20   max_in_flight: 1\n    when_capped: wait\n    request: {{endpoint: http, path: /}}\n\
         \x20 - name: next\n    duration: 1s\n    load: {{shape: constant, rate: 10}}\n\
         \x20   request: {{endpoint: http, path: /}}\n",
        hung_server().0
    );
    let s = Plan::from_yaml(&yaml, "s.yaml", Path::new(".")).unwrap();
    let t = std::time::Instant::now();
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let held = &r.phases[0];
    // One request took the only permit and hung; the other 19 arrivals waited until the
    // phase's end and were never sent.
    assert_eq!(held.counts.scheduled, 20, "{:?}", held.counts);
    assert_eq!(held.counts.dropped, 19, "{:?}", held.counts);
    assert_eq!(held.counts.finished, 1, "{:?}", held.counts);
    assert!(held.elapsed_s <= 1.0 + 1e-9, "{}", held.elapsed_s);
    // The next phase started on time: its 10 requests were all sent during its second.
    let next = &r.phases[1];
    assert_eq!(next.counts.scheduled, 10, "{:?}", next.counts);
    assert_eq!(next.counts.dropped, 0);
    let late = r
        .records
        .iter()
        .filter(|rec| rec.phase == 1)
        .map(|rec| rec.actual_us.saturating_sub(rec.intended_us))
        .max()
        .unwrap();
    assert!(
        late < 200_000,
        "phase 2 sent {late} us late: a catch-up burst"
    );
    // Whole run: 2 s of phases plus the last requests' 3 s timeout, not 20 x 3 s.
    assert!(t.elapsed() < Duration::from_secs(7), "{:?}", t.elapsed());
}

/// An uncapped dispatcher that falls behind its schedule (40,000 arrivals a second on one
/// thread) still sends nothing after the phase's end (and the jitter it allows,
/// `END_SLACK`): what it had not sent by then is dropped.
#[test]
fn a_dispatcher_that_falls_behind_sends_nothing_after_the_phase_end() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cfg = inferscope::sim::profile("healthy").unwrap();
        cfg.vector.corpus_size = 10;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sim = inferscope::sim::start(cfg, l).await.unwrap();
        let yaml = format!(
            "target: {}\ntimeout: 5s\ngrace: 2s\nphases:\n\
             \x20 - name: flood\n    duration: 500ms\n    load: {{shape: constant, rate: 40000}}\n\
             \x20   request: {{endpoint: http, path: /health}}\n",
            sim.url()
        );
        let s = Plan::from_yaml(&yaml, "s.yaml", Path::new(".")).unwrap();
        let r = loadgen::run(&s, Options::new(), CancellationToken::new())
            .await
            .unwrap();
        let c = &r.phases[0].counts;
        assert_eq!(c.scheduled, 20_000, "{c:?}");
        let start = r.records.iter().map(|x| x.intended_us).min().unwrap();
        let end = start + 500_000;
        let after: Vec<u64> = r
            .records
            .iter()
            .filter(|x| x.actual_us > end + END_SLACK.as_micros() as u64 + 10_000)
            .map(|x| x.actual_us - end)
            .collect();
        assert!(
            after.is_empty(),
            "{} requests sent after the phase end (up to {} us after); {c:?}",
            after.len(),
            after.iter().max().unwrap()
        );
        assert_eq!(c.finished + c.dropped, c.scheduled, "{c:?}");
        sim.shutdown().await.unwrap();
    });
}
