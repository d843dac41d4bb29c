//! The Qdrant adapter against a test double of Qdrant's REST API (`qdrant_double`): seeding,
//! `hnsw_ef`, client-side recall, a wrong dimension refused in one line, and the achieved rate
//! at 400 QPS with 10% of queries searched exactly on the client.

use std::path::Path;

use inferscope::loadgen::{self, Options, Plan, RunError};
use tokio_util::sync::CancellationToken;

use crate::qdrant_double;

fn scenario(yaml: &str) -> Plan {
    Plan::from_yaml(yaml, "q.yaml", Path::new(".")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::many_single_char_names)]
async fn seeds_a_collection_and_computes_recall_on_the_client() {
    let (addr, q) = qdrant_double::start().await;
    let s = scenario(&format!(
        "target: http://{addr}\nseed: 3\nphases:
  - name: q
    duration: 2s
    load: {{shape: constant, rate: 25}}
    request:
      endpoint: vector_search
      api: qdrant
      collection: bench
      top_k: 5
      ef_search: 64
      recall_sample: 100%
      corpus: {{vectors: 800, dimensions: 16, batch: 300}}
    slo: ['recall >= 0.99', 'recall_min_window >= 92%']
"
    ));
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let p = &r.phases[0];
    assert_eq!(p.counts.finished, 50, "{:?}", p.counts);
    assert_eq!(p.counts.ok, 50, "{:?}", p.counts.errors);
    // The double searches exactly: every sampled query has recall 1.
    assert_eq!(p.recall.count, 50);
    assert!((p.recall.mean - 1.0).abs() < 1e-3, "{:?}", p.recall);
    assert!(p.slo.iter().all(|x| x.pass), "{:?}", p.slo);
    assert!(p.latency_ms["e2e"].p99 > 0.0);
    let v = p.vector.as_ref().unwrap();
    assert_eq!(v.joint.sampled, 50);
    assert!(!v.health.as_ref().unwrap().rebuild_advised);
    assert_eq!(q.colls.lock().unwrap()["bench"].points.len(), 800);
    assert!(
        q.hnsw_ef
            .lock()
            .unwrap()
            .iter()
            .all(|e| e == &serde_json::json!(64))
    );
    assert!(r.records.iter().all(|x| x.recall == Some(1.0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dimension_that_does_not_fit_the_collection_stops_the_run_in_one_line() {
    let (addr, _q) = qdrant_double::start().await;
    let seed = scenario(&format!(
        "target: http://{addr}\nphases:
  - name: seed
    duration: 1s
    load: {{shape: constant, rate: 2}}
    request: {{endpoint: vector_search, api: qdrant, corpus: {{vectors: 50, dimensions: 16}}}}
"
    ));
    loadgen::run(&seed, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let wrong = scenario(&format!(
        "target: http://{addr}\nphases:
  - name: wrong
    duration: 1s
    load: {{shape: constant, rate: 2}}
    request: {{endpoint: vector_search, api: qdrant, dimensions: 8}}
"
    ));
    let e = loadgen::run(&wrong, Options::new(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::Vector(_)), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("8-dimension") && msg.contains("set `dimensions: 16`"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
    // Without `dimensions:` the collection's own is used.
    let found = scenario(&format!(
        "target: http://{addr}\nphases:
  - name: found
    duration: 1s
    load: {{shape: constant, rate: 4}}
    request: {{endpoint: vector_search, api: qdrant}}
"
    ));
    let r = loadgen::run(&found, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.phases[0].counts.ok, 4, "{:?}", r.phases[0].counts);
    // A collection that is not there says how to make it.
    let absent = scenario(&format!(
        "target: http://{addr}\nphases:
  - name: absent
    duration: 1s
    load: {{shape: constant, rate: 4}}
    request: {{endpoint: vector_search, api: qdrant, collection: nope}}
"
    ));
    let e = loadgen::run(&absent, Options::new(), CancellationToken::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no collection `nope`") && e.contains("corpus:"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_path_that_matches_nothing_stops_the_run_in_one_line() {
    let (addr, _q) = qdrant_double::start().await;
    let s = scenario(&format!(
        "target: http://{addr}\nphases:
  - name: j
    duration: 1s
    load: {{shape: constant, rate: 2}}
    request:
      endpoint: vector_search
      api: json
      path: /collections/c/points/search
      corpus:
        vectors: 20
        dimensions: 4
        insert: false
      json:
        body: {{vector: '${{vector}}', limit: '${{top_k}}'}}
        ids: $.hits[*].id
"
    ));
    // Nothing inserted: the collection is made by hand, as a user's would exist already.
    put(
        addr,
        "/collections/c",
        r#"{"vectors":{"size":4,"distance":"Euclid"}}"#,
    )
    .await;
    let e = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ids path `$.hits[*].id` matched nothing") && e.contains("has no field `hits`"),
        "{e}"
    );
    assert!(e.contains("fix `json.body`, `json.ids`"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

/// A PUT with a JSON body through the load generator's own client.
async fn put(addr: std::net::SocketAddr, path: &str, body: &str) {
    use inferscope::loadgen::client::{Target, build_client};
    let target = Target::new(&format!("http://{addr}"), []).unwrap();
    let client = build_client(
        &target,
        std::time::Duration::from_secs(5),
        inferscope::dial::Reach::Loopback,
    );
    let req = target
        .request(
            &hyper::Method::PUT,
            path,
            bytes::Bytes::from(body.to_string()),
            &[],
        )
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert!(resp.status().is_success());
}

/// The seed's peak: 400 QPS with 10% of queries searched exactly on the client (on its own
/// thread, beside the requests); the rate actually sent stays within 1% of the target. The
/// double answers without searching, on its own thread: the server is not what is measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_side_ground_truth_stays_off_the_request_path_at_400_qps() {
    let (addr, q) = qdrant_double::start_in_thread();
    q.cheap.store(true, std::sync::atomic::Ordering::Relaxed);
    let s = scenario(&format!(
        "target: http://{addr}\nseed: 9\nphases:
  - name: peak
    duration: 5s
    load: {{shape: constant, rate: 400}}
    request:
      endpoint: vector_search
      api: qdrant
      top_k: 10
      ef_search: 128
      recall_sample: 10%
      corpus: {{vectors: 20000, dimensions: 128, batch: 500}}
"
    ));
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let p = &r.phases[0];
    // Sent within the phase's 5 s (from the first intended start), per second.
    let start = r.records.iter().map(|x| x.intended_us).min().unwrap();
    let sent = r
        .records
        .iter()
        .filter(|x| x.actual_us <= start + 5_000_000)
        .count();
    let achieved = sent as f64 / p.duration_s;
    eprintln!(
        "400 QPS, recall_sample 10%: sent {achieved:.1} req/s within the phase ({} finished, {} ok, {} recall samples, {} dropped, send lag p50 {:.2} ms p99 {:.2} ms)",
        p.counts.finished,
        p.counts.ok,
        p.recall.count,
        p.vector.as_ref().map_or(0, |v| v.joint.dropped),
        p.latency_ms["send_lag"].p50,
        p.latency_ms["send_lag"].p99
    );
    assert!((achieved - 400.0).abs() <= 4.0, "achieved {achieved}");
    assert!(
        p.counts.ok + 20 >= p.counts.finished,
        "{:?}",
        p.counts.errors
    );
    assert!(p.recall.count >= 120, "{:?}", p.recall);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_universal_query_route_is_read_as_documented() {
    let (addr, _q) = qdrant_double::start().await;
    let s = scenario(&format!(
        "target: http://{addr}\nseed: 8\nphases:
  - name: query
    duration: 1s
    load: {{shape: constant, rate: 10}}
    request:
      endpoint: vector_search
      api: qdrant
      collection: uq
      path: /collections/uq/points/query
      recall_sample: 100%
      corpus: {{vectors: 200, dimensions: 8}}
"
    ));
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let p = &r.phases[0];
    assert_eq!(p.counts.ok, 10, "{:?}", p.counts.errors);
    assert_eq!(p.recall.count, 10);
    assert!((p.recall.mean - 1.0).abs() < 1e-3, "{:?}", p.recall);
}
