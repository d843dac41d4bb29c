//! The live progress line (stderr, only on a terminal).

use std::io::Write as _;

/// What the line shows for the running phase.
pub struct Progress<'a> {
    /// Phase name.
    pub phase: &'a str,
    /// Seconds since the phase started.
    pub elapsed_s: f64,
    /// Phase duration, seconds.
    pub duration_s: f64,
    /// Requests finished in this phase.
    pub finished: u64,
    /// Mean target rate (open loop).
    pub target_rate: Option<f64>,
    /// Which latency `p99_ms` is: `ttft`, or `e2e` for phases without tokens.
    pub p99_of: &'a str,
    /// p99 of that latency so far, ms.
    pub p99_ms: Option<f64>,
    /// Failed requests so far.
    pub errors: u64,
    /// Dropped requests so far.
    pub dropped: u64,
}

impl Progress<'_> {
    /// Renders the line (no line end).
    #[must_use]
    pub fn line(&self) -> String {
        let rate = self.finished as f64 / self.elapsed_s.max(1e-3);
        let target = self
            .target_rate
            .map_or_else(String::new, |t| format!("/{t:.1}"));
        let p99 = self
            .p99_ms
            .map_or_else(|| "-".into(), |v| format!("{v:.1}ms"));
        format!(
            "[{}] {:.0}/{:.0}s  {:.1}{} req/s  {} p99 {}  errors {}  dropped {}",
            self.phase,
            self.elapsed_s,
            self.duration_s,
            rate,
            target,
            self.p99_of,
            p99,
            self.errors,
            self.dropped
        )
    }

    /// Overwrites the current terminal line with this progress.
    pub fn draw(&self) {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{}", self.line());
        let _ = err.flush();
    }
}

/// Clears the progress line before other output.
pub fn clear() {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shows_rate_vs_target() {
        let p = Progress {
            phase: "peak",
            elapsed_s: 10.0,
            duration_s: 60.0,
            finished: 1195,
            target_rate: Some(120.0),
            p99_of: "ttft",
            p99_ms: Some(312.44),
            errors: 3,
            dropped: 0,
        };
        assert_eq!(
            p.line(),
            "[peak] 10/60s  119.5/120.0 req/s  ttft p99 312.4ms  errors 3  dropped 0"
        );
    }
}
