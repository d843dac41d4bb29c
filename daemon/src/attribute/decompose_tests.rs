//! The per-request decomposition adds up, ranks never put a winner below its runner-up, and
//! two faults at once are both named.

use super::tests::fixture;
use super::*;
use crate::collect::timeline::{
    KernelParts, RequestParts, RunqSignals, ServerSignals, Timeline, Window,
};

/// A request whose first token took `lag + up + server + down` ms, all seen by the kernel.
fn request(lag: f64, up: f64, server: f64, down: f64) -> RequestParts {
    let ttft = lag + up + server + down;
    RequestParts {
        ttft_ms: Some(ttft),
        e2e_ms: ttft + 100.0,
        send_lag_ms: lag,
        kernel: Some(KernelParts {
            to_server_ms: up,
            server_first_ms: server,
            to_client_first_ms: down,
            server_last_ms: server + 99.0,
            to_client_last_ms: down + 1.0,
        }),
    }
}

/// A window of `phase` whose server queued requests `queue` ms on average and whose threads
/// waited `runq_us` µs per wake-up, with `requests`.
fn window(phase: &str, i: u64, queue: f64, runq_us: f64, requests: Vec<RequestParts>) -> Window {
    Window {
        start_unix_ms: i * 1000,
        len_ms: 1000,
        phase: Some(phase.to_owned()),
        server: Some(ServerSignals {
            queue_time_mean_ms: Some(queue),
            ..ServerSignals::default()
        }),
        runq: Some(RunqSignals {
            samples: 100,
            mean_us: runq_us,
            ..RunqSignals::default()
        }),
        requests,
        ..Window::default()
    }
}

#[test]
fn known_per_request_parts_come_back_exactly() {
    // Baseline: lag 0.5, up 1, server 20 (cpu wait 3 x 1 ms, queue 2, working 15), down 1.
    // Peak: lag 0.5, up 5, server 200 (cpu wait 3 x 2 ms, queue 150, working 44), down 3.
    let mut t = Timeline::new(0, 1000);
    for i in 0..5 {
        t.windows.push(window(
            "baseline",
            i,
            2.0,
            1000.0,
            vec![request(0.5, 1.0, 20.0, 1.0); 8],
        ));
    }
    for i in 5..10 {
        t.windows.push(window(
            "peak",
            i,
            150.0,
            2000.0,
            vec![request(0.5, 5.0, 200.0, 3.0); 8],
        ));
    }
    let a = attribute(&t);
    let d = a.phase("peak").unwrap().decomposition.clone().unwrap();
    assert_eq!(d.basis, Basis::Requests);
    assert_eq!(
        (d.baseline_ms, d.value_ms, d.increase_ms),
        (22.5, 208.5, 186.0)
    );
    let parts = [
        d.loadgen_lag_ms,
        d.to_server_ms,
        d.cpu_scheduling_ms,
        d.queue_ms,
        d.server_compute_ms,
        d.to_client_ms,
    ];
    let want = [0.0, 4.0, 3.0, 148.0, 29.0, 2.0];
    for (got, want) in parts.iter().zip(want) {
        assert!((got.unwrap() - want).abs() < 1e-9, "{d:#?}");
    }
    assert!(d.unexplained_ms.abs() < 1e-9, "{d:#?}");
    assert!((d.sum_ms() - d.increase_ms).abs() < 1e-9);
    assert!(d.fell_ms.abs() < 1e-12, "{d:#?}");
    assert!((d.band.as_ref().unwrap().kernel_share - 1.0).abs() < 1e-12);
    let tail = a.phase("peak").unwrap().tail_decomposition.clone().unwrap();
    assert!((tail.sum_ms() - tail.increase_ms).abs() < 1e-9);
}

