//! The hops behind a report's target: each called server's time line labelled with the
//! target's phases and attributed against its own baseline, and each phase told which hop
//! holds its rise (`attribute::hops`). `stress --explain --service` and the daemon's report of
//! a gateway build them here.

use super::Report;
use crate::attribute::{
    self, PhaseSummary,
    hops::{self, HopLine},
};
use crate::collect::timeline::Timeline;

impl Report {
    /// This report with each phase's hops among `services` (name, time line on the target's
    /// clock), counting the calls of `callers` (the target's processes) or, when `None`, of
    /// any other watched server.
    #[must_use]
    pub fn with_hops(mut self, services: Vec<(String, Timeline)>, callers: Option<&[u32]>) -> Self {
        if services.is_empty() {
            return self;
        }
        let lines: Vec<(String, Timeline, Vec<PhaseSummary>)> = services
            .into_iter()
            .map(|(name, mut t)| {
                hops::label_phases(&self.timeline, &mut t);
                let phases = attribute::attribute(&t).phases;
                (name, t, phases)
            })
            .collect();
        let hop_lines: Vec<HopLine<'_>> = lines
            .iter()
            .map(|(name, timeline, phases)| HopLine {
                name,
                timeline,
                phases,
                callers,
            })
            .collect();
        for p in &mut self.phases {
            p.hops = hops::of_phase(&self.timeline, p, &hop_lines);
        }
        self
    }
}
