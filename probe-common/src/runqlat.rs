//! Run-queue latency (bcc `runqlat` semantics): classic tracepoints on `sched:sched_wakeup`,
//! `sched_wakeup_new` and `sched_switch`, or one raw tracepoint on `sched_switch` reading the
//! scheduler's own `task_struct.sched_info` when the kernel's BTF gives its offset. Both
//! variants fill the same histograms.

use crate::assert_size;

/// Number of log2 buckets; bucket `i` holds delays in `[2^i, 2^(i+1))` microseconds
/// (bucket 0 also holds 0 µs). 2^31 µs is 35 minutes: nothing real lands beyond it.
pub const SLOTS: usize = 32;

/// `tgid -> Hist`: per-process run-queue delay histogram.
pub const MAP_HISTS: &str = "RUNQ_HISTS";
/// `tid -> u64` enqueue timestamp (ns) of runnable tasks not yet on a CPU.
pub const MAP_START: &str = "RUNQ_START";
/// `tid -> SchedInfo` as last seen at the task's switch-out (raw variant; an LRU map).
pub const MAP_LAST: &str = "RUNQ_LAST";
/// Per-CPU `u32`: the process (tgid) of the task that handed the CPU to the one on it now
/// (raw variant).
pub const MAP_HOLDER: &str = "RUNQ_HOLDER";
/// Per-CPU `u64` counters of what could not be recorded, per hook: slot
/// [`crate::drop_slot`]`(HOOK_*, DROP_*, DROP_KINDS)`.
pub const MAP_DROPS: &str = "RUNQ_DROPS";

/// `sched:sched_wakeup`.
pub const HOOK_WAKEUP: u32 = 0;
/// `sched:sched_wakeup_new`.
pub const HOOK_WAKEUP_NEW: u32 = 1;
/// `sched:sched_switch` (classic tracepoint).
pub const HOOK_SWITCH: u32 = 2;
/// `sched_switch` raw tracepoint.
pub const HOOK_RAW_SWITCH: u32 = 3;
/// Number of hooks; [`HOOK_NAMES`] names each.
pub const HOOKS: u32 = 4;
/// Each hook's name, by `HOOK_*`.
pub const HOOK_NAMES: [&str; HOOKS as usize] = [
    "sched:sched_wakeup",
    "sched:sched_wakeup_new",
    "sched:sched_switch",
    "raw_tp:sched_switch",
];

/// [`MAP_START`] was full: a wakeup could not be stamped.
pub const DROP_START_FULL: u32 = 0;
/// [`MAP_HISTS`] was full: a process's histogram could not be created.
pub const DROP_HIST_FULL: u32 = 1;
/// Number of drop counters per hook.
pub const DROP_KINDS: u32 = 2;
/// Each drop counter's name, by `DROP_*`.
pub const DROP_NAMES: [&str; DROP_KINDS as usize] = ["start_full", "hist_full"];
/// Every `(HOOK_*, DROP_*)` pair a program can count: what userspace exports.
pub const LOSSES: [(u32, u32); 5] = [
    (HOOK_WAKEUP, DROP_START_FULL),
    (HOOK_WAKEUP_NEW, DROP_START_FULL),
    (HOOK_SWITCH, DROP_START_FULL),
    (HOOK_SWITCH, DROP_HIST_FULL),
    (HOOK_RAW_SWITCH, DROP_HIST_FULL),
];

/// Capacity of [`MAP_START`]: runnable-but-waiting tasks at any instant.
pub const START_ENTRIES: u32 = 65_536;
/// Capacity of [`MAP_LAST`]: threads of watched processes; the least recently switched are
/// evicted (their next sample is skipped).
pub const LAST_ENTRIES: u32 = 65_536;
/// Capacity of [`MAP_HISTS`]: distinct processes with a histogram.
pub const HIST_ENTRIES: u32 = 16_384;

/// Names of the globals that userspace fills from the tracepoint format files.
pub mod globals {
    /// Offset of `pid` in `sched_wakeup` / `sched_wakeup_new`.
    pub const WAKEUP_PID: &str = "WAKEUP_PID_OFF";
    /// Offset of `prev_pid` in `sched_switch`.
    pub const SWITCH_PREV_PID: &str = "SWITCH_PREV_PID_OFF";
    /// Offset of `prev_state` in `sched_switch`.
    pub const SWITCH_PREV_STATE: &str = "SWITCH_PREV_STATE_OFF";
    /// Offset of `next_pid` in `sched_switch`.
    pub const SWITCH_NEXT_PID: &str = "SWITCH_NEXT_PID_OFF";
    /// Bits of `prev_state` that mean "not runnable" (from the format's `__print_flags`).
    pub const STATE_MASK: &str = "SWITCH_STATE_MASK";
    /// Byte offset of `sched_info.pcount` in `struct task_struct`, with `run_delay` right
    /// after it (raw-tracepoint variant, from BTF).
    pub const TASK_SCHED_INFO: &str = "TASK_SCHED_INFO_OFF";
}

/// A log2 histogram of run-queue delay in microseconds.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hist {
    /// Counts per log2 bucket.
    pub slots: [u64; SLOTS],
    /// Total number of samples.
    pub count: u64,
    /// Sum of all delays, microseconds.
    pub sum_us: u64,
    /// The part of `sum_us` that ended with the CPU handed over by a thread of the same
    /// process: waits behind its own threads, not behind other processes or an idle CPU it
    /// could not use (a quota, a migration).
    pub self_us: u64,
}
assert_size!(Hist, SLOTS * 8 + 24);

impl Hist {
    /// An empty histogram.
    pub const ZERO: Self = Self {
        slots: [0; SLOTS],
        count: 0,
        sum_us: 0,
        self_us: 0,
    };
}

/// The per-CPU record of the task that was just switched in: its tid and how long it waited.
/// Its tgid is only known when it is switched out again (then it is `current`), so the sample
/// is recorded then. This avoids reading `task_struct`; only the classic variant uses it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Pending {
    /// Thread id switched in; 0 = nothing pending.
    pub tid: u32,
    /// The process (tgid) of the task that handed it the CPU.
    pub holder: u32,
    /// Run-queue delay of that switch-in, microseconds.
    pub delay_us: u64,
}
assert_size!(Pending, 16);

/// The head of the kernel's `struct sched_info`: `pcount` (`unsigned long`) and `run_delay`
/// (`unsigned long long`), adjacent in every kernel since 2.6 (checked against BTF at load).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedInfo {
    /// Times the task was switched in.
    pub pcount: u64,
    /// Nanoseconds spent runnable on a run queue, summed.
    pub run_delay_ns: u64,
}
assert_size!(SchedInfo, 16);

/// Log2 bucket of a value (bcc's `log2l`): 0 and 1 -> 0, 2..3 -> 1, 4..7 -> 2, ...
#[must_use]
#[inline]
pub const fn log2_slot(v: u64) -> usize {
    if v == 0 {
        return 0;
    }
    let s = 63 - v.leading_zeros() as usize;
    if s >= SLOTS { SLOTS - 1 } else { s }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: both are repr(C), Copy, with explicit padding and no invalid bit patterns.
    unsafe impl aya::Pod for super::Hist {}
    unsafe impl aya::Pod for super::Pending {}
    unsafe impl aya::Pod for super::SchedInfo {}
}
