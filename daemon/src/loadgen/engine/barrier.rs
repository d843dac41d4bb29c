//! `--start-at`: a common start for the shards of one load (pods of an Indexed Job), so that
//! their phases run at once and the merged report describes load that really ran together.
//!
//! A run waits, after its setup (model discovery, vector seeding) and before its first
//! request, until the start time. Written as an instant (`2026-12-02T12:30:00Z`, or `@` and
//! Unix seconds) or as a grid, `next:2m`: the next whole multiple of two minutes of Unix time,
//! which every shard started within the same two minutes agrees on without talking to the
//! others. `report merge` refuses shards whose phases did not overlap
//! ([`crate::measure::merge::check_concurrent`]), so a shard that missed the common start is
//! caught, not blended in.

use std::{
    fmt,
    str::FromStr,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio_util::sync::CancellationToken;

/// When the run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// At this instant.
    At(SystemTime),
    /// At the next whole multiple of this period of Unix time.
    Next(Duration),
}

/// A `--start-at` value that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--start-at {0:?}: {1} (write a time such as 2026-12-02T12:30:00Z, @UNIX_SECONDS, or next:2m)"
)]
pub struct StartAtError(String, &'static str);

impl FromStr for StartAt {
    type Err = StartAtError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| StartAtError(s.to_owned(), why);
        if let Some(period) = s.strip_prefix("next:") {
            let d = crate::duration::parse(period).map_err(|_| bad("not a duration"))?;
            if d < Duration::from_secs(1) || d > Duration::from_hours(24) {
                return Err(bad("the period must be 1s to 24h"));
            }
            return Ok(StartAt::Next(d));
        }
        if let Some(secs) = s.strip_prefix('@') {
            let secs: f64 = secs.parse().map_err(|_| bad("not a number of seconds"))?;
            let d = Duration::try_from_secs_f64(secs).map_err(|_| bad("out of range"))?;
            return Ok(StartAt::At(UNIX_EPOCH + d));
        }
        humantime::parse_rfc3339_weak(s)
            .map(StartAt::At)
            .map_err(|_| bad("not an RFC 3339 time"))
    }
}

impl fmt::Display for StartAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartAt::At(t) => write!(f, "{}", humantime::format_rfc3339_millis(*t)),
            StartAt::Next(d) => write!(f, "next:{}", humantime::format_duration(*d)),
        }
    }
}

impl StartAt {
    /// The instant this start names, seen at `now`.
    #[must_use]
    pub fn instant(self, now: SystemTime) -> SystemTime {
        match self {
            StartAt::At(t) => t,
            StartAt::Next(period) => {
                let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
                let p = period.as_nanos();
                let next = (since.as_nanos() / p + 1) * p;
                UNIX_EPOCH + Duration::from_nanos(u64::try_from(next).unwrap_or(u64::MAX))
            }
        }
    }
}

/// What waiting for the start came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The start came (after waiting this long).
    Started(Duration),
    /// The start had passed this long ago: the run starts at once, late.
    Late(Duration),
    /// Cancelled while waiting.
    Cancelled,
}

/// Waits for `start` (seen now, cancellable) and says how that went in `notes`.
pub async fn meet(start: StartAt, cancel: &CancellationToken, notes: super::Notes) {
    let at = start.instant(SystemTime::now());
    let when = humantime::format_rfc3339_millis(at);
    let ms = |d: Duration| humantime::format_duration(Duration::from_millis(d.as_millis() as u64));
    notes.say(&match wait(at, cancel).await {
        Waited::Started(d) => format!(
            "started at the common start {when} ({start}), after waiting {}",
            ms(d)
        ),
        Waited::Late(d) => format!(
            "the common start {when} had passed {} ago: started at once, late (`report merge` will say whether the shards still overlap)",
            ms(d)
        ),
        Waited::Cancelled => format!("cancelled while waiting for the common start {when}"),
    });
}

/// Waits until `at` (cancellable).
pub async fn wait(at: SystemTime, cancel: &CancellationToken) -> Waited {
    let now = SystemTime::now();
    let Ok(ahead) = at.duration_since(now) else {
        return Waited::Late(now.duration_since(at).unwrap_or_default());
    };
    tokio::select! {
        () = tokio::time::sleep(ahead) => Waited::Started(ahead),
        () = cancel.cancelled() => Waited::Cancelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_read_and_grids_agree() {
        let t = |s: &str| s.parse::<StartAt>();
        assert_eq!(
            t("@1700000000").unwrap(),
            StartAt::At(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(
            t("2023-11-14T22:13:20Z").unwrap(),
            StartAt::At(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(t("next:2m").unwrap(), StartAt::Next(Duration::from_mins(2)));
        for bad in ["soon", "next:0s", "next:2d", "@-5", "@x", ""] {
            let e = t(bad).unwrap_err().to_string();
            assert!(e.starts_with("--start-at") && e.contains("next:2m"), "{e}");
        }
        // Two shards started 50 s apart within one grid period start together.
        let grid = StartAt::Next(Duration::from_mins(2));
        let a = UNIX_EPOCH + Duration::from_secs(1_700_000_040 + 10);
        let b = a + Duration::from_secs(50);
        assert_eq!(grid.instant(a), grid.instant(b));
        let at = grid.instant(a).duration_since(UNIX_EPOCH).unwrap();
        assert_eq!(at.as_secs() % 120, 0);
        assert!(grid.instant(a) > a);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_ends_at_the_start_late_or_cancelled() {
        let cancel = CancellationToken::new();
        let past = SystemTime::now() - Duration::from_secs(3);
        assert!(
            matches!(wait(past, &cancel).await, Waited::Late(d) if d >= Duration::from_secs(3))
        );
        let soon = SystemTime::now() + Duration::from_secs(5);
        assert!(
            matches!(wait(soon, &cancel).await, Waited::Started(d) if d > Duration::from_secs(4))
        );
        cancel.cancel();
        let later = SystemTime::now() + Duration::from_hours(1);
        assert_eq!(wait(later, &cancel).await, Waited::Cancelled);
    }
}
