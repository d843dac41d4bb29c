//! report.html renders in headless Chromium: the page loads without script errors and every
//! chart is drawn from the embedded data.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inferscope::collect::timeline::Timeline;
use inferscope::export::report::{Report, RunMeta, Waterfall};

const CHARTS: [&str; 5] = [
    "chart-latency",
    "chart-kv",
    "chart-runq",
    "chart-gpu",
    "chart-waterfall",
];

fn fixture_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

fn report(timeline: &str, with_waterfalls: bool) -> Report {
    let text =
        std::fs::read_to_string(fixture_path(&format!("timelines/{timeline}.json"))).unwrap();
    let t: Timeline = serde_json::from_str(&text).unwrap();
    let end = t.origin_unix_ms + t.windows.len() as u64 * t.len_ms;
    let run = RunMeta::new(
        timeline,
        "http://127.0.0.1:8000",
        t.origin_unix_ms,
        end,
        t.len_ms,
    );
    let r = Report::new(run, t);
    if with_waterfalls {
        let text = std::fs::read_to_string(fixture_path("waterfalls.json")).unwrap();
        let w: Vec<Waterfall> = serde_json::from_str(&text).unwrap();
        r.with_waterfalls(w)
    } else {
        r
    }
}

fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        let found = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|d| d.join(name))
            .find(|p| p.is_file());
        if let Some(p) = found {
            return p;
        }
    }
    panic!("chromium is not installed: run `cargo xtask setup` (Debian package `chromium`)");
}

