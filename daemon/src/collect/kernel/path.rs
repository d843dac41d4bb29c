//! RTT samples and retransmits of a process's connections over one window, from the
//! connection table's running counts.

use probe_common::sockets::Conn;

/// A connection's running counts, as the connection table holds them.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ConnCounts {
    rtt_samples: u64,
    srtt_sum_us: u64,
    retrans: u32,
}

impl ConnCounts {
    pub(super) fn of(c: &Conn) -> Self {
        Self {
            rtt_samples: c.rtt_samples,
            srtt_sum_us: c.srtt_sum_us,
            retrans: c.retrans,
        }
    }
}

/// RTT samples and retransmits of a process's connections over one window.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Path {
    pub(super) samples: u64,
    pub(super) srtt_sum_us: u64,
    pub(super) srtt_max_us: u32,
    pub(super) retrans: u64,
}

impl Path {
    /// Adds what `c` gained since `last`.
    pub(super) fn add(&mut self, c: &Conn, last: ConnCounts) {
        self.samples += c.rtt_samples.saturating_sub(last.rtt_samples);
        self.srtt_sum_us += c.srtt_sum_us.saturating_sub(last.srtt_sum_us);
        self.retrans += u64::from(c.retrans.saturating_sub(last.retrans));
        if c.rtt_samples > last.rtt_samples {
            self.srtt_max_us = self.srtt_max_us.max(c.srtt_last_us);
        }
    }

    pub(super) fn merge(&mut self, o: &Path) {
        self.samples += o.samples;
        self.srtt_sum_us += o.srtt_sum_us;
        self.srtt_max_us = self.srtt_max_us.max(o.srtt_max_us);
        self.retrans += o.retrans;
    }
}
