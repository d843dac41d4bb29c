//! Run-queue latency with bcc runqlat's semantics, from classic tracepoints only.
//!
//! A task is stamped when it becomes runnable (`sched_wakeup`, `sched_wakeup_new`, or
//! `sched_switch` with a still-runnable `prev`: preemption re-queues it). When it is switched in,
//! the wait is computed and parked per CPU; the next `sched_switch` on that CPU switches the same
//! task out, and since it is then `current`, its tgid is known and the sample lands in the
//! per-process histogram, with whether the task that handed it the CPU (`current` at its
//! switch-in) was of the same process. Field offsets come from userspace (tracefs format files).

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{map, tracepoint},
    maps::{HashMap, PerCpuArray},
    programs::TracePointContext,
};

use crate::{
    atomic_add,
    watch::{count_drop, current, global, watched_fast},
};
use probe_common::drop_slot;
use probe_common::runqlat::{
    DROP_HIST_FULL, DROP_KINDS, DROP_START_FULL, HIST_ENTRIES, HOOK_SWITCH, HOOK_WAKEUP,
    HOOK_WAKEUP_NEW, HOOKS, Hist, Pending, START_ENTRIES, log2_slot,
};

#[unsafe(no_mangle)]
static WAKEUP_PID_OFF: u32 = 0;
#[unsafe(no_mangle)]
static SWITCH_PREV_PID_OFF: u32 = 0;
#[unsafe(no_mangle)]
static SWITCH_PREV_STATE_OFF: u32 = 0;
#[unsafe(no_mangle)]
static SWITCH_NEXT_PID_OFF: u32 = 0;
#[unsafe(no_mangle)]
static SWITCH_STATE_MASK: u64 = 0xff;

#[map]
static RUNQ_START: HashMap<u32, u64> = HashMap::with_max_entries(START_ENTRIES, 0);
#[map]
static RUNQ_HISTS: HashMap<u32, Hist> = HashMap::with_max_entries(HIST_ENTRIES, 0);
#[map]
static RUNQ_PENDING: PerCpuArray<Pending> = PerCpuArray::with_max_entries(1, 0);
#[map]
static RUNQ_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(HOOKS * DROP_KINDS, 0);

const BPF_NOEXIST: u64 = 1;

/// Stamps `tid` as runnable now (for hook `hook`'s loss count).
#[inline(always)]
fn stamp(tid: u32, hook: u32) {
    if tid == 0 {
        return;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if RUNQ_START.insert(tid, now, 0).is_err() {
        count_drop(&RUNQ_DROPS, drop_slot(hook, DROP_START_FULL, DROP_KINDS));
    }
}

#[tracepoint]
pub fn runq_wakeup(ctx: TracePointContext) -> u32 {
    match try_wakeup(&ctx, HOOK_WAKEUP) {
        Ok(()) | Err(_) => 0,
    }
}

#[tracepoint]
pub fn runq_wakeup_new(ctx: TracePointContext) -> u32 {
    match try_wakeup(&ctx, HOOK_WAKEUP_NEW) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_wakeup(ctx: &TracePointContext, hook: u32) -> Result<(), i32> {
    let tid: i32 = unsafe { ctx.read_at(global(&WAKEUP_PID_OFF) as usize)? };
    stamp(tid as u32, hook);
    Ok(())
}

#[tracepoint]
pub fn runq_switch(ctx: TracePointContext) -> u32 {
    match try_switch(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_switch(ctx: &TracePointContext) -> Result<(), i32> {
    let prev: i32 = unsafe { ctx.read_at(global(&SWITCH_PREV_PID_OFF) as usize)? };
    let prev_state: i64 = unsafe { ctx.read_at(global(&SWITCH_PREV_STATE_OFF) as usize)? };
    let next: i32 = unsafe { ctx.read_at(global(&SWITCH_NEXT_PID_OFF) as usize)? };
    let pending = RUNQ_PENDING.get_ptr_mut(0).ok_or(0)?;

    // `prev` is still current here: settle the sample parked when it was switched in.
    // SAFETY: per-CPU slot; tracepoints do not nest on one CPU.
    let parked = unsafe { *pending };
    let tgid = current().0;
    if parked.tid != 0 && parked.tid == prev as u32 && watched_fast(tgid) {
        record(tgid, parked.delay_us, parked.holder == tgid, HOOK_SWITCH);
    }

    // Preempted while runnable: it goes back on the run queue now.
    if (prev_state as u64) & global(&SWITCH_STATE_MASK) == 0 {
        stamp(prev as u32, HOOK_SWITCH);
    }

    let mut park = Pending {
        tid: 0,
        holder: 0,
        delay_us: 0,
    };
    if next != 0 {
        let tid = next as u32;
        // SAFETY: the value is a plain u64 copied out before the remove.
        if let Some(ts) = unsafe { RUNQ_START.get(&tid) } {
            let ts = *ts;
            let now = unsafe { bpf_ktime_get_ns() };
            let _ = RUNQ_START.remove(&tid);
            // `prev` (current) hands `next` the CPU.
            park = Pending {
                tid,
                holder: tgid,
                delay_us: now.saturating_sub(ts) / 1000,
            };
        }
    }
    unsafe { *pending = park };
    Ok(())
}

/// Adds one sample to `tgid`'s histogram (for hook `hook`'s loss count); `own` when a thread of
/// the same process handed it the CPU. Callers have checked that it is watched.
#[inline(always)]
pub(crate) fn record(tgid: u32, delay_us: u64, own: bool, hook: u32) {
    if tgid == 0 {
        return;
    }
    let hist = match RUNQ_HISTS.get_ptr_mut(&tgid) {
        Some(h) => h,
        None => {
            if RUNQ_HISTS.insert(&tgid, &Hist::ZERO, BPF_NOEXIST).is_err() {
                // Either another CPU created it first (fine) or the map is full.
                if RUNQ_HISTS.get_ptr_mut(&tgid).is_none() {
                    count_drop(&RUNQ_DROPS, drop_slot(hook, DROP_HIST_FULL, DROP_KINDS));
                    return;
                }
            }
            match RUNQ_HISTS.get_ptr_mut(&tgid) {
                Some(h) => h,
                None => return,
            }
        }
    };
    let slot = log2_slot(delay_us);
    // SAFETY: `hist` points into a map value that lives while the program runs; the counters
    // are shared across CPUs, hence atomic adds.
    unsafe {
        atomic_add(&raw mut (*hist).slots[slot], 1);
        atomic_add(&raw mut (*hist).count, 1);
        atomic_add(&raw mut (*hist).sum_us, delay_us);
        if own {
            atomic_add(&raw mut (*hist).self_us, delay_us);
        }
    }
}
