//! `inferscope report merge`: one report from the reports of several shards (`--shard i/N`)
//! or hosts, exactly. Histograms are decoded and added, then every percentile, rate and SLO
//! is recomputed through the same code the runner uses ([`PhaseReport::build`]); percentiles
//! are never averaged. Counts add up, rates are taken over the union of the shards' time spans,
//! and records are concatenated with their times moved onto the earliest shard's clock.

use std::path::Path;

use super::{
    metrics::{Hist, PhaseMetrics},
    record::ErrorClass,
    report::{PhaseInfo, PhaseReport, RampView, SCHEMA, Stop, StressReport, VERSION},
    shard::Shard,
    slo::Slo,
    summary::decode_hist,
};

/// Why reports cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// No input.
    #[error("nothing to merge: give two or more report files")]
    Empty,
    /// Unreadable or not JSON.
    #[error("{file}: {why}")]
    Read {
        /// The file.
        file: String,
        /// What went wrong.
        why: String,
    },
    /// Another kind of JSON document.
    #[error(
        "{file}: schema {found:?} is not {SCHEMA:?}: give reports written by `inferscope stress --out`"
    )]
    Schema {
        /// The file.
        file: String,
        /// Its schema field.
        found: String,
    },
    /// A report of another version.
    #[error(
        "{file}: report version {found}, this inferscope reads version {VERSION}: merge with the inferscope that wrote it"
    )]
    Version {
        /// The file.
        file: String,
        /// Its version.
        found: u64,
    },
    /// The reports do not describe one scenario.
    #[error("{file}: {why} (first report: {first}): merge reports of one scenario only")]
    Mismatch {
        /// The report that differs.
        file: String,
        /// The first report.
        first: String,
        /// What differs.
        why: String,
    },
    /// The shards do not add up to one whole load.
    #[error(
        "incomplete shard set: {why}; merge every shard's report, or pass --allow-partial to merge what is there"
    )]
    Incomplete {
        /// Which shards are missing or disagree.
        why: String,
    },
    /// The shards' phases did not run at once: the merge would describe load that never ran.
    #[error(
        "{file}: phase {phase} started {skew_s:.1}s apart from {first}'s (allowed {allowed_s:.1}s): the shards did not run at once; start them together (stress --start-at) or pass --allow-skew to merge anyway"
    )]
    NotConcurrent {
        /// The report whose phase started furthest from the earliest.
        file: String,
        /// The report whose phase started earliest.
        first: String,
        /// The phase.
        phase: String,
        /// How far apart the phase's starts are, seconds.
        skew_s: f64,
        /// The largest skew accepted for it, seconds.
        allowed_s: f64,
    },
    /// A histogram or SLO inside a report is damaged.
    #[error("{file}: phase {phase}: {why}")]
    Damaged {
        /// The file.
        file: String,
        /// The phase.
        phase: String,
        /// What is wrong.
        why: String,
    },
}

/// Reads a report file, checking its schema and version before anything else so that a
/// report of another version is named as such rather than failing on a missing field.
pub fn read(path: &Path) -> Result<StressReport, MergeError> {
    let file = path.display().to_string();
    let read_err = |why: String| MergeError::Read {
        file: file.clone(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| read_err(format!("cannot read: {e}")))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| read_err(format!("not JSON: {e}")))?;
    let schema = v.get("schema").and_then(|s| s.as_str()).unwrap_or_default();
    if schema != SCHEMA {
        return Err(MergeError::Schema {
            file,
            found: schema.to_owned(),
        });
    }
    let version = v.get("version").and_then(serde_json::Value::as_u64);
    if version != Some(u64::from(VERSION)) {
        return Err(MergeError::Version {
            file,
            found: version.unwrap_or(0),
        });
    }
    serde_json::from_value(v).map_err(|e| read_err(format!("damaged report: {e}")))
}

/// The static facts of a reported phase, as [`PhaseReport::build`] needs them (SLOs re-parsed
/// from their text).
pub fn phase_info(p: &PhaseReport, elapsed_s: f64) -> Result<PhaseInfo, String> {
    let slos = p
        .slo
        .iter()
        .map(|r| Slo::parse(&r.slo).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PhaseInfo {
        name: p.name.clone(),
        label: p.label.clone(),
        endpoint: p.endpoint.clone(),
        load_level: p.load_level.clone(),
        target_rate: p.target_rate,
        duration_s: p.duration_s,
        elapsed_s,
        slos,
        retry_t_max_ms: None,
        // Shards' sampled pairs are not in their reports: the joint view is per run.
        vector: None,
        // Every shard replayed its share of the same trace rows: the sharing is the whole's.
        prefix: p.prefix.clone(),
    })
}

