//! A trace in the published Mooncake layout (`examples/mooncake-trace.jsonl`: rows with shared
//! hash blocks) replayed twice: at a server that records every request, where the arrivals,
//! prompt lengths, `max_tokens` and shared leading text are as the trace says; and against the
//! sim with its prefix cache on under `--explain`, whose prefix hit rate lands within a few
//! points of the trace's prefix-sharing ratio, which the report states beside it.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    path::{Path, PathBuf},
    time::Duration,
};

use inferscope::loadgen::{self, Options, Plan, scenario::overrides::Overrides};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{counting_server::holding_server, sim_process::SimProcess};

/// The example trace: 24 rows over 10.7 s, blocks of 512 tokens.
fn trace_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/mooncake-trace.jsonl")
}

/// (timestamp ms, `input_length`, `output_length`, `hash_ids`) of each row, read plainly.
fn rows() -> Vec<(u64, usize, u64, Vec<u64>)> {
    std::fs::read_to_string(trace_path())
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let ids = v["hash_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap())
                .collect();
            (
                v["timestamp"].as_u64().unwrap(),
                v["input_length"].as_u64().unwrap() as usize,
                v["output_length"].as_u64().unwrap(),
                ids,
            )
        })
        .collect()
}

/// What an infinite prefix cache hits of the rows, counted here on its own: per row, the
/// words of each block whose chain of leading ids an earlier row sent, up to the most words
/// of it that row sent.
fn sharing() -> (u64, u64) {
    let mut sent: std::collections::HashMap<Vec<u64>, usize> = std::collections::HashMap::new();
    let (mut prompt, mut shared) = (0, 0);
    for (_, input, _, ids) in rows() {
        prompt += input as u64;
        let mut left = input;
        for j in 0..ids.len() {
            let n = left.min(512);
            let most = sent.entry(ids[..=j].to_vec()).or_insert(0);
            shared += n.min(*most) as u64;
            *most = (*most).max(n);
            left -= n;
        }
    }
    (prompt, shared)
}

