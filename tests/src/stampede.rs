//! The KV-cache stampede (cache breakdown, 击穿): one hot prompt, normally served from the
//! server's prefix cache, asked by many at the same instant right after the cache forgot it.
//! Every copy that arrives before the first one's prefill is done computes the same prefill
//! again. Its counterpart asks the same prompt at the same mean rate, spread out: the cache
//! serves every copy but the first, and nothing rises.

use serde_json::Value;

use crate::{
    Sim,
    cases::Case,
    explain::{self, FIRST, NO_SERVER_METRICS, Stress, loopback},
};

/// Requests per second of the hot prompt outside the bursts.
const RATE: f64 = 4.0;
/// Copies per burst, one burst a second.
const BURST: u32 = 24;

/// The cases: the stampede with and without the server's metrics, and the spread-out
/// counterpart.
#[must_use]
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "stampede",
            mechanism: "sim, one 1,500-word prompt at 4 req/s; peak: bursts of 24 copies every second, each after POST /reset_prefix_cache",
            expected: "duplicate_prefill",
            run: || run("stampede", true, true),
        },
        Case {
            name: "stampede-nometrics",
            mechanism: "the stampede, `/metrics` left unread: the client's own count of copies sent within one prefill of their twin",
            expected: "duplicate_prefill",
            run: || run("stampede-nm", true, false),
        },
        Case {
            name: "hot-prompt-spread",
            mechanism: "the same prompt at the stampede's mean rate (28 req/s), spread out, no reset: the prefix cache serves the copies",
            expected: "none",
            run: || run("hot-spread", false, true),
        },
    ]
}

/// The scenario: baseline, peak and cooldown of the hot prompt; at the peak either bursts
/// after a reset (`burst`) or the same mean rate spread out.
#[must_use]
pub fn scenario(name: &str, target: &str, burst: bool) -> String {
    let prompt = "the operator asks why the latency of the service rose ".repeat(150);
    let request = format!(
        "{{endpoint: chat, model: inferscope-sim, prompt: \"{prompt}\", max_tokens: 16, stream: true}}"
    );
    explain::three_phases(name, target, "", |p| {
        let (rate, more) = match p {
            "peak" if burst => (
                RATE,
                format!(
                    "    chaos: {{stampede: {{size: {BURST}, every: 1s, reset: /reset_prefix_cache}}}}\n"
                ),
            ),
            "peak" => (RATE + f64::from(BURST), String::new()),
            _ => (RATE, String::new()),
        };
        explain::Phase {
            load: format!("{{shape: constant, rate: {rate}}}"),
            request: request.clone(),
            more,
        }
    })
}

/// Runs the scenario against the healthy sim; `metrics` false leaves `/metrics` unread.
#[must_use]
pub fn run(name: &str, burst: bool, metrics: bool) -> Value {
    let sim = Sim::start(
        &["nice", "-n", &FIRST.to_string()],
        "healthy",
        loopback(),
        &[],
    );
    let extra: &[&str] = if metrics { &[] } else { &NO_SERVER_METRICS };
    let r = Stress::start(name, &scenario(name, &sim.url(), burst), None, FIRST, extra).finish();
    drop(sim);
    r
}

#[cfg(test)]
mod tests {
    use inferscope::loadgen::scenario::{Scenario, files::Files, overrides::Overrides, plan::Plan};

    /// Both scenarios pass the scenario's own checks, and only the stampede's peak bursts.
    #[test]
    fn both_scenarios_compile_and_only_one_bursts() {
        for burst in [true, false] {
            let yaml = super::scenario("x", "http://127.0.0.1:1", burst);
            let s = Scenario::parse_yaml(&yaml, "s.yaml").unwrap();
            let plan = Plan::compile(
                s,
                &Files::Relative(std::path::Path::new(".")),
                &Overrides::default(),
            )
            .unwrap();
            let peak = &plan.scenario().phases[1];
            assert_eq!(peak.name, "peak");
            assert_eq!(
                peak.chaos.stampede.as_ref().map(|s| s.size),
                burst.then_some(super::BURST)
            );
        }
    }
}
