//! When a rule fires: its conditions must hold in every window, without a break, for `for:`
//! (measured from the start of the first window they held in to the end of the current one);
//! it fires once per such episode, and never within `cooldown` of its last firing. An episode
//! that reaches `for:` inside the cooldown fires when the cooldown ends, if it still lasts.
//! A window that is missing (a gap in the window starts) breaks the episode like a window in
//! which the conditions do not hold.

use std::time::Duration;

/// One rule's episode state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Episode {
    /// Start of the first window of the current run of holding windows, Unix ms.
    since_ms: Option<u64>,
    /// End of the last window seen, Unix ms (to notice gaps).
    last_end_ms: Option<u64>,
    /// The current episode already fired.
    fired: bool,
    /// End of the window the rule last fired in, Unix ms.
    last_fired_ms: Option<u64>,
}

impl Episode {
    /// Feeds one closed window (`start_ms`, `len_ms`) in which the conditions `held` or not;
    /// returns whether the rule fires now.
    pub fn step(
        &mut self,
        start_ms: u64,
        len_ms: u64,
        held: bool,
        for_at_least: Duration,
        cooldown: Duration,
    ) -> bool {
        let end_ms = start_ms + len_ms;
        // A skipped window (or one from before) is a break: the conditions were not seen to
        // hold in it.
        let continuous = self
            .last_end_ms
            .is_some_and(|e| start_ms.abs_diff(e) < len_ms.max(1));
        self.last_end_ms = Some(end_ms);
        if !held {
            self.since_ms = None;
            self.fired = false;
            return false;
        }
        if !continuous {
            self.since_ms = None;
            self.fired = false;
        }
        let since = *self.since_ms.get_or_insert(start_ms);
        if self.fired {
            return false;
        }
        let held_for = Duration::from_millis(end_ms.saturating_sub(since));
        let cooled = self
            .last_fired_ms
            .is_none_or(|f| Duration::from_millis(end_ms.saturating_sub(f)) >= cooldown);
        if held_for >= for_at_least && cooled {
            self.fired = true;
            self.last_fired_ms = Some(end_ms);
            return true;
        }
        false
    }

    /// Whether an episode is under way (the conditions held in the last window).
    #[must_use]
    pub fn active(&self) -> bool {
        self.since_ms.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds 1 s windows from t=0 whose conditions held as `pattern` says (`#` held, `.` not,
    /// ` ` a missing window); returns the indices of the windows the rule fired in.
    fn fires(pattern: &str, hold_s: u64, cooldown_s: u64) -> Vec<usize> {
        let mut e = Episode::default();
        pattern
            .chars()
            .enumerate()
            .filter(|(_, c)| *c != ' ')
            .filter_map(|(i, c)| {
                e.step(
                    i as u64 * 1000,
                    1000,
                    c == '#',
                    Duration::from_secs(hold_s),
                    Duration::from_secs(cooldown_s),
                )
                .then_some(i)
            })
            .collect()
    }

    #[test]
    fn fires_once_per_episode_after_the_hold() {
        // Held for 2 s at the end of window 3 (windows 2 and 3); the episode goes on and
        // does not fire again.
        assert_eq!(fires("..########..", 2, 0), [3]);
        // Two episodes, two firings.
        assert_eq!(fires("..###...###.", 2, 0), [3, 9]);
        // `for: 0`: the first window that holds.
        assert_eq!(fires(".#.#", 0, 0), [1, 3]);
    }

    #[test]
    fn never_fires_on_a_healthy_sequence_or_short_blips() {
        assert!(fires("............", 2, 0).is_empty());
        assert!(fires(".#.#.#.#.#.#", 2, 0).is_empty());
        // Held 2 s, but with a missing window in the middle: no continuous 3 s.
        assert!(fires("## ##", 3, 0).is_empty());
    }

    #[test]
    fn cooldown_is_respected() {
        // `for: 1s` on 1 s windows: the first window that holds. The second episode holds
        // from window 5 on, inside the 10 s cooldown of the firing that ended at 1 s; it still
        // lasts when the cooldown ends (the end of window 10, 11 s) and fires then.
        assert_eq!(fires("###..##########", 1, 10), [0, 10]);
        // An episode that ends inside the cooldown never fires.
        assert_eq!(fires("##..###......", 1, 10), [0]);
        // After the cooldown, a new episode fires normally.
        assert_eq!(fires("##.........##", 1, 5), [0, 11]);
    }
}
