//! Reports built from the attribution fixtures.

use super::*;
use crate::attribute::Cause;

fn fixture(name: &str) -> Timeline {
    let path = format!(
        "{}/tests/fixtures/timelines/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn waterfalls() -> Vec<Waterfall> {
    let path = format!(
        "{}/tests/fixtures/waterfalls.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn report(name: &str) -> Report {
    let t = fixture(name);
    let end = t.origin_unix_ms + t.windows.len() as u64 * t.len_ms;
    Report::new(
        RunMeta::new(
            name,
            "http://127.0.0.1:8000",
            t.origin_unix_ms,
            end,
            t.len_ms,
        ),
        t,
    )
}

fn assert_close(a: &serde_json::Value, b: &serde_json::Value, path: &str) {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-9 * x.abs().max(1.0),
                "{path}: {x} vs {y}"
            );
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{path}");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                assert_close(x, y, &format!("{path}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{path}"
            );
            for (k, x) in x {
                assert_close(x, &y[k], &format!("{path}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{path}"),
    }
}

#[test]
fn json_is_versioned_and_round_trips() {
    let r = report("kv_cache").with_waterfalls(waterfalls());
    let json = r.to_json().unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["schema_version"], SCHEMA_VERSION);
    assert_eq!(v["run"]["scenario"], "kv_cache");
    assert_eq!(
        v["verdicts"].as_array().unwrap().len(),
        r.timeline.windows.len()
    );
    assert_eq!(v["phases"][1]["dominant"], "kv_cache");
    assert_eq!(v["waterfalls"].as_array().unwrap().len(), 10);
    let back = Report::from_json(&json).unwrap();
    assert_eq!(back.verdicts.len(), r.verdicts.len());
    assert_eq!(back.waterfalls, r.waterfalls);
    assert_eq!(back.run, r.run);
    // serde_json parses some floats an ulp off: compare the whole report with a tolerance.
    let again: serde_json::Value = serde_json::from_str(&back.to_json().unwrap()).unwrap();
    assert_close(&again, &v, "");
    let other = json.replacen(
        &format!("\"schema_version\": {SCHEMA_VERSION}"),
        "\"schema_version\": 1",
        1,
    );
    assert!(matches!(
        Report::from_json(&other),
        Err(ReportError::Schema { found: 1 })
    ));
}

#[test]
fn fixture_waterfalls_are_ordered() {
    for w in waterfalls() {
        assert_eq!(w.out_of_order(), None, "request {}", w.request_id);
        assert!(w.network_ms().unwrap() > 0.0);
    }
}

#[test]
fn terminal_says_why_the_runner_up_lost() {
    let r = report("kv_cache");
    let peak = r.phase("peak").unwrap();
    assert!(peak.runners_up[0].confidence <= peak.confidence);
    let text = r.terminal();
    assert!(
        text.contains("runner-up queue 0.") && text.contains(", explained by kv_cache"),
        "{text}"
    );
}

#[test]
fn terminal_summary_names_verdict_evidence_and_hint_per_phase() {
    let text = report("kv_cache").terminal();
    let peak = text
        .split("\nphase peak (")
        .nth(1)
        .expect("peak phase printed");
    assert!(
        peak.contains("verdict: kv_cache (score 1.00, runner-up queue 0."),
        "{text}"
    );
    assert!(peak.contains("kv_usage=0.98 (>= 0.95)"), "{text}");
    assert!(peak.contains("preemptions_per_s="), "{text}");
    assert!(
        peak.contains("what to do: KV cache is full: raise gpu_memory_utilization"),
        "{text}"
    );
    assert!(peak.contains("TTFT p50 +"), "{text}");
    assert!(
        peak.contains("latency (window-averaged): TTFT p50 "),
        "{text}"
    );
    assert!(peak.contains("load: 59.8 req/s (target 60)"), "{text}");
    let baseline = text
        .split("\nphase baseline (")
        .nth(1)
        .unwrap()
        .split("\nphase peak (")
        .next()
        .unwrap();
    assert!(baseline.contains("verdict: none"), "{text}");
    assert!(!text.contains("WARNING"), "{text}");
    assert!(!text.contains("missing evidence"), "{text}");
}

