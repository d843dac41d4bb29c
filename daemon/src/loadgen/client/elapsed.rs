//! Microseconds since an instant: the unit of every time a request's record keeps.

use std::time::Instant;

/// Microseconds since `t0`.
#[must_use]
pub fn us_since(t0: Instant) -> u64 {
    t0.elapsed().as_micros() as u64
}

/// Microseconds since `start`, as a connect time (saturating at `u32::MAX`, 71 minutes).
pub(super) fn micros(start: Instant) -> u32 {
    u32::try_from(us_since(start)).unwrap_or(u32::MAX)
}
