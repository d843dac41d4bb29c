//! `compute`: an engine whose steps slow down as its batch grows, told apart from a queue, a
//! starved CPU and a healthy engine that batches more, with and without server metrics.

use super::tests::q;
use super::*;
use crate::collect::timeline::{LoadSignals, NetSignals, RunqSignals, ServerSignals, Window};

/// One window of `streams` streams whose tokens come every `itl` ms, the first after `ttft` ms.
struct W {
    phase: &'static str,
    streams: u64,
    itl: f64,
    ttft: f64,
    waiting: f64,
    runq_p99_us: f64,
    /// The share of the time the server's threads wanted a CPU that they waited for one.
    runq_wait_share: f64,
    metrics: bool,
}

impl W {
    fn base(phase: &'static str, streams: u64, itl: f64, ttft: f64) -> Self {
        Self {
            phase,
            streams,
            itl,
            ttft,
            waiting: 0.0,
            runq_p99_us: 400.0,
            runq_wait_share: 0.02,
            metrics: true,
        }
    }

    fn window(&self, i: u64) -> Window {
        // A little noise, so the baseline has a spread like a real one.
        let jitter = 1.0 + 0.04 * ((i % 3) as f64 - 1.0);
        let (itl, ttft) = (self.itl * jitter, self.ttft * jitter);
        let streams = self.streams as f64;
        Window {
            start_unix_ms: i * 1000,
            len_ms: 1000,
            phase: Some(self.phase.to_owned()),
            load: Some(LoadSignals {
                requests: self.streams.max(1) * 2,
                achieved_rps: streams * 2.0,
                in_flight_max: self.streams,
                ttft_ms: Some(q(ttft, ttft * 1.5)),
                itl_ms: Some(q(itl, itl * 3.0)),
                e2e_ms: Some(q(ttft + 64.0 * itl, (ttft + 64.0 * itl) * 1.3)),
                send_lag_ms: Some(q(0.1, 0.5)),
                output_tokens_per_s: streams * 1000.0 / itl,
                endpoint: Some(crate::loadgen::Endpoint::Chat),
                ..LoadSignals::default()
            }),
            server: self.metrics.then(|| ServerSignals {
                running: Some(streams),
                waiting: Some(self.waiting),
                batch_mean: Some(streams),
                tpot_mean_ms: Some(itl),
                prompt_tokens_per_s: Some(streams * 64.0),
                ..ServerSignals::default()
            }),
            runq: Some(RunqSignals {
                samples: 500,
                p50_us: self.runq_p99_us / 10.0,
                p99_us: self.runq_p99_us * jitter,
                mean_us: self.runq_p99_us / 5.0,
                total_ms: 1000.0 * self.runq_wait_share,
                oncpu_ms: Some(1000.0 * (1.0 - self.runq_wait_share)),
                ..RunqSignals::default()
            }),
            net: Some(NetSignals {
                exchanges: self.streams.max(1) * 2,
                srtt_mean_us: Some(50.0 * jitter),
                server_first_token_p50_ms: Some(ttft / 2.0),
                transit_p50_ms: Some(0.5 * jitter),
                ..NetSignals::default()
            }),
            ..Window::default()
        }
    }
}

fn timeline(phases: &[W]) -> Timeline {
    let mut t = Timeline::new(0, 1000);
    let mut i = 0;
    for p in phases {
        for _ in 0..8 {
            t.windows.push(p.window(i));
            i += 1;
        }
    }
    t
}

fn dominant(t: &Timeline, phase: &str) -> PhaseSummary {
    attribute(t).phase(phase).unwrap().clone()
}

/// One thread, free slots: 1 -> 2 -> 4 streams, each step carries them all (llama.cpp's
/// 6.5 -> 13 -> 26 ms), the first token a couple of steps away throughout.
fn saturating(metrics: bool) -> Timeline {
    let phase = |name, streams, itl, ttft| W {
        metrics,
        ..W::base(name, streams, itl, ttft)
    };
    timeline(&[
        phase("baseline", 1, 6.5, 40.0),
        phase("peak-2", 2, 13.0, 45.0),
        phase("peak", 4, 26.0, 65.0),
    ])
}

