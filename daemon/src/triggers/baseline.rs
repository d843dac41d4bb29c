//! What `rises_by` and `falls_by` compare against: per metric, the median over
//!
//! 1. the windows of the latest phase named `baseline` (or `*-baseline`, `baseline-*`; marked
//!    with `POST /api/v1/marks`, or the scenario's own phase under `stress --explain`), once it
//!    has [`MIN_PHASE_WINDOWS`] windows with the metric;
//! 2. else the first [`FIRST_WINDOWS`] windows that had the metric.
//!
//! A fixed reference, not the attribution's rolling baseline: the daemon's rolling baseline
//! follows a lasting change within minutes, and a rule such as "p95 rises by 300 ms for 2
//! minutes" must keep comparing against the calm before it.

use std::collections::HashMap;

use super::metric::Metric;
use crate::attribute::baseline::is_baseline_name;
use crate::quantile::exact::median;

/// Windows taken as the baseline without a baseline phase.
pub const FIRST_WINDOWS: usize = 10;
/// Fewest windows of a baseline phase before it replaces the first windows.
pub const MIN_PHASE_WINDOWS: usize = 3;
/// Most windows of a baseline phase kept (its latest).
const MAX_PHASE_WINDOWS: usize = 600;

#[derive(Debug, Default)]
struct Values {
    first: Vec<f64>,
    phase: Vec<f64>,
}

/// The baseline of each metric that a rise or fall is measured on.
#[derive(Debug, Default)]
pub struct Baseline {
    values: HashMap<Metric, Values>,
    /// The baseline phase the `phase` values belong to.
    phase: Option<String>,
}

impl Baseline {
    /// The baseline value of `metric`, `None` until there is one.
    #[must_use]
    pub fn get(&self, metric: Metric) -> Option<f64> {
        let v = self.values.get(&metric)?;
        if v.phase.len() >= MIN_PHASE_WINDOWS {
            median(&v.phase)
        } else if v.first.len() >= FIRST_WINDOWS {
            median(&v.first)
        } else {
            None
        }
    }

    /// Adds a closed window of phase `phase` with the values it had (after it was judged).
    pub fn add(&mut self, phase: Option<&str>, values: &[(Metric, Option<f64>)]) {
        let in_baseline = phase.filter(|p| is_baseline_name(p));
        if let Some(p) = in_baseline
            && self.phase.as_deref() != Some(p)
        {
            // A new baseline phase replaces the old one.
            self.phase = Some(p.to_owned());
            for v in self.values.values_mut() {
                v.phase.clear();
            }
        }
        for (m, value) in values {
            let Some(value) = value else { continue };
            let v = self.values.entry(*m).or_default();
            if v.first.len() < FIRST_WINDOWS {
                v.first.push(*value);
            }
            if in_baseline.is_some() {
                if v.phase.len() == MAX_PHASE_WINDOWS {
                    v.phase.remove(0);
                }
                v.phase.push(*value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Signal;

    #[test]
    fn first_windows_then_the_baseline_phase() {
        let m = Metric::Signal(Signal::TtftP95Ms);
        let mut b = Baseline::default();
        for i in 0..FIRST_WINDOWS {
            assert_eq!(b.get(m), None);
            b.add(None, &[(m, Some(100.0 + i as f64)), (m, None)]);
        }
        assert_eq!(b.get(m), Some(104.5));
        // Later windows do not move it.
        b.add(None, &[(m, Some(900.0))]);
        assert_eq!(b.get(m), Some(104.5));
        // A marked baseline phase replaces it once it has enough windows.
        for _ in 0..MIN_PHASE_WINDOWS {
            b.add(Some("run-2.baseline"), &[(m, Some(50.0))]);
        }
        assert_eq!(b.get(m), Some(50.0));
        b.add(Some("peak"), &[(m, Some(900.0))]);
        assert_eq!(b.get(m), Some(50.0));
    }
}
