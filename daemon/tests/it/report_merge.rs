//! `report merge` is exact: one real run's per-request records, split into 3 shards, each
//! shard's report built through the runner's own code path (`PhaseMetrics::record`, then
//! `PhaseReport::build`), merged, give exactly the percentiles, counts and SLO outcomes of the
//! whole run's report. Also: the merge refuses reports of other scenarios or versions.

use std::path::Path;

use inferscope::loadgen::{self, Options, Plan, Shard, StressReport};

use inferscope::measure::{
    merge::{self, MergeError},
    metrics::PhaseMetrics,
    record::RequestRecord,
    report::{PhaseReport, RampView},
    summary::decode_hist,
};
use tokio_util::sync::CancellationToken;

async fn whole_run() -> StressReport {
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = 500;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim = inferscope::sim::start(cfg, l).await.unwrap();
    let yaml = format!(
        "name: merge\ntarget: http://{}\nseed: 11\nphases:\n\
         \x20 - name: base\n    duration: 1s\n    load: {{shape: poisson, rate: 30}}\n\
         \x20   request: {{endpoint: chat, model: inferscope-sim, max_tokens: 12}}\n\
         \x20   slo: ['ttft_p95 < 30s', 'itl_p99 < 1ms']\n\
         \x20 - name: peak\n    duration: 1s\n    load: {{shape: constant, rate: 45}}\n\
         \x20   request: {{endpoint: chat, model: inferscope-sim, max_tokens: 6}}\n\
         \x20   chaos: {{max_tokens_one: 0.2}}\n",
        sim.addr()
    );
    let scenario = Plan::from_yaml(&yaml, "<test>", Path::new(".")).unwrap();
    let report = loadgen::run(&scenario, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    sim.shutdown().await.unwrap();
    report
}

/// Shard `i` of 3 of `whole`: every third record, built as the runner builds a report.
fn shard(whole: &StressReport, i: u32) -> StressReport {
    let records: Vec<_> = whole
        .records
        .iter()
        .filter(|r| r.id % 3 == u64::from(i))
        .cloned()
        .collect();
    StressReport {
        shard: Some(Shard::new(i, 3).unwrap()),
        ..rebuilt(whole, records, 3.0)
    }
}

/// `whole` with its phases built from `records` as the runner builds them, each target
/// `parts`-th of the whole's; a phase whose records started during a ramp-up gets its ramp.
fn rebuilt(whole: &StressReport, records: Vec<RequestRecord>, parts: f64) -> StressReport {
    let phases = whole
        .phases
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let mut m = PhaseMetrics::default();
            for r in records.iter().filter(|r| r.phase as usize == k) {
                m.record(r);
                m.scheduled += 1;
            }
            let mut info = merge::phase_info(p, p.elapsed_s).unwrap();
            info.target_rate = p.target_rate.map(|r| r / parts);
            let mut built = PhaseReport::build(&info, &m);
            if records.iter().any(|r| r.phase as usize == k && r.ramp_up) {
                built.ramp = Some(RampView::new(0.5, "linear", false, false, &m));
            }
            built
        })
        .collect::<Vec<_>>();
    StressReport {
        slo_pass: phases.iter().all(|p| p.slo.iter().all(|r| r.pass)),
        phases,
        records,
        ..whole.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_ramps_merge_to_the_whole_ramp() {
    let mut whole = whole_run().await;
    // The first half second of `base` as a ramp: its requests are kept apart.
    for r in &mut whole.records {
        r.ramp_up = r.phase == 0 && r.intended_us < 500_000;
    }
    let whole = rebuilt(&whole, whole.records.clone(), 1.0);
    let ramp = whole.phases[0].ramp.clone().expect("a ramp");
    assert!(ramp.requests >= 5, "{ramp:?}");
    let parts: Vec<(String, StressReport)> = (0..3)
        .map(|i| (format!("shard-{i}.json"), shard(&whole, i)))
        .collect();
    assert_ne!(parts[0].1.phases[0].ramp, Some(ramp.clone()));
    let merged = merge::merge(&parts, merge::Allow::default()).unwrap();
    assert_eq!(merged.phases[0].ramp, Some(ramp));
    assert_eq!(merged.phases[0].latency_ms, whole.phases[0].latency_ms);
    assert_eq!(merged.phases[1].ramp, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_merge_to_exactly_the_whole() {
    let whole = whole_run().await;
    let finished: u64 = whole.phases.iter().map(|p| p.counts.finished).sum();
    assert_eq!(finished, whole.records.len() as u64);
    assert!(finished >= 60, "{finished} requests");
    let parts: Vec<(String, StressReport)> = (0..3)
        .map(|i| (format!("shard-{i}.json"), shard(&whole, i)))
        .collect();
    // The shards really differ from the whole: otherwise the test proves nothing.
    assert_ne!(parts[0].1.phases[0].latency_ms, whole.phases[0].latency_ms);
    let merged = merge::merge(&parts, merge::Allow::default()).unwrap();
    assert_eq!(merged.phases.len(), whole.phases.len());
    for (m, w) in merged.phases.iter().zip(&whole.phases) {
        assert_eq!(m.latency_ms, w.latency_ms, "phase {}", w.name);
        assert_eq!(m.stream_tokens_per_s, w.stream_tokens_per_s);
        assert_eq!(m.counts.finished, w.counts.finished);
        assert_eq!(m.counts.ok, w.counts.ok);
        assert_eq!(m.counts.good, w.counts.good);
        assert_eq!(m.counts.errors, w.counts.errors);
        assert_eq!(m.error_rate.to_bits(), w.error_rate.to_bits());
        assert_eq!(m.output_tokens, w.output_tokens);
        assert_eq!(m.input_tokens, w.input_tokens);
        assert_eq!(m.requests_per_s.to_bits(), w.requests_per_s.to_bits());
        assert_eq!(m.slo, w.slo, "phase {}", w.name);
        let tr = (m.target_rate.unwrap() - w.target_rate.unwrap()).abs();
        assert!(tr < 1e-9, "{:?} vs {:?}", m.target_rate, w.target_rate);
        for (name, enc) in &w.histograms {
            assert_eq!(
                decode_hist(&m.histograms[name]).unwrap(),
                decode_hist(enc).unwrap(),
                "histogram {name}"
            );
        }
    }
    // One SLO of `base` is set to fail (itl_p99 < 1ms): the merged report fails it too.
    assert!(!whole.slo_pass);
    assert_eq!(merged.slo_pass, whole.slo_pass);
    assert!(merged.phases[0].slo[0].pass);
    assert_eq!(merged.records.len(), whole.records.len());
    assert_eq!(merged.shard, None);

    // The same through the binary: files in, merged file out.
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crate::cli::inferscope();
    cmd.args(["report", "merge"]);
    for (name, r) in &parts {
        let path = dir.path().join(name);
        r.write(&path).unwrap();
        cmd.arg(path);
    }
    let out_path = dir.path().join("merged.json");
    let out = cmd.arg("--out").arg(&out_path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_cli = merge::read(&out_path).unwrap();
    // JSON floats may come back one ULP off (serde_json's fast float parser), so compare
    // what the file carries exactly: the histograms and the counts.
    for (m, w) in from_cli.phases.iter().zip(&whole.phases) {
        for (name, enc) in &w.histograms {
            assert_eq!(
                decode_hist(&m.histograms[name]).unwrap(),
                decode_hist(enc).unwrap(),
                "phase {} histogram {name}",
                w.name
            );
        }
        assert_eq!(m.counts, w.counts);
    }
}

#[test]
fn a_bad_shard_is_refused_in_one_line() {
    for (arg, why) in [
        ("3/3", "i must be smaller than N"),
        ("0/0", "N must be at least 1"),
    ] {
        let out = crate::cli::inferscope()
            .args(["stress", "--target", "http://127.0.0.1:9", "--rate", "1"])
            .args(["--duration", "1s", "--shard", arg])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err
            .lines()
            .find(|l| l.contains(why))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(line.contains("write i/N"), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_refuses_mixed_scenarios_versions_and_repeated_shards() {
    let whole = whole_run().await;
    let a = shard(&whole, 0);
    let mut other = shard(&whole, 1);
    other.scenario = "another".into();
    let e = merge::merge(
        &[("a.json".into(), a.clone()), ("b.json".into(), other)],
        merge::Allow::default(),
    )
    .unwrap_err();
    assert!(matches!(e, MergeError::Mismatch { .. }), "{e}");
    assert!(e.to_string().contains("b.json"), "{e}");
    assert!(e.to_string().contains("one scenario"), "{e}");

    let e = merge::merge(
        &[("a.json".into(), a.clone()), ("c.json".into(), a.clone())],
        merge::Allow::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("shard 0/3 is also in a.json"), "{e}");
    assert!(matches!(
        merge::merge(&[], merge::Allow::default()),
        Err(MergeError::Empty)
    ));

    // Shifted start (within the skew a 1 s phase allows): rates are over the union of the
    // spans, records on one clock.
    let mut late = shard(&whole, 1);
    late.started_unix_ns += 200_000_000;
    let pair = [("a.json".to_string(), a.clone()), ("l.json".into(), late)];
    // Two of three shards: refused, naming the missing one, unless partial is asked for.
    let e = merge::merge(&pair, merge::Allow::default()).unwrap_err();
    assert!(matches!(e, MergeError::Incomplete { .. }), "{e}");
    assert!(e.to_string().contains("missing shard 2/3"), "{e}");
    assert!(e.to_string().contains("--allow-partial"), "{e}");
    let merged = merge::merge(
        &pair,
        merge::Allow {
            partial: true,
            ..merge::Allow::default()
        },
    )
    .unwrap();
    let span = merged.phases[0].elapsed_s;
    assert!(
        (span - (whole.phases[0].elapsed_s + 0.2)).abs() < 1e-6,
        "{span}"
    );
    assert!((merged.elapsed_s - (whole.elapsed_s + 0.2)).abs() < 1e-6);

    // Shards of different N, and a whole run among shards.
    let mut of4 = shard(&whole, 1);
    of4.shard = Some(Shard::new(1, 4).unwrap());
    let e = merge::merge(
        &[
            ("a.json".into(), a.clone()),
            ("four.json".into(), of4),
            ("c.json".into(), shard(&whole, 2)),
        ],
        merge::Allow::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("shards of different N"), "{e}");
    let mut plain = shard(&whole, 1);
    plain.shard = None;
    let e = merge::merge(
        &[("a.json".into(), a.clone()), ("w.json".into(), plain)],
        merge::Allow::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("w.json is not a shard"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    a.write(&good).unwrap();
    let back = merge::read(&good).unwrap();
    assert_eq!((back.shard, back.records.len()), (a.shard, a.records.len()));
    let mut v = serde_json::to_value(&a).unwrap();
    v["version"] = 2.into();
    let newer = dir.path().join("newer.json");
    std::fs::write(&newer, v.to_string()).unwrap();
    let e = merge::read(&newer).unwrap_err().to_string();
    assert!(
        e.contains("report version 2, this inferscope reads version 1"),
        "{e}"
    );
    v["schema"] = "something.else".into();
    std::fs::write(&newer, v.to_string()).unwrap();
    let e = merge::read(&newer).unwrap_err().to_string();
    assert!(e.contains("is not \"inferscope.stress.report\""), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_that_did_not_run_at_once_are_refused() {
    let whole = whole_run().await;
    let a = shard(&whole, 0);
    // Shards that did not run at once: refused, naming the phase and the skew, unless asked.
    let mut apart = shard(&whole, 2);
    apart.started_unix_ns += 1_500_000_000;
    let three = [
        ("a.json".to_string(), a.clone()),
        ("b.json".into(), shard(&whole, 1)),
        ("apart.json".into(), apart),
    ];
    let e = merge::merge(&three, merge::Allow::default()).unwrap_err();
    let MergeError::NotConcurrent {
        file,
        phase,
        skew_s,
        ..
    } = &e
    else {
        panic!("{e}");
    };
    assert_eq!((file.as_str(), phase.as_str()), ("apart.json", "base"));
    assert!((skew_s - 1.5).abs() < 1e-6, "{e}");
    assert!(e.to_string().contains("--start-at"), "{e}");
    let skewed = merge::Allow {
        skew: true,
        ..merge::Allow::default()
    };
    assert!(merge::merge(&three, skewed).is_ok());
}

/// Two `--shard i/2` processes started 1.5 s apart: with one `--start-at` they send at once and
/// merge; without it their 2 s phases are 1.5 s apart and the merge refuses them.
#[test]
fn shards_started_apart_meet_at_the_common_start_or_the_merge_refuses_them() {
    let sim = crate::sim_process::SimProcess::start(["--corpus-size", "50"]);
    let dir = tempfile::tempdir().unwrap();
    let run = |tag: &str, start_at: Option<&str>| {
        let mut children = Vec::new();
        let mut outs = Vec::new();
        for i in 0..2 {
            let out = dir.path().join(format!("{tag}-{i}.json"));
            let mut cmd = crate::cli::inferscope();
            cmd.args(["stress", "--target", &sim.url, "--rate", "20"])
                .args(["--duration", "2s", "--max-tokens", "4", "--quiet"])
                .args(["--shard", &format!("{i}/2"), "--out"])
                .arg(&out)
                .stderr(std::process::Stdio::piped());
            if let Some(at) = start_at {
                cmd.args(["--start-at", at]);
            }
            children.push(cmd.spawn().unwrap());
            outs.push(out);
            std::thread::sleep(std::time::Duration::from_millis(1500));
        }
        let mut notes = String::new();
        for c in children {
            let o = c.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "{err}");
            notes.push_str(&err);
        }
        let merged = crate::cli::run(
            &[
                &["report", "merge"][..],
                &outs.iter().map(|p| p.to_str().unwrap()).collect::<Vec<_>>(),
            ]
            .concat(),
        );
        (notes, merged)
    };

    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 5;
    let (notes, merged) = run("together", Some(&format!("@{at}")));
    assert!(
        notes.matches("started at the common start").count() == 2,
        "{notes}"
    );
    let err = String::from_utf8_lossy(&merged.stderr);
    assert!(merged.status.success(), "{err}");
    let report: StressReport = serde_json::from_slice(&merged.stdout).unwrap();
    assert!(
        report.phases[0].counts.finished >= 30,
        "{:?}",
        report.phases[0].counts
    );

    let (_, merged) = run("apart", None);
    let err = String::from_utf8_lossy(&merged.stderr);
    assert_eq!(merged.status.code(), Some(1), "{err}");
    assert!(
        err.contains("did not run at once") && err.contains("--start-at"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
