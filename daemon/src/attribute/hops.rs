//! The hops of a pipeline behind the target (`stress --explain --service NAME=PORT`): which
//! hop holds a phase's latency rise, and the cause inside it.
//!
//! Each hop's processes have their own time line, filled by the same collectors as the
//! target's and attributed against their own baseline. A hop's part of the rise is the rise
//! of its kernel-side first token on the exchanges another watched server asked for (what
//! the target waits for when it calls the hop; scrapes and other clients left out), median
//! over the phase against the baseline phase's. With the kernel's exchanges kept (`stress
//! --explain`), each call counts in the phase its request arrived in, as the client's rise
//! counts each request in the phase that sent it ([`by_arrival_phase`]); the daemon, which
//! keeps no exchanges, takes the median of the phase's windows ([`by_window_phase`]). The
//! target's own part (`orchestration`) is the rise of the target's kernel-side first token
//! less the hops'. The rise split is the target's decomposition
//! (the client's latency); the parts are medians of other populations, so when they add up
//! to more than the rise they are scaled down to it together, and what they do not cover is
//! `rest` (the network and the client). A hop holds the rise when its part is at least
//! [`HOLDS`] of it and the target's own verdict is not `none`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Cause, PhaseSummary, baseline::is_baseline_name, fmt_num};
use crate::collect::{
    kernel::Exchange,
    timeline::{Timeline, Window},
};

/// Share of the rise a hop must hold to be named.
pub const HOLDS: f64 = 0.3;

/// The name of the target's own part.
pub const ORCHESTRATION: &str = "orchestration";

/// A gateway's calls in one window, from the kernel: how many exchanges it asked each watched
/// server for, per request it answered (its tool-call depth at that hop: 1 for a RAG hop it
/// calls once a request, more for a tool an agent calls again and again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Orchestration {
    /// Requests the gateway answered in the window (its exchanges).
    pub requests: u64,
    /// Each server it called.
    pub calls: Vec<HopCalls>,
}

/// What a gateway asked of one server it called, in one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HopCalls {
    /// The called server.
    pub hop: String,
    /// The exchanges the gateway asked it for.
    pub calls: u64,
    /// Those per request the gateway answered; `None` when it answered none in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_request: Option<f64>,
}

/// One hop's part of a phase's rise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HopPart {
    /// The hop (`--service NAME`), or `orchestration` for the target's own time.
    pub hop: String,
    /// Its kernel-side first token in the baseline phase, ms (median): of the calls made to
    /// it for a hop, of the target's own answers for `orchestration`.
    pub baseline_ms: Option<f64>,
    /// The same in this phase, ms.
    pub value_ms: Option<f64>,
    /// Its part of the rise, ms (never negative).
    pub part_ms: f64,
    /// The hop's own verdict in this phase (`none` for orchestration: see the target's).
    pub cause: Cause,
    /// Its score.
    pub confidence: f64,
}

/// Where a phase's latency rise went, hop by hop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Hops {
    /// The target's rise over the baseline (its decomposition's), ms.
    pub rise_ms: f64,
    /// Each hop's part, then `orchestration`.
    pub parts: Vec<HopPart>,
    /// What no hop covers: the network and the client, ms.
    pub rest_ms: f64,
    /// The hop holding the rise, when one holds at least [`HOLDS`] of it.
    pub holder: Option<String>,
}

impl Hops {
    /// One line: `hop search holds +480 ms of the +510 ms rise (94%); inside it: vector_index
    /// (0.82)`, or that no hop holds it.
    #[must_use]
    pub fn line(&self) -> String {
        let Some(h) = self
            .holder
            .as_ref()
            .and_then(|n| self.parts.iter().find(|p| &p.hop == n))
        else {
            return format!(
                "no hop holds the +{} ms rise ({})",
                fmt_num(self.rise_ms),
                self.list()
            );
        };
        let share = 100.0 * h.part_ms / self.rise_ms.max(f64::EPSILON);
        let inside = if h.hop == ORCHESTRATION {
            "the target's own time (inbound less its calls)".to_owned()
        } else {
            format!("inside it: {} ({:.2})", h.cause, h.confidence)
        };
        format!(
            "hop {} holds +{} ms of the +{} ms rise ({share:.0}%); {inside}",
            h.hop,
            fmt_num(h.part_ms),
            fmt_num(self.rise_ms)
        )
    }

