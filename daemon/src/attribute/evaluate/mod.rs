//! Scores every rule on a window and picks the verdict.

mod evidence;
mod no_cause;
mod pick;
mod rise;
mod score;

pub use pick::verdict;
pub use rise::{MEDIAN_RISE_MS, MEDIAN_RISE_RATIO};
pub use score::{RuleResult, score};
