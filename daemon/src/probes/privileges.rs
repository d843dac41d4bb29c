//! What this process may do with BPF: root, or the capabilities each hook needs.

/// `CAP_SYS_ADMIN`: uprobes need it on this kernel (`perf_event_open` of a uprobe PMU).
pub const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_PERFMON`: tracepoint and perf-event attach.
pub const CAP_PERFMON: u32 = 38;
/// `CAP_BPF`: loading programs and creating maps.
pub const CAP_BPF: u32 = 39;

/// Whether the effective uid is 0.
#[must_use]
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The effective capability set, from `/proc/self/status` (`CapEff`).
#[must_use]
pub fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_cap_eff(&s))
        .unwrap_or(0)
}

fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}

/// Whether capability `cap` is in the effective set.
#[must_use]
pub fn has_cap(cap: u32) -> bool {
    effective_caps() & (1 << cap) != 0
}

/// Fails with a one-line "what to do" unless BPF programs may be loaded and attached.
pub fn require_bpf(what: &str) -> Result<(), super::ProbeError> {
    let caps = effective_caps();
    let can = caps & (1 << CAP_SYS_ADMIN) != 0
        || (caps & (1 << CAP_BPF) != 0 && caps & (1 << CAP_PERFMON) != 0);
    if can {
        Ok(())
    } else {
        Err(super::ProbeError::Permission {
            what: what.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cap_eff() {
        let s = "Name:\tx\nCapPrm:\t000001ffffffffff\nCapEff:\t000000c000000000\n";
        let caps = parse_cap_eff(s).unwrap();
        assert_ne!(caps & (1 << CAP_BPF), 0);
        assert_ne!(caps & (1 << CAP_PERFMON), 0);
        assert_eq!(caps & (1 << CAP_SYS_ADMIN), 0);
        assert_eq!(parse_cap_eff("nothing"), None);
    }
}