    /// `search +480 ms, chat +10 ms, orchestration +0 ms, rest +20 ms`.
    #[must_use]
    pub fn list(&self) -> String {
        let mut parts: Vec<String> = self
            .parts
            .iter()
            .map(|p| format!("{} +{} ms", p.hop, fmt_num(p.part_ms)))
            .collect();
        parts.push(format!("rest +{} ms", fmt_num(self.rest_ms)));
        parts.join(", ")
    }
}

/// A server's kernel-side first token in each phase, median, ms: a hop's on the calls the
/// target made to it, or the target's own on its answers.
pub type ByPhase = BTreeMap<String, f64>;

/// A hop with its phases attributed and its first token on the target's calls.
pub struct HopLine<'a> {
    /// The hop's name.
    pub name: &'a str,
    /// Its phases, attributed against its own baseline.
    pub phases: &'a [PhaseSummary],
    /// Its first token on the target's calls, per phase.
    pub first_token_ms: &'a ByPhase,
}

/// The hops of phase `phase` against the baseline phase `base`, from the target's own first
/// token (`own`) and each hop's; `None` for the baseline phase, a phase without a rise, or no
/// hops. The rise is the client's (the phase's decomposition); without a client (the daemon)
/// it is the rise of the target's own kernel-side first token, what its clients wait for.
#[must_use]
pub fn of_phase(
    own: &ByPhase,
    base: &str,
    phase: &PhaseSummary,
    hops: &[HopLine<'_>],
) -> Option<Hops> {
    if hops.is_empty() || phase.name == base {
        return None;
    }
    let at = |m: &ByPhase| (m.get(base).copied(), m.get(&phase.name).copied());
    let own = at(own);
    let rise = match &phase.decomposition {
        Some(d) => d.increase_ms,
        None => rise_of(own.0, own.1),
    };
    let parts = hops
        .iter()
        .map(|h| {
            let (baseline_ms, value_ms) = at(h.first_token_ms);
            let verdict = h.phases.iter().find(|p| p.name == phase.name);
            HopPart {
                hop: h.name.to_owned(),
                baseline_ms,
                value_ms,
                part_ms: rise_of(baseline_ms, value_ms),
                cause: verdict.map_or(Cause::None, |p| p.dominant),
                confidence: verdict.map_or(0.0, |p| p.confidence),
            }
        })
        .collect();
    split(rise, phase.dominant, parts, own)
}

/// Each phase's first token of `t`: the median over the phase's windows of their first token
/// (`first_answer_ms`), as a time line keeps them (the daemon, which keeps no exchanges).
#[must_use]
pub fn by_window_phase(t: &Timeline, calls: Option<Calls<'_>>) -> ByPhase {
    let mut windows: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, w) in t.windows.iter().enumerate() {
        if let Some(p) = w.phase.as_deref() {
            windows.entry(p).or_default().push(i);
        }
    }
    windows
        .into_iter()
        .filter_map(|(p, idx)| Some((p.to_owned(), first_answer_ms(t, &idx, calls)?)))
        .collect()
}

/// Each phase's first token of `exchanges`: the median over the exchanges whose request
/// arrived during the phase (the phase of `target`'s window holding the arrival, its Unix ms
/// from `unix_ms` of the kernel's monotonic ns). An exchange is counted in the phase that asked
/// for it, as the client's rise counts each request in the phase that sent it: under a growing
/// queue, the windows in which exchanges end hold the earlier, shorter waits.
#[must_use]
pub fn by_arrival_phase<'a>(
    target: &Timeline,
    exchanges: impl IntoIterator<Item = &'a Exchange>,
    unix_ms: impl Fn(u64) -> u64,
) -> ByPhase {
    let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for e in exchanges {
        let at = unix_ms(e.req_in_ns);
        let phase = target
            .windows
            .get(target.index(at))
            .filter(|w| at >= w.start_unix_ms)
            .and_then(|w| w.phase.as_deref());
        if let Some(p) = phase {
            samples
                .entry(p)
                .or_default()
                .push(e.first_token_ns() as f64 / 1e6);
        }
    }
    samples
        .into_iter()
        .filter_map(|(p, v)| Some((p.to_owned(), crate::quantile::exact::median(&v)?)))
        .collect()
}

