//! The report page of a run's load alone (`stress --html PATH` without `--explain`): the
//! generator's records folded into a time line of windows, the phases' exact latencies and
//! sampled waterfalls, rendered by the same page as an explained run. No server, kernel or GPU
//! evidence was collected, and the page says so; its verdicts rest on the load alone.

use crate::collect::{session::ServerSide, timeline::Timeline};
use crate::measure::StressReport;

use super::{Report, of_run::start_ms};

/// Window length of a load-only report, ms.
pub const WINDOW_MS: u64 = 1000;

/// What a load-only report lacks, first in its missing evidence.
pub const NOTE: &str =
    "load only (stress without --explain): no server metrics, kernel or GPU evidence was collected";

/// The report of `lg`'s load in [`WINDOW_MS`] windows. Needs the run's records (a run with
/// `--no-records` has none: every chart is empty).
#[must_use]
pub fn report(lg: &StressReport) -> Report {
    let timeline = Timeline::new(start_ms(lg), WINDOW_MS);
    Report::of_load(lg, timeline, &ServerSide::default(), [NOTE])
}