/// Adds a reported phase's histograms and counters into `m`.
/// Adds a phase report's ramp (its count and histograms) to `m`.
fn add_ramp(m: &mut super::metrics::RampSamples, r: &RampView) -> Result<(), String> {
    m.finished += r.requests;
    for (name, h) in [("ttft", &mut m.ttft), ("e2e", &mut m.e2e)] {
        // A report written before the ramp kept its histograms has none: its count still adds.
        if let Some(enc) = r.histograms.get(name) {
            let add = decode_hist(enc).map_err(|e| format!("ramp histogram `{name}`: {e}"))?;
            h.add(&add)
                .map_err(|e| format!("ramp histogram `{name}`: {e:?}"))?;
        }
    }
    Ok(())
}

pub fn add_phase(m: &mut PhaseMetrics, p: &PhaseReport) -> Result<(), String> {
    for hist in Hist::ALL {
        let name = hist.name();
        let Some(enc) = p.histograms.get(name) else {
            // Reports written before per-turn TTFT, ICE and connect times existed have none.
            if matches!(
                hist,
                Hist::TtftFirstTurn | Hist::TtftLaterTurns | Hist::Ice | Hist::Connect
            ) {
                continue;
            }
            return Err(format!("histogram `{name}` is missing"));
        };
        let h = decode_hist(enc).map_err(|e| format!("histogram `{name}`: {e}"))?;
        m[hist]
            .add(&h)
            .map_err(|e| format!("histogram `{name}`: {e:?}"))?;
    }
    if let Some(r) = &p.ramp {
        add_ramp(&mut m.ramp, r)?;
    }
    let c = &p.counts;
    m.scheduled += c.scheduled;
    m.dropped += c.dropped;
    m.finished += c.finished;
    m.ok += c.ok;
    m.good += c.good;
    m.reconnected += c.reconnected;
    for (name, n) in &c.chaos {
        let knob = super::record::Chaos::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| format!("unknown chaos knob `{name}`"))?;
        *m.chaos.entry(knob).or_default() += n;
    }
    for (name, n) in &c.errors {
        let class = ErrorClass::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| format!("unknown error class `{name}`"))?;
        *m.errors.entry(class).or_default() += n;
    }
    // The report keeps the error rate, not the counted errors (chaos aborts are excluded):
    // rate x finished gives the count back exactly for any realistic count.
    m.counted_errors += (p.error_rate * c.finished as f64).round() as u64;
    m.output_tokens += p.output_tokens;
    m.input_tokens += p.input_tokens;
    m.tasks += p.tasks;
    m.tasks_ok += p.tasks_succeeded;
    if let Some(v) = &p.pipeline {
        m.pipeline.add_view(v)?;
    }
    if let Some(v) = &p.sessions {
        m.sessions.add_view(v)?;
    }
    Ok(())
}

fn check_same(
    first: &(String, StressReport),
    other: &(String, StressReport),
) -> Result<(), MergeError> {
    let (f, a) = first;
    let (file, b) = other;
    let mismatch = |why: String| MergeError::Mismatch {
        file: file.clone(),
        first: f.clone(),
        why,
    };
    if a.scenario != b.scenario {
        return Err(mismatch(format!(
            "scenario {:?} is not {:?}",
            b.scenario, a.scenario
        )));
    }
    let names = |r: &StressReport| r.phases.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
    if names(a) != names(b) {
        return Err(mismatch(format!(
            "phases {:?} are not {:?}",
            names(b),
            names(a)
        )));
    }
    for (pa, pb) in a.phases.iter().zip(&b.phases) {
        if (&pa.label, &pa.endpoint, &pa.load_level) != (&pb.label, &pb.endpoint, &pb.load_level)
            || pa.duration_s.to_bits() != pb.duration_s.to_bits()
        {
            return Err(mismatch(format!(
                "phase {} is {} {} for {}s, not {} {} for {}s",
                pb.name,
                pb.endpoint,
                pb.load_level,
                pb.duration_s,
                pa.endpoint,
                pa.load_level,
                pa.duration_s
            )));
        }
        let slos = |p: &PhaseReport| p.slo.iter().map(|r| r.slo.clone()).collect::<Vec<_>>();
        if slos(pa) != slos(pb) {
            return Err(mismatch(format!("phase {} has other SLOs", pb.name)));
        }
    }
    Ok(())
}

