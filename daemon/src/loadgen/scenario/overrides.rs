//! Command-line flags over a scenario file (`stress gate.yaml --slo 'ttft_p95 < 200ms'`): the
//! one place where flags meet the file, so that no flag is silently ignored.
//!
//! Precedence is flag over file. A flag that sets something the whole run shares (`--target`,
//! `--timeout`, `--max-in-flight`, `--seed`) replaces the file's value; a flag that shapes
//! the LLM request (`--model`, `--max-tokens`, `--temperature`, `--no-stream`) replaces it in
//! every chat and completions phase; `--slo` goes into every phase (replacing an SLO the
//! phase has on the same metric in the same direction). A flag that describes the one phase
//! of a run without a file (`--rate`, `--duration`, ...) has no single phase to go to in a
//! file of many, so it is refused with what to write in the file instead.
//!
//! The overrides are applied once, to the parsed file, before it is validated
//! ([`super::plan::Plan::compile`]): the scenario that runs is checked as it runs.

use std::time::Duration;

use crate::loadgen::{
    scenario::template::JsonTemplate,
    scenario::{Phase, Scenario},
};

use crate::measure::{
    record::Endpoint,
    slo::{Op, Slo},
};

/// A `stress` flag that describes the single phase of a run without a scenario file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseFlag {
    /// `--rate`.
    Rate,
    /// `--arrival`.
    Arrival,
    /// `--connections` (`--concurrency`).
    Connections,
    /// `--duration`.
    Duration,
    /// `--endpoint`.
    Endpoint,
    /// `--method`.
    Method,
    /// `--body`.
    Body,
    /// `--prompt`.
    Prompt,
    /// `--dimensions`.
    Dimensions,
}

impl PhaseFlag {
    /// The flag as written on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            PhaseFlag::Rate => "--rate",
            PhaseFlag::Arrival => "--arrival",
            PhaseFlag::Connections => "--connections",
            PhaseFlag::Duration => "--duration",
            PhaseFlag::Endpoint => "--endpoint",
            PhaseFlag::Method => "--method",
            PhaseFlag::Body => "--body",
            PhaseFlag::Prompt => "--prompt",
            PhaseFlag::Dimensions => "--dimensions",
        }
    }

    /// What to write in the scenario file instead.
    #[must_use]
    pub fn instead(self) -> &'static str {
        match self {
            PhaseFlag::Rate | PhaseFlag::Arrival => {
                "set `load: {shape: constant, rate: N}` (or `shape: poisson`) in each phase instead"
            }
            PhaseFlag::Connections => {
                "set `load: {shape: concurrency, users: N}` in each phase instead"
            }
            PhaseFlag::Duration => "set `duration:` in each phase instead",
            PhaseFlag::Endpoint => "set `request.endpoint:` in each phase instead",
            PhaseFlag::Method => {
                "set `request.method:` (with `endpoint: http`) in each phase instead"
            }
            PhaseFlag::Body => "set `request.body:` in each phase instead",
            PhaseFlag::Prompt => "set `request.prompt:` in each phase instead",
            PhaseFlag::Dimensions => {
                "set `request.dimensions:` in each vector_search phase instead"
            }
        }
    }
}

/// Why the flags cannot go over a scenario.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    /// A flag of the file-less single phase was given with a scenario file.
    #[error("{} conflicts with the scenario file {file}: {}", .flag.name(), .flag.instead())]
    Conflict {
        /// The flag.
        flag: PhaseFlag,
        /// The scenario file.
        file: String,
    },
    /// An LLM request flag, and no phase it could apply to.
    #[error("{flag} applies to chat and completions phases, and {file} has none: drop {flag}")]
    NoLlmPhase {
        /// The flag.
        flag: &'static str,
        /// The scenario file (or `the run`).
        file: String,
    },
}

