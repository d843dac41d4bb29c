//! Accepted connections waiting for their owner. The kernel completes a passive handshake in
//! softirq context, before any process has taken the socket, so an accept event names no
//! process: counting every one would count the accepts of every server on the node. An accept
//! waits here, by its socket, until a later event of that socket names the process that read
//! from it (its first exchange, a retransmit, its close), or the kernel's connection table does
//! at the end of a window; then it counts for that process when it is a watched server, and
//! not at all otherwise.

use std::collections::HashMap;

/// Most accepts waiting at once: a node accepting faster than its servers read is dropping
/// them here, not growing without bound. An accept of a process nobody watches waits until
/// its socket closes.
const MAX_WAITING: usize = 16_384;

/// Accept latency (ms) by kernel socket address, of sockets no process has touched yet.
#[derive(Debug, Default)]
pub struct Accepts {
    waiting: HashMap<u64, f64>,
    /// Accepts not kept because `MAX_WAITING` were waiting.
    pub dropped: u64,
}

impl Accepts {
    /// Socket `sk` finished its handshake `ms` after the SYN.
    pub fn accepted(&mut self, sk: u64, ms: f64) {
        if self.waiting.len() >= MAX_WAITING && !self.waiting.contains_key(&sk) {
            self.dropped += 1;
            return;
        }
        self.waiting.insert(sk, ms);
    }

    /// A process now owns `sk`: its accept latency, when it was waiting (once).
    pub fn owned(&mut self, sk: u64) -> Option<f64> {
        self.waiting.remove(&sk)
    }

    /// Whether no accept is waiting.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// How many accepts are waiting.
    #[must_use]
    pub fn len(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accept_counts_once_when_its_owner_is_known() {
        let mut a = Accepts::default();
        a.accepted(0xa, 0.2);
        a.accepted(0xb, 0.3);
        assert_eq!(a.owned(0xa), Some(0.2));
        assert_eq!(a.owned(0xa), None, "counted once");
        assert_eq!(a.owned(0xc), None, "a socket accepted before the probes");
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn waiting_accepts_are_bounded() {
        let mut a = Accepts::default();
        for sk in 0..MAX_WAITING as u64 + 10 {
            a.accepted(sk, 0.1);
        }
        assert_eq!(a.len(), MAX_WAITING);
        assert_eq!(a.dropped, 10);
        // A socket already waiting is updated, not dropped.
        a.accepted(0, 0.5);
        assert_eq!((a.dropped, a.owned(0)), (10, Some(0.5)));
    }
}