#[test]
fn terminal_summary_warns_when_the_load_generator_lags() {
    let r = report("loadgen");
    assert_eq!(r.phase("peak").unwrap().dominant, Cause::Loadgen);
    let text = r.terminal();
    assert!(
        text.contains(
            "WARNING: the load generator lagged in 6 of 6 windows (100% of the phase's requests, \
             sent up to 168 ms late): its latencies are untrustworthy"
        ),
        "{text}"
    );
    assert!(text.contains("--shard i/N"), "{text}");
}

#[test]
fn missing_sources_are_named_in_the_report() {
    let r = report("missing_evidence").with_missing_evidence(["no root: kernel probes off"]);
    assert_eq!(r.missing_evidence[0], "no root: kernel probes off");
    for needle in [
        "no server metrics",
        "no run-queue delay",
        "no socket timings",
        "no GPU signals",
    ] {
        assert!(
            r.missing_evidence.iter().any(|m| m.starts_with(needle)),
            "{needle}: {:?}",
            r.missing_evidence
        );
    }
    let text = r.terminal();
    assert!(
        text.contains("missing evidence: no root: kernel probes off"),
        "{text}"
    );
    assert!(text.contains("  missing: "), "{text}");
}

#[test]
fn html_embeds_the_report_and_fetches_nothing() {
    let mut r = report("queue").with_waterfalls(waterfalls());
    r.run.scenario = "</script><script>alert(1)</script>".to_owned();
    let html = r.html().unwrap();
    assert_eq!(
        html.matches("</script>").count(),
        3,
        "only the page's own scripts close"
    );
    // Nothing outside the data block loads a resource.
    let page_only = html.replace(&html[html.find("id=\"report-data\">").unwrap()..], "");
    for forbidden in [
        "http://",
        "https://",
        "src=",
        "<link",
        "@import",
        "fetch(",
        "XMLHttpRequest",
    ] {
        assert!(!page_only.contains(forbidden), "{forbidden}");
    }
    // The SVG namespace is a name, not a fetch.
    let js_and_css = format!(
        "{}{}",
        include_str!("report.js"),
        include_str!("report.css")
    )
    .replace("'http://www.w3.org/2000/svg'", "");
    for forbidden in [
        "http://",
        "https://",
        "src=",
        "@import",
        "fetch(",
        "XMLHttpRequest",
    ] {
        assert!(!js_and_css.contains(forbidden), "{forbidden}");
    }
    assert!(!html.contains("<link"));
    assert!(!html.contains(" src="));
    let start = html.find("id=\"report-data\">").unwrap() + "id=\"report-data\">".len();
    let end = start + html[start..].find("</script>").unwrap();
    let back = Report::from_json(&html[start..end]).unwrap();
    assert_eq!(back.run.scenario, r.run.scenario);
    assert_eq!(back.phases.len(), r.phases.len());
    assert_eq!(back.waterfalls, r.waterfalls);
}

