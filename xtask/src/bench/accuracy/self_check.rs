//! The generator's own run-queue self-check: a run under `--explain`, read from its report.

use std::path::Path;

use anyhow::Context as _;

use super::clients::{inferscope, run_dir};
use super::measures::How;
use super::sim::measured;
use crate::bench::procs;

/// `streams` under `--explain`: the generator's own run-queue delay and the verdict on it.
pub(super) fn self_check(cpus: (usize, usize), streams: usize) {
    let how = How {
        streams,
        secs: 10,
        ramp: None,
        explain: true,
    };
    let dir = run_dir(how);
    match measured(cpus, |sim| inferscope(sim, cpus.1, how)) {
        Ok(_) => match read_self_check(&dir.join("report.json")) {
            Ok(line) => println!("  self-check at {streams} streams (--explain): {line}"),
            Err(e) => println!("  self-check at {streams} streams: no explain report: {e:#}"),
        },
        Err(e) => println!("  self-check at {streams} streams (--explain) failed: {e:#}"),
    }
}

/// The explain report's generator run-queue p99 (highest window) and the phase's verdict.
fn read_self_check(path: &Path) -> anyhow::Result<String> {
    let v = procs::read_json(path)?;
    let windows = v
        .pointer("/timeline/windows")
        .and_then(serde_json::Value::as_array)
        .context("no timeline windows")?;
    let runq: Vec<f64> = windows
        .iter()
        .filter_map(|w| w.pointer("/runq/loadgen_p99_us")?.as_f64())
        .collect();
    let phase = v.pointer("/phases/0").context("no phase verdict")?;
    let dominant = phase
        .get("dominant")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("?");
    let suspect = phase
        .get("untrustworthy")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let max = runq.iter().copied().fold(f64::NAN, f64::max);
    Ok(format!(
        "generator run-queue p99 {} over {} windows; verdict `{dominant}`{}",
        if runq.is_empty() {
            "not watched".to_string()
        } else {
            format!("max {max:.0} µs, median {:.0} µs", median(&runq))
        },
        windows.len(),
        if suspect {
            ", the report flags its own latencies as suspect"
        } else {
            ", latencies trusted"
        }
    ))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_self_check_from_an_explain_report() {
        let dir = std::env::temp_dir().join(format!("xtask-selfcheck-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("report.json");
        let report = serde_json::json!({
            "timeline": {"windows": [
                {"runq": {"loadgen_p99_us": 40.0}},
                {"runq": {"loadgen_p99_us": 9000.0}},
                {"runq": null}
            ]},
            "phases": [{"dominant": "loadgen", "untrustworthy": true}]
        });
        std::fs::write(&path, report.to_string()).unwrap();
        let line = read_self_check(&path).unwrap();
        assert!(line.contains("max 9000 µs"), "{line}");
        assert!(line.contains("verdict `loadgen`"), "{line}");
        assert!(line.contains("suspect"), "{line}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
