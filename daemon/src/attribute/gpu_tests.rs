//! `gpu_throttle` and XIDs, on time lines whose GPU part comes from the NVML test double
//! (`gpu::nvml_double`) through the collector's own fold (`collect::server::gpu_window`): a
//! power cap or a thermal limit that starts with the rise is the cause; one the baseline had
//! too, or one without a rise, is not; an XID during the rise is named in the evidence.

use super::tests::q;
use super::*;
use crate::collect::server::gpu_window;
use crate::collect::timeline::{
    GpuSignals, LoadSignals, RunqSignals, ServerSignals, Timeline, Window,
};
use crate::gpu::nvml::{DeviceSample, GpuSource};
use crate::gpu::nvml_double::{
    NvmlTestDouble, healthy, power_capped, thermal, tick, tick_with_xid,
};
use crate::measure::Endpoint;

const PID: u32 = 4242;

type State = fn(u32, &[u32]) -> DeviceSample;

/// Two NVML samples of `state` (the first with XID `xid`) folded into one window's GPU part.
fn gpu(state: State, xid: Option<u64>) -> GpuSignals {
    let devices = vec![state(0, &[PID])];
    let first = match xid {
        Some(code) => tick_with_xid(devices.clone(), 0, code),
        None => tick(devices.clone()),
    };
    let mut double = NvmlTestDouble::new(vec![first, tick(devices)]);
    let samples = vec![double.sample(), double.sample()];
    gpu_window(&samples, &samples[1].devices, &[PID]).expect("the server is on GPU 0")
}

/// One window of 8 streams whose tokens come every `itl` ms, on a GPU in `state`.
fn window(i: u64, phase: &str, itl: f64, state: State, xid: Option<u64>) -> Window {
    let jitter = 1.0 + 0.04 * ((i % 3) as f64 - 1.0);
    let itl = itl * jitter;
    let ttft = 4.0 * itl;
    Window {
        start_unix_ms: i * 1000,
        len_ms: 1000,
        phase: Some(phase.to_owned()),
        load: Some(LoadSignals {
            requests: 16,
            achieved_rps: 16.0,
            in_flight_max: 8,
            ttft_ms: Some(q(ttft, ttft * 1.5)),
            itl_ms: Some(q(itl, itl * 3.0)),
            e2e_ms: Some(q(ttft + 64.0 * itl, (ttft + 64.0 * itl) * 1.3)),
            send_lag_ms: Some(q(0.1, 0.5)),
            output_tokens_per_s: 8000.0 / itl,
            endpoint: Some(Endpoint::Chat),
            ..LoadSignals::default()
        }),
        server: Some(ServerSignals {
            running: Some(8.0),
            waiting: Some(0.0),
            kv_usage: Some(0.4),
            preemptions_per_s: Some(0.0),
            batch_mean: Some(8.0),
            tpot_mean_ms: Some(itl),
            ..ServerSignals::default()
        }),
        runq: Some(RunqSignals {
            samples: 500,
            p50_us: 40.0,
            p99_us: 400.0 * jitter,
            mean_us: 80.0,
            total_ms: 20.0,
            oncpu_ms: Some(300.0),
            ..RunqSignals::default()
        }),
        gpu: Some(gpu(state, xid)),
        ..Window::default()
    }
}

/// A baseline of 8 windows at `base_itl` on a GPU in `base`, then a peak of 8 at `peak_itl`
/// on a GPU in `peak` (an XID `xid` in its third window).
fn timeline(base: State, base_itl: f64, peak: State, peak_itl: f64, xid: Option<u64>) -> Timeline {
    let mut t = Timeline::new(0, 1000);
    for i in 0..8 {
        t.windows.push(window(i, "baseline", base_itl, base, None));
    }
    for i in 8..16 {
        let x = xid.filter(|_| i == 10);
        t.windows.push(window(i, "peak", peak_itl, peak, x));
    }
    t
}

fn peak(a: &Attribution) -> &PhaseSummary {
    a.phase("peak").expect("a peak phase")
}

fn names(p: &PhaseSummary) -> Vec<&str> {
    p.evidence.iter().map(|e| e.signal.as_str()).collect()
}

