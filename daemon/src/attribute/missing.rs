//! Evidence a phase's verdict lacked: every signal a rule wanted and a window did not have,
//! grouped by why (the full list, kept in `report.json`), and the part of it that could have
//! changed the phase's verdict, in words (what a reader is shown).
//!
//! A phase's verdict is the cause most of its windows named. The windows that lacked a signal
//! could have changed it only if, had every one of them named the runner-up instead, the
//! runner-up would have caught up: 2 x (windows lacking it) >= the margin (the dominant
//! cause's windows minus the runner-up's). A signal missing in a few windows of a phase one
//! cause won by a wide margin could not have; one missing in most windows of an `unexplained`
//! or `none` phase could.

use super::{
    signals::{Signal, Source},
    verdict::Missing,
};

/// Signals missing for the same reason in the same number of windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Why they are absent (`Signal::absent_reason`).
    pub reason: String,
    /// Their names (`Signal::name`), or a part of the decomposition.
    pub signals: Vec<String>,
    /// How many of the phase's windows lacked them.
    pub windows: usize,
}

impl Group {
    /// `reason: a, b (in k of n windows)`, the windows left out when all `of` lacked them.
    #[must_use]
    pub fn line(&self, of: usize) -> String {
        format!(
            "{}: {}{}",
            self.reason,
            self.signals.join(", "),
            self.some(of)
        )
    }

    /// As [`Group::line`], the signals in words (`KV-cache usage`, not `kv_usage`).
    #[must_use]
    pub fn words(&self, of: usize) -> String {
        let mut said: Vec<&str> = Vec::new();
        for w in self.signals.iter().map(|s| words(s)) {
            if !said.contains(&w) {
                said.push(w);
            }
        }
        format!("{}: {}{}", self.reason, said.join(", "), self.some(of))
    }

    fn some(&self, of: usize) -> String {
        if self.windows < of {
            format!(" (in {} of {of} windows)", self.windows)
        } else {
            String::new()
        }
    }
}

/// The missing lines of a phase's windows grouped: by reason, then by how many windows lacked
/// each signal, in order of first appearance.
pub fn groups<'a>(lines: impl Iterator<Item = &'a Missing>) -> Vec<Group> {
    let mut counts: Vec<(&str, &str, usize)> = Vec::new();
    for Missing { signal, reason } in lines {
        let (signal, reason) = (signal.as_str(), reason.as_str());
        match counts
            .iter_mut()
            .find(|(r, s, _)| *r == reason && *s == signal)
        {
            Some((_, _, k)) => *k += 1,
            None => counts.push((reason, signal, 1)),
        }
    }
    let mut groups: Vec<Group> = Vec::new();
    for (reason, signal, k) in counts {
        match groups
            .iter_mut()
            .find(|g| g.reason == reason && g.windows == k)
        {
            Some(g) => g.signals.push(signal.to_owned()),
            None => groups.push(Group {
                reason: reason.to_owned(),
                signals: vec![signal.to_owned()],
                windows: k,
            }),
        }
    }
    groups
}

/// What a phase lacks by design, which no setting would give: a recognised engine's metrics
/// lack a series because the engine does not export it, and a drain (nothing sent) has no
/// load-generator data.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByDesign {
    /// The scrape recognised the engine (vLLM, `SGLang`, TGI, llama.cpp).
    pub recognised_engine: bool,
    /// The phase is a drain.
    pub drain: bool,
}

impl ByDesign {
    fn covers(self, g: &Group) -> bool {
        (self.recognised_engine && g.reason == Source::Server.unreported_reason())
            || (self.drain && g.reason == Source::Load.absent_reason())
    }
}

/// The groups whose windows could have changed a verdict won by `margin` windows over its
/// runner-up (see the module's words), what the phase lacks by design left out: one line a
/// reason, in words, the window count kept where all its signals share one.
#[must_use]
pub fn decisive(groups: &[Group], of: usize, margin: usize, by_design: ByDesign) -> Vec<String> {
    let mut merged: Vec<(Group, bool)> = Vec::new();
    for g in groups
        .iter()
        .filter(|g| 2 * g.windows >= margin && !by_design.covers(g))
    {
        match merged.iter_mut().find(|(m, _)| m.reason == g.reason) {
            Some((m, same)) => {
                m.signals.extend(g.signals.iter().cloned());
                *same &= m.windows == g.windows;
                m.windows = m.windows.max(g.windows);
            }
            None => merged.push((g.clone(), true)),
        }
    }
    merged
        .into_iter()
        .map(|(g, same)| g.words(if same { of } else { g.windows }))
        .collect()
}

