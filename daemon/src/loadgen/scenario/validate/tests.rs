//! Pipeline and stampede phases checked in one line, and the target's port.

use std::path::Path;

use crate::loadgen::scenario::Scenario;

fn with_target(target: &str) -> Scenario {
    let src = format!(
        "target: {target}\nphases:\n  - name: p\n    duration: 1s\n    load: {{shape: constant, rate: 1}}\n"
    );
    super::super::plan::Plan::from_yaml(&src, "t.yaml", Path::new("."))
        .unwrap()
        .scenario()
        .clone()
}

fn plan_error(request: &str) -> String {
    phase_error(&format!("    request:\n{request}"))
}

#[test]
fn pipeline_phases_are_checked_in_one_line() {
    let steps =
        "      pipeline:\n        steps:\n          - {kind: search}\n          - {kind: chat}\n";
    assert_eq!(plan_error(steps), "");
    let e = plan_error(&format!("      max_tokens: 9\n{steps}"));
    assert!(
        e.starts_with("t.yaml:") && e.contains("`request.max_tokens` does not apply to a pipeline"),
        "{e}"
    );
    let e = plan_error(&format!("      endpoint: vector_search\n{steps}"));
    assert!(e.contains("`request.endpoint` does not apply"), "{e}");
    let e = plan_error(&format!("      conversation: {{turns: 2}}\n{steps}"));
    assert!(e.contains("`request.conversation` does not apply"), "{e}");
    let e = plan_error(
        "      pipeline:\n        steps:\n          - {kind: chat}\n          - {kind: search}\n",
    );
    assert!(e.contains("steps run in the order"), "{e}");
    let e = plan_error(
        "      pipeline:\n        steps:\n          - {kind: chat, prompt: x, path: 'nope'}\n",
    );
    assert!(e.contains("pipeline step `chat`: bad path"), "{e}");
    let e = plan_error(
        "      pipeline:\n        steps:\n          - {kind: search, fallback: {default: 3}}\n          - {kind: chat}\n",
    );
    assert!(
        e.contains("t.yaml:") && e.contains("list of document texts"),
        "{e}"
    );
    let e = plan_error(
        "      pipeline:\n        steps:\n          - {kind: chat, prompt: '${dataset.prompt} ${query}'}\n",
    );
    assert!(e.contains("no `request.dataset`"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
}

/// The error of a 5 s phase with these extra lines (empty when it compiles).
fn phase_error(lines: &str) -> String {
    let src = format!(
        "target: http://127.0.0.1:1\nphases:\n  - name: p\n    duration: 5s\n    load: {{shape: constant, rate: 1}}\n{lines}"
    );
    super::super::plan::Plan::from_yaml(&src, "t.yaml", Path::new("."))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

#[test]
fn a_stampede_is_checked_in_one_line() {
    let ok = "    chaos: {stampede: {size: 8, every: 1s, reset: /reset_prefix_cache}}\n";
    assert_eq!(phase_error(ok), "");
    for (lines, says) in [
        (
            "    chaos: {stampede: {size: 1, every: 1s}}\n",
            "chaos.stampede size must be 2..=10000",
        ),
        (
            "    chaos: {stampede: {size: 4, every: 5s}}\n",
            "every must be above 0s and below the phase's duration",
        ),
        (
            "    chaos: {stampede: {size: 4, every: 1s, reset: 'x'}}\n",
            "bad path",
        ),
        (
            "    chaos: {stampede: {size: 4, every: 1s, flush: /x}}\n",
            "unknown field `flush`",
        ),
        (
            "    request: {endpoint: vector_search, dimensions: 8}\n    chaos: {stampede: {size: 4, every: 1s}}\n",
            "`chaos.stampede` needs an LLM endpoint",
        ),
        (
            "    request: {conversation: {turns: 2}}\n    chaos: {stampede: {size: 4, every: 1s}}\n",
            "drop `conversation:`",
        ),
    ] {
        let e = phase_error(lines);
        assert!(e.starts_with("t.yaml") && e.contains(says), "{lines}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn the_target_is_parsed_once_where_the_scenario_is_read() {
    let t = with_target("https://vllm:8443/v1").target;
    assert_eq!((t.host(), t.port(), t.is_https()), ("vllm", 8443, true));
    for (bad, says) in [
        ("ftp://vllm", "write an http:// or https:// URL"),
        ("vllm:8000x", "bad target URL"),
    ] {
        let src = format!(
            "target: {bad}\nphases:\n  - name: p\n    duration: 1s\n    load: {{shape: constant, rate: 1}}\n"
        );
        let e = super::super::plan::Plan::from_yaml(&src, "t.yaml", Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.yaml:1:") && e.contains(says), "{bad}: {e}");
    }
}
