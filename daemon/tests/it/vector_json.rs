//! Vector search against the sim: the generic `json` adapter (body template and JSON paths,
//! the sim's exact endpoint for ground truth), the dimension the sim's index reports (and a
//! wrong one refused, from a scenario and from flags), the `ef_search` sweep and its
//! frontier, index health in SLOs, and the demo's vector phases.

use std::path::Path;

use inferscope::loadgen::{self, Options, Plan, RunError, scenario::overrides::Overrides};
use tokio_util::sync::CancellationToken;

async fn sim(corpus: usize) -> (String, inferscope::sim::SimServer) {
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = corpus;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim = inferscope::sim::start(cfg, l).await.unwrap();
    (format!("http://{}", sim.addr()), sim)
}

fn scenario(yaml: &str) -> Plan {
    Plan::from_yaml(yaml, "v.yaml", Path::new(".")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_adapter_drives_the_sim_with_its_exact_endpoint_as_ground_truth() {
    let (target, sim) = sim(1000).await;
    let s = scenario(&format!(
        "target: {target}\nseed: 2\nphases:
  - name: j
    duration: 2s
    load: {{shape: constant, rate: 20}}
    request:
      endpoint: vector_search
      api: json
      path: /v1/vector/search
      exact_path: /v1/vector/exact
      dimensions: 64
      top_k: 5
      ef_search: 64
      recall_sample: 100%
      json:
        body: {{query: {{vector: '${{vector}}'}}, top_k: '${{top_k}}', ef_search: '${{ef_search}}', vector: '${{vector}}', note: 'k=${{top_k}}'}}
        ids: $.results[*].id
        scores: $.results[*].distance
"
    ));
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let p = &r.phases[0];
    assert_eq!(p.counts.ok, 40, "{:?}", p.counts.errors);
    assert_eq!(p.recall.count, 40);
    assert!(p.recall.mean > 0.6, "{:?}", p.recall);
    assert!(p.vector.as_ref().unwrap().joint.sampled == 40);
    sim.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_index_dimension_is_used_and_a_wrong_one_refused() {
    let (target, sim) = sim(200).await;
    let wrong = scenario(&format!(
        "target: {target}\nphases:
  - name: w
    duration: 1s
    load: {{shape: constant, rate: 5}}
    request: {{endpoint: vector_search, dimensions: 128}}
"
    ));
    let e = loadgen::run(&wrong, Options::new(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::Vector(_)), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("128-dimension vectors but the sim's index holds 64-dimension")
            && msg.contains("--dimensions 64"),
        "{msg}"
    );
    let found = scenario(&format!(
        "target: {target}\nphases:
  - name: f
    duration: 1s
    load: {{shape: constant, rate: 5}}
    request: {{endpoint: vector_search, recall_sample: 100%}}
"
    ));
    let r = loadgen::run(&found, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.phases[0].counts.ok, 5, "{:?}", r.phases[0].counts.errors);
    assert_eq!(r.phases[0].recall.count, 5);
    sim.shutdown().await.unwrap();
}

#[test]
fn flags_take_the_dimension_from_the_sim_or_refuse_a_wrong_one() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (target, sim) = rt.block_on(sim(200));
    let stress = |extra: &[&str]| {
        crate::cli::inferscope()
            .args(["stress", "--target", &target, "--endpoint", "vector-search"])
            .args([
                "--rate",
                "10",
                "--duration",
                "1s",
                "--quiet",
                "--no-records",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let ok = stress(&[]);
    let err = String::from_utf8_lossy(&ok.stderr);
    assert!(ok.status.success(), "{err}");
    let bad = stress(&["--dimensions", "128"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{err}");
    assert!(err.contains("--dimensions 64"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    rt.block_on(sim.shutdown()).unwrap();
}

#[test]
fn bad_templates_and_paths_are_refused_at_load_time() {
    for (json, want) in [
        (
            "{body: {v: '${vec}'}, ids: $.results[*].id}",
            "unknown placeholder `${vec}`",
        ),
        (
            "{body: {v: '${vector}'}, ids: '$.results[x]'}",
            "bad JSON path",
        ),
        ("{body: {k: '${top_k}'}, ids: $.r}", "neither `${vector}`"),
    ] {
        let yaml = format!(
            "target: http://127.0.0.1:1\nphases:
  - name: j
    duration: 1s
    load: {{shape: constant, rate: 1}}
    request: {{endpoint: vector_search, api: json, path: /s, dimensions: 4, json: {json}}}
"
        );
        let e = Plan::from_yaml(&yaml, "b.yaml", Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want) && e.starts_with("b.yaml:"), "{json}: {e}");
    }
    for (request, want) in [
        (
            "{endpoint: vector_search, corpus: {vectors: 10, dimensions: 4}}",
            "the sim serves its own fixed corpus",
        ),
        (
            "{endpoint: vector_search, api: chroma, text: hello}",
            "takes vectors, not text",
        ),
        (
            "{endpoint: vector_search, api: json, path: /s, dimensions: 4}",
            "`api: json` and a `json:` block",
        ),
        (
            "{endpoint: vector_search, api: chroma, collection: ab, dimensions: 4}",
            "3 to 512 characters",
        ),
        (
            "{endpoint: vector_search, api: qdrant, corpus: {vectors: 10000000, dimensions: 100}}",
            "use fewer vectors",
        ),
        (
            "{endpoint: chat, api: qdrant}",
            "need `endpoint: vector_search`",
        ),
    ] {
        let yaml = format!(
            "target: http://127.0.0.1:1\nphases:
  - name: c
    duration: 1s
    load: {{shape: constant, rate: 1}}
    request: {request}
"
        );
        let e = Plan::from_yaml(&yaml, "c.yaml", Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(want) && e.starts_with("c.yaml:"),
            "{request}: {e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ef_search_sweep_prints_the_frontier_and_health_gates_slos() {
    let (target, sim) = sim(2000).await;
    let s = scenario(&format!(
        "target: {target}\nseed: 4\nphases:
  - name: v
    duration: 1s
    load: {{shape: constant, rate: 30}}
    sweep: {{ef_search: [10, 1000]}}
    request: {{endpoint: vector_search, top_k: 10, recall_sample: 100%}}
    slo: ['recall_min_window >= 95%']
"
    ));
    assert_eq!(s.scenario().phases.len(), 2);
    assert_eq!(s.scenario().phases[0].name, "v@ef10");
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let (lo, hi) = (&r.phases[0], &r.phases[1]);
    assert_eq!(lo.vector.as_ref().unwrap().ef_search, Some(10));
    assert_eq!(hi.vector.as_ref().unwrap().sweep_of.as_deref(), Some("v"));
    // ef_search is applied: a wider search finds more of the true neighbours (here about 0.73
    // against 1.0 over 2,000 vectors) and takes longer (about 2.5 against 9.6 ms at the p50).
    assert!(
        hi.recall.mean >= lo.recall.mean + 0.1,
        "{:?} {:?}",
        lo.recall,
        hi.recall
    );
    let p50 = |p: &inferscope::loadgen::PhaseReport| p.latency_ms["e2e"].p50;
    assert!(p50(hi) > 1.5 * p50(lo), "{} {}", p50(lo), p50(hi));
    // The recall SLO judges each step: the narrow search misses it, the wide one meets it.
    let pass = |p: &inferscope::loadgen::PhaseReport| p.slo.iter().all(|x| x.pass);
    assert!(!pass(lo) && pass(hi), "{:?} {:?}", lo.slo, hi.slo);
    assert!(!r.slo_pass);
    assert!(lo.slo.iter().all(|x| x.observed.is_some()));
    let table = r.table();
    assert!(
        table.contains("ef_search sweep of `v`: recall/latency frontier"),
        "{table}"
    );
    assert!(table.contains("recall x latency:"), "{table}");
    assert!(table.contains("index health:"), "{table}");
    sim.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_scenario_validates_and_its_vector_phase_runs_against_the_sim() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/seed-matrix.yaml");
    let (target, sim) = sim(2000).await;
    let flags = Overrides {
        target: Some(target.parse().unwrap()),
        ..Overrides::default()
    };
    let demo = Plan::from_file(&path, &flags).unwrap();
    let mut phase = demo.scenario().phases[3].clone();
    assert_eq!(phase.name, "vector-baseline");
    phase.duration = std::time::Duration::from_secs(2);
    let s = demo.with_phases(vec![phase]).unwrap();
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let p = &r.phases[0];
    assert!(p.counts.finished > 50, "{:?}", p.counts);
    assert_eq!(p.counts.ok, p.counts.finished, "{:?}", p.counts.errors);
    assert!(p.recall.count > 0);
    sim.shutdown().await.unwrap();
}

#[test]
fn the_vector_db_example_parses_into_a_sweep() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/vector-db.yaml");
    let plan = Plan::from_file(&path, &Overrides::default()).unwrap();
    let s = plan.scenario();
    let names: Vec<&str> = s.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "baseline",
            "peak@ef16",
            "peak@ef32",
            "peak@ef64",
            "peak@ef128",
            "peak@ef256"
        ]
    );
    assert!(
        s.phases[1..]
            .iter()
            .all(|p| p.sweep_of.as_deref() == Some("peak"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_rebuild_shows_as_latency_spikes_in_the_health_view() {
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = 1000;
    cfg.vector.rebuild_min_ms = 1500;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim = inferscope::sim::start(cfg, l).await.unwrap();
    let s = scenario(&format!(
        "target: http://{}\nphases:
  - name: rebuild
    duration: 12s
    load: {{shape: constant, rate: 20}}
    request: {{endpoint: vector_search, top_k: 5, recall_sample: 50%}}
    events: [{{at: 2s, path: /v1/vector/rebuild}}]
",
        sim.addr()
    ));
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let v = r.phases[0].vector.as_ref().unwrap();
    // Spikes are seconds over 3x the median second. The rebuild's own seconds are hundreds of
    // ms, and the slowest spike is one of them; other seconds (the backlog draining after it, a
    // busy machine running parallel tests) may be spikes too, at a few tens of ms.
    let slowest = v
        .spikes
        .iter()
        .max_by(|a, b| a.e2e_mean_ms.total_cmp(&b.e2e_mean_ms))
        .unwrap_or_else(|| panic!("no spike: {:?}", r.events));
    assert!(
        (2.0..=8.0).contains(&slowest.start_s) && slowest.e2e_mean_ms > 100.0,
        "{:?} {:?}",
        v.spikes,
        r.events
    );
    assert!(r.table().contains("latency spikes"), "{}", r.table());
    sim.shutdown().await.unwrap();
}