fn scenario(dir: &Path, target: &str, stream: bool) -> PathBuf {
    let yaml = format!(
        "name: replay\ntarget: {target}\nseed: 1\nphases:\n  - name: replay\n    duration: 6s\n    load: {{shape: trace, path: {}, format: mooncake, speed: 2}}\n    request: {{endpoint: chat, stream: {stream}}}\n",
        trace_path().display()
    );
    let path = dir.join("replay.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Each request the recording server saw: when it arrived, and its body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mooncake_rows_arrive_with_their_lengths_and_shared_text_at_a_counting_server() {
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = holding_server(Duration::ZERO);
    let plan = Plan::from_file(&scenario(dir.path(), &url, false), &Overrides::default()).unwrap();
    let report = loadgen::run(&plan, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let rows = rows();
    let got = seen.lock().unwrap().asked.clone();
    assert_eq!(got.len(), rows.len(), "one request per row");
    assert_eq!(report.phases[0].counts.finished, rows.len() as u64);
    // The generator's schedule is the trace's at speed 2, to the µs it plans in (when each was
    // read by the server also holds the test's CPU contention, so the server side is held to
    // the order alone, below: the rows are at least 225 ms apart).
    let mut intended: Vec<u64> = report.records.iter().map(|r| r.intended_us).collect();
    intended.sort_unstable();
    for (i, (us, (ts, ..))) in intended.iter().zip(&rows).enumerate() {
        let (offset, want) = (us - intended[0], ts * 1000 / 2);
        assert!(
            offset.abs_diff(want) < 1000,
            "row {i} planned at +{offset} us, trace says +{want} us"
        );
    }
    // The i-th request the server read is the i-th row: its prompt's length and max_tokens.
    let mut prompts = Vec::new();
    for (i, ((_, body), (_, input, output, _))) in got.iter().zip(&rows).enumerate() {
        let prompt = body["messages"][0]["content"].as_str().unwrap().to_string();
        assert_eq!(prompt.split(' ').count(), *input, "row {i}: prompt words");
        assert_eq!(body["max_tokens"].as_u64(), Some(*output), "row {i}");
        assert_eq!(body["ignore_eos"], Value::Bool(true), "row {i}");
        prompts.push(prompt);
    }
    let words = |i: usize, n: usize| prompts[i].split(' ').take(n).collect::<Vec<_>>().join(" ");
    // Rows 0 and 2 have the same ids [0, 1, 2] (1100 and 1536 words): 0 is the start of 2.
    assert!(prompts[2].starts_with(&prompts[0]));
    // Rows 0 and 1 share block 0 only: the same 512 words, then not.
    assert_eq!(words(0, 512), words(1, 512));
    assert_ne!(words(0, 513), words(1, 513));
    // Row 4 ([6, 7]) shares nothing with row 0.
    assert_ne!(words(0, 8), words(4, 8));
    let prefix = report.phases[0]
        .prefix
        .as_ref()
        .expect("the phase states its sharing");
    let (prompt, shared) = sharing();
    assert_eq!(
        (prefix.prompt_tokens, prefix.shared_tokens),
        (prompt, shared)
    );
    assert_eq!(prefix.requests, rows.len() as u64);
}

/// `vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total` of the sim at `url`.
fn sim_hit_rate(url: &str) -> f64 {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let counter = |name: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let queries = counter("vllm:prefix_cache_queries_total");
    assert!(queries > 0.0, "the sim counted no prefix queries:\n{text}");
    counter("vllm:prefix_cache_hits_total") / queries
}

#[test]
fn a_mooncake_replay_against_the_sim_hits_about_what_the_trace_shares() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimProcess::start(["--profile", "healthy"]);
    let out = dir.path().join("stress.json");
    let report_dir = dir.path().join("explained");
    let run = crate::cli::inferscope()
        .arg("stress")
        .arg(scenario(dir.path(), &sim.url, true))
        .args(["--quiet", "--explain", "--report-dir"])
        .arg(&report_dir)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&run.stderr)
    );
    let (prompt, shared) = sharing();
    let ratio = shared as f64 / prompt as f64;
    let hit = sim_hit_rate(&sim.url);
    eprintln!("trace shares {ratio:.4} of its prompt tokens; the sim's prefix cache hit {hit:.4}");
    // The sim caches 16-token blocks and never a prompt's last token; its chat template adds a
    // few shared tokens: a few points apart at most.
    assert!(
        (hit - ratio).abs() < 0.03,
        "sim hit {hit:.4} vs trace {ratio:.4}"
    );

    let stress: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let phase = &stress["phases"][0];
    assert_eq!(phase["counts"]["ok"].as_u64(), Some(24), "{phase}");
    assert_eq!(phase["prefix"]["shared_tokens"].as_u64(), Some(shared));
    // Every answer had exactly the row's output length (max_tokens with ignore_eos).
    let outputs: u64 = rows().iter().map(|r| r.2).sum();
    assert_eq!(phase["output_tokens"].as_u64(), Some(outputs));
    // The records' intended starts are the trace's times at speed 2.
    let records = stress["records"].as_array().unwrap();
    let mut intended: Vec<u64> = records
        .iter()
        .map(|r| r["intended_us"].as_u64().unwrap())
        .collect();
    intended.sort_unstable();
    for (got, (ts, ..)) in intended.iter().zip(rows()) {
        let want_us = ts * 1000 / 2;
        assert!(
            (got - intended[0]).abs_diff(want_us) < 1000,
            "intended {got} vs {want_us}"
        );
    }

    let explained: Value =
        serde_json::from_slice(&std::fs::read(report_dir.join("report.json")).unwrap()).unwrap();
    let summary = explained["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "replay")
        .unwrap();
    let p = &summary["prefix"];
    assert!(
        (p["trace"]["sharing_ratio"].as_f64().unwrap() - ratio).abs() < 1e-9,
        "{p}"
    );
    let server = p["server_hit_rate"]
        .as_f64()
        .expect("the sim exports its hit rate");
    assert!(
        (server - hit).abs() < 0.02,
        "report {server:.4} vs the sim's counters {hit:.4}"
    );
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("prefix: the trace shares"))
        .unwrap_or_else(|| panic!("no prefix line in\n{stdout}"));
    eprintln!("{line}");
    assert!(line.contains("the server's prefix cache hit"), "{line}");
}
