//! Run-queue latency probe: bcc runqlat's per-process log2 histograms.
//!
//! Two kernel variants fill the same histograms: one raw tracepoint on `sched_switch` that reads
//! the scheduler's own wait accounting (`task_struct.sched_info`, offset from this kernel's BTF;
//! see `probe-ebpf/src/runqlat_raw.rs`), preferred because it costs an unwatched task almost
//! nothing; and classic tracepoints on `sched:sched_wakeup`, `sched:sched_wakeup_new` and
//! `sched:sched_switch` that stamp wakeups (fields at tracefs format offsets) when BTF lacks the
//! offset or the raw attach fails. [`Probes::hooks`] names the one in use: `raw:sched_switch`
//! or `sched:sched_switch`.

use std::{collections::BTreeMap, path::Path};

use aya::maps::{HashMap, MapData};
use probe_common::runqlat::{self as rq, Hist, globals};

use super::{
    Global, ProbeError, Probes,
    btf::{Btf, BtfError},
    tracefs::Format,
};

/// Raw-tracepoint programs and the tracepoint each attaches to.
const RAW: [(&str, &str); 1] = [("runq_raw_switch", "sched_switch")];

/// Classic tracepoint programs and the `sched:` event each attaches to.
const CLASSIC: [(&str, &str); 3] = [
    ("runq_wakeup", "sched_wakeup"),
    ("runq_wakeup_new", "sched_wakeup_new"),
    ("runq_switch", "sched_switch"),
];

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

/// The raw variant's global: the byte offset of `task_struct.sched_info.pcount` in this
/// kernel's BTF, with `run_delay` the next 8 bytes. An error means the raw variant cannot be
/// used.
pub(crate) fn raw_globals(btf: &Btf) -> Result<Vec<Global>, BtfError> {
    // Kernels that gate the accounting (older ones, without delay accounting) print zeros.
    let schedstat = std::fs::read_to_string("/proc/self/schedstat").unwrap_or_default();
    if !sched_info_counts(&schedstat) {
        return Err(BtfError::Malformed(format!(
            "the scheduler does not count switches (/proc/self/schedstat: {:?})",
            schedstat.trim()
        )));
    }
    raw_globals_from(btf)
}

/// Whether a `/proc/<pid>/schedstat` line (`runtime run_delay pcount`) of a running process
/// shows the scheduler's accounting at work: a running process was switched in at least once.
fn sched_info_counts(schedstat: &str) -> bool {
    schedstat
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|pcount| pcount > 0)
}

fn raw_globals_from(btf: &Btf) -> Result<Vec<Global>, BtfError> {
    let (info, _) = btf.member_offset("task_struct", "sched_info")?;
    let pcount = btf.sized_member("sched_info", "pcount", 8)?;
    let delay = btf.sized_member("sched_info", "run_delay", 8)?;
    // The program reads both as one `SchedInfo` (two adjacent u64s).
    if delay != pcount + 8 {
        return Err(BtfError::Malformed(format!(
            "sched_info.run_delay (at {delay}) does not follow .pcount (at {pcount})"
        )));
    }
    Ok(vec![(
        globals::TASK_SCHED_INFO,
        u64::from(info + pcount),
        4,
    )])
}

/// Which kernel programs the run-queue family uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Variant {
    /// Raw tracepoints when possible, else classic ones. `INFERSCOPE_RUNQ_VARIANT=classic` or
    /// `=raw` in the environment overrides this (the daemon's knob, docs/explain.md).
    #[default]
    Auto,
    /// Raw tracepoints only; an error when they cannot be used.
    Raw,
    /// Classic tracepoints only.
    Classic,
}

/// Environment variable that overrides [`Variant::Auto`].
pub const VARIANT_ENV: &str = "INFERSCOPE_RUNQ_VARIANT";

/// Attaches the raw variant when BTF gave its offsets and every raw attach works, else the
/// classic one. Both variants are never attached together: they would double-count.
pub(crate) fn attach(probes: &mut Probes, variant: Variant) -> Result<(), ProbeError> {
    let variant = match (variant, std::env::var(VARIANT_ENV).as_deref()) {
        (Variant::Auto, Ok("classic")) => Variant::Classic,
        (Variant::Auto, Ok("raw")) => Variant::Raw,
        (v, _) => v,
    };
    if variant != Variant::Classic {
        let result = match probes.runq_raw_unavailable.clone() {
            None => attach_raw(probes),
            Some(source) => Err(ProbeError::Btf {
                what: "raw:sched_switch needs task_struct offsets from BTF".into(),
                source,
            }),
        };
        match result {
            Ok(()) => return Ok(()),
            Err(e) if variant == Variant::Raw => return Err(e),
            Err(e) => tracing::info!("run-queue: {e}; using classic tracepoints"),
        }
    }
    for (prog, event) in CLASSIC {
        probes.attach_tracepoint(prog, "sched", event)?;
    }
    Ok(())
}

/// Attaches all raw programs, or none: on a failure the ones attached are unloaded again and
/// only the failed hook stays in [`Probes::hooks`], with its reason.
fn attach_raw(probes: &mut Probes) -> Result<(), ProbeError> {
    for (i, (prog, tp)) in RAW.iter().enumerate() {
        if let Err(e) = probes.attach_raw_tracepoint(prog, tp) {
            for (prog, tp) in &RAW[..=i] {
                probes.unload(prog);
                if *prog != RAW[i].0 {
                    probes.forget_hook(&format!("raw:{tp}"));
                }
            }
            return Err(e);
        }
    }
    Ok(())
}

impl Probes {
    /// Attaches the run-queue family with a chosen [`Variant`];
    /// `attach(Family::Runqlat)` is `attach_runqlat(Variant::Auto)`.
    pub fn attach_runqlat(&mut self, variant: Variant) -> Result<(), ProbeError> {
        attach(self, variant)
    }

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
            start_full: self.drop_kind_sum(
                rq::MAP_DROPS,
                rq::DROP_START_FULL,
                rq::DROP_KINDS,
                rq::HOOKS,
            )?,
            hist_full: self.drop_kind_sum(
                rq::MAP_DROPS,
                rq::DROP_HIST_FULL,
                rq::DROP_KINDS,
                rq::HOOKS,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::btf::VMLINUX;

    #[test]
    fn raw_globals_from_this_kernels_btf() {
        let Ok(btf) = Btf::from_file(VMLINUX) else {
            println!("skipped: {VMLINUX} not readable");
            return;
        };
        let g = raw_globals_from(&btf).unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].0, globals::TASK_SCHED_INFO);
        assert!(g[0].1 > 0 && g[0].2 == 4, "{g:?}");
    }

    #[test]
    fn schedstat_lines() {
        assert!(sched_info_counts("1234 56 7\n"));
        assert!(!sched_info_counts("0 0 0\n"), "accounting off");
        assert!(!sched_info_counts(""), "no file");
        assert!(!sched_info_counts("garbage"));
    }
}