/// Loads `html` in headless Chromium and returns (DOM after scripts ran, Chromium's stderr).
pub fn dump_dom(html: &str, tag: &str) -> (String, String) {
    let dir = std::env::temp_dir().join(format!("inferscope-html-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("profile")).unwrap();
    let page = dir.join("report.html");
    std::fs::write(&page, html).unwrap();
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The DOM is larger than a pipe's buffer: drain both pipes while Chromium runs.
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = String::new();
            let _ = r.read_to_string(&mut buf);
            buf
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    // Chromium can hang on a broken machine: give it two minutes, then fail instead of blocking.
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_mins(2) {
            let _ = child.kill();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let dom = stdout.join().unwrap();
    let stderr = stderr.join().unwrap();
    assert!(status.success(), "chromium failed ({status}): {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
    (dom, stderr)
}

/// The `data-points` of the element with `id`.
pub fn data_points(dom: &str, id: &str) -> usize {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in DOM"));
    let tag = &dom[dom[..at].rfind('<').unwrap()..at + dom[at..].find('>').unwrap()];
    let value = tag
        .split("data-points=\"")
        .nth(1)
        .unwrap_or_else(|| panic!("#{id}: {tag}"));
    value[..value.find('"').unwrap()].parse().unwrap()
}

pub fn assert_no_errors(dom: &str, stderr: &str) {
    assert!(
        dom.contains("data-rendered=\"ok\""),
        "the page's script did not finish:\n{dom}"
    );
    assert!(
        !dom.contains("class=\"error\""),
        "script errors in the page:\n{dom}"
    );
    for line in stderr.lines().filter(|l| l.contains("CONSOLE")) {
        assert!(
            !line.contains("Uncaught") && !line.contains("Error"),
            "console: {line}"
        );
    }
}

#[test]
fn report_html_renders_every_chart_from_the_data() {
    use inferscope::attribute::{
        Cause,
        hops::{HopPart, Hops},
    };
    let mut r = report("kv_cache", true);
    // A pipeline's peak: the rise split by hop.
    let part = |hop: &str, ms: f64, cause: Cause| HopPart {
        hop: hop.into(),
        baseline_ms: Some(2.0),
        value_ms: Some(2.0 + ms),
        part_ms: ms,
        cause,
        confidence: 0.9,
    };
    let peak = r.phases.iter_mut().find(|p| p.name == "peak").unwrap();
    peak.hops = Some(Hops {
        rise_ms: 500.0,
        parts: vec![
            part("chat", 470.0, Cause::KvCache),
            part("orchestration", 20.0, Cause::None),
        ],
        rest_ms: 10.0,
        holder: Some("chat".into()),
    });
    let (dom, stderr) = dump_dom(&r.html().unwrap(), "full");
    assert_no_errors(&dom, &stderr);
    let windows = r.timeline.windows.len();
    // 4 latency series per window.
    assert_eq!(data_points(&dom, "chart-latency"), 4 * windows);
    assert_eq!(data_points(&dom, "chart-kv"), windows);
    assert_eq!(data_points(&dom, "chart-runq"), 3 * windows);
    assert_eq!(data_points(&dom, "chart-gpu"), windows);
    assert_eq!(data_points(&dom, "chart-waterfall"), r.waterfalls.len());
    // Verdict bands: in each of the 4 time charts, one per window with a cause, coloured by it.
    let kv_windows = r
        .verdicts
        .iter()
        .filter(|v| v.verdict.cause.name() == "kv_cache")
        .count();
    assert!(kv_windows > 0);
    assert_eq!(
        dom.matches("data-cause=\"kv_cache\"").count(),
        4 * kv_windows
    );
    assert_eq!(
        dom.matches("class=\"waterfall\"").count(),
        r.waterfalls.len()
    );
    assert!(
        dom.contains("data-phase=\"peak\" data-verdict=\"kv_cache\""),
        "phase table"
    );
    assert!(dom.contains("What to do: KV cache is full"));
    // A waterfall's run-queue and GPU times are its windows' totals prorated, and say so.
    assert!(
        dom.contains("ms (share of its windows)"),
        "waterfall run-queue label"
    );
    // The slow tail is marked as such.
    assert_eq!(dom.matches("data-sample=\"slowest_e2e\"").count(), 1);
    assert!(dom.contains("slowest E2E"), "slow-tail label");
    assert!(dom.contains("data-holder=\"chat\""), "hops bar");
    assert!(
        dom.contains("hops: +500 ms, hop chat holds it"),
        "hops line"
    );
    assert!(dom.contains("chat (kv_cache) 470"), "hop with its cause");
    assert_eq!(dom.matches("class=\"window-row\"").count(), windows);
}

/// The H200's overloaded peak: in most of its sending windows every request timed out before
/// a first token, so TTFT has nothing to plot there. Each window with timeouts is drawn at the
/// time its requests waited (censored at the timeout, ~60 s) and says how many timed out.
#[test]
fn report_html_draws_requests_that_timed_out_at_their_wait() {
    let r = report("h200_kv_admission", false);
    let timed_out: Vec<(u64, f64)> = r
        .timeline
        .windows
        .iter()
        .filter_map(|w| {
            let l = w.load.as_ref()?;
            let n = *l
                .error_classes
                .get(&inferscope::measure::ErrorClass::Timeout)?;
            Some((n, l.e2e_ms.as_ref()?.p99))
        })
        .collect();
    assert!(timed_out.len() >= 20, "{}", timed_out.len());
    assert!(
        timed_out.iter().all(|(_, e2e)| *e2e >= 59_000.0),
        "{timed_out:?}"
    );
    let (dom, stderr) = dump_dom(&r.html().unwrap(), "censored");
    assert_no_errors(&dom, &stderr);
    assert!(dom.contains("data-series=\"timed out (waited at least)\""));
    assert_eq!(dom.matches("class=\"censored\"").count(), timed_out.len());
    let (n, _) = timed_out[1];
    assert!(
        dom.contains(&format!("{n} of ")),
        "a point's title counts its timeouts"
    );
}

#[test]
fn report_html_without_probes_says_why_charts_are_empty() {
    let r = report("missing_evidence", false).with_missing_evidence(["no root: kernel probes off"]);
    let (dom, stderr) = dump_dom(&r.html().unwrap(), "missing");
    assert_no_errors(&dom, &stderr);
    assert!(data_points(&dom, "chart-latency") > 0);
    for id in ["chart-kv", "chart-runq", "chart-gpu", "chart-waterfall"] {
        assert_eq!(data_points(&dom, id), 0, "{id}");
    }
    assert!(dom.contains("no data: scheduler probes off (needs root)"));
    assert!(dom.contains("no root: kernel probes off"));
}

#[test]
fn report_html_survives_hostile_strings() {
    let mut r = report("loadgen", true);
    r.run.scenario =
        "</script><script>document.body.setAttribute('data-rendered','pwned')</script>".into();
    let (dom, stderr) = dump_dom(&r.html().unwrap(), "hostile");
    assert_no_errors(&dom, &stderr);
    assert!(!dom.contains("pwned\""), "injected script ran");
    assert!(dom.contains("The load generator lagged"));
    for id in CHARTS {
        assert!(data_points(&dom, id) > 0, "{id}");
    }
}