#[test]
fn write_files_writes_both() {
    let dir = std::env::temp_dir().join(format!("inferscope-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, html) = report("network").write_files(&dir).unwrap();
    assert!(
        std::fs::read_to_string(json)
            .unwrap()
            .contains("\"network\"")
    );
    assert!(
        std::fs::read_to_string(html)
            .unwrap()
            .starts_with("<!doctype html>")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn write_files_replaces_whole_files_and_leaves_no_temporaries() {
    let dir = std::env::temp_dir().join(format!("inferscope-report-atomic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A longer stale file: an in-place truncating write would be the only way to keep its tail.
    std::fs::write(dir.join("report.json"), "x".repeat(4 << 20)).unwrap();
    let (json, _) = report("network").write_files(&dir).unwrap();
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(!text.contains("xxxx"), "stale bytes survived");
    Report::from_json(&text).unwrap();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["report.html", "report.json"]);
    std::fs::remove_dir_all(&dir).unwrap();
    // Into a directory that does not exist: an error naming the file, nothing created.
    let err = report("network").write_files(&dir).unwrap_err();
    assert!(err.to_string().contains("report.json"), "{err}");
    assert!(!dir.exists());
}

#[test]
fn exact_phase_latency_replaces_the_window_average() {
    let mut r = report("queue");
    let exact = crate::attribute::PhaseLatency {
        ttft_ms: Some(crate::collect::timeline::Quantiles {
            p50: 371.0,
            p95: 640.0,
            p99: 702.4,
            max: 1100.0,
        }),
        ..Default::default()
    };
    assert!(r.set_phase_latency("peak", exact));
    assert!(!r.set_phase_latency("no-such-phase", crate::attribute::PhaseLatency::default()));
    let text = r.terminal();
    let peak = text.split("\nphase peak (").nth(1).unwrap();
    assert!(
        peak.contains("latency: TTFT p50 371 ms p99 702 ms | ITL n/a"),
        "{text}"
    );
    assert!(r.phase("peak").unwrap().latency.exact);
}

#[test]
fn terminal_colours_verdict_lines_only_when_asked() {
    let r = report("kv_cache");
    let plain = r.terminal_with(false);
    assert_eq!(plain, r.terminal());
    assert!(!plain.contains('\x1b'), "{plain}");
    let coloured = r.terminal_with(true);
    // Only the verdict lines change: bold red for a cause, green for none.
    let verdicts: Vec<&str> = coloured
        .lines()
        .filter(|l| l.contains("verdict:"))
        .collect();
    assert!(
        verdicts
            .iter()
            .any(|l| l.starts_with("  \x1b[1;31mverdict: kv_cache") && l.ends_with("\x1b[0m")),
        "{coloured}"
    );
    assert!(
        verdicts.contains(&"  \x1b[32mverdict: none (latency at the baseline)\x1b[0m"),
        "{coloured}"
    );
    let stripped = coloured
        .replace("\x1b[1;31m", "")
        .replace("\x1b[32m", "")
        .replace("\x1b[33m", "")
        .replace("\x1b[0m", "");
    assert_eq!(stripped, plain);
}

#[test]
fn every_fixture_report_matches_the_checked_in_schema() {
    let dir = format!("{}/tests/fixtures/timelines", env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let value = serde_json::to_value(report(&name)).unwrap();
        if let Err(errors) = crate::export::schema::Format::Explain.check(&value) {
            panic!("{name}: {errors:#?}");
        }
        n += 1;
    }
    assert!(n >= 3, "{n} fixtures");
    let with_waterfalls = serde_json::to_value(report("kv_cache").with_waterfalls(waterfalls()));
    crate::export::schema::Format::Explain
        .check(&with_waterfalls.unwrap())
        .unwrap();
}

#[test]
fn a_vector_phase_prints_no_token_signal_as_missing() {
    // The network fixture as vector searches: load, server metrics and socket probes on, but
    // no request has a first token or token gaps to time.
    let mut t = fixture("network");
    for w in &mut t.windows {
        if let Some(l) = w.load.as_mut() {
            l.endpoint = Some(crate::measure::Endpoint::VectorSearch);
            (l.ttft_ms, l.itl_ms) = (None, None);
        }
        if let Some(n) = w.net.as_mut() {
            n.transit_p50_ms = None;
        }
        if let Some(s) = w.server.as_mut() {
            (s.ttft_p50_ms, s.ttft_p95_ms, s.ttft_mean_ms, s.tpot_mean_ms) =
                (None, None, None, None);
        }
    }
    let end = t.origin_unix_ms + t.windows.len() as u64 * t.len_ms;
    let r = Report::new(
        RunMeta::new(
            "vector",
            "http://127.0.0.1:8000",
            t.origin_unix_ms,
            end,
            t.len_ms,
        ),
        t,
    );
    let text = r.terminal();
    for line in text.lines().filter(|l| l.contains("missing")) {
        for s in [
            "ttft",
            "itl_",
            "client_server_gap_ms",
            "frontend_ms",
            "server_tpot_ms",
        ] {
            assert!(!line.contains(s), "{s} in {line}\n{text}");
        }
    }
}

#[test]
fn what_to_do_speaks_the_recognised_engine() {
    let peak = |name: &str| report(name).phase("peak").unwrap().hint.clone();
    let llama = peak("llamacpp_compute");
    assert!(llama.contains("--parallel"), "{llama}");
    assert!(!llama.contains("max_num_seqs"), "{llama}");
    // llama.cpp's metrics unread: nothing recognised, neutral words.
    let neutral = peak("llamacpp_compute_nometrics");
    for knob in [
        "--parallel",
        "max_num_seqs",
        "--max-running-requests",
        "--max-batch-size",
    ] {
        assert!(!neutral.contains(knob), "{knob} in {neutral}");
    }
    assert!(peak("kv_cache").contains("gpu_memory_utilization"));
}

#[test]
fn hops_from_exchanges_count_the_targets_calls_in_the_phase_they_were_asked_in() {
    use crate::collect::kernel::Exchange;
    // The kv_cache fixture: baseline 0..6 s, peak 6..14 s; its clock is the kernel's here.
    let r = report("kv_cache");
    let origin_ns = r.timeline.origin_unix_ms * 1_000_000;
    let ex = |tgid: u32, caller: Option<u32>, at_ms: u64, wait_ms: u64| Exchange {
        tgid,
        client: None,
        req_in_ns: origin_ns + at_ms * 1_000_000,
        first_out_ns: origin_ns + (at_ms + wait_ms) * 1_000_000,
        second_out_ns: 0,
        last_out_ns: origin_ns + (at_ms + wait_ms) * 1_000_000,
        max_gap_ns: 0,
        max_gap_end_ns: 0,
        retrans: 0,
        caller,
    };
    let exchanges = [
        // The target (pid 1) answers its clients; it calls chat (pid 2).
        ex(1, None, 1_000, 40),
        ex(1, None, 8_000, 540),
        ex(2, Some(1), 1_010, 20),
        ex(2, Some(1), 2_010, 20),
        // Asked in the peak, its answer waited into the phase's last seconds.
        ex(2, Some(1), 7_000, 5_020),
        ex(2, Some(1), 8_010, 520),
        // A scrape of chat by nobody watched, and chat calling itself: not the target's calls.
        ex(2, None, 9_000, 9_000),
        ex(2, Some(2), 9_500, 9_000),
    ];
    let pids = std::collections::BTreeMap::from([("chat".to_owned(), vec![2])]);
    let unix_ms = |ns: u64| ns / 1_000_000;
    let hop = Timeline::new(r.timeline.origin_unix_ms, r.timeline.len_ms);
    let r = r.with_hops(
        vec![("chat".to_owned(), hop)],
        &CallsSeen::Exchanges {
            exchanges: &exchanges,
            pids: &pids,
            unix_ms: &unix_ms,
        },
    );
    let peak = r.phases.iter().find(|p| p.name == "peak").unwrap();
    let hops = peak.hops.as_ref().expect("the peak's hops");
    let part = |n: &str| hops.parts.iter().find(|p| p.hop == n).unwrap();
    let chat = part("chat");
    assert_eq!(
        (chat.baseline_ms, chat.value_ms),
        (Some(20.0), Some(2770.0))
    );
    let own = part(crate::attribute::hops::ORCHESTRATION);
    assert_eq!((own.baseline_ms, own.value_ms), (Some(40.0), Some(540.0)));
}
