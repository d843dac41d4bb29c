//! Ranges of every number a scenario may hold, checked where serde still knows the position
//! (so errors read `FILE:LINE:COL`), and again by [`check`] before a run starts, so that a
//! scenario built in code or changed by flags cannot reach a panic either (a zero-rate token
//! bucket, an `Instant` beyond the end of time, a semaphore larger than tokio allows).

use std::time::Duration;

use serde::{Deserialize, Deserializer, de::Error as _};

use crate::loadgen::scenario::{HARD_MAX_IN_FLIGHT, Load, Phase, Scenario};

/// Largest `max_tokens_per_s`.
pub const HARD_MAX_TOKENS_PER_S: f64 = 1e9;
/// Largest `oversize_tokens` (words of an inflated prompt; each is 6 bytes on the wire).
pub const HARD_MAX_OVERSIZE_TOKENS: u32 = 1_000_000;
/// Largest vector `dimensions`.
pub const HARD_MAX_DIMENSIONS: usize = 65_536;
/// Most turns one conversation may have.
pub const MAX_TURNS: u32 = 1000;
/// Longest shared system prompt, words.
pub const MAX_SYSTEM_WORDS: u32 = 100_000;
/// Most identical requests in one `chaos.stampede` burst.
pub const MAX_STAMPEDE: u32 = 10_000;
/// Range of a gamma shape's `burstiness`.
pub const BURSTINESS: (f64, f64) = (1e-3, 1e3);

/// A duration field in [`crate::duration`]'s grammar (`60s`, `500ms`, `1m 30s`, at most a week).
pub fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    crate::duration::parse(&String::deserialize(d)?).map_err(D::Error::custom)
}

/// [`de_duration`]'s reading of `s`, for a field that is sometimes a duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::duration::parse(s).map_err(|e| e.to_string())
}

/// An optional [`de_duration`] that must be above zero.
pub fn de_opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let v = de_duration(d)?;
    if v.is_zero() {
        return Err(D::Error::custom("duration must be above zero"));
    }
    Ok(Some(v))
}

/// An integer field in `1..=max`, or an error naming it.
fn int_in<'de, D: Deserializer<'de>>(d: D, field: &str, max: u64) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if (1..=max).contains(&v) {
        Ok(v)
    } else {
        Err(D::Error::custom(format!(
            "`{field}: {v}` must be 1..={max}"
        )))
    }
}

/// An in-flight cap: `1..=HARD_MAX_IN_FLIGHT`.
pub fn de_opt_in_flight<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    // The bound fits usize on every target this builds for (64-bit).
    int_in(d, "max_in_flight", HARD_MAX_IN_FLIGHT as u64).map(|v| Some(v as usize))
}

/// A tokens/s cap: finite, above zero, at most [`HARD_MAX_TOKENS_PER_S`].
pub fn de_opt_tokens_per_s<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = f64::deserialize(d)?;
    if v > 0.0 && v <= HARD_MAX_TOKENS_PER_S {
        Ok(Some(v))
    } else {
        Err(D::Error::custom(format!(
            "`max_tokens_per_s: {v}` must be above 0 and at most {HARD_MAX_TOKENS_PER_S:e}"
        )))
    }
}

/// Words of an oversize prompt: `1..=HARD_MAX_OVERSIZE_TOKENS`.
pub fn de_opt_oversize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    int_in(d, "oversize_tokens", u64::from(HARD_MAX_OVERSIZE_TOKENS)).map(|v| Some(v as u32))
}

/// Vector dimensions: `1..=HARD_MAX_DIMENSIONS`.
pub fn de_opt_dimensions<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    int_in(d, "dimensions", HARD_MAX_DIMENSIONS as u64).map(|v| Some(v as usize))
}

