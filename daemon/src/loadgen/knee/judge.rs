//! Judging a step: each SLO's observed value and 95% interval, whether the load was
//! sustained, pass or fail, and whether a latency SLO's verdict is marginal.

use super::outcome::{SloObservation, Step, fmt_load};
use super::spec::{Knob, SearchSpec};
use crate::measure::StressReport;
use crate::measure::{
    report::PhaseReport,
    slo::{Metric, Series, Slo, Stat},
    summary::decode_hist,
};
use crate::quantile::Quantile;

/// Share of the scheduled rate that must finish per second for a step to count as sustained.
pub const SUSTAINED_SHARE: f64 = 0.9;

pub(super) fn judge(spec: &SearchSpec, load: f64, report: &StressReport) -> Step {
    let phase = report.phases[0].clone();
    let mut why: Vec<String> = Vec::new();
    let mut marginal = false;
    let slos: Vec<SloObservation> = spec
        .slos
        .iter()
        .map(|slo| {
            // The step's result of this SLO, found by its text; none is a failure (no data).
            let (observed, pass) = phase
                .slo
                .iter()
                .find(|r| r.slo == slo.text)
                .map_or((None, false), |r| (r.observed, r.pass));
            let interval = quantile_interval(slo, &phase);
            if let (Some((lo, hi)), true) = (interval, matches!(slo.metric, Metric::Latency(..))) {
                marginal |= lo <= slo.threshold && slo.threshold <= hi;
            }
            if !pass {
                why.push(match observed {
                    Some(v) => format!("{} (observed {v:.1})", slo.text),
                    None => format!("{} (no data)", slo.text),
                });
            }
            SloObservation {
                slo: slo.text.clone(),
                observed,
                interval,
                pass,
            }
        })
        .collect();
    let achieved = phase.requests_per_s;
    if spec.knob == Knob::Rate && achieved < SUSTAINED_SHARE * load {
        why.push(format!(
            "{achieved:.1} req/s finished of {} scheduled",
            fmt_load(load)
        ));
    }
    Step {
        load,
        achieved_rps: achieved,
        pass: why.is_empty(),
        marginal,
        why,
        slos,
        phase,
    }
}

/// The 95% interval of a latency quantile SLO's observed value (ms), from the phase's
/// histogram: the values at ranks n*q -+ 1.96*sqrt(n*q*(1-q)) (the binomial order-statistic
/// interval, which assumes nothing about the distribution).
fn quantile_interval(slo: &Slo, phase: &PhaseReport) -> Option<(f64, f64)> {
    let Metric::Latency(series, Stat::Quantile(q)) = slo.metric else {
        return None;
    };
    let key = match series {
        Series::Ttft => "ttft",
        Series::Itl => "itl",
        Series::Tpot => "tpot",
        Series::E2e => "e2e",
        Series::SendLag => "send_lag",
    };
    let h = decode_hist(phase.histograms.get(key)?).ok()?;
    let n = h.len() as f64;
    if n < 1.0 {
        return None;
    }
    let half = 1.96 * (n * q * (1.0 - q)).sqrt();
    // Histograms hold microseconds.
    let at = |rank: f64| h.quantile((rank / n).clamp(0.0, 1.0)).map(|us| us / 1000.0);
    Some((at((n * q - half).floor())?, at((n * q + half).ceil())?))
}
