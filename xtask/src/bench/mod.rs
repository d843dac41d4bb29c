//! `cargo xtask bench [probes|...]`: benchmarks that print comparisons measured side by side
//! in one run on this machine (ratios, never absolute thresholds: the machines are noisy).
pub mod probes;
pub mod workload;

/// Runs the named benchmark, or all of them.
pub fn run(which: Option<&str>) -> anyhow::Result<()> {
    match which {
        None => probes::run(),
        Some("probes") => probes::run(),
        Some(other) => anyhow::bail!("unknown benchmark `{other}`: probes"),
    }
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
        let s: Vec<String> = cells.iter().enumerate().map(|(i, c)| format!("{c:<w$}", w = widths[i])).collect();
        println!("  {}", s.join("  "));
    };
    line(header.iter().map(ToString::to_string).collect());
    line(widths.iter().map(|w| "-".repeat(*w)).collect());
    for r in rows {
        line(r.clone());
    }
}
