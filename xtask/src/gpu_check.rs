//! `cargo xtask gpu-check`: everything one run on a GPU machine needs, laid out in
//! `target/gpu-check/` (ignored by git): the release binary, a truth workload that counts its own
//! CUDA calls (`cuda_truth.py`), a small `PyTorch` engine (`torch_engine.py`), a scenario and one
//! script (`run.sh`), from `xtask/gpu-check/`. `--read DIR` prints, from that run's files, the
//! truth table: what the workload did against what inferscope counted for every hooked call, NVML
//! against nvidia-smi, and the engine runs' verdicts per phase.
use std::{collections::BTreeMap, path::Path};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::run;

/// Builds and lays out the kit; prints how to run it.
pub fn prepare() -> anyhow::Result<()> {
    run::status(&mut run::cargo(&["build", "--release", "-p", "inferscope"]))?;
    let root = run::root();
    let kit = root.join("target/gpu-check");
    std::fs::create_dir_all(&kit).with_context(|| format!("creating {}", kit.display()))?;
    let copy = |from: &Path, name: &str| -> anyhow::Result<()> {
        std::fs::copy(from, kit.join(name))
            .with_context(|| format!("copying {} into {}", from.display(), kit.display()))?;
        Ok(())
    };
    copy(&root.join("target/release/inferscope"), "inferscope")?;
    for f in [
        "run.sh",
        "cuda_truth.py",
        "torch_engine.py",
        "gpu-matrix.yaml",
    ] {
        copy(&root.join("xtask/gpu-check").join(f), f)?;
    }
    println!(
        "gpu-check: laid out {kit}\n\
         on a GPU machine (PyTorch, root), from the checkout: OUT=/some/dir bash target/gpu-check/run.sh\n\
         with the device tool: run(command: 'bash target/gpu-check/run.sh', carry: [\"target/gpu-check\"], timeout_s: 540)\n\
         then here: cargo xtask gpu-check --read THAT_OUT (the folder with truth-py.txt)",
        kit = kit.display()
    );
    Ok(())
}

/// Prints the truth table of a run's files in `dir`.
pub fn read(dir: &Path) -> anyhow::Result<()> {
    let text = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let truth = text("truth-py.txt");
    if truth.is_empty() {
        bail!(
            "{}: no truth-py.txt; give the folder the GPU run wrote ($OUT)",
            dir.display()
        );
    }
    let expect = truth
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("expect").cloned().or_else(|| first_kit(&v)))
        .unwrap_or(Value::Null);
    let metrics = metrics(&text("truth-metrics.txt"));
    let counted = |name: &str| metrics.get(name).copied();
    println!(
        "{:<34} {:>14} {:>14}  verdict",
        "call", "expected", "counted"
    );
    let rows: [(&str, &str, &str); 7] = [
        (
            "allocations",
            "allocations",
            "inferscope_gpu_allocations_total",
        ),
        ("frees", "frees", "inferscope_gpu_frees_total"),
        (
            "kernel launches",
            "launches",
            "inferscope_gpu_launches_total",
        ),
        (
            "host->device async copy bytes",
            "copy_h2d_bytes",
            "inferscope_gpu_copy_host_to_device_bytes_total",
        ),
        (
            "device->host async copy bytes",
            "copy_d2h_bytes",
            "inferscope_gpu_copy_device_to_host_bytes_total",
        ),
        (
            "mapped bytes held",
            "mapped_bytes_held",
            "inferscope_gpu_memory_mapped_bytes",
        ),
        (
            "sync seconds (> 0 expected)",
            "syncs",
            "inferscope_gpu_sync_seconds_total",
        ),
    ];
    for (what, key, metric) in rows {
        let want = expect.get(key).and_then(Value::as_f64);
        let got = counted(metric);
        let ok = match (key, want, got) {
            ("syncs", Some(n), Some(s)) => n > 0.0 && s > 0.0,
            (_, Some(w), Some(g)) => (w - g).abs() < 0.5,
            _ => false,
        };
        let show = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
        let got_text = if key == "syncs" {
            got.map_or_else(|| "-".to_owned(), |s| format!("{s:.4} s"))
        } else {
            show(got)
        };
        let verdict = match (ok, want) {
            (true, _) => "ok",
            (false, None) => "not in this run's workload",
            (false, Some(_)) => "MISMATCH",
        };
        println!("{what:<34} {:>14} {got_text:>14}  {verdict}", show(want));
    }
    if let Some(e) = expect.get("map_error").and_then(Value::as_str) {
        println!("  (the workload could not map: {e})");
    }
    let smi_mib = nvidia_smi_used_mib(&truth);
    let nvml =
        counted("inferscope_gpu_device_memory_used_bytes").map(|b| b / f64::from(1u32 << 20));
    println!(
        "device memory used: nvidia-smi {} MiB, NVML through inferscope {} MiB",
        smi_mib.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}")),
        nvml.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"))
    );
    engine_verdicts(&text);
    Ok(())
}

/// Each engine run's phases and their verdicts.
fn engine_verdicts(text: &dyn Fn(&str) -> String) {
    for tag in ["metrics", "nometrics"] {
        let report = text(&format!("explain-{tag}/report.json"));
        let Ok(r) = serde_json::from_str::<Value>(&report) else {
            println!("engine {tag}: no report (see stress-{tag}.txt)");
            continue;
        };
        let phases: Vec<String> = r["phases"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                format!(
                    "{} {}",
                    p["name"].as_str().unwrap_or("?"),
                    p["dominant"].as_str().unwrap_or("?")
                )
            })
            .collect();
        println!("engine {tag}: {}", phases.join("; "));
    }
}

/// The first kit's counts line (`../shared/gpu-h200/cuda-truth.workload.txt`: direct and torch
/// allocations, each freed, launches, synchronizes) as the expectations it implies.
fn first_kit(v: &Value) -> Option<Value> {
    let n = |k: &str| v.get(k).and_then(Value::as_f64);
    let allocs = n("direct_alloc_ok")? + n("torch_allocs")?;
    Some(serde_json::json!({
        "allocations": allocs, "frees": allocs, "launches": n("launches")?, "syncs": n("syncs")?,
    }))
}

/// Prometheus text: each sample's name to its value, summed over label sets.
fn metrics(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if let Ok(v) = value.parse::<f64>() {
            *out.entry(name.to_owned()).or_insert(0.0) += v;
        }
    }
    out
}

/// The `memory.used [MiB]` column of the nvidia-smi CSV the run appended to truth-py.txt.
fn nvidia_smi_used_mib(truth: &str) -> Option<f64> {
    let mut lines = truth.lines();
    lines.find(|l| l.starts_with("memory.used"))?;
    lines
        .next()?
        .split(',')
        .next()?
        .trim()
        .split(' ')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_h200_run() {
        let m = metrics(
            "# HELP x\ninferscope_gpu_launches_total{server=\"pid:1\"} 2000\ninferscope_gpu_launches_total{server=\"pid:2\"} 5\n",
        );
        assert!((m["inferscope_gpu_launches_total"] - 2005.0).abs() < 1e-9);
        let truth = "{\"ready\": 1}\nmemory.used [MiB], memory.total [MiB]\n623 MiB, 143771 MiB\n";
        assert_eq!(nvidia_smi_used_mib(truth), Some(623.0));
    }
}
