//! Argument parsers shared by the subcommands: checked at parse time, so a bad value is a
//! one-line usage error, never a panic deep inside a run.

use std::time::Duration;

/// A duration such as `1s` or `500ms` ([`inferscope::duration`]'s grammar) that is above zero
/// (window and interval lengths: a zero-length tick panics a timer).
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    inferscope::duration::positive(s).map_err(|e| e.to_string())
}

/// A cap on requests in flight: 1 up to the hard ceiling every scenario has.
pub fn in_flight(s: &str) -> Result<usize, String> {
    let max = inferscope::loadgen::scenario::HARD_MAX_IN_FLIGHT;
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("max_in_flight must be 1..={max}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_absurd_durations_are_refused() {
        assert_eq!(positive_duration("1s"), Ok(Duration::from_secs(1)));
        assert!(positive_duration("0s").unwrap_err().contains("above zero"));
        assert!(positive_duration("100000y").is_err());
    }

    #[test]
    fn in_flight_caps_are_range_checked() {
        assert_eq!(in_flight("1"), Ok(1));
        assert_eq!(in_flight("100000"), Ok(100_000));
        for bad in ["0", "100001", "-1", "2305843009213693951", "x"] {
            assert!(in_flight(bad).unwrap_err().contains("1..=100000"), "{bad}");
        }
    }
}