/// Splits `rise` between the hops' `parts` and the target's own time (its first answer's
/// baseline and value less what its calls took), scaled down together when they add up to
/// more; the holder is named when `dominant` is a cause. `None` without a rise.
#[must_use]
pub fn split(
    rise: f64,
    dominant: Cause,
    mut parts: Vec<HopPart>,
    own: (Option<f64>, Option<f64>),
) -> Option<Hops> {
    if rise <= 0.0 || parts.is_empty() {
        return None;
    }
    let called: f64 = parts.iter().map(|p| p.part_ms).sum();
    parts.push(HopPart {
        hop: ORCHESTRATION.to_owned(),
        baseline_ms: own.0,
        value_ms: own.1,
        part_ms: (rise_of(own.0, own.1) - called).max(0.0),
        cause: Cause::None,
        confidence: 0.0,
    });
    let sum: f64 = parts.iter().map(|p| p.part_ms).sum();
    if sum > rise {
        for p in &mut parts {
            p.part_ms *= rise / sum;
        }
    }
    let covered: f64 = parts.iter().map(|p| p.part_ms).sum();
    let holder = (dominant != Cause::None)
        .then(|| {
            parts
                .iter()
                .filter(|p| p.part_ms >= HOLDS * rise)
                .max_by(|a, b| a.part_ms.total_cmp(&b.part_ms))
                .map(|p| p.hop.clone())
        })
        .flatten();
    Some(Hops {
        rise_ms: rise,
        parts,
        rest_ms: (rise - covered).max(0.0),
        holder,
    })
}

/// Labels each window of `hop` with the phase of the target's window that starts with it.
pub fn label_phases(target: &Timeline, hop: &mut Timeline) {
    // Both time lines' windows are in time order: the first target window not ending before
    // a hop window's start, less half a window, is the only one that can match it.
    let mut t = 0;
    for w in &mut hop.windows {
        let near = |t: &Window| t.start_unix_ms.abs_diff(w.start_unix_ms) < t.len_ms / 2;
        while target
            .windows
            .get(t)
            .is_some_and(|x| !near(x) && x.start_unix_ms + x.len_ms / 2 <= w.start_unix_ms)
        {
            t += 1;
        }
        w.phase = target
            .windows
            .get(t)
            .filter(|x| near(x))
            .and_then(|x| x.phase.clone());
    }
}

/// The baseline phase of `t`: one named `baseline`, else the first.
#[must_use]
pub fn baseline_phase(t: &Timeline) -> Option<String> {
    let phases = || t.windows.iter().filter_map(|w| w.phase.as_deref());
    phases()
        .find(|p| is_baseline_name(p))
        .or_else(|| phases().next())
        .map(str::to_owned)
}

/// Whose calls to a hop count: the target's processes, or (`None`) any other watched server's.
#[derive(Clone, Copy)]
pub struct Calls<'a>(pub Option<&'a [u32]>);

impl Calls<'_> {
    /// The first token p50 of the calls in `w`, ms.
    #[must_use]
    pub fn first_token_ms(self, w: &Window) -> Option<f64> {
        let n = w.net.as_ref()?;
        match self.0 {
            None => n.called_first_token_p50_ms,
            // One caller per gateway process; a gateway of several processes takes the busiest.
            Some(pids) => n
                .callers
                .iter()
                .filter(|c| pids.contains(&c.tgid))
                .max_by_key(|c| c.exchanges)
                .and_then(|c| c.first_token_p50_ms),
        }
    }
}

