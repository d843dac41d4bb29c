//! The one grammar for a length of time, read by every YAML field (a phase's `duration:`, a
//! trigger's `for:`, a session's `think:`) and every flag (`--window`, `--interval`, `--start-at
//! next:`): terms of a number and a unit, `1m 30s`, `500ms`, `1.5s`, `250us`, `2h`, or `0`.
//! What each field allows on top (above zero, a shorter ceiling) is its own check on the
//! [`Duration`] this returns.

use std::time::Duration;

/// Longest duration anything accepts (a week): longer values are typos, and an `Instant` far
/// in the future overflows.
pub const MAX: Duration = Duration::from_hours(7 * 24);

/// A duration that cannot be used; each says what was written and how to write one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not in the grammar.
    #[error("bad duration {0:?}: {1} (write e.g. `60s`, `500ms`, `1m 30s`)")]
    Unreadable(String, &'static str),
    /// Longer than [`MAX`].
    #[error("duration `{0}` is longer than the limit of 7 days")]
    TooLong(String),
    /// Zero where a length is needed.
    #[error("duration `{0}` must be above zero (e.g. 1s)")]
    Zero(String),
}

/// Reads `s`: one or more `<number><unit>` terms (the number may have a fraction; spaces
/// between terms are allowed), or a bare `0`; at most [`MAX`].
pub fn parse(s: &str) -> Result<Duration, DurationError> {
    let text = s.trim();
    let bad = |why| DurationError::Unreadable(s.to_owned(), why);
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut secs = 0.0_f64;
    let mut rest = text;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(bad("expected a number"));
        }
        let n: f64 = rest[..num_len].parse().map_err(|_| bad("not a number"))?;
        rest = rest[num_len..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(rest.len());
        if unit_len == 0 {
            return Err(bad("a number needs a unit"));
        }
        secs += n * unit_secs(&rest[..unit_len]).ok_or_else(|| bad("unknown unit"))?;
        rest = rest[unit_len..].trim_start();
    }
    if !secs.is_finite() || secs > MAX.as_secs_f64() {
        return Err(DurationError::TooLong(s.to_owned()));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// [`parse`], refusing zero (a window, an interval, a tick: a zero-length timer panics).
pub fn positive(s: &str) -> Result<Duration, DurationError> {
    let d = parse(s)?;
    if d.is_zero() {
        return Err(DurationError::Zero(s.to_owned()));
    }
    Ok(d)
}

/// Seconds in one `unit`.
fn unit_secs(unit: &str) -> Option<f64> {
    Some(match unit {
        "ns" | "nsec" => 1e-9,
        "us" | "µs" | "usec" => 1e-6,
        "ms" | "msec" => 1e-3,
        "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
        "d" | "day" | "days" => 86_400.0,
        "w" | "week" | "weeks" => 604_800.0,
        "M" | "month" | "months" => 2_630_016.0,
        "y" | "year" | "years" => 31_557_600.0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_grammar_reads_fields_and_flags_alike() {
        for (s, d) in [
            ("60s", Duration::from_mins(1)),
            ("500ms", Duration::from_millis(500)),
            ("1m 30s", Duration::from_secs(90)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("250us", Duration::from_micros(250)),
            ("2m", Duration::from_mins(2)),
            ("1h", Duration::from_hours(1)),
            ("7days", MAX),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            (" 2 s ", Duration::from_secs(2)),
        ] {
            assert_eq!(parse(s), Ok(d), "{s}");
        }
    }

    #[test]
    fn what_it_refuses_it_names() {
        for (s, says) in [
            ("soon", "expected a number"),
            ("5", "needs a unit"),
            ("5 parsecs", "unknown unit"),
            ("1..5s", "not a number"),
            ("", "empty"),
        ] {
            let e = parse(s).unwrap_err();
            assert!(e.to_string().contains(says), "{s}: {e}");
            assert!(e.to_string().starts_with("bad duration"), "{s}: {e}");
        }
        assert_eq!(
            parse("8d"),
            Err(DurationError::TooLong("8d".into())),
            "a week is the most"
        );
        assert_eq!(
            parse("99999999y"),
            Err(DurationError::TooLong("99999999y".into()))
        );
        assert_eq!(positive("0s"), Err(DurationError::Zero("0s".into())));
        assert_eq!(positive("1s"), Ok(Duration::from_secs(1)));
    }
}