/// Checks that sharded reports form one whole load: every report is a shard, all of the same
/// N, and every index `0..N` is present. Reports without a shard (whole runs on several
/// hosts) are complete by themselves.
pub fn check_complete(reports: &[(String, StressReport)]) -> Result<(), MergeError> {
    let shards: Vec<(&str, Shard)> = reports
        .iter()
        .filter_map(|(f, r)| r.shard.map(|s| (f.as_str(), s)))
        .collect();
    let Some(&(first_file, first)) = shards.first() else {
        return Ok(());
    };
    if shards.len() != reports.len() {
        let whole: Vec<&str> = reports
            .iter()
            .filter(|(_, r)| r.shard.is_none())
            .map(|(f, _)| f.as_str())
            .collect();
        return Err(MergeError::Incomplete {
            why: format!(
                "{} {} not a shard while {first_file} is shard {first}",
                whole.join(", "),
                if whole.len() == 1 { "is" } else { "are" }
            ),
        });
    }
    if let Some((f, s)) = shards.iter().find(|(_, s)| s.count != first.count) {
        return Err(MergeError::Incomplete {
            why: format!(
                "{f} is shard {s} but {first_file} is shard {first}: shards of different N"
            ),
        });
    }
    let missing: Vec<String> = (0..first.count)
        .filter(|i| !shards.iter().any(|(_, s)| s.index == *i))
        .map(|i| format!("{i}/{}", first.count))
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::Incomplete {
            why: format!(
                "missing shard{} {}",
                if missing.len() == 1 { "" } else { "s" },
                missing.join(", ")
            ),
        });
    }
    Ok(())
}

/// What a merge lets through that it refuses by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allow {
    /// An incomplete shard set (`--allow-partial`; see [`check_complete`]).
    pub partial: bool,
    /// Shards whose phases did not run at once (`--allow-skew`; see [`check_concurrent`]).
    pub skew: bool,
}

/// The largest start skew of a phase's shards a merge accepts: a tenth of the phase, and a
/// quarter second at least (clocks of separate hosts agree to milliseconds under NTP).
#[must_use]
pub fn allowed_skew_s(duration_s: f64) -> f64 {
    (duration_s * 0.1).max(0.25)
}

/// Checks that the reports' phases ran at once: each phase's starts (a report's start plus the
/// phases before it) lie within [`allowed_skew_s`] of each other.
pub fn check_concurrent(reports: &[(String, StressReport)]) -> Result<(), MergeError> {
    let Some(first) = reports.first() else {
        return Ok(());
    };
    for (i, p0) in first.1.phases.iter().enumerate() {
        let starts: Vec<(&str, f64)> = reports
            .iter()
            .map(|(f, r)| {
                let before: f64 = r.phases.iter().take(i).map(|p| p.elapsed_s).sum();
                (f.as_str(), r.started_unix_ns as f64 / 1e9 + before)
            })
            .collect();
        let by = |a: &&(&str, f64), b: &&(&str, f64)| a.1.total_cmp(&b.1);
        let (Some(early), Some(late)) = (starts.iter().min_by(by), starts.iter().max_by(by)) else {
            continue;
        };
        let allowed_s = allowed_skew_s(p0.duration_s);
        if late.1 - early.1 > allowed_s {
            return Err(MergeError::NotConcurrent {
                file: late.0.to_owned(),
                first: early.0.to_owned(),
                phase: p0.name.clone(),
                skew_s: late.1 - early.1,
                allowed_s,
            });
        }
    }
    Ok(())
}

/// Merges reports (`(file name, report)`, the name used in errors) into one. They must be of
/// one scenario, each shard once; an incomplete shard set ([`check_complete`]) and shards that
/// did not run at once ([`check_concurrent`]) are refused unless `allow` lets them through.
pub fn merge(reports: &[(String, StressReport)], allow: Allow) -> Result<StressReport, MergeError> {
    check_consistent(reports)?;
    if !allow.partial {
        check_complete(reports)?;
    }
    if !allow.skew {
        check_concurrent(reports)?;
    }
    merge_checked(reports)
}

/// One scenario, each shard once.
fn check_consistent(reports: &[(String, StressReport)]) -> Result<(), MergeError> {
    let first = reports.first().ok_or(MergeError::Empty)?;
    let mut seen = Vec::new();
    for r in reports {
        check_same(first, r)?;
        if let Some(s) = r.1.shard {
            if let Some((f, _)) = seen.iter().find(|(_, t)| *t == s) {
                return Err(MergeError::Mismatch {
                    file: r.0.clone(),
                    first: first.0.clone(),
                    why: format!("shard {s} is also in {f}; give each shard's report once"),
                });
            }
            seen.push((r.0.clone(), s));
        }
    }
    Ok(())
}