#[test]
fn steps_that_slow_as_the_batch_grows_are_compute() {
    for metrics in [true, false] {
        let t = saturating(metrics);
        for phase in ["peak-2", "peak"] {
            let p = dominant(&t, phase);
            assert_eq!(p.dominant, Cause::Compute, "metrics {metrics}: {p:#?}");
            assert!(p.confidence >= 0.6, "metrics {metrics}: {}", p.confidence);
            let met: Vec<&str> = p.evidence.iter().map(|e| e.signal.as_str()).collect();
            assert!(met.contains(&"itl_p50_ms"), "{met:?}");
            assert!(met.contains(&"in_flight_max"), "{met:?}");
            if metrics {
                assert!(met.contains(&"batch_mean"), "{met:?}");
                assert!(met.contains(&"server_tpot_ms"), "{met:?}");
            }
            assert!(p.hint.contains("replicas"), "{}", p.hint);
        }
        assert_eq!(dominant(&t, "baseline").dominant, Cause::None);
    }
}

/// The same saturation seen with NVML and the serving threads: a scheduler thread on a whole
/// CPU beside SMs busy a quarter of the time is host-bound, and the advice says so first;
/// SMs busy throughout are GPU-bound; without NVML no side is named.
#[test]
fn a_compute_phase_says_whether_the_host_or_the_gpu_bounds_its_steps() {
    use crate::collect::timeline::{GpuDevice, GpuSignals};
    let with = |thread_ms: f64, sm: f64| {
        let mut t = saturating(true);
        for w in &mut t.windows {
            w.runq
                .get_or_insert_with(RunqSignals::default)
                .busiest_thread_ms = Some(thread_ms);
            w.gpu = Some(GpuSignals {
                devices: vec![GpuDevice {
                    sm_util_percent: Some(sm),
                    ..GpuDevice::default()
                }],
                ..GpuSignals::default()
            });
        }
        dominant(&t, "peak")
    };
    let host = with(1000.0, 24.0);
    assert_eq!(host.dominant, Cause::Compute);
    assert!(
        matches!(host.bound, Some(bound::Bound::Host { .. })),
        "{:?}",
        host.bound
    );
    assert!(
        host.hint
            .starts_with("host-bound: the GPU waits for the host"),
        "{}",
        host.hint
    );
    let gpu = with(300.0, 96.0);
    assert!(
        matches!(gpu.bound, Some(bound::Bound::Gpu { .. })),
        "{:?}",
        gpu.bound
    );
    assert!(gpu.hint.starts_with("GPU-bound"), "{}", gpu.hint);
    assert_eq!(dominant(&saturating(true), "peak").bound, None);
}

#[test]
fn a_saturated_engine_that_queues_next_is_queue_and_says_compute_came_first() {
    let mut t = saturating(true);
    // The last phase's later windows: every slot taken, requests deferred, the first token
    // hundreds of steps away.
    for (k, w) in t.windows.iter_mut().skip(19).enumerate() {
        let s = w.server.as_mut().unwrap();
        s.waiting = Some(3.0 + 2.0 * k as f64);
        let l = w.load.as_mut().unwrap();
        let ttft = 800.0 * (k as f64 + 1.0);
        l.ttft_ms = Some(q(ttft, ttft * 1.3));
        w.net.as_mut().unwrap().server_first_token_p50_ms = Some(ttft - 10.0);
    }
    let a = attribute(&t);
    let p = a.phase("peak").unwrap();
    assert_eq!(p.dominant, Cause::Queue, "{p:#?}");
    assert_eq!(p.came_first, Some(Cause::Compute), "{p:#?}");
    assert!(p.hint.starts_with("compute saturated first"), "{}", p.hint);
    // A window that queues is never compute, whatever the steps did.
    for w in a.windows.iter().skip(19) {
        assert_eq!(w.verdict.cause, Cause::Queue, "{:#?}", w.verdict);
    }
}

