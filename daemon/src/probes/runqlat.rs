//! Run-queue latency probe (bcc runqlat semantics) on `sched:sched_wakeup`,
//! `sched:sched_wakeup_new` and `sched:sched_switch`.

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray},
};
use probe_common::runqlat::{self as rq, Hist, globals};

use super::{ProbeError, tracefs::Format};

/// Counters of samples the kernel side could not record; they only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops {
    /// Wakeups that could not be stamped (start map full).
    pub start_full: u64,
    /// Samples of a process whose histogram could not be created (histogram map full).
    pub hist_full: u64,
}

/// The attached run-queue latency programs and their maps.
pub struct Runqlat {
    ebpf: Ebpf,
}

/// The globals the kernel program needs, parsed from this kernel's tracefs.
fn offsets() -> Result<Vec<(&'static str, u64, usize)>, ProbeError> {
    let tracefs = super::tracefs::ensure_mounted()?;
    let wakeup = Format::read(&tracefs, "sched", "sched_wakeup")?;
    let wakeup_new = Format::read(&tracefs, "sched", "sched_wakeup_new")?;
    let switch = Format::read(&tracefs, "sched", "sched_switch")?;
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

impl Runqlat {
    /// Loads and attaches the programs. `watch` limits recording to those tgids; empty = all.
    pub fn attach(watch: &[u32]) -> Result<Self, ProbeError> {
        super::privileges::require_bpf("runqlat")?;
        let mut me = Self {
            ebpf: super::load(&offsets()?)?,
        };
        me.set_watch(watch)?;
        for (prog, event) in [
            ("runq_wakeup", "sched_wakeup"),
            ("runq_wakeup_new", "sched_wakeup_new"),
            ("runq_switch", "sched_switch"),
        ] {
            super::attach_tracepoint(&mut me.ebpf, prog, "sched", event)?;
        }
        Ok(me)
    }

    /// Replaces the watch-list; empty records every process.
    pub fn set_watch(&mut self, tgids: &[u32]) -> Result<(), ProbeError> {
        let err = |e| ProbeError::ebpf("updating the runqlat watch-list", e);
        let mut mode: Array<&mut MapData, u32> = Array::try_from(
            self.ebpf
                .map_mut(rq::MAP_WATCH_MODE)
                .expect("map in object"),
        )
        .map_err(err)?;
        // Off while the list changes, so no process is wrongly skipped or recorded.
        mode.set(0, 0, 0).map_err(err)?;
        let mut watch: HashMap<&mut MapData, u32, u8> =
            HashMap::try_from(self.ebpf.map_mut(rq::MAP_WATCH).expect("map in object"))
                .map_err(err)?;
        let old: Vec<u32> = watch.keys().filter_map(Result::ok).collect();
        for k in old {
            watch.remove(&k).map_err(err)?;
        }
        for &t in tgids {
            watch.insert(t, 1, 0).map_err(err)?;
        }
        let mut mode: Array<&mut MapData, u32> = Array::try_from(
            self.ebpf
                .map_mut(rq::MAP_WATCH_MODE)
                .expect("map in object"),
        )
        .map_err(err)?;
        mode.set(0, u32::from(!tgids.is_empty()), 0).map_err(err)
    }

    /// Cumulative histograms per tgid since attach.
    pub fn snapshot(&self) -> Result<BTreeMap<u32, Hist>, ProbeError> {
        let err = |e| ProbeError::ebpf("reading run-queue histograms", e);
        let hists: HashMap<&MapData, u32, Hist> =
            HashMap::try_from(self.ebpf.map(rq::MAP_HISTS).expect("map in object")).map_err(err)?;
        Ok(hists.iter().filter_map(Result::ok).collect())
    }

    /// Forgets histograms of processes that have exited, so the map does not fill up.
    pub fn prune(&mut self, alive: impl Fn(u32) -> bool) -> Result<usize, ProbeError> {
        let err = |e| ProbeError::ebpf("pruning run-queue histograms", e);
        let mut hists: HashMap<&mut MapData, u32, Hist> =
            HashMap::try_from(self.ebpf.map_mut(rq::MAP_HISTS).expect("map in object"))
                .map_err(err)?;
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

    /// What the kernel side could not record, summed over CPUs.
    pub fn drops(&self) -> Result<Drops, ProbeError> {
        let err = |e| ProbeError::ebpf("reading runqlat drop counters", e);
        let drops: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(self.ebpf.map(rq::MAP_DROPS).expect("map in object"))
                .map_err(err)?;
        let sum = |i| drops.get(&i, 0).map(|v| v.iter().sum::<u64>()).map_err(err);
        Ok(Drops {
            start_full: sum(rq::DROP_START_FULL)?,
            hist_full: sum(rq::DROP_HIST_FULL)?,
        })
    }
}
