//! Run-queue latency probe (bcc runqlat semantics) on `sched:sched_wakeup`,
//! `sched:sched_wakeup_new` and `sched:sched_switch`.

use std::{collections::BTreeMap, path::Path};

use aya::maps::{HashMap, MapData};
use probe_common::runqlat::{self as rq, Hist, globals};

use super::{Global, ProbeError, Probes, tracefs::Format};

/// Counters of samples the kernel side could not record; they only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Drops {
    /// Wakeups that could not be stamped (start map full).
    pub start_full: u64,
    /// Samples of a process whose histogram could not be created (histogram map full).
    pub hist_full: u64,
}

/// The globals the kernel program needs, parsed from this kernel's tracefs.
pub(crate) fn globals(tracefs: &Path) -> Result<Vec<Global>, ProbeError> {
    let wakeup = Format::read(tracefs, "sched", "sched_wakeup")?;
    let wakeup_new = Format::read(tracefs, "sched", "sched_wakeup_new")?;
    let switch = Format::read(tracefs, "sched", "sched_switch")?;
    let pid = wakeup.offset("pid", 4)?;
    // One program serves both wakeup events, so their layouts must agree.
    if wakeup_new.offset("pid", 4)? != pid {
        return Err(ProbeError::Format {
            event: wakeup_new.event,
            reason: "`pid` offset differs from sched:sched_wakeup".into(),
        });
    }
    let mask = match switch.print_flags_mask() {
        0 => 0xff, // no flag table in the print format: the task-state bits of every kernel since 4.14
        m => m,
    };
    Ok(vec![
        (globals::WAKEUP_PID, u64::from(pid), 4),
        (
            globals::SWITCH_PREV_PID,
            u64::from(switch.offset("prev_pid", 4)?),
            4,
        ),
        (
            globals::SWITCH_PREV_STATE,
            u64::from(switch.offset("prev_state", 8)?),
            4,
        ),
        (
            globals::SWITCH_NEXT_PID,
            u64::from(switch.offset("next_pid", 4)?),
            4,
        ),
        (globals::STATE_MASK, mask, 8),
    ])
}

pub(crate) fn attach(probes: &mut Probes) -> Result<(), ProbeError> {
    for (prog, event) in [
        ("runq_wakeup", "sched_wakeup"),
        ("runq_wakeup_new", "sched_wakeup_new"),
        ("runq_switch", "sched_switch"),
    ] {
        probes.attach_tracepoint(prog, "sched", event)?;
    }
    Ok(())
}

impl Probes {
    /// Cumulative run-queue histograms per tgid since attach.
    pub fn runq_snapshot(&self) -> Result<BTreeMap<u32, Hist>, ProbeError> {
        let err = |e| ProbeError::ebpf("reading run-queue histograms", e);
        let hists: HashMap<&MapData, u32, Hist> =
            HashMap::try_from(self.map(rq::MAP_HISTS)).map_err(err)?;
        Ok(hists.iter().filter_map(Result::ok).collect())
    }

    /// Forgets run-queue histograms of processes that have exited, so the map does not fill.
    pub fn runq_prune(&mut self, alive: impl Fn(u32) -> bool) -> Result<usize, ProbeError> {
        let err = |e| ProbeError::ebpf("pruning run-queue histograms", e);
        let mut hists: HashMap<&mut MapData, u32, Hist> =
            HashMap::try_from(self.map_mut(rq::MAP_HISTS)).map_err(err)?;
        let dead: Vec<u32> = hists
            .keys()
            .filter_map(Result::ok)
            .filter(|&t| !alive(t))
            .collect();
        for t in &dead {
            hists.remove(t).map_err(err)?;
        }
        Ok(dead.len())
    }

    /// What the run-queue programs could not record, summed over CPUs.
    pub fn runq_drops(&self) -> Result<Drops, ProbeError> {
        Ok(Drops {
            start_full: self.per_cpu_sum(rq::MAP_DROPS, rq::DROP_START_FULL)?,
            hist_full: self.per_cpu_sum(rq::MAP_DROPS, rq::DROP_HIST_FULL)?,
        })
    }
}