/// The median over windows `idx` of `t` of the kernel-side first token (the first write of a
/// whole answer): of the `calls` made to it when given (a hop, as the target waits for it),
/// else of every exchange (the target, answering its clients).
#[must_use]
pub fn first_answer_ms(t: &Timeline, idx: &[usize], calls: Option<Calls<'_>>) -> Option<f64> {
    let of = |w: &Window| match calls {
        Some(c) => c.first_token_ms(w),
        None => w.net.as_ref()?.server_first_token_p50_ms,
    };
    let v: Vec<f64> = idx
        .iter()
        .filter_map(|&i| t.windows.get(i))
        .filter_map(of)
        .collect();
    crate::quantile::exact::median(&v)
}

/// `value` less `base`, never negative; 0 when either is unknown.
#[must_use]
pub fn rise_of(base: Option<f64>, value: Option<f64>) -> f64 {
    match (base, value) {
        (Some(b), Some(v)) => (v - b).max(0.0),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{attribute::attribute, collect::timeline::NetSignals};

    /// A time line of `phases` (name, windows, first answer ms) of 1 s windows.
    fn line(phases: &[(&str, usize, f64)]) -> Timeline {
        let mut t = Timeline::new(0, 1000);
        let mut at = 500;
        for &(name, n, ms) in phases {
            for _ in 0..n {
                let w = t.at(at);
                w.phase = Some(name.into());
                w.net = Some(NetSignals {
                    exchanges: 10,
                    server_first_token_p50_ms: Some(ms),
                    called_exchanges: 10,
                    called_first_token_p50_ms: Some(ms),
                    ..NetSignals::default()
                });
                at += 1000;
            }
        }
        t
    }

    /// The hop `name` of time line `t`, its phases not attributed.
    fn hop<'a>(name: &'a str, first_token_ms: &'a ByPhase) -> HopLine<'a> {
        HopLine {
            name,
            phases: &[],
            first_token_ms,
        }
    }

    /// A hop's first token per phase, from its time line.
    fn calls(t: &Timeline) -> ByPhase {
        by_window_phase(t, Some(Calls(None)))
    }

    /// The target's own first token per phase.
    fn own(t: &Timeline) -> ByPhase {
        by_window_phase(t, None)
    }

    fn peak(rise: f64, dominant: Cause) -> PhaseSummary {
        let t = line(&[("baseline", 3, 10.0), ("peak", 3, 10.0 + rise)]);
        let mut p = attribute(&t)
            .phases
            .into_iter()
            .find(|p| p.name == "peak")
            .unwrap();
        p.dominant = dominant;
        p.decomposition = Some(crate::attribute::Decomposition {
            increase_ms: rise,
            ..crate::attribute::Decomposition::default()
        });
        p
    }

    #[test]
    fn the_hop_whose_time_rose_holds_the_rise_and_the_parts_add_up() {
        let target = line(&[("baseline", 3, 40.0), ("peak", 3, 540.0)]);
        let search = line(&[("baseline", 3, 5.0), ("peak", 3, 485.0)]);
        let chat = line(&[("baseline", 3, 20.0), ("peak", 3, 25.0)]);
        let (search, chat) = (calls(&search), calls(&chat));
        let hops = [hop("search", &search), hop("chat", &chat)];
        let h = of_phase(
            &own(&target),
            "baseline",
            &peak(510.0, Cause::Unexplained),
            &hops,
        )
        .unwrap();
        assert_eq!(h.holder.as_deref(), Some("search"));
        let part = |n: &str| h.parts.iter().find(|p| p.hop == n).unwrap().part_ms;
        assert!((part("search") - 480.0).abs() < 1e-9);
        assert!((part("chat") - 5.0).abs() < 1e-9);
        // The target rose 500 ms, its calls 485: 15 ms of its own.
        assert!((part(ORCHESTRATION) - 15.0).abs() < 1e-9);
        assert!((h.rest_ms - 10.0).abs() < 1e-9);
        let sum: f64 = h.parts.iter().map(|p| p.part_ms).sum::<f64>() + h.rest_ms;
        assert!((sum - 510.0).abs() < 1e-9);
        assert!(
            h.line()
                .starts_with("hop search holds +480 ms of the +510 ms rise (94%)")
        );
    }

    #[test]
    fn the_targets_own_time_is_orchestration_and_parts_never_exceed_the_rise() {
        // The gateway's own time rose 300 ms, its calls did not; the client saw only 200.
        let target = line(&[("baseline", 3, 40.0), ("peak", 3, 340.0)]);
        let search = line(&[("baseline", 3, 5.0), ("peak", 3, 5.0)]);
        let search = calls(&search);
        let hops = [hop("search", &search)];
        let h = of_phase(&own(&target), "baseline", &peak(200.0, Cause::Queue), &hops).unwrap();
        assert_eq!(h.holder.as_deref(), Some(ORCHESTRATION));
        let sum: f64 = h.parts.iter().map(|p| p.part_ms).sum();
        assert!((sum - 200.0).abs() < 1e-9 && h.rest_ms == 0.0, "{h:?}");
        assert!(h.parts.iter().all(|p| p.part_ms >= 0.0));
    }

    #[test]
    fn a_healthy_phase_names_no_hop_and_the_baseline_has_no_hops() {
        let target = line(&[("baseline", 3, 40.0), ("peak", 3, 140.0)]);
        let search = line(&[("baseline", 3, 5.0), ("peak", 3, 105.0)]);
        let search = calls(&search);
        let hops = [hop("search", &search)];
        let h = of_phase(&own(&target), "baseline", &peak(100.0, Cause::None), &hops).unwrap();
        assert_eq!(h.holder, None);
        assert!(h.line().starts_with("no hop holds"));
        let mut base = peak(100.0, Cause::Queue);
        base.name = "baseline".into();
        assert!(of_phase(&own(&target), "baseline", &base, &hops).is_none());
    }

    #[test]
    fn an_exchange_counts_in_the_phase_its_request_arrived_in() {
        let target = line(&[("baseline", 2, 1.0), ("peak", 2, 1.0), ("cooldown", 2, 1.0)]);
        // Arrived at `at` ms, its first token `wait` ms later.
        let ex = |at: u64, wait: u64| Exchange {
            tgid: 1,
            client: None,
            req_in_ns: at * 1_000_000,
            first_out_ns: (at + wait) * 1_000_000,
            second_out_ns: 0,
            last_out_ns: (at + wait) * 1_000_000,
            max_gap_ns: 0,
            max_gap_end_ns: 0,
            retrans: 0,
            caller: Some(2),
        };
        // A queue grew in the peak: its calls waited seconds and ended in the cooldown.
        let all = [
            ex(500, 10),
            ex(1500, 12),
            ex(2100, 3000),
            ex(3900, 4000),
            ex(4500, 20),
        ];
        let by = by_arrival_phase(&target, &all, |ns| ns / 1_000_000);
        let phases: Vec<(&str, f64)> = by.iter().map(|(p, &ms)| (p.as_str(), ms)).collect();
        let close = |(a, x): (&str, f64), (b, y): (&str, f64)| a == b && (x - y).abs() < 1e-9;
        let want = [("baseline", 11.0), ("cooldown", 20.0), ("peak", 3500.0)];
        assert!(
            phases.len() == 3 && phases.iter().zip(want).all(|(&p, w)| close(p, w)),
            "{phases:?}"
        );
    }

    #[test]
    fn hop_windows_take_the_targets_phases() {
        let target = line(&[("baseline", 2, 1.0), ("peak", 2, 1.0)]);
        let mut hop = Timeline::new(0, 1000);
        for at in [503, 1502, 2499, 3500] {
            hop.at(at);
        }
        label_phases(&target, &mut hop);
        let phases: Vec<_> = hop.windows.iter().map(|w| w.phase.as_deref()).collect();
        assert_eq!(
            phases,
            [
                Some("baseline"),
                Some("baseline"),
                Some("peak"),
                Some("peak")
            ]
        );
    }
}
