//! Which processes are the node's inference servers: the given pids, the listeners on the given
//! ports (in any network namespace), the processes with the given names, or, with none given,
//! every process mapping libcuda.

use crate::collect::{discover, procfs};

/// Finds the servers to watch; asked again every few windows as servers come and go.
#[derive(Debug, Clone, Default)]
pub struct Finder {
    /// `--port`: processes listening on these TCP ports.
    pub ports: Vec<u16>,
    /// `--pid`: these processes.
    pub pids: Vec<u32>,
    /// `--name`: processes whose name or command line contains one of these.
    pub names: Vec<String>,
}

impl Finder {
    /// The live servers now, sorted and unique.
    #[must_use]
    pub fn targets(&self) -> Vec<u32> {
        let mut pids = self.pids.clone();
        for &p in &self.ports {
            pids.extend(discover::pids_listening_on(p));
        }
        for n in &self.names {
            pids.extend(discover::pids_named(n));
        }
        if self.ports.is_empty() && self.pids.is_empty() && self.names.is_empty() {
            pids.extend(discover::pids_with_libcuda());
        }
        pids.retain(|&p| procfs::alive(p));
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

/// `1, 2, 3`.
pub(super) fn pid_list(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