/// What the command line sets over a scenario: every field left at its default leaves the
/// scenario as it is.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--target`: the base URL.
    pub target: Option<crate::target_url::TargetUrl>,
    /// `--timeout`: the per-request timeout.
    pub timeout: Option<Duration>,
    /// `--max-in-flight`: the run-wide cap on requests in flight.
    pub max_in_flight: Option<usize>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--model`, for every LLM phase.
    pub model: Option<String>,
    /// `--max-tokens`, for every LLM phase.
    pub max_tokens: Option<u32>,
    /// `--temperature`, for every LLM phase.
    pub temperature: Option<f64>,
    /// `--no-stream`: every LLM phase asks for the whole answer at once.
    pub no_stream: bool,
    /// `--no-trace-headers`: no `traceparent` or `x-request-id` on any request.
    pub no_trace_headers: bool,
    /// `--slo`, for every phase.
    pub slos: Vec<Slo>,
    /// Flags of the single phase a run without a file is made of (refused with a file).
    pub phase_flags: Vec<PhaseFlag>,
}

impl Overrides {
    /// Applies the flags to `scenario`, read from `file` (named in errors). Refuses any
    /// [`PhaseFlag`], and an LLM request flag when no phase is an LLM phase.
    pub(super) fn apply(&self, scenario: &mut Scenario, file: &str) -> Result<(), OverrideError> {
        self.refuse_phase_flags(file)?;
        if let Some(t) = &self.target {
            scenario.target.clone_from(t);
        }
        if let Some(t) = self.timeout {
            scenario.timeout = t;
        }
        if let Some(n) = self.max_in_flight {
            scenario.max_in_flight = n;
        }
        if self.seed.is_some() {
            scenario.seed = self.seed;
        }
        if self.no_trace_headers {
            scenario.trace_headers = false;
        }
        self.apply_llm(&mut scenario.phases, file)?;
        for p in &mut scenario.phases {
            merge_slos(&mut p.slo, &self.slos);
        }
        // The search judges each step by the first phase's SLOs and its own: a flag that
        // replaced one of the phase's must not be overruled by the search's.
        if let Some(search) = &mut scenario.search {
            search
                .slo
                .retain(|s| !self.slos.iter().any(|f| same_bound(s, f)));
        }
        Ok(())
    }

    /// The first [`PhaseFlag`] given, as the conflict it is with the scenario `file`.
    pub(super) fn refuse_phase_flags(&self, file: &str) -> Result<(), OverrideError> {
        match self.phase_flags.first() {
            Some(&flag) => Err(OverrideError::Conflict {
                flag,
                file: file.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// `--model`, `--max-tokens`, `--temperature` and `--no-stream` on every LLM phase.
    fn apply_llm(&self, phases: &mut [Phase], file: &str) -> Result<(), OverrideError> {
        let given = [
            ("--model", self.model.is_some()),
            ("--max-tokens", self.max_tokens.is_some()),
            ("--temperature", self.temperature.is_some()),
            ("--no-stream", self.no_stream),
        ];
        let Some(&(flag, _)) = given.iter().find(|(_, g)| *g) else {
            return Ok(());
        };
        let mut any = false;
        for p in phases.iter_mut().filter(|p| is_llm(p)) {
            any = true;
            let r = &mut p.request;
            if let Some(m) = &self.model {
                r.model = Some(m.clone());
            }
            if let Some(n) = self.max_tokens {
                r.max_tokens = Some(n);
            }
            if let Some(t) = self.temperature {
                r.temperature = Some(JsonTemplate::Leaf(serde_json::json!(t)));
            }
            if self.no_stream {
                r.stream = Some(false);
            }
        }
        if any {
            Ok(())
        } else {
            Err(OverrideError::NoLlmPhase {
                flag,
                file: file.to_owned(),
            })
        }
    }
}

/// Whether a phase sends chat or completions requests (the default endpoint is chat).
fn is_llm(p: &Phase) -> bool {
    matches!(
        p.request.endpoint.unwrap_or(Endpoint::Chat),
        Endpoint::Chat | Endpoint::Completions
    )
}

/// Adds the flags' SLOs to a phase's; a flag's SLO replaces the phase's on the same metric
/// bounded the same way (flag over file), so `--slo 'ttft_p95 < 1s'` loosens a file's
/// `ttft_p95 < 200ms` rather than being outvoted by it.
fn merge_slos(phase: &mut Vec<Slo>, flags: &[Slo]) {
    phase.retain(|s| !flags.iter().any(|f| same_bound(s, f)));
    phase.extend(flags.iter().cloned());
}

/// Whether two SLOs bound the same metric from the same side (both upper or both lower).
fn same_bound(a: &Slo, b: &Slo) -> bool {
    let upper = |s: &Slo| matches!(s.op, Op::Lt | Op::Le);
    a.metric == b.metric && upper(a) == upper(b)
}

#[cfg(test)]
#[path = "overrides_tests.rs"]
mod tests;
