//! The report page of a run's load alone (`stress --html PATH` without `--explain`): the
//! generator's records folded into a time line of windows, the phases' exact latencies and
//! sampled waterfalls, rendered by the same page as an explained run. No server, kernel or GPU
//! evidence was collected, and the page says so; its verdicts rest on the load alone.

use crate::collect::{load_fold::LoadFold, session::ServerSide, timeline::Timeline};
use crate::measure::StressReport;

use super::{Report, of_run::start_ms};

/// Window length of a load-only report, ms.
pub const WINDOW_MS: u64 = 1000;

/// What a load-only report lacks, first in its missing evidence.
pub const NOTE: &str =
    "load only (stress without --explain): no server metrics, kernel or GPU evidence was collected";

/// The report of `lg`'s load, its requests folded (`fold`, in [`WINDOW_MS`] windows) as they
/// finished.
#[must_use]
pub fn report(lg: &StressReport, fold: &LoadFold) -> Report {
    let timeline = Timeline::new(start_ms(lg), WINDOW_MS);
    Report::of_load(lg, fold, timeline, &ServerSide::default(), [NOTE])
}