#[test]
fn a_part_that_fell_is_netted_and_what_nothing_saw_is_unexplained() {
    // Transit fell by 2 ms while the server's time rose by 100; half the peak's requests were
    // not seen by the kernel, and the server exports no TTFT metric to stand in.
    let mut t = Timeline::new(0, 1000);
    for i in 0..5 {
        t.windows.push(window(
            "baseline",
            i,
            0.0,
            0.0,
            vec![request(0.0, 2.0, 20.0, 2.0); 6],
        ));
    }
    for i in 5..10 {
        let mut rs = vec![request(0.0, 1.0, 120.0, 1.0); 6];
        for r in rs.iter_mut().skip(3) {
            r.kernel = None;
        }
        t.windows.push(window("peak", i, 0.0, 0.0, rs));
    }
    let d = attribute(&t)
        .phase("peak")
        .unwrap()
        .decomposition
        .clone()
        .unwrap();
    assert!((d.increase_ms - 98.0).abs() < 1e-9, "{d:#?}");
    assert!((d.sum_ms() - d.increase_ms).abs() < 1e-9, "{d:#?}");
    for (name, v) in d.parts() {
        assert!(v >= 0.0, "{name}: {d:#?}");
    }
    assert!(
        d.unexplained_ms > 0.0 && d.unexplained_ms <= d.increase_ms,
        "{d:#?}"
    );
    assert!(d.fell_ms > 0.0, "{d:#?}");
}

/// The fixtures' names.
const FIXTURES: [&str; 10] = [
    "kv_cache",
    "queue",
    "gpu_memory",
    "cpu_runqueue",
    "network",
    "loadgen",
    "healthy_low_load",
    "missing_evidence",
    "llamacpp_compute",
    "llamacpp_compute_nometrics",
];

#[test]
fn no_winner_ranks_below_its_runner_up() {
    for name in FIXTURES {
        let a = attribute(&fixture(name));
        let named = |c: Cause| !matches!(c, Cause::None | Cause::Unexplained);
        for w in a.windows.iter().filter(|w| named(w.verdict.cause)) {
            for r in &w.verdict.runners_up {
                assert!(
                    r.confidence <= w.verdict.confidence,
                    "{name} window {}: {:#?}",
                    w.index,
                    w.verdict
                );
            }
        }
        for p in a.phases.iter().filter(|p| named(p.dominant)) {
            for r in &p.runners_up {
                assert!(
                    r.confidence <= p.confidence + 1e-9,
                    "{name} phase {}: {} {:.3} vs {:.3}",
                    p.name,
                    r.cause,
                    r.confidence,
                    p.confidence
                );
            }
        }
    }
}

#[test]
fn kv_pressure_and_a_slow_link_at_once_name_both_with_their_parts() {
    // The KV-pressure time line with the congested link's network signals, and requests whose
    // server time and transit both rose.
    let mut t = fixture("kv_cache");
    let net = fixture("network");
    for (i, w) in t.windows.iter_mut().enumerate() {
        let peak = w.phase.as_deref() == Some("peak");
        let from = if peak { 6 + (i - 6) % 7 } else { i };
        w.net.clone_from(&net.windows[from].net);
        // The window's transit is its requests' (150 ms up, 350 ms down).
        if let Some(n) = w.net.as_mut().filter(|_| peak) {
            n.transit_p50_ms = Some(500.0);
        }
        w.requests = if peak {
            vec![request(0.1, 150.0, 1000.0, 350.0); 20]
        } else {
            vec![request(0.1, 0.5, 60.0, 0.5); 20]
        };
    }
    let a = attribute(&t);
    let p = a.phase("peak").unwrap();
    let named: Vec<Cause> = p.causes.iter().map(|c| c.cause).collect();
    assert_eq!(named.len(), 2, "{:#?}", p.causes);
    assert!(
        named.contains(&Cause::KvCache) && named.contains(&Cause::Network),
        "{:#?} {:#?}",
        p.causes,
        p.runners_up
    );
    for c in &p.causes {
        assert!(c.part >= causes::SECOND_CAUSE_MIN_PART, "{:#?}", p.causes);
    }
    let kv = p.causes.iter().find(|c| c.cause == Cause::KvCache).unwrap();
    assert!((kv.part - 0.65).abs() < 0.02, "{:#?}", p.causes);
}