#[test]
fn a_power_cap_that_comes_with_the_rise_is_gpu_throttle() {
    let a = attribute(&timeline(healthy, 20.0, power_capped, 32.0, None));
    assert_eq!(a.phase("baseline").unwrap().dominant, Cause::None);
    let p = peak(&a);
    assert_eq!(p.dominant, Cause::GpuThrottle, "{:#?}", p.shares);
    assert!(p.confidence >= 0.8, "{}", p.confidence);
    for s in [
        "gpu_throttle_share",
        "gpu_sm_clock_mhz",
        "gpu_power_share_of_cap",
        "itl_p50_ms",
    ] {
        assert!(names(p).contains(&s), "{s} missing from {:?}", names(p));
    }
    assert!(p.hint.contains("power"), "{}", p.hint);
}

#[test]
fn a_thermal_slowdown_that_comes_with_the_rise_is_gpu_throttle() {
    let a = attribute(&timeline(healthy, 20.0, thermal, 32.0, None));
    let p = peak(&a);
    assert_eq!(p.dominant, Cause::GpuThrottle, "{:#?}", p.shares);
    // Thermal, not the power cap: the draw is far below it.
    assert!(names(p).contains(&"gpu_sm_clock_mhz"), "{:?}", names(p));
    assert!(
        !names(p).contains(&"gpu_power_share_of_cap"),
        "{:?}",
        names(p)
    );
}

/// Throttled in the baseline as much as in the peak: the throttle does not coincide with the
/// rise, so it is not its cause.
#[test]
fn a_throttle_the_baseline_had_too_is_not_the_cause() {
    let a = attribute(&timeline(power_capped, 20.0, power_capped, 32.0, None));
    let p = peak(&a);
    assert_ne!(p.dominant, Cause::GpuThrottle, "{:#?}", p.shares);
    assert!(
        a.windows
            .iter()
            .all(|w| w.verdict.cause != Cause::GpuThrottle),
        "{:#?}",
        a.windows
    );
}

/// Throttled without any rise: latency is at the baseline, so the verdict is `none`.
#[test]
fn a_throttle_without_a_rise_is_none() {
    let a = attribute(&timeline(healthy, 20.0, power_capped, 20.0, None));
    assert_eq!(peak(&a).dominant, Cause::None, "{:#?}", peak(&a).shares);
}

/// An XID in a window of the rise is named in that window's evidence, with its code and GPU.
#[test]
fn an_xid_during_the_rise_is_named_in_the_evidence() {
    let a = attribute(&timeline(healthy, 20.0, thermal, 32.0, Some(79)));
    let w = &a.windows[10].verdict;
    assert_eq!(w.cause, Cause::GpuThrottle, "{w:#?}");
    let xid = w
        .evidence
        .iter()
        .find(|e| e.signal == "gpu_xid")
        .unwrap_or_else(|| panic!("no XID in {:#?}", w.evidence));
    assert!((xid.value - 79.0).abs() < 1e-9, "{xid:?}");
    assert!(xid.line().contains("XID 79 on GPU 0"), "{}", xid.line());
    // Only where it happened.
    assert!(
        a.windows[11]
            .verdict
            .evidence
            .iter()
            .all(|e| e.signal != "gpu_xid")
    );
    // An XID while latency is at the baseline is no evidence of a rise.
    let quiet = attribute(&timeline(healthy, 20.0, healthy, 20.0, Some(79)));
    assert!(
        quiet.windows[10]
            .verdict
            .evidence
            .iter()
            .all(|e| e.signal != "gpu_xid")
    );
}

/// Without NVML (no GPU, or no driver) the throttle's signals do not apply: nothing is listed
/// missing for them and a healthy window stays `none`.
#[test]
fn without_nvml_the_throttle_is_not_missing_evidence() {
    let mut t = timeline(healthy, 20.0, healthy, 20.0, None);
    for w in &mut t.windows {
        w.gpu = None;
    }
    let a = attribute(&t);
    let throttle = [
        "gpu_throttle_share",
        "gpu_sm_clock_mhz",
        "gpu_power_share_of_cap",
    ];
    for w in &a.windows {
        assert_eq!(w.verdict.cause, Cause::None);
        let missing: Vec<&str> = w
            .verdict
            .missing
            .iter()
            .map(|m| m.signal.as_str())
            .collect();
        assert!(missing.iter().all(|m| !throttle.contains(m)), "{missing:?}");
    }
}