/// A signal's name in words a user knows; an unknown name as it is.
#[must_use]
pub fn words(name: &str) -> &str {
    use Signal as S;
    let Ok(signal) = serde_json::from_value::<Signal>(serde_json::Value::String(name.to_owned()))
    else {
        return name;
    };
    match signal {
        S::TtftP50Ms => "median time to first token",
        S::TtftP95Ms => "time to first token p95",
        S::TtftP99Ms => "time to first token p99",
        S::ItlP50Ms => "median inter-token latency",
        S::ItlP99Ms => "inter-token latency p99",
        S::E2eP50Ms => "median request latency",
        S::E2eP99Ms => "request latency p99",
        S::RecallMean => "search recall",
        S::VectorShare => "share of vector searches",
        S::PhaseEvents => "the phase's events",
        S::ErrorRate => "error rate",
        S::AchievedShareOfTarget => "rate achieved against the target",
        S::SendLagP50Ms | S::SendLagP95Ms => "the generator's send lag",
        S::UnsentArrivals => "arrivals never sent",
        S::LoadgenRunqP99Us => "the generator's CPU wait",
        S::Waiting => "requests waiting",
        S::RunningShareOfCap => "running requests against the slot cap",
        S::KvUsage => "KV-cache usage",
        S::PreemptionsPerS => "preemptions",
        S::QueueTimeP50Ms | S::QueueTimeP95Ms | S::QueueTimeMeanMs => "queue time",
        S::ServerTtftP50Ms | S::ServerTtftMeanMs => "the server's time to first token",
        S::PromptTokensPerRequest => "prompt tokens per request",
        S::PrefixHitRate => "prefix-cache hit rate",
        S::QueueShareOfTtft | S::TtftRiseFromQueue => "queue time's part of the first token",
        S::RunqP99Us | S::RunqMeanUs | S::RunqTotalShare | S::RunqWaitShare => {
            "the server's CPU run-queue wait"
        }
        S::SrttMeanUs => "round-trip time",
        S::Retransmits => "TCP retransmits",
        S::KernelFirstTokenP50Ms => "the kernel's request-in to first token",
        S::KernelExchangeP50Ms | S::KernelExchangeP99Ms => "the kernel's exchange time",
        S::IndexRebuild => "index rebuild",
        S::ServerCpuPerRequestMs => "the server's CPU per request",
        S::ServerWaitShare => "the server's waiting part of the first token",
        S::LossHitShare | S::LossSlowdown => "requests hit by packet loss",
        S::ReadDelayMs => "the client's read delay",
        S::ClientServerGapMs | S::TransitShareOfRise => "time in the network",
        S::FrontendMs => "the server's front-end time",
        S::GpuOom => "GPU out-of-memory errors",
        S::GpuAllocsAfterWarmup | S::GpuAllocChurn => "GPU allocations",
        S::GpuMemUsedFrac => "GPU memory used",
        S::InFlightMax => "requests in flight",
        S::TtftPerItl => "first token against inter-token latency",
        S::DuplicatePrefillShare => "duplicate prompts in flight",
        S::BatchMean => "batch size",
        S::ServerTpotMs => "the server's time per output token",
        S::EngineBusyShare => "the engine's busy share",
        S::GpuSyncPerLaunchMs => "GPU synchronize time",
        S::GpuThrottleShare | S::GpuSmClockMhz | S::GpuPowerShareOfCap => "GPU clocks and power",
        S::GpuXids => "GPU XID errors",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(signal: &str, reason: &str) -> Missing {
        Missing::new(signal, reason)
    }

    #[test]
    fn groups_by_reason_and_window_count_and_keeps_what_could_change_the_verdict() {
        let lines = [
            m("kv_usage", "no server metrics"),
            m("waiting", "no server metrics"),
            m("frontend_ms", "not reported"),
            m("kv_usage", "no server metrics"),
            m("waiting", "no server metrics"),
        ];
        let g = groups(lines.iter());
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].signals, ["kv_usage", "waiting"]);
        assert_eq!(g[0].windows, 2);
        assert_eq!(g[0].line(2), "no server metrics: kv_usage, waiting");
        assert_eq!(
            g[1].line(20),
            "not reported: frontend_ms (in 1 of 20 windows)"
        );
        // A phase won 18 to 2: a signal missing in 2 windows could not have turned it (2 x 2
        // < 16); one missing in every window could.
        let none = ByDesign::default();
        assert_eq!(decisive(&g, 20, 16, none), Vec::<String>::new());
        assert_eq!(
            decisive(&g, 2, 2, none),
            [
                "no server metrics: KV-cache usage, requests waiting",
                "not reported: the server's front-end time (in 1 of 2 windows)"
            ]
        );
    }

    #[test]
    fn one_line_a_reason() {
        let lines = [
            m("kv_usage", "no server metrics"),
            m("waiting", "no server metrics"),
            m("kv_usage", "no server metrics"),
        ];
        assert_eq!(
            decisive(&groups(lines.iter()), 2, 0, ByDesign::default()),
            ["no server metrics: KV-cache usage, requests waiting"]
        );
    }

    #[test]
    fn what_is_missing_by_design_is_not_shown() {
        let server = Source::Server.unreported_reason();
        let load = Source::Load.absent_reason();
        let lines = [m("frontend_ms", server), m("ttft_p99_ms", load)];
        let g = groups(lines.iter());
        let shown = |recognised_engine, drain| {
            decisive(
                &g,
                1,
                0,
                ByDesign {
                    recognised_engine,
                    drain,
                },
            )
            .len()
        };
        assert_eq!(shown(false, false), 2);
        assert_eq!(shown(true, false), 1);
        assert_eq!(shown(true, true), 0);
    }

    #[test]
    fn every_signal_has_words_and_one_unknown_name_stays() {
        for s in Signal::ALL {
            assert_ne!(words(&s.name()), s.name(), "{s:?}");
        }
        assert_eq!(words("decomposition"), "decomposition");
    }
}
