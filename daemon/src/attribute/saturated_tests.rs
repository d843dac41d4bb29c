//! Time lines saturated from their baseline on, judged in every phase: two a real GPU engine
//! produced (`daemon/tests/fixtures/timelines/h200_*.json`, recorded on an NVIDIA H200: a
//! `PyTorch` engine whose admission is bound by its KV budget, 64 slots, 2 req/s then 80 req/s;
//! the baseline was saturated from its eighth second, the peak asked 80 req/s of a server that
//! completed a few, and drained to the 60 s timeout) and one the sim produced
//! (`sim_saturated_baseline.json`).

use super::tests::fixture;
use super::*;

fn phase<'a>(a: &'a Attribution, name: &str) -> &'a PhaseSummary {
    a.phase(name)
        .unwrap_or_else(|| panic!("no phase {name}: {:?}", names(a)))
}

fn names(a: &Attribution) -> Vec<&str> {
    a.phases.iter().map(|p| p.name.as_str()).collect()
}

fn has_note(p: &PhaseSummary, prefix: &str) {
    assert!(
        p.notes.iter().any(|n| n.starts_with(prefix)),
        "{}: no note {prefix:?} in {:?}",
        p.name,
        p.notes
    );
}

fn never_a_stampede(a: &Attribution) {
    for w in &a.windows {
        assert_ne!(
            w.verdict.cause,
            Cause::DuplicatePrefill,
            "window {}",
            w.index
        );
    }
}

#[test]
fn with_metrics_the_full_kv_cache_is_named_in_every_phase() {
    let a = attribute(&fixture("h200_kv_admission"));
    assert_eq!(names(&a), ["baseline", "peak", "peak (drain)"]);
    never_a_stampede(&a);
    // The baseline: KV usage 1.0, requests waiting from its fourth second on.
    // The baseline: the engine admitted about two requests a second while slots (1 -> 21 of
    // 64) and cache (0.3 -> 0.88) had room, so requests waited on its step loop; from its
    // twelfth second the KV cache was full (0.997) with requests waiting. Neither is healthy.
    let base = phase(&a, "baseline");
    let verdicts = |phase: &str| -> Vec<&Verdict> {
        a.windows
            .iter()
            .filter(|w| w.phase.as_deref() == Some(phase))
            .map(|w| &w.verdict)
            .collect()
    };
    let baseline = verdicts("baseline");
    for v in &baseline[1..=10] {
        assert_eq!(v.cause, Cause::Queue, "{v:#?}");
        assert_eq!(v.signature.as_deref(), Some("token budget or step loop"));
    }
    for v in &baseline[12..] {
        assert_eq!(v.cause, Cause::KvCache, "{v:#?}");
        assert_eq!(v.signature.as_deref(), Some("full, requests waiting"));
    }
    assert!(
        matches!(base.dominant, Cause::Queue | Cause::KvCache),
        "{:#?}",
        base.shares
    );
    // Its advice raises no limit: the cache was full in it.
    assert_eq!(base.hint, "requests wait for admission: add replicas");
    let saturated = base.saturated.as_deref().unwrap_or_default();
    assert!(saturated.contains("KV cache full"), "{saturated}");
    has_note(
        base,
        "the baseline is not a healthy reference: KV cache full",
    );
    // The peak: KV 0.98-0.999, 23 of 64 slots running, waiting up to 1,977.
    let peak = phase(&a, "peak");
    assert_eq!(peak.dominant, Cause::KvCache, "{:#?}", peak.shares);
    assert!(peak.shares[0].share >= 0.8, "{:#?}", peak.shares);
    has_note(peak, "compared against a saturated baseline");
    // The advice leans on no room the evidence shows full.
    assert!(
        !peak.hint.contains("max_num_seqs / max_num_batched_tokens"),
        "{}",
        peak.hint
    );
    assert!(peak.hint.starts_with("KV cache is full"), "{}", peak.hint);
    let o = peak.overload.as_ref().expect("an overload line");
    assert!((o.asked_rps - 80.0).abs() < 1.0, "{o:?}");
    assert!(o.completed_rps < 20.0, "{o:?}");
    assert!(o.timed_out > 1000, "{o:?}");
    assert!(
        o.waited
            .as_deref()
            .is_some_and(|w| w.contains("KV cache full")),
        "{o:?}"
    );
    // Its drain: apart, still the cache.
    let drain = phase(&a, "peak (drain)");
    assert!(drain.drain);
    assert_eq!(drain.dominant, Cause::KvCache, "{:#?}", drain.shares);
    assert!(drain.windows >= 50, "{}", drain.windows);
}