/// Every range again, on a scenario as it will run (after flags and code changed it): the
/// one place a compile (and [`Plan::with_phases`](super::plan::Plan::with_phases)) checks
/// them, before the phases' own checks read a duration or a user count. The error is where
/// to look (the text its line is found by: `max_in_flight`, the phase's `name: …`, else
/// `phases`) and the message, which names the field and the allowed range.
pub fn check(s: &Scenario) -> Result<(), (String, String)> {
    let top = |msg: String| ("phases".to_owned(), msg);
    if !(1..=HARD_MAX_IN_FLIGHT).contains(&s.max_in_flight) {
        return Err((
            "max_in_flight".into(),
            format!("max_in_flight must be 1..={HARD_MAX_IN_FLIGHT}"),
        ));
    }
    if s.timeout.is_zero() {
        return Err(top("timeout must be above 0".into()));
    }
    dur("timeout", s.timeout).map_err(top)?;
    dur("grace", s.grace).map_err(top)?;
    for p in &s.phases {
        phase(p).map_err(|msg| (format!("name: {}", p.name), msg))?;
    }
    Ok(())
}

/// `d`, which `what` names, is at most [`crate::duration::MAX`].
fn dur(what: &str, d: Duration) -> Result<(), String> {
    if d > crate::duration::MAX {
        Err(format!("{what} is longer than the limit of 7 days"))
    } else {
        Ok(())
    }
}

