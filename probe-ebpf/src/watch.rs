//! The watch-list shared by every hook family, and small helpers the families share.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};

#[map]
static WATCH: HashMap<u32, u8> = HashMap::with_max_entries(1024, 0);
#[map]
static WATCH_MODE: Array<u32> = Array::with_max_entries(1, 0);
#[map]
static WATCH_BITS: Array<u64> = Array::with_max_entries(probe_common::WATCH_BITS_WORDS, 0);

/// Whether `tgid` is watched: always when the list is off, else when it is on the list.
#[inline(always)]
pub fn watched(tgid: u32) -> bool {
    match WATCH_MODE.get(0) {
        Some(&1) => unsafe { WATCH.get(&tgid) }.is_some(),
        _ => true,
    }
}

/// [`watched`] for hot paths (every scheduler event): the same answer from the bitmap copy of
/// the list, with array lookups only.
#[inline(always)]
pub fn watched_fast(tgid: u32) -> bool {
    match WATCH_MODE.get(0) {
        Some(&1) => WATCH_BITS
            .get(tgid >> 6)
            .is_some_and(|w| w & (1u64 << (tgid & 63)) != 0),
        _ => true,
    }
}

/// Whether the watch-list is on (only listed processes are watched).
#[inline(always)]
pub fn list_on() -> bool {
    matches!(WATCH_MODE.get(0), Some(&1))
}

/// Reads a global filled in by the loader.
#[inline(always)]
pub fn global<T: Copy>(v: &'static T) -> T {
    // SAFETY: globals live in .rodata, written by the loader before the program runs.
    unsafe { core::ptr::read_volatile(v) }
}

/// Adds one to per-CPU counter `kind` of `drops`; these only grow.
#[inline(always)]
pub fn count_drop(drops: &PerCpuArray<u64>, kind: u32) {
    if let Some(p) = drops.get_ptr_mut(kind) {
        // SAFETY: per-CPU slot; programs of one CPU do not preempt each other mid-update.
        unsafe { *p += 1 };
    }
}

/// Submit flags for a ring-buffer record: wake the reader only once a quarter of the ring is
/// used. A wakeup per record sends an IPI and wakes a task inside the traced kernel call
/// (measured: ~3 us per `inet_sock_set_state` hit instead of ~0.9); the reader polls the ring
/// every 100 ms anyway (`daemon/src/probes/reader.rs`).
#[inline(always)]
pub fn submit_flags(ring: &RingBuf, ring_bytes: u32) -> u64 {
    const BPF_RB_AVAIL_DATA: u64 = 0;
    const BPF_RB_NO_WAKEUP: u64 = 1;
    const BPF_RB_FORCE_WAKEUP: u64 = 2;
    if ring.query(BPF_RB_AVAIL_DATA) >= u64::from(ring_bytes / 4) {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// `(tgid, tid)` of the current task.
#[inline(always)]
pub fn current() -> (u32, u32) {
    let v = aya_ebpf::helpers::bpf_get_current_pid_tgid();
    ((v >> 32) as u32, v as u32)
}
