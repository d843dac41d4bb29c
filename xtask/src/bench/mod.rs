//! `cargo xtask bench [probes|sim|engine|loadgen|attribution|soak]`: benchmarks that print comparisons measured side by
//! side in one run on this machine (ratios, never absolute thresholds: the machines are noisy).
//! Never part of `cargo xtask test`.
mod accuracy;
mod attribution;
mod engine;
mod loadgen;
mod peers;
pub mod probes;
mod procs;
mod sim;
mod soak;
pub mod workload;

type Bench = fn() -> anyhow::Result<()>;

const ALL: [(&str, Bench); 6] = [
    ("probes", probes::run),
    ("sim", sim::run),
    ("engine", engine::run),
    ("loadgen", loadgen::run),
    ("attribution", attribution::run),
    ("soak", soak::run),
];

/// Runs the named benchmark, or all of them (each one even when an earlier one failed).
pub fn run(which: Option<&str>) -> anyhow::Result<()> {
    let names = || ALL.map(|(n, _)| n).join("|");
    let Some(which) = which else {
        let failed: Vec<&str> = ALL
            .iter()
            .filter_map(|(name, bench)| {
                bench()
                    .map_err(|e| eprintln!("xtask: bench {name}: {e:#}"))
                    .err()
                    .map(|()| *name)
            })
            .collect();
        anyhow::ensure!(
            failed.is_empty(),
            "benchmarks failed: {}",
            failed.join(", ")
        );
        return Ok(());
    };
    let (_, bench) = ALL
        .iter()
        .find(|(n, _)| *n == which)
        .ok_or_else(|| anyhow::anyhow!("unknown benchmark `{which}`: {}", names()))?;
    bench()
}

/// Prints a table: a header and rows of cells, left-aligned in columns.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        println!("  {}", s.join("  "));
    };
    line(header.iter().map(ToString::to_string).collect());
    line(widths.iter().map(|w| "-".repeat(*w)).collect());
    for r in rows {
        line(r.clone());
    }
}