#[test]
fn a_queue_without_metrics_is_not_compute() {
    // Slots full, ITL up by the batch, the first token waiting for a slot: TTFT in steps grows.
    let t = timeline(&[
        W {
            metrics: false,
            ..W::base("baseline", 1, 6.5, 40.0)
        },
        W {
            metrics: false,
            ..W::base("peak", 4, 11.0, 2500.0)
        },
    ]);
    let a = attribute(&t);
    for w in a.windows.iter().skip(8) {
        assert_ne!(w.verdict.cause, Cause::Compute, "{:#?}", w.verdict);
    }
}

#[test]
fn an_engine_that_batches_more_at_the_same_step_time_is_none() {
    // A GPU engine below its limit: 4x the streams, each step barely longer.
    let t = timeline(&[
        W::base("baseline", 1, 8.0, 40.0),
        W::base("peak", 4, 9.0, 42.0),
    ]);
    let p = dominant(&t, "peak");
    assert_eq!(p.dominant, Cause::None, "{p:#?}");
}

#[test]
fn slower_steps_at_the_same_batch_are_not_compute() {
    // The steps slow with nothing added to them (another tenant's work, a throttled clock):
    // not the batch, so not this cause.
    let t = timeline(&[
        W::base("baseline", 2, 6.5, 40.0),
        W::base("peak", 2, 20.0, 110.0),
    ]);
    let a = attribute(&t);
    for w in a.windows.iter().skip(8) {
        assert_ne!(w.verdict.cause, Cause::Compute, "{:#?}", w.verdict);
    }
}

#[test]
fn a_starved_cpu_is_cpu_runqueue_not_the_slower_steps_it_causes() {
    let t = timeline(&[
        W::base("baseline", 1, 6.5, 40.0),
        W {
            runq_p99_us: 30_000.0,
            runq_wait_share: 0.6,
            ..W::base("peak", 4, 26.0, 65.0)
        },
    ]);
    let p = dominant(&t, "peak");
    assert_eq!(p.dominant, Cause::CpuRunqueue, "{p:#?}");
    // Outside contention (the threads' share of wanted CPU time spent waiting +0.2) is what
    // `compute` requires absent.
    assert!(
        !p.runners_up.iter().any(|r| r.cause == Cause::Compute),
        "{:#?}",
        p.runners_up
    );
}

#[test]
fn longer_steps_are_server_compute_in_the_decomposition() {
    // Without a queue-time metric the kernel's first-token rise is split by the steps' growth.
    let mut t = saturating(false);
    for (i, w) in t.windows.iter_mut().enumerate() {
        let first = if i < 8 { 20.0 } else { 45.0 };
        w.net.as_mut().unwrap().server_first_token_p50_ms = Some(first);
    }
    let p = dominant(&t, "peak");
    let d = p.decomposition.unwrap();
    let compute = d.server_compute_ms.unwrap();
    assert!(compute >= 20.0, "{d:#?}");
    assert!(d.queue_ms.unwrap() < 1.0, "{d:#?}");
}

#[test]
fn without_load_records_the_servers_own_steps_and_batch_name_compute() {
    // The node daemon beside an external generator: no client records, the server's time per
    // token and batch, and the kernel's whole exchange for the latency rise.
    let mut t = saturating(true);
    for w in &mut t.windows {
        let l = w.load.take().unwrap();
        let e2e = l.e2e_ms.unwrap().p50;
        w.net.as_mut().unwrap().exchange_p50_ms = Some(e2e);
    }
    let a = attribute(&t);
    let p = a.phase("peak").unwrap();
    assert_eq!(p.dominant, Cause::Compute, "{p:#?}");
    let met: Vec<&str> = p.evidence.iter().map(|e| e.signal.as_str()).collect();
    assert!(
        met.contains(&"server_tpot_ms") && met.contains(&"batch_mean"),
        "{met:?}"
    );
    assert_eq!(a.phase("baseline").unwrap().dominant, Cause::None);
}
