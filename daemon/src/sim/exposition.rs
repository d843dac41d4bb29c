//! The Prometheus text the sim writes: a gauge, a counter, and one sample read back (tests).

use std::fmt::Write as _;

/// Appends a gauge with its help and type lines.
pub(crate) fn gauge(o: &mut String, name: &str, help: &str, labels: &str, v: f64) {
    let _ = writeln!(
        o,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {v:?}"
    );
}

/// Appends a counter with its help and type lines.
pub(crate) fn counter(o: &mut String, name: &str, help: &str, labels: &str, v: u64) {
    let _ = writeln!(
        o,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {v}.0"
    );
}

/// Reads one sample's value from exposition text: `name` with any labels.
#[must_use]
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