/// One phase's ranges.
fn phase(p: &Phase) -> Result<(), String> {
    let name = &p.name;
    if p.duration.is_zero() {
        return Err(format!("phase `{name}`: duration must be > 0"));
    }
    dur(&format!("phase `{name}`: duration"), p.duration)?;
    if p.max_in_flight
        .is_some_and(|n| !(1..=HARD_MAX_IN_FLIGHT).contains(&n))
    {
        return Err(format!(
            "phase `{name}`: max_in_flight must be 1..={HARD_MAX_IN_FLIGHT}"
        ));
    }
    if p.max_tokens_per_s
        .is_some_and(|r| !(r > 0.0 && r <= HARD_MAX_TOKENS_PER_S))
    {
        return Err(format!(
            "phase `{name}`: max_tokens_per_s must be above 0 and at most {HARD_MAX_TOKENS_PER_S:e}"
        ));
    }
    if let Load::Concurrency { users } = p.load
        && !(1..=HARD_MAX_IN_FLIGHT).contains(&users)
    {
        return Err(format!(
            "phase `{name}`: users must be 1..={HARD_MAX_IN_FLIGHT}"
        ));
    }
    if let Some(e) = p.events.iter().find(|e| e.at > p.duration) {
        return Err(format!(
            "phase `{name}`: event `{}` at {} is after the phase's end",
            e.path,
            humantime::format_duration(e.at)
        ));
    }
    if p.chaos
        .oversize_tokens
        .is_some_and(|n| n > HARD_MAX_OVERSIZE_TOKENS)
    {
        return Err(format!(
            "phase `{name}`: oversize_tokens must be at most {HARD_MAX_OVERSIZE_TOKENS}"
        ));
    }
    if p.request
        .dimensions
        .is_some_and(|n| !(1..=HARD_MAX_DIMENSIONS).contains(&n))
    {
        return Err(format!(
            "phase `{name}`: dimensions must be 1..={HARD_MAX_DIMENSIONS}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::loadgen::scenario::{Scenario, files::Files, overrides::Overrides, plan::Plan};

    fn load(phase_extra: &str, top: &str) -> Result<Plan, String> {
        let src = format!(
            "target: http://127.0.0.1:1\n{top}phases:\n  - name: p\n    duration: 1s\n    load: {{shape: constant, rate: 10}}\n{phase_extra}"
        );
        Plan::from_yaml(&src, "s.yaml", Path::new(".")).map_err(|e| e.to_string())
    }

    #[test]
    fn numbers_that_used_to_panic_are_refused_with_their_position() {
        for (extra, top, want) in [
            ("    max_tokens_per_s: 0\n", "", "s.yaml:6:"),
            ("    max_tokens_per_s: .nan\n", "", "max_tokens_per_s"),
            ("    max_tokens_per_s: .inf\n", "", "max_tokens_per_s"),
            ("    max_in_flight: 2305843009213693951\n", "", "s.yaml:6:"),
            ("    max_in_flight: 0\n", "", "max_in_flight"),
            ("", "timeout: 100000000y\n", "s.yaml:2:"),
            ("", "grace: 9999999999d\n", "7 days"),
            (
                "    chaos: {oversize_prompt: 0.1, oversize_tokens: 4294967295}\n",
                "",
                "oversize_tokens",
            ),
            (
                "    request: {endpoint: vector_search, dimensions: 100000000}\n",
                "",
                "dimensions",
            ),
            (
                "    request: {temperature: '${random_float(-1e308,1e308)}'}\n",
                "",
                "finite",
            ),
            (
                "    events: [{at: 5s, path: /x}]\n",
                "",
                "after the phase's end",
            ),
        ] {
            let e = load(extra, top).unwrap_err();
            assert!(e.contains(want), "{extra}{top}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let e = Plan::from_yaml(
            "target: http://127.0.0.1:1\nphases:\n  - name: p\n    duration: 99999999y\n    load: {shape: constant, rate: 1}\n",
            "s.yaml",
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("s.yaml:4:") && e.contains("7 days"), "{e}");
        let e = load(
            "    load: {shape: gamma, rate: 1, burstiness: 1e-300}\n",
            "",
        );
        assert!(e.is_err());
        assert!(
            load(
                "    max_tokens_per_s: 100\n    max_in_flight: 100000\n    request: {max_tokens: 8}\n",
                ""
            )
            .is_ok()
        );
    }

    /// A range has one home, [`super::check`]: a file, a flag and a derived plan meet the same
    /// words, and a file's error points at the phase or the field.
    #[test]
    fn a_range_reads_the_same_from_a_file_a_flag_or_a_derived_plan() {
        let read = |top: &str, phase: &str| {
            let src = format!("target: http://127.0.0.1:1\n{top}phases:\n  - name: p\n{phase}");
            Plan::from_yaml(&src, "s.yaml", Path::new("."))
                .unwrap_err()
                .to_string()
        };
        let e = read(
            "",
            "    duration: 0s\n    load: {shape: constant, rate: 1}\n",
        );
        assert!(
            e.starts_with("s.yaml:3:5: phase `p`: duration must be > 0"),
            "{e}"
        );
        let e = read(
            "",
            "    duration: 1s\n    load: {shape: concurrency, users: 0}\n",
        );
        assert!(
            e.starts_with("s.yaml:3:5: phase `p`: users must be 1..="),
            "{e}"
        );
        let e = read(
            "max_in_flight: 0\n",
            "    duration: 1s\n    load: {shape: constant, rate: 1}\n",
        );
        assert!(
            e.starts_with("s.yaml:2:1: max_in_flight must be 1..="),
            "{e}"
        );
        let flag = Overrides {
            max_in_flight: Some(0),
            ..Overrides::default()
        };
        let src = "target: http://127.0.0.1:1\nphases:\n  - {name: p, duration: 1s, load: {shape: constant, rate: 1}}\n";
        let scenario = Scenario::parse_yaml(src, "s.yaml").unwrap();
        let e = Plan::compile(scenario, &Files::Relative(Path::new(".")), &flag)
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_in_flight must be 1..="), "{e}");
        let plan = load("", "").unwrap();
        let mut p = plan.scenario().phases[0].clone();
        p.duration = std::time::Duration::ZERO;
        let e = plan.with_phases(vec![p]).unwrap_err().to_string();
        assert!(e.ends_with("phase `p`: duration must be > 0"), "{e}");
    }

    #[test]
    fn a_plan_derived_in_code_is_checked_again() {
        let plan = load("", "").unwrap();
        let mut s = plan.scenario().clone();
        s.max_in_flight = 0;
        assert!(super::check(&s).is_err());
        let mut p = plan.scenario().phases[0].clone();
        p.max_in_flight = Some(usize::MAX >> 2);
        let e = plan.with_phases(vec![p.clone()]).unwrap_err().to_string();
        assert!(e.contains("max_in_flight"), "{e}");
        p.max_in_flight = None;
        p.max_tokens_per_s = Some(0.0);
        assert!(plan.with_phases(vec![p.clone()]).is_err());
        p.max_tokens_per_s = None;
        assert!(
            plan.with_phases(vec![p.clone(), p.clone()]).is_err(),
            "a name twice"
        );
        assert!(plan.with_phases(vec![p]).is_ok());
    }
}
