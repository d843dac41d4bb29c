//! Process identity from procfs.

use std::fs;

/// The short command name of `pid` (`/proc/<pid>/comm`), or `"?"` if it has exited.
#[must_use]
pub fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_or_else(|_| "?".to_string(), |s| s.trim_end().to_string())
}

/// Whether process `pid` still exists.
#[must_use]
pub fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Thread ids of process `pid`.
#[must_use]
pub fn threads(pid: u32) -> Vec<u32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}
