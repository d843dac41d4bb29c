//! Run-queue latency from one raw tracepoint, `sched_switch`, with the scheduler's own
//! accounting: the same histograms as [`crate::runqlat`] at a fraction of its cost.
//!
//! The kernel keeps `task_struct.sched_info` for every task (`CONFIG_SCHED_INFO`, the source of
//! `/proc/<pid>/schedstat`): `pcount` counts the times it was switched in and `run_delay` sums
//! the nanoseconds it waited runnable on a run queue, after a wakeup or a preemption alike
//! (runqlat's semantics). Between two switch-outs of a task it was switched in exactly once,
//! so the growth of `run_delay` between them is the wait before that run. At `sched_switch`,
//! `prev` is `current`: its ids come from a helper and an unwatched task costs no memory read
//! and no map lookup beyond one per-CPU slot: the process of the task that handed the CPU to
//! the one on it now, so that a wait ended by a thread of the same process (its own threads
//! crowding each other) is told apart from one ended by another process or an idle CPU. No
//! wakeup hooks, no timestamps: a pinned pipe ping-pong pays two cheap programs per round trip
//! instead of four.
//!
//! A sample lands when the task is switched out after the run that ended its wait (a CPU-bound
//! task: at its next preemption). The offset of `sched_info.pcount` (with `run_delay` right
//! after it) comes from this kernel's BTF.

use aya_ebpf::{
    helpers::bpf_probe_read_kernel,
    macros::{map, raw_tracepoint},
    maps::{LruHashMap, PerCpuArray},
    programs::RawTracePointContext,
};
use probe_common::runqlat::{HOOK_RAW_SWITCH, LAST_ENTRIES, SchedInfo};

use crate::{
    runqlat::record,
    watch::{current, global, watched_fast},
};

#[unsafe(no_mangle)]
static TASK_SCHED_INFO_OFF: u32 = 0;

/// `tid -> sched_info` as last seen at the task's switch-out.
#[map]
static RUNQ_LAST: LruHashMap<u32, SchedInfo> = LruHashMap::with_max_entries(LAST_ENTRIES, 0);

/// Per CPU: the tgid of the task that handed the CPU to the one on it now.
#[map]
static RUNQ_HOLDER: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state)`.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn runq_raw_switch(ctx: RawTracePointContext) -> u32 {
    match try_switch(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_switch(ctx: &RawTracePointContext) -> Result<(), i32> {
    let (tgid, tid) = current();
    let slot = RUNQ_HOLDER.get_ptr_mut(0).ok_or(0)?;
    // SAFETY: per-CPU slot; tracepoints do not nest on one CPU. `prev` (current) hands `next`
    // the CPU; what handed it to `prev` is read first.
    let holder = unsafe {
        let h = *slot;
        *slot = tgid;
        h
    };
    if tid == 0 || !watched_fast(tgid) {
        return Ok(());
    }
    let prev = ctx.arg::<u64>(1) as *const u8;
    // SAFETY: bpf_probe_read_kernel checks the address; the offset comes from this kernel's BTF.
    let now: SchedInfo = unsafe {
        bpf_probe_read_kernel(
            prev.wrapping_add(global(&TASK_SCHED_INFO_OFF) as usize)
                .cast(),
        )?
    };
    // SAFETY: the value is plain data, copied out before the map is written.
    let last = unsafe { RUNQ_LAST.get(&tid) }.copied();
    let _ = RUNQ_LAST.insert(&tid, &now, 0);
    // One switch-in since the last switch-out (else the task is new to the map, or the tid
    // was reused): the growth is exactly one wait.
    if let Some(last) = last
        && now.pcount == last.pcount + 1
    {
        record(
            tgid,
            now.run_delay_ns.saturating_sub(last.run_delay_ns) / 1000,
            holder == tgid,
            HOOK_RAW_SWITCH,
        );
    }
    Ok(())
}
