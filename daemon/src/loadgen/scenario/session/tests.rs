//! Sessions parsed from YAML, waits drawn from their distributions, bad sessions refused.

use std::{path::Path, time::Duration};

use rand::{SeedableRng as _, rngs::SmallRng};

use super::check::agent_problem;
use super::*;
use crate::loadgen::scenario::plan::Plan;

/// The error of a phase whose request is `request` (YAML under `request:`), or "" when it
/// is accepted.
fn error(request: &str) -> String {
    let src = format!(
        "target: http://127.0.0.1:1\nphases:\n  - name: p\n    duration: 10s\n    load: {{shape: poisson, rate: 1}}\n    request:\n{request}"
    );
    Plan::from_yaml(&src, "t.yaml", Path::new("."))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

fn session(body: &str) -> String {
    error(&format!("      session:\n{body}"))
}

#[test]
fn a_whole_session_parses() {
    let s: SessionSpec = serde_norway::from_str(
        "system_prompt_tokens: 400\ncontext_limit: 3000\ncompaction: {summary: 200}\nsteps:\n  - llm: {}\n  - repeat:\n      times: 3\n      steps:\n        - tool: {name: search, wait: {lognormal: {median: 300ms, sigma: 0.6}}, result_tokens: [200, 600]}\n        - llm: {max_tokens: 48}\n  - agents:\n      count: 3\n      steps:\n        - llm: {}\n        - tool: {url: 'http://127.0.0.1:8001/v1/tools/lookup'}\n  - think: {exponential: 1s}\n  - llm: {}\n",
    )
    .unwrap();
    assert_eq!(s.compaction, Compaction::Summary(200));
    assert_eq!(s.task_tokens, 64);
    let Step::Repeat(r) = &s.steps[1] else {
        panic!("{:?}", s.steps[1]);
    };
    assert_eq!(r.times, 3);
    let Step::Tool(t) = &r.steps[0] else {
        panic!("{:?}", r.steps[0]);
    };
    assert_eq!(t.result_tokens, Some(Tokens { min: 200, max: 600 }));
    assert_eq!(
        tool_urls(&s.steps),
        ["http://127.0.0.1:8001/v1/tools/lookup"]
    );
    assert_eq!(agent_problem(&s.steps, 0), None);
}

#[test]
fn waits_are_drawn_from_their_distribution() {
    let w = |y: &str| serde_norway::from_str::<Wait>(y).unwrap();
    let mut rng = SmallRng::seed_from_u64(3);
    assert_eq!(w("250ms").draw(&mut rng), Duration::from_millis(250));
    assert_eq!(w("{constant: 1s}").draw(&mut rng), Duration::from_secs(1));
    let mean = |d: Wait, rng: &mut SmallRng| {
        (0..20_000).map(|_| d.draw(rng).as_secs_f64()).sum::<f64>() / 20_000.0
    };
    let u = w("{uniform: [100ms, 300ms]}");
    assert!((0..1000).all(|_| {
        let x = u.draw(&mut rng);
        x >= Duration::from_millis(100) && x <= Duration::from_millis(300)
    }));
    assert!((mean(w("{exponential: 200ms}"), &mut rng) - 0.2).abs() < 0.01);
    let ln = w("{lognormal: {median: 200ms, sigma: 0.5}}");
    let mut draws: Vec<f64> = (0..20_000)
        .map(|_| ln.draw(&mut rng).as_secs_f64())
        .collect();
    draws.sort_by(f64::total_cmp);
    assert!((draws[10_000] - 0.2).abs() < 0.01, "{}", draws[10_000]);
    // A heavy tail is cut at the hour.
    let huge = w("{lognormal: {median: 1h, sigma: 10}}");
    assert!((0..100).all(|_| huge.draw(&mut rng) <= MAX_WAIT));
}

#[test]
fn bad_sessions_are_refused_in_one_line() {
    let ok = "        steps: [{llm: {}}, {tool: {wait: 1s, result_tokens: 10}}, {think: 2s}, {llm: {}}]\n";
    assert_eq!(session(ok), "");
    for (body, says) in [
        (
            "        steps: [{think: 1s}]\n",
            "the session needs an `llm` step",
        ),
        (
            "        steps: [{llm: {}}, {agents: {count: 2, steps: [{think: 1s}]}}]\n",
            "a sub-agent at depth 1 needs an `llm` step",
        ),
        (
            "        steps: [{llm: {}}, {agents: {count: 0, steps: [{llm: {}}]}}]\n",
            "agents count must be 1..=64",
        ),
        (
            "        steps: [{llm: {}}, {tool: {wait: 1s}}]\n",
            "tool `tool` needs `result_tokens:`",
        ),
        (
            "        steps: [{llm: {}}, {tool: {name: s, result_tokens: 3}}]\n",
            "tool `s` needs `wait:`",
        ),
        (
            "        steps: [{llm: {}}, {tool: {wait: 1s, url: 'http://h/x', result_tokens: 3}}]\n",
            "has both `wait` and `url`",
        ),
        (
            "        steps: [{llm: {}}, {tool: {url: 'ftp://h/x'}}]\n",
            "not an http:// or https:// URL",
        ),
        (
            "        steps: [{llm: {}}, {repeat: {times: 0, steps: [{llm: {}}]}}]\n",
            "repeat times must be 1..=1000",
        ),
        (
            "        steps: [{llm: {max_tokens: 0}}]\n",
            "llm max_tokens must be at least 1",
        ),
        (
            "        steps: [{llm: {}}, {dance: {}}]\n",
            "unknown field `dance`",
        ),
        (
            "        steps: [{llm: {}, think: 1s}]\n",
            "a step is one of",
        ),
        (
            "        steps: [{llm: {}}, {think: soon}]\n",
            "bad duration \"soon\"",
        ),
        (
            "        steps: [{llm: {}}, {think: {gamma: 1s}}]\n",
            "unknown wait distribution `gamma`",
        ),
        (
            "        steps: [{llm: {}}, {tool: {wait: 1s, result_tokens: [9, 3]}}]\n",
            "bad token count",
        ),
        (
            "        compaction: squash\n        steps: [{llm: {}}]\n",
            "bad compaction",
        ),
        (
            "        context_limit: 60\n        steps: [{llm: {}}]\n",
            "context_limit 60 leaves no room",
        ),
    ] {
        let e = session(body);
        assert!(e.starts_with("t.yaml:") && e.contains(says), "{body}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    let nested = "{agents: {count: 1, steps: [{llm: {}}, X]}}";
    let mut deep = "{llm: {}}".to_owned();
    for _ in 0..5 {
        deep = nested.replace('X', &deep);
    }
    let e = session(&format!("        steps: [{{llm: {{}}}}, {deep}]\n"));
    assert!(e.contains("nest at most 4 deep"), "{e}");
    let e = error(&format!(
        "      conversation: {{turns: 2}}\n      session:\n{ok}"
    ));
    assert!(
        e.contains("`request.conversation` does not go with `session:`"),
        "{e}"
    );
    let e = error(&format!(
        "      endpoint: completions\n      session:\n{ok}"
    ));
    assert!(e.contains("`session:` needs `endpoint: chat`"), "{e}");
}
