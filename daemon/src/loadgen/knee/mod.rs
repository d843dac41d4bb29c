//! SLO knee search (`stress --find-max`): the highest load that still meets the SLOs.
//!
//! Short steps of one phase each, at a rate (open loop) or a number of users (closed loop):
//! 1. **grow**: the start load, then double it until a step fails (or the ceiling passes);
//!    when the start load already fails, halve it until one passes (at most 6 times);
//! 2. **bisect** between the highest passing and the lowest failing load until they are within
//!    the tolerance (5% by default; one user for concurrency) or the time budget is spent.
//!
//! A step fails when one of its SLOs fails, or, open loop, when fewer than 90% of the
//! scheduled requests finished per second (the server, or the generator, did not keep up: the
//! load was not sustained). The knee lies between the highest passing and the lowest failing
//! load: that bracket is the answer's interval. Each latency-quantile SLO's observed value
//! also gets a distribution-free 95% confidence interval (the order statistics around rank
//! n*q, binomial), and a step whose interval contains the threshold is marked *marginal*: its
//! pass or fail could flip on a rerun. Steps are separate runs with a pause between them, so
//! a queue left by an overloaded step drains before the next.
//!
//! `spec` says what to search, `planner` picks the next load, `search` runs the steps,
//! `judge` decides each, `outcome` holds the answer.

mod judge;
mod outcome;
mod planner;
mod search;
mod spec;

pub use judge::SUSTAINED_SHARE;
pub use outcome::{Outcome, SearchStop, SloObservation, Step, fmt_load};
pub use planner::Planner;
pub use search::{search, step_phase};
pub use spec::{DEFAULT_BUDGET, DEFAULT_STEP, Knob, Overrides, SearchSpec};

#[cfg(test)]
mod tests;
