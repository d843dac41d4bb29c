//! The hops behind a report's target: each called server's time line labelled with the
//! target's phases and attributed against its own baseline, and each phase told which hop
//! holds its rise (`attribute::hops`). `stress --explain --service` and the daemon's report of
//! a gateway build them here.

use std::collections::BTreeMap;

use super::Report;
use crate::attribute::{
    self, PhaseSummary,
    hops::{self, ByPhase, Calls, HopLine},
};
use crate::collect::{kernel::Exchange, timeline::Timeline};

/// Where the first tokens of the target and of its hops are read.
pub enum CallsSeen<'a> {
    /// In the time lines' windows, the hops' on the calls of the target's processes
    /// `callers`: the daemon, which keeps no exchanges.
    Windows {
        /// The target's processes.
        callers: &'a [u32],
    },
    /// In the kernel's exchanges, each in the phase its request arrived in (`stress
    /// --explain`, which keeps them for joins): a hop's are its processes' exchanges that
    /// another watched server asked for, the target's those of processes of no hop.
    Exchanges {
        /// Every watched server's exchanges.
        exchanges: &'a [Exchange],
        /// Each hop's processes, by its name.
        pids: &'a BTreeMap<String, Vec<u32>>,
        /// The kernel's monotonic ns as Unix ms.
        unix_ms: &'a dyn Fn(u64) -> u64,
    },
}

impl Report {
    /// This report with each phase's hops among `services` (name, time line on the target's
    /// clock), their first tokens and the target's read as `seen` says.
    #[must_use]
    pub fn with_hops(mut self, services: Vec<(String, Timeline)>, seen: &CallsSeen<'_>) -> Self {
        let Some(base) = hops::baseline_phase(&self.timeline) else {
            return self;
        };
        if services.is_empty() {
            return self;
        }
        let lines: Vec<(String, Vec<PhaseSummary>, ByPhase)> = services
            .into_iter()
            .map(|(name, mut t)| {
                hops::label_phases(&self.timeline, &mut t);
                let phases = attribute::attribute(&t).phases;
                let first = seen.hop(&self.timeline, &name, &t);
                (name, phases, first)
            })
            .collect();
        let own = seen.target(&self.timeline);
        let hop_lines: Vec<HopLine<'_>> = lines
            .iter()
            .map(|(name, phases, first)| HopLine {
                name,
                phases,
                first_token_ms: first,
            })
            .collect();
        for p in &mut self.phases {
            p.hops = hops::of_phase(&own, &base, p, &hop_lines);
        }
        self
    }
}

impl CallsSeen<'_> {
    /// Hop `name`'s first token on the target's calls per phase; `t`, its time line, labelled
    /// with `target`'s phases.
    fn hop(&self, target: &Timeline, name: &str, t: &Timeline) -> ByPhase {
        match self {
            Self::Windows { callers } => hops::by_window_phase(t, Some(Calls(Some(callers)))),
            Self::Exchanges {
                exchanges,
                pids,
                unix_ms,
            } => {
                let own: &[u32] = pids.get(name).map_or(&[], Vec::as_slice);
                let called = exchanges.iter().filter(|e| {
                    own.contains(&e.tgid) && e.caller.is_some_and(|c| !own.contains(&c))
                });
                hops::by_arrival_phase(target, called, unix_ms)
            }
        }
    }

    /// The target's own first token per phase, on its answers.
    fn target(&self, target: &Timeline) -> ByPhase {
        match self {
            Self::Windows { .. } => hops::by_window_phase(target, None),
            Self::Exchanges {
                exchanges,
                pids,
                unix_ms,
            } => {
                let answered = exchanges
                    .iter()
                    .filter(|e| !pids.values().any(|p| p.contains(&e.tgid)));
                hops::by_arrival_phase(target, answered, unix_ms)
            }
        }
    }
}
