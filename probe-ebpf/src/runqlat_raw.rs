//! Run-queue latency from raw tracepoints: the same maps and semantics as [`crate::runqlat`],
//! without the perf record the kernel fills for every classic tracepoint hit (measured: ~20%
//! of a pipe ping-pong's throughput for two empty classic programs).
//!
//! Raw tracepoints pass the `TP_PROTO` arguments, i.e. `task_struct` pointers. `pid` and `tgid`
//! are read at byte offsets userspace found in this kernel's BTF. Knowing the tgid at wakeup
//! lets unwatched tasks be skipped before anything is stamped, and knowing next's tgid at
//! switch-in records the sample at once: no per-CPU pending slot.

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};

use crate::{
    runqlat::{RUNQ_START, record, stamp},
    watch::{current, global, watched_fast},
};

#[unsafe(no_mangle)]
static TASK_PID_OFF: u32 = 0;
#[unsafe(no_mangle)]
static TASK_TGID_OFF: u32 = 0;

/// `(tgid, tid)` of the task at `task` (a `struct task_struct *` from the kernel).
#[inline(always)]
fn task_ids(task: u64) -> Result<(u32, u32), i32> {
    let base = task as *const u8;
    let (pid_off, tgid_off) = (global(&TASK_PID_OFF), global(&TASK_TGID_OFF));
    // `pid` and `tgid` are adjacent in every kernel's task_struct so far: one helper call
    // instead of two. The globals are frozen .rodata, so the verifier drops the other branch.
    if tgid_off == pid_off + 4 {
        // SAFETY: bpf_probe_read_kernel checks the address; offsets come from this kernel's BTF.
        let both: u64 =
            unsafe { bpf_probe_read_kernel(base.wrapping_add(pid_off as usize).cast())? };
        // Little-endian target: pid is the low half.
        return Ok(((both >> 32) as u32, both as u32));
    }
    // SAFETY: as above.
    let tid: u32 = unsafe { bpf_probe_read_kernel(base.wrapping_add(pid_off as usize).cast())? };
    let tgid: u32 = unsafe { bpf_probe_read_kernel(base.wrapping_add(tgid_off as usize).cast())? };
    Ok((tgid, tid))
}

/// `sched_wakeup(struct task_struct *p)`.
#[raw_tracepoint(tracepoint = "sched_wakeup")]
pub fn runq_raw_wakeup(ctx: RawTracePointContext) -> u32 {
    match try_wakeup(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

/// `sched_wakeup_new(struct task_struct *p)`.
#[raw_tracepoint(tracepoint = "sched_wakeup_new")]
pub fn runq_raw_wakeup_new(ctx: RawTracePointContext) -> u32 {
    match try_wakeup(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_wakeup(ctx: &RawTracePointContext) -> Result<(), i32> {
    let (tgid, tid) = task_ids(ctx.arg::<u64>(0))?;
    // Filter here: an unwatched task is never stamped, so its switch-in finds nothing.
    if tid != 0 && watched_fast(tgid) {
        stamp(tid);
    }
    Ok(())
}

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state)`.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn runq_raw_switch(ctx: RawTracePointContext) -> u32 {
    match try_switch(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_switch(ctx: &RawTracePointContext) -> Result<(), i32> {
    let preempt = ctx.arg::<u64>(0) & 0xff != 0;
    let next = ctx.arg::<u64>(2);
    let prev_state = ctx.arg::<u64>(3) as u32;

    // Still runnable (preempted, or yielding in TASK_RUNNING): it goes back on the run queue.
    // `prev` is `current` until the context switch, so its ids need no memory read.
    if preempt || prev_state == 0 {
        let (tgid, tid) = current();
        if tid != 0 && watched_fast(tgid) {
            stamp(tid);
        }
    }

    let (tgid, tid) = task_ids(next)?;
    // An unwatched task was never stamped: skip the hash lookup (the common case with a list).
    if tid == 0 || !watched_fast(tgid) {
        return Ok(());
    }
    // SAFETY: the value is a plain u64 copied out before the remove.
    let Some(ts) = (unsafe { RUNQ_START.get(&tid) }).copied() else {
        return Ok(());
    };
    let now = unsafe { bpf_ktime_get_ns() };
    let _ = RUNQ_START.remove(&tid);
    record(tgid, now.saturating_sub(ts) / 1000);
    Ok(())
}
