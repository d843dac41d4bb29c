//! Colour on the terminal summary's verdict lines: only when the summary goes to a terminal,
//! never when `NO_COLOR` is set to anything but the empty string (<https://no-color.org>),
//! never for `TERM=dumb`, never when piped or redirected.

use std::ffi::OsStr;
use std::io::IsTerminal as _;

/// How a line is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Latency at the baseline: green.
    Good,
    /// A warning, or a rise nothing explains: yellow.
    Warn,
    /// A named bottleneck: bold red.
    Bad,
}

impl Style {
    fn code(self) -> &'static str {
        match self {
            Style::Good => "\x1b[32m",
            Style::Warn => "\x1b[33m",
            Style::Bad => "\x1b[1;31m",
        }
    }
}

/// The decision: colour only for a terminal, with `NO_COLOR` unset or empty and `TERM` not
/// `dumb`.
#[must_use]
pub fn wanted(is_terminal: bool, no_color: Option<&OsStr>, term: Option<&OsStr>) -> bool {
    is_terminal
        && no_color.is_none_or(OsStr::is_empty)
        && term.is_none_or(|t| t != OsStr::new("dumb"))
}

/// [`wanted`] for this process's stdout and environment.
#[must_use]
pub fn for_stdout() -> bool {
    wanted(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("TERM").as_deref(),
    )
}

/// `text` in `style` when `on`, unchanged otherwise.
#[must_use]
pub fn paint(text: &str, style: Style, on: bool) -> String {
    if on {
        format!("{}{text}\x1b[0m", style.code())
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let os = |s: &'static str| Some(OsStr::new(s));
        assert!(wanted(true, None, os("xterm-256color")));
        assert!(wanted(true, None, None));
        // Piped or redirected: never.
        assert!(!wanted(false, None, os("xterm")));
        // NO_COLOR with any value turns it off; an empty one does not (no-color.org).
        assert!(!wanted(true, os("1"), os("xterm")));
        assert!(!wanted(true, os("false"), os("xterm")));
        assert!(wanted(true, os(""), os("xterm")));
        assert!(!wanted(true, None, os("dumb")));
    }

    #[test]
    fn paint_wraps_only_when_on() {
        assert_eq!(paint("verdict", Style::Bad, false), "verdict");
        assert_eq!(
            paint("verdict", Style::Good, true),
            "\x1b[32mverdict\x1b[0m"
        );
    }
}