/// Merges reports that passed the checks [`merge`] asked for.
fn merge_checked(reports: &[(String, StressReport)]) -> Result<StressReport, MergeError> {
    let first = reports.first().ok_or(MergeError::Empty)?;
    let start = reports
        .iter()
        .map(|(_, r)| r.started_unix_ns)
        .min()
        .expect("not empty");
    let earliest = reports
        .iter()
        .find(|(_, r)| r.started_unix_ns == start)
        .map(|(_, r)| r)
        .expect("not empty");
    // Seconds from the earliest start to a report's start.
    let lead = |r: &StressReport| (r.started_unix_ns - start) as f64 / 1e9;
    let mut phases = Vec::with_capacity(first.1.phases.len());
    for (i, p0) in first.1.phases.iter().enumerate() {
        let mut m = PhaseMetrics::default();
        // Every shard starts a phase at the same planned offset from its own start, so the
        // union of the phase's spans runs from the earliest lead to the latest lead + elapsed.
        let (mut from, mut to) = (f64::INFINITY, f64::NEG_INFINITY);
        for (file, r) in reports {
            let p = &r.phases[i];
            add_phase(&mut m, p).map_err(|why| MergeError::Damaged {
                file: file.clone(),
                phase: p.name.clone(),
                why,
            })?;
            from = from.min(lead(r));
            to = to.max(lead(r) + p.elapsed_s);
        }
        let mut info = phase_info(p0, (to - from).max(0.0)).map_err(|why| MergeError::Damaged {
            file: first.0.clone(),
            phase: p0.name.clone(),
            why,
        })?;
        // Each shard's target is its share: the whole target is their sum.
        info.target_rate = reports
            .iter()
            .map(|(_, r)| r.phases[i].target_rate)
            .sum::<Option<f64>>();
        let mut merged = PhaseReport::build(&info, &m);
        // The shards ran the same ramp: its requests add up.
        merged.ramp = p0
            .ramp
            .as_ref()
            .map(|r| RampView::new(r.ramp_up_s, &r.strategy, r.default, r.counted, &m));
        phases.push(merged);
    }
    let mut records = Vec::new();
    let mut events = Vec::new();
    for (_, r) in reports {
        // Saturating: a damaged report must not overflow the arithmetic.
        let shift = (r.started_unix_ns - start) / 1000;
        records.extend(r.records.iter().cloned().map(|mut rec| {
            rec.intended_us = rec.intended_us.saturating_add(shift);
            rec.actual_us = rec.actual_us.saturating_add(shift);
            rec.end_us = rec.end_us.saturating_add(shift);
            if let Some(t) = &mut rec.first_byte_us {
                *t = t.saturating_add(shift);
            }
            for t in &mut rec.token_us {
                *t = t.saturating_add(shift);
            }
            rec
        }));
        events.extend(r.events.iter().cloned().map(|mut e| {
            e.at_us = e.at_us.saturating_add(shift);
            e.end_us = e.end_us.saturating_add(shift);
            e
        }));
    }
    records.sort_by_key(|r| r.intended_us);
    events.sort_by_key(|e| e.at_us);
    // The gravest stop of the shards, naming each shard that stopped.
    let stopped = reports
        .iter()
        .filter_map(|(_, r)| r.stopped.as_ref().map(|s| s.kind))
        .max()
        .map(|kind| {
            let each: Vec<String> = reports
                .iter()
                .filter_map(|(f, r)| r.stopped.as_ref().map(|s| format!("{f}: {s}")))
                .collect();
            Stop::new(kind, each.join("; "))
        });
    let mut targets: Vec<&str> = reports.iter().map(|(_, r)| r.target.as_str()).collect();
    targets.sort_unstable();
    targets.dedup();
    Ok(StressReport {
        schema: SCHEMA.into(),
        version: VERSION,
        scenario: first.1.scenario.clone(),
        target: targets.join(", "),
        shard: None,
        started_unix_ns: start,
        started_monotonic_ns: earliest.started_monotonic_ns,
        elapsed_s: reports
            .iter()
            .map(|(_, r)| lead(r) + r.elapsed_s)
            .fold(0.0, f64::max),
        stopped,
        slo_pass: crate::measure::report::slo_pass(&phases),
        phases,
        events,
        records,
        records_overflow: reports.iter().map(|(_, r)| r.records_overflow).sum(),
        run: first.1.run.clone(),
    })
}
