//! A closed loop's `ramp_up`: users start spread over the ramp (not all at the phase's start),
//! the requests they start during it are marked and kept out of the phase's percentiles (or
//! counted, when asked), and the `fixed` sim exports its own exact lateness beside it.

use std::path::Path;

use inferscope::{
    loadgen::{self, Options, Plan},
    measure::{RequestRecord, StressReport},
};
use tokio_util::sync::CancellationToken;

use crate::sim_common::{metric, profile, start};

const USERS: usize = 40;

async fn ramped_run(url: &str, ramp: &str) -> StressReport {
    let yaml = format!(
        "target: {url}\nseed: 3\nphases:\n  - name: ramped\n    duration: 3s\n    \
         load: {{shape: concurrency, users: {USERS}}}\n    ramp_up: {ramp}\n    \
         request: {{endpoint: completions, model: inferscope-sim, max_tokens: 4}}\n"
    );
    let plan = Plan::from_yaml(&yaml, "ramp.yaml", Path::new(".")).unwrap();
    loadgen::run(&plan, Options::new(), CancellationToken::new())
        .await
        .unwrap()
}

/// µs since the phase's start (its first request) that `r` was sent.
fn sent_after_start(recs: &[RequestRecord], r: &RequestRecord) -> u64 {
    let first = recs.iter().map(|r| r.actual_us).min().unwrap();
    r.actual_us - first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_start_over_the_ramp_and_its_requests_are_reported_apart() {
    let mut cfg = profile("fixed");
    cfg.fixed = Some(inferscope::sim::config::FixedTiming {
        ttft_ms: 20.0,
        itl_ms: 5.0,
    });
    let srv = start(cfg).await;
    let r = ramped_run(&srv.url(), "1s").await;
    let p = &r.phases[0];
    let recs = &r.records;
    assert!(!recs.is_empty());
    // Linear over 1 s: about 4 of the 40 users start in the first 100 ms (all 40 without it).
    let early = recs
        .iter()
        .filter(|x| sent_after_start(recs, x) < 100_000)
        .count();
    assert!(early <= 12, "{early} requests in the first 100 ms");
    // The ramp's requests are marked, and only they (50 ms of slack around its end).
    for x in recs {
        let at = sent_after_start(recs, x);
        if at < 950_000 {
            assert!(x.ramp_up, "a request {at} µs into the ramp is not marked");
        } else if at > 1_050_000 {
            assert!(
                !x.ramp_up,
                "a request {at} µs in, after the ramp, is marked"
            );
        }
    }
    let ramp = p.ramp.as_ref().expect("the report marks the ramp");
    let marked = recs.iter().filter(|x| x.ramp_up).count() as u64;
    assert_eq!(
        (
            ramp.ramp_up_s,
            ramp.strategy.as_str(),
            ramp.default,
            ramp.counted
        ),
        (1.0, "linear", false, false)
    );
    assert_eq!(ramp.requests, marked);
    assert!(marked > 0 && ramp.ttft_ms.count > 0);
    // The phase's TTFT percentiles hold the other requests only.
    assert_eq!(p.latency_ms["ttft"].count + marked, p.counts.ok, "{p:#?}");
    assert_eq!(p.counts.errors.len(), 0, "{:?}", p.counts.errors);
    // Each user opened its own connection once (the sim keeps it alive): the user's first
    // request waited for it, and that wait is the phase's `connect`, ramp or not.
    let connect = &p.latency_ms["connect"];
    let opened = recs.iter().filter(|x| x.connect_us.is_some()).count() as u64;
    assert_eq!(connect.count, opened);
    assert!(
        (USERS as u64..=USERS as u64 + p.counts.reconnected).contains(&opened),
        "{opened} connections opened by {USERS} users"
    );

    // The sim's own exact lateness, first tokens and later ones apart.
    let text = srv.metrics_text();
    let firsts = metric(&text, "inferscope_sim_ttft_lateness_seconds_count");
    let laters = metric(&text, "inferscope_sim_itl_lateness_seconds_count");
    assert!(
        (firsts - p.counts.ok as f64).abs() <= USERS as f64,
        "{firsts}"
    );
    assert!(
        (laters - 3.0 * firsts).abs() <= 3.0 * USERS as f64,
        "{laters}"
    );
    let p50 = metric(
        &text,
        "inferscope_sim_ttft_lateness_seconds{model_name=\"inferscope-sim\",quantile=\"0.5\"}",
    );
    assert!((0.0..0.05).contains(&p50), "TTFT lateness p50 {p50}");

    // `count: true` keeps them in the percentiles; the ramp is still reported.
    let r = ramped_run(
        &srv.url(),
        "{duration: 500ms, strategy: exponential, count: true}",
    )
    .await;
    let p = &r.phases[0];
    let ramp = p.ramp.as_ref().unwrap();
    assert_eq!(
        (ramp.strategy.as_str(), ramp.counted, ramp.requests),
        ("exponential", true, 0)
    );
    assert!(r.records.iter().all(|x| !x.ramp_up));
    assert_eq!(p.latency_ms["ttft"].count, p.counts.ok);
    srv.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_bad_ramp_is_refused_in_one_line() {
    let src = |load: &str, ramp: &str| {
        format!(
            "target: http://127.0.0.1:1\nphases:\n  - name: p\n    duration: 5s\n    load: {load}\n    ramp_up: {ramp}\n"
        )
    };
    let err = |s: String| {
        Plan::from_yaml(&s, "t.yaml", Path::new("."))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let users = "{shape: concurrency, users: 4}";
    assert_eq!(err(src(users, "2s")), "");
    for (load, ramp, says) in [
        (users, "5s", "shorter than the phase's duration"),
        ("{shape: constant, rate: 2}", "2s", "closed loop"),
        (
            users,
            "{duration: 1s, strategy: log}",
            "unknown variant `log`",
        ),
        (users, "{duration: 1s, users: 3}", "unknown field `users`"),
        (users, "soon", "ramp_up: bad duration \"soon\""),
    ] {
        let e = err(src(load, ramp));
        assert!(e.starts_with("t.yaml:") && e.contains(says), "{ramp}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}
