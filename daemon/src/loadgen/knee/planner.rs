//! The search's policy without I/O: grow the load until a step fails, then bisect between the
//! highest pass and the lowest fail.

use super::outcome::SearchStop;
use super::spec::Knob;

/// The next load to try, from the steps so far: the search's whole policy, without I/O.
#[derive(Debug, Clone)]
pub struct Planner {
    knob: Knob,
    pub(super) start: f64,
    ceiling: f64,
    tolerance: f64,
    /// Highest passing load so far.
    pass: Option<f64>,
    /// Lowest failing load so far.
    fail: Option<f64>,
    halvings: u32,
}

/// Halvings of the start load tried before "nothing passes".
const MAX_HALVINGS: u32 = 6;

impl Planner {
    /// A planner starting at `start`, never above `ceiling`.
    #[must_use]
    pub fn new(knob: Knob, start: f64, ceiling: f64, tolerance: f64) -> Self {
        Self {
            knob,
            start: start.min(ceiling),
            ceiling,
            tolerance,
            pass: None,
            fail: None,
            halvings: 0,
        }
    }

    /// Records that `load` passed or failed.
    pub fn record(&mut self, load: f64, pass: bool) {
        if pass {
            self.pass = Some(self.pass.map_or(load, |p| p.max(load)));
        } else {
            self.fail = Some(self.fail.map_or(load, |f| f.min(load)));
            if self.pass.is_none() {
                self.halvings += 1;
            }
        }
    }

    /// Highest pass and lowest fail so far.
    #[must_use]
    pub fn bracket(&self) -> (Option<f64>, Option<f64>) {
        (self.pass, self.fail)
    }

    /// The next load, or why the search is over.
    pub fn next(&self) -> Result<f64, SearchStop> {
        let round = |v: f64| match self.knob {
            Knob::Rate => v,
            Knob::Users => v.round().max(1.0),
        };
        match (self.pass, self.fail) {
            (None, None) => Ok(round(self.start)),
            (Some(p), None) if p >= self.ceiling => Err(SearchStop::CeilingPassed),
            (Some(p), None) => Ok(round((p * 2.0).min(self.ceiling))),
            (None, Some(f)) => {
                let next = round(f / 2.0);
                if self.halvings > MAX_HALVINGS || next >= f {
                    Err(SearchStop::NothingPassed)
                } else {
                    Ok(next)
                }
            }
            (Some(p), Some(f)) => {
                let close = match self.knob {
                    Knob::Rate => f <= p * (1.0 + self.tolerance),
                    Knob::Users => f - p <= 1.0,
                };
                if close {
                    Err(SearchStop::Converged)
                } else {
                    Ok(round(f64::midpoint(p, f)))
                }
            }
        }
    }
}
