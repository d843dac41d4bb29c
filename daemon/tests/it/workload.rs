//! `inferscope workload build` on a checked-in query log (`fixtures/queries.jsonl`, written by
//! `fixtures/make_queries.py`: 8 topics x 40 paraphrased queries), with the local embedding and
//! with the simulator's `/v1/embeddings`; complexity scores of fixture prompts; and
//! complexity-shaped arrivals through the load generator.

use crate::loadgen_support;

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use inferscope::loadgen::{self, Options, Plan, engine::complexity};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Runs `workload build` and returns its stdout; panics with its stderr on failure.
fn build(args: &[&str]) -> String {
    let t = Instant::now();
    let out = crate::cli::run(&[&["workload", "build"], args].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    eprintln!(
        "workload build {args:?}: {:.2} s",
        t.elapsed().as_secs_f64()
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Topic of each fixture query.
fn topics() -> HashMap<String, String> {
    std::fs::read_to_string(fixture("queries.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["prompt"].as_str().unwrap().to_string(),
                v["topic"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn rows(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Per cluster: (size, majority topic, purity = majority share).
fn purity(rows: &[Value]) -> BTreeMap<u64, (usize, String, f64)> {
    let topic = topics();
    let mut by: BTreeMap<u64, BTreeMap<String, usize>> = BTreeMap::new();
    for r in rows {
        let t = &topic[r["prompt"].as_str().unwrap()];
        *by.entry(r["cluster"].as_u64().unwrap())
            .or_default()
            .entry(t.clone())
            .or_default() += 1;
    }
    by.into_iter()
        .map(|(c, counts)| {
            let size: usize = counts.values().sum();
            let (top, n) = counts.iter().max_by_key(|(_, n)| **n).unwrap();
            (c, (size, top.clone(), *n as f64 / size as f64))
        })
        .collect()
}

/// Checks the clusters of a build and returns the overall purity.
fn check_clusters(rows: &[Value], min_purity: f64) -> f64 {
    let p = purity(rows);
    eprintln!("clusters (size, topic, purity): {p:?}");
    assert_eq!(p.len(), 8, "{p:?}");
    let mut majors: Vec<&String> = p.values().map(|(_, t, _)| t).collect();
    majors.sort();
    majors.dedup();
    assert_eq!(majors.len(), 8, "one topic per cluster: {p:?}");
    for (c, (_, t, share)) in &p {
        assert!(
            *share >= min_purity,
            "cluster {c} ({t}) purity {share:.2}: {p:?}"
        );
    }
    let pure: f64 = p.values().map(|(n, _, s)| *n as f64 * s).sum();
    pure / rows.len() as f64
}

fn check_rows(rows: &[Value]) {
    for r in rows {
        let t = r["temperature"].as_f64().unwrap();
        assert!((0.3..=0.8).contains(&t), "{r}");
        let c = r["complexity"].as_u64().unwrap();
        assert_eq!(
            c,
            u64::from(complexity::of_text(r["prompt"].as_str().unwrap()).score)
        );
    }
}

#[test]
fn the_fixture_log_makes_8_pure_clusters_the_same_for_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let log = fixture("queries.jsonl");
    let out = |name: &str| dir.path().join(name);
    let run = |name: &str, seed: &str| {
        build(&[
            "--from",
            log.to_str().unwrap(),
            "--clusters",
            "8",
            "--per-cluster",
            "50",
            "--seed",
            seed,
            "--out",
            out(name).to_str().unwrap(),
        ])
    };
    let stdout = run("a.jsonl", "7");
    run("b.jsonl", "7");
    run("c.jsonl", "8");
    let bytes = |n: &str| std::fs::read(out(n)).unwrap();
    assert_eq!(bytes("a.jsonl"), bytes("b.jsonl"), "same seed, same bytes");
    assert_eq!(bytes("a.clusters.json"), bytes("b.clusters.json"));
    assert_ne!(bytes("a.jsonl"), bytes("c.jsonl"), "another seed differs");

    let a = rows(&out("a.jsonl"));
    assert_eq!(a.len(), 320, "every query kept: 40 per topic < 50");
    check_rows(&a);
    let overall = check_clusters(&a, 0.85);
    eprintln!("local embedding: overall purity {overall:.3}");
    assert!(overall >= 0.9, "{overall}");
    let c = rows(&out("c.jsonl"));
    let overall = check_clusters(&c, 0.85);
    eprintln!("seed 8: overall purity {overall:.3}");
    assert!(overall >= 0.9, "{overall}");

    // The report: on stdout and as JSON next to the dataset.
    assert!(stdout.contains("320 queries (320 distinct)"), "{stdout}");
    assert!(stdout.contains("cluster 7: "), "{stdout}");
    let report: Value = serde_json::from_slice(&bytes("a.clusters.json")).unwrap();
    assert_eq!(report["schema"], "inferscope.workload.clusters/v1");
    assert_eq!(report["dimensions"], 1024);
    let clusters = report["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 8);
    for c in clusters {
        let ex = c["exemplars"].as_array().unwrap();
        assert_eq!(ex.len(), 3, "{c}");
        assert!(ex.iter().all(|e| e.as_str().unwrap().chars().count() <= 80));
    }
    let sizes: Vec<u64> = clusters
        .iter()
        .map(|c| c["size"].as_u64().unwrap())
        .collect();
    assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");

    // Fewer representatives: the nearest ones, 10 per cluster.
    build(&[
        "--from",
        log.to_str().unwrap(),
        "--per-cluster",
        "10",
        "--seed",
        "7",
        "--out",
        out("e.jsonl").to_str().unwrap(),
    ]);
    let e = rows(&out("e.jsonl"));
    assert_eq!(e.len(), 80);
    check_clusters(&e, 0.85);
}

#[test]
fn embeddings_from_the_sim_endpoint() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = 10;
    let model = cfg.model.clone();
    let sim = rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        inferscope::sim::start(cfg, l).await.unwrap()
    });
    let dir = tempfile::tempdir().unwrap();
    let log = fixture("queries.jsonl");
    let url = sim.url();
    let run = |name: &str| {
        let out = dir.path().join(name);
        build(&[
            "--from",
            log.to_str().unwrap(),
            "--embed-url",
            &url,
            "--embed-model",
            &model,
            "--seed",
            "3",
            "--out",
            out.to_str().unwrap(),
        ]);
        out
    };
    let a = run("a.jsonl");
    let b = run("b.jsonl");
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let r = rows(&a);
    check_rows(&r);
    // The simulator's embedding is a random projection of every token, function words and
    // punctuation included, without IDF: it exercises the endpoint path, not clustering
    // quality, so the clusters are counted and their purity only printed.
    let p = purity(&r);
    assert_eq!(p.len(), 8, "{p:?}");
    let pure: f64 = p.values().map(|(n, _, s)| *n as f64 * s).sum();
    eprintln!(
        "sim embeddings: overall purity {:.3}: {p:?}",
        pure / r.len() as f64
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("a.clusters.json")).unwrap())
            .unwrap();
    assert_eq!(report["dimensions"], 64);
    assert!(
        report["embedding"]
            .as_str()
            .unwrap()
            .contains("/v1/embeddings"),
        "{report}"
    );

    // A wrong model is one line that says what to check.
    let out = crate::cli::run(&[
        "workload",
        "build",
        "--from",
        log.to_str().unwrap(),
        "--embed-url",
        &url,
        "--embed-model",
        "nope",
        "--out",
        dir.path().join("x.jsonl").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("HTTP 404"), "{err}");
    assert!(err.contains("check --embed-url and --embed-model"), "{err}");
    rt.block_on(sim.shutdown()).unwrap();
}

#[test]
fn bad_logs_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("empty.jsonl", "", "has no queries"),
        (
            "bad.jsonl",
            "{\"prompt\":\"fine\"}\nthis is not json\n",
            "bad.jsonl:2: not a JSON object",
        ),
        (
            "few.jsonl",
            "{\"prompt\":\"one query\"}\n{\"prompt\":\"two queries\"}\n{\"prompt\":\"one query\"}\n",
            "2 distinct queries cannot make 8 clusters: lower --clusters or add queries",
        ),
        (
            "key.jsonl",
            "{\"question\":\"x\"}\n",
            "no string field `text`: pass --field",
        ),
    ];
    for (name, text, says) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = crate::cli::run(&[
            "workload",
            "build",
            "--from",
            path.to_str().unwrap(),
            "--out",
            dir.path().join("o.jsonl").to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
    }
    // --field picks the key; a missing log names itself.
    let path = dir.path().join("key.jsonl");
    std::fs::write(&path, "{\"question\":\"x y\"}\n{\"question\":\"z\"}\n").unwrap();
    let ok = build(&[
        "--from",
        path.to_str().unwrap(),
        "--field",
        "question",
        "--clusters",
        "2",
        "--out",
        dir.path().join("o.jsonl").to_str().unwrap(),
    ]);
    assert!(ok.contains("2 queries (2 distinct)"), "{ok}");
    let out = crate::cli::run(&[
        "workload",
        "build",
        "--from",
        "/nonexistent/q.jsonl",
        "--out",
        "/tmp/x",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read the query log /nonexistent/q.jsonl"),
        "{err}"
    );
}

#[test]
fn complexity_of_fixture_prompts() {
    let fixtures: BTreeMap<String, Value> =
        std::fs::read_to_string(fixture("complexity_prompts.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["name"].as_str().unwrap().to_string(), v["body"].clone())
            })
            .collect();
    let score = |body: &Value| complexity::of_request(body.to_string().as_bytes());
    let s: BTreeMap<&str, complexity::Complexity> = fixtures
        .iter()
        .map(|(k, v)| (k.as_str(), score(v)))
        .collect();
    eprintln!("{s:#?}");
    assert!(s["one_liner"].score <= 5, "{:?}", s["one_liner"]);
    assert_eq!(s["nested_list"].nesting, 3);
    assert_eq!(s["fenced_code"].nesting, 4);
    let tools = s["nested_json_tool_calls"];
    assert_eq!((tools.nesting, tools.tools), (7, 4), "{tools:?}");
    assert!(tools.score >= 55, "{tools:?}");
    // The same tool-call request with a long context (a 6000-word document) is near the top.
    let mut long = fixtures["nested_json_tool_calls"].clone();
    let doc = "The incident report lists every alert the service raised overnight. ".repeat(600);
    long["messages"][0]["content"] = Value::String(doc);
    let long = score(&long);
    assert!(long.score >= 80, "{long:?}");
    assert!(long.score > tools.score);
    // Monotone in each factor, the others held.
    let one = s["one_liner"];
    for (more, what) in [
        (s["nested_list"], "nesting"),
        (s["fenced_code"], "fence"),
        (tools, "tools"),
    ] {
        assert!(more.score > one.score, "{what}: {more:?} vs {one:?}");
    }
    let with =
        |nesting, tools, tokens| complexity::Complexity::from_factors(nesting, tools, tokens).score;
    for f in 0..10u32 {
        assert!(with(f + 1, 2, 500) >= with(f, 2, 500));
        assert!(with(2, f + 1, 500) >= with(2, f, 500));
        assert!(with(2, 2, 16 << f) <= with(2, 2, 16 << (f + 1)));
    }
}

async fn shaped_run(prompt: &str, rate: f64, secs: u64, shaping: bool) -> usize {
    let (addr, stamps) = loadgen_support::start().await;
    let yaml = format!(
        "target: http://{addr}\nseed: 5\ndatasets:\n  d:\n    prompts: [{prompt}]\nphases:\n  - name: p\n    duration: {secs}s\n    load: {{shape: constant, rate: {rate}, complexity_shaping: {shaping}}}\n    request: {{endpoint: chat, dataset: d, max_tokens: 2, stream: false}}\n",
        prompt = serde_json::to_string(prompt).unwrap()
    );
    let s = Plan::from_yaml(&yaml, "<test>", Path::new(".")).unwrap();
    let report = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let p = &report.phases[0];
    assert_eq!(p.counts.ok, p.counts.scheduled, "{:?}", p.counts);
    let n = stamps.arrivals.lock().unwrap().len();
    assert_eq!(n as u64, p.counts.scheduled);
    n
}

/// Requests of one score over a phase: `base * 0.75^(score/20) * duration`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shaped_arrivals_follow_the_formula() {
    let (rate, secs) = (60.0, 3);
    let flat = "What is the capital of France?";
    let nested = "Fix this: {\"a\": [{\"b\": {\"c\": [1, {\"d\": \"<tool_call>\"}]}}]} \"arguments\" <tool_call>";
    for (prompt, shaping) in [(flat, true), (nested, false), (nested, true)] {
        let score = complexity::of_text(prompt).score;
        let factor = if shaping {
            complexity::rate_factor(score)
        } else {
            1.0
        };
        let want = rate * factor * secs as f64;
        let t = Instant::now();
        let n = shaped_run(prompt, rate, secs, shaping).await as f64;
        eprintln!(
            "score {score}, shaping {shaping}: {n} requests in {secs} s for {want:.1} ({:.1} s)",
            t.elapsed().as_secs_f64()
        );
        // The first arrival is at 0, so a constant schedule holds one more than rate * time.
        assert!((n - want).abs() <= 1.5, "score {score}: {n} for {want:.1}");
    }
    assert!(complexity::of_text(nested).score >= 40);
    assert!(Duration::from_secs(secs) > Duration::ZERO);
}

/// A built dataset drives the load generator directly: its rows' temperatures are sent as
/// numbers (the simulator refuses anything else).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_dataset_is_a_stress_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dataset.jsonl");
    let status = tokio::process::Command::new(env!("CARGO_BIN_EXE_inferscope"))
        .args(["workload", "build", "--from"])
        .arg(fixture("queries.jsonl"))
        .arg("--out")
        .arg(&out)
        .args(["--per-cluster", "5"])
        .output()
        .await
        .unwrap();
    assert!(status.status.success());
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = 10;
    let model = cfg.model.clone();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim = inferscope::sim::start(cfg, l).await.unwrap();
    let yaml = format!(
        "target: {}\nseed: 1\ndatasets:\n  d: {{path: dataset.jsonl}}\nphases:\n  - name: p\n    duration: 1s\n    load: {{shape: constant, rate: 20, complexity_shaping: true}}\n    request: {{endpoint: chat, model: {model}, dataset: d, max_tokens: 4, temperature: \"${{dataset.temperature}}\"}}\n",
        sim.url()
    );
    let s = Plan::from_yaml(&yaml, "<test>", dir.path()).unwrap();
    let report = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let p = &report.phases[0];
    assert!(p.counts.ok > 5, "{:?}", p.counts);
    assert_eq!(p.counts.ok, p.counts.finished, "{:?}", p.counts);
    sim.shutdown().await.unwrap();
}