#[test]
fn without_metrics_the_overloaded_peak_is_queue_never_a_stampede() {
    let a = attribute(&fixture("h200_kv_admission_nometrics"));
    never_a_stampede(&a);
    let peak = phase(&a, "peak");
    assert_eq!(peak.dominant, Cause::Queue, "{:#?}", peak.shares);
    let o = peak.overload.as_ref().expect("an overload line");
    assert!(o.timed_out > 1000, "{o:?}");
    assert!(o.line().contains("timed out waiting"), "{}", o.line());
    // Nothing says the baseline is saturated without the server's gauges: it is judged
    // against itself, and no phase names a full resource.
    for p in &a.phases {
        assert!(p.saturated.is_none(), "{}: {:?}", p.name, p.saturated);
    }
}

/// Recorded on the sim (`sim_saturated_baseline.json`, the time line of the root test
/// `a_kv_cache_full_from_the_baseline_on_is_kv_cache_in_every_phase`): 64 KV blocks, 4 req/s of
/// 128 + 384 tokens in the baseline, 12 in the peak, 4 in the cooldown. The cache is full (by
/// its gauge or by its evictions) with requests waiting from the baseline on; each phase that
/// sent is `kv_cache`, the baseline is named as no healthy reference, and no advice raises the
/// slot cap.
#[test]
fn a_sim_saturated_from_its_baseline_is_kv_cache_in_every_phase() {
    let a = attribute(&fixture("sim_saturated_baseline"));
    never_a_stampede(&a);
    for p in &a.phases {
        assert_eq!(p.dominant, Cause::KvCache, "{}: {:#?}", p.name, p.shares);
        assert!(
            !p.hint.contains("raise max_num_seqs"),
            "{}: {}",
            p.name,
            p.hint
        );
        assert!(
            p.saturated
                .as_deref()
                .is_some_and(|s| s.contains("KV cache full")),
            "{}: {:?}",
            p.name,
            p.saturated
        );
    }
    let base = phase(&a, "baseline");
    has_note(
        base,
        "the baseline is not a healthy reference: KV cache full",
    );
    let peak = phase(&a, "peak");
    has_note(peak, "compared against a saturated baseline");
}

/// The H200 engine's steps were bound by its host: its one scheduler thread (the engine runs
/// one: `torch_engine.py`) on a CPU ~1,060 ms per second while the SMs were 6-34% busy. The
/// time line was recorded before the busiest thread was read per thread; given the process's
/// on-CPU time as that thread's, the peak is host-bound. Without it no side is named: the SMs
/// alone are not busy enough to call it GPU-bound.
#[test]
fn the_h200_engine_was_host_bound() {
    let t = fixture("h200_kv_admission");
    let peak: Vec<&crate::collect::timeline::Window> = t
        .windows
        .iter()
        .filter(|w| w.phase.as_deref() == Some("peak"))
        .collect();
    assert_eq!(bound::Bound::of(&peak), None);
    let mut t = t.clone();
    for w in &mut t.windows {
        if let Some(r) = w.runq.as_mut() {
            r.busiest_thread_ms = r.oncpu_ms;
        }
    }
    let peak: Vec<&crate::collect::timeline::Window> = t
        .windows
        .iter()
        .filter(|w| w.phase.as_deref() == Some("peak"))
        .collect();
    let b = bound::Bound::of(&peak).expect("a bound");
    assert!(
        matches!(b, bound::Bound::Host { sm_busy_percent, .. } if sm_busy_percent < 30.0),
        "{b:?}"
    );
}
