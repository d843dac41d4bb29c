//! Attribution of vector services: a vector phase lists no token signal as missing; an index
//! rebuild is `vector_index` by the server's tail, without client records, and only with the
//! service's evidence of the rebuild.

use super::tests::{assert_quiet_baseline, evidence_names, fixture, peak};
use super::*;

/// A vector phase has no first token and no token gaps: the signals of generated tokens are not
/// missing there, while the sources that are really off still are.
#[test]
fn a_vector_phase_lists_no_token_signal_as_missing() {
    let mut t = fixture("cpu_runqueue");
    for w in &mut t.windows {
        if let Some(l) = w.load.as_mut() {
            l.endpoint = Some(crate::measure::Endpoint::VectorSearch);
            l.ttft_ms = None;
            l.itl_ms = None;
        }
        if let Some(n) = w.net.as_mut() {
            n.transit_p50_ms = None;
        }
        // Recorded without the server's metrics: those are missing for real.
        w.server = None;
    }
    let a = attribute(&t);
    let token = [
        "ttft",
        "itl",
        "client_server_gap_ms",
        "frontend_ms",
        "server_tpot_ms",
        "queue_share",
    ];
    for p in &a.phases {
        let missing = p.missing.join("\n");
        for s in token {
            assert!(!missing.contains(s), "{}: {s} in {missing}", p.name);
        }
    }
    for w in &a.windows {
        for m in &w.verdict.missing {
            assert!(!token.iter().any(|s| m.signal.contains(s)), "{m}");
        }
    }
    let missing = peak(&a).missing.join("\n");
    assert!(missing.contains("no server metrics"), "{missing}");
    // The same windows as chat requests lack their first token: that is missing.
    for w in &mut t.windows {
        if let Some(l) = w.load.as_mut() {
            l.endpoint = Some(crate::measure::Endpoint::Chat);
        }
    }
    let a = attribute(&t);
    assert!(
        a.windows
            .iter()
            .any(|w| w.verdict.missing.iter().any(|m| m.signal == "ttft_p50_ms")),
        "a chat window without TTFT names it missing"
    );
}

/// A server's run queue that stays quiet: its threads barely wait for a CPU.
fn quiet_runq() -> crate::collect::timeline::RunqSignals {
    crate::collect::timeline::RunqSignals {
        samples: 100,
        p50_us: 5.0,
        p99_us: 200.0,
        mean_us: 20.0,
        total_ms: 2.0,
        ..Default::default()
    }
}

/// A vector service as the node agent sees it: no client's records, only the kernel's timing
/// of its exchanges and the service's own counters. A rebuild during the peak makes the
/// slowest searches 10x slower: `vector_index`, by its `server tail`. The same tail on a
/// server that answered no search (an engine) is not `vector_index`.
#[test]
fn a_vector_service_rebuilding_is_vector_index_without_client_records() {
    use crate::collect::timeline::{NetSignals, ServerSignals};
    let timeline = |searches_per_s: f64| {
        let mut t = Timeline::new(0, 1000);
        for i in 0..20u64 {
            let peak = i >= 10;
            let w = t.at(i * 1000 + 500);
            w.phase = Some(if peak { "peak" } else { "baseline" }.into());
            w.net = Some(NetSignals {
                exchanges: 50,
                server_first_token_p50_ms: Some(4.0),
                exchange_p50_ms: Some(4.0 + (i % 3) as f64 * 0.1),
                exchange_p99_ms: Some(if peak { 80.0 } else { 8.0 + (i % 2) as f64 }),
                srtt_mean_us: Some(30.0),
                ..NetSignals::default()
            });
            w.runq = Some(quiet_runq());
            w.server = Some(ServerSignals {
                vector_searches_per_s: Some(searches_per_s),
                index_rebuild: Some(if peak && searches_per_s > 0.0 {
                    1.0
                } else {
                    0.0
                }),
                ..ServerSignals::default()
            });
        }
        t
    };
    let a = attribute(&timeline(48.0));
    assert_quiet_baseline(&a);
    let p = peak(&a);
    assert_eq!(p.dominant, Cause::VectorIndex, "{:#?}", p.shares);
    let names = evidence_names(p);
    for s in ["kernel_exchange_p99_ms", "index_rebuild", "vector_share"] {
        assert!(names.contains(&s), "{s} not in {names:?}");
    }
    let engine = attribute(&timeline(0.0));
    assert_ne!(peak(&engine).dominant, Cause::VectorIndex);
    // A server without metrics: nothing says it is a vector service, so its tail is not one.
    let mut unknown = timeline(48.0);
    for w in &mut unknown.windows {
        w.server = None;
    }
    assert_ne!(peak(&attribute(&unknown)).dominant, Cause::VectorIndex);
}

/// Searches sent to a vector service that exports no index metrics (Chroma): their slowest
/// answers 10x slower in the peak, the CPUs and the network flat. Without evidence of an index
/// rebuild that tail is not `vector_index` (it is the load's), and the peak says the rebuild
/// evidence was missing; the same windows from a service that says its index was being
/// rebuilt are `vector_index`.
#[test]
fn a_search_tail_is_vector_index_only_with_the_services_rebuild_evidence() {
    use crate::collect::timeline::{LoadSignals, NetSignals, Quantiles, ServerSignals};
    let timeline = |rebuild_said: bool| {
        let mut t = Timeline::new(0, 1000);
        for i in 0..20u64 {
            let peak = i >= 10;
            let w = t.at(i * 1000 + 500);
            w.phase = Some(if peak { "peak" } else { "baseline" }.into());
            let p99 = if peak { 300.0 } else { 6.0 + (i % 2) as f64 };
            w.load = Some(LoadSignals {
                requests: 30,
                achieved_rps: 30.0,
                target_rps: Some(30.0),
                endpoint: Some(crate::measure::Endpoint::VectorSearch),
                e2e_ms: Some(Quantiles {
                    p50: 5.0 + (i % 3) as f64 * 0.1,
                    p95: p99 * 0.8,
                    p99,
                    max: p99 * 1.1,
                }),
                send_lag_ms: Some(Quantiles::default()),
                ..LoadSignals::default()
            });
            w.net = Some(NetSignals {
                exchanges: 30,
                exchange_p50_ms: Some(4.0),
                exchange_p99_ms: Some(p99 - 1.0),
                srtt_mean_us: Some(30.0),
                ..NetSignals::default()
            });
            w.runq = Some(quiet_runq());
            w.server = rebuild_said.then(|| ServerSignals {
                vector_searches_per_s: Some(30.0),
                index_rebuild: Some(if peak { 1.0 } else { 0.0 }),
                ..ServerSignals::default()
            });
        }
        t
    };
    let chroma = attribute(&timeline(false));
    let p = peak(&chroma);
    assert_ne!(p.dominant, Cause::VectorIndex, "{:#?}", p.shares);
    // What the report shows: the rebuild evidence could have changed the verdict.
    let missing = p.missing_decisive.join("\n");
    assert!(missing.contains("index rebuild"), "{missing}");
    let said = attribute(&timeline(true));
    assert_eq!(
        peak(&said).dominant,
        Cause::VectorIndex,
        "{:#?}",
        peak(&said).shares
    );
}
