//! One task per ring buffer: wait for readiness (`AsyncFd`), decode each record, and pass it
//! on through a bounded channel. A full channel drops the record and counts it.

use std::{
    marker::PhantomData,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use aya::maps::{MapData, RingBuf};
use tokio::{io::unix::AsyncFd, sync::mpsc};

/// Records dropped in userspace because the consumer was too slow; only grows.
#[derive(Debug, Default)]
pub struct ChannelDrops(AtomicU64);

impl ChannelDrops {
    /// Current count.
    #[must_use]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Decodes a `#[repr(C)]` record from ring-buffer bytes; `None` if too short.
#[must_use]
pub fn decode<T: Copy>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < size_of::<T>() {
        return None;
    }
    // SAFETY: T is a plain repr(C) Copy type shared with the kernel; every bit pattern is valid
    // and read_unaligned has no alignment requirement.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// A running reader; dropping the receiver ends it.
pub struct Reader<T> {
    /// Decoded records.
    pub rx: mpsc::Receiver<T>,
    /// Records dropped because `rx` was full.
    pub drops: Arc<ChannelDrops>,
    _t: PhantomData<T>,
}

/// How often a reader looks at its ring without being woken (at 20 ms the idle daemon spent
/// 0.8% of a core on the polls; at 100 ms, ~0.1%).
pub const POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Decodes every record in `ring` and passes it on; `false` once the receiver is gone.
fn forward<T: Copy>(
    ring: &mut RingBuf<MapData>,
    tx: &mpsc::Sender<T>,
    drops: &ChannelDrops,
) -> bool {
    while let Some(item) = ring.next() {
        let Some(rec) = decode::<T>(&item) else {
            continue;
        };
        match tx.try_send(rec) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                drops.0.fetch_add(1, Ordering::Relaxed);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
        }
    }
    true
}

/// Spawns the reader task of `ring` on the current tokio runtime.
pub fn spawn<T: Copy + Send + 'static>(
    ring: RingBuf<MapData>,
    capacity: usize,
) -> std::io::Result<Reader<T>> {
    let (tx, rx) = mpsc::channel(capacity);
    let drops = Arc::new(ChannelDrops::default());
    let counter = Arc::clone(&drops);
    // SAFETY: the ring buffer owns its map fd for as long as the AsyncFd owns the ring buffer.
    let mut fd = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)?;
    tokio::spawn(async move {
        // The kernel wakes this task only when the ring fills up (`submit_flags` in
        // probe-ebpf): poll it on a short timer too.
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let open = tokio::select! {
                r = fd.readable_mut() => {
                    let Ok(mut guard) = r else { return };
                    let open = forward(guard.get_inner_mut(), &tx, &counter);
                    guard.clear_ready();
                    open
                }
                _ = tick.tick() => forward(fd.get_mut(), &tx, &counter),
            };
            if !open {
                return;
            }
        }
    });
    Ok(Reader {
        rx,
        drops,
        _t: PhantomData,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_checks_length() {
        #[derive(Clone, Copy, Debug, PartialEq)]
        #[repr(C)]
        struct Rec {
            a: u32,
            b: u64,
        }
        let mut bytes = vec![0u8; 16];
        bytes[0] = 7;
        bytes[8] = 9;
        assert_eq!(decode::<Rec>(&bytes), Some(Rec { a: 7, b: 9 }));
        assert_eq!(decode::<Rec>(&bytes[..8]), None);
    }
}
