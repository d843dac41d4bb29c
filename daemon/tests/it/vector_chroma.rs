//! Vector search against a real Chroma server (`chroma run` from the venv `cargo xtask setup`
//! makes at `target/venv`; skipped, saying why, when the venv has no `chromadb`, and failed under
//! `CI=true`): the chroma
//! adapter seeds a collection and its client-side recall@k matches a brute-force check done
//! here over the vectors Chroma holds, for the queries Chroma was sent (seen through a
//! recording proxy); and the `json` adapter drives Chroma with a template of its own.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{body::Bytes, extract::State, http::Request, response::Response};
use inferscope::loadgen::{
    self, Options, Plan,
    client::{HttpClient, Target, build_client},
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const BASE: &str = "/api/v2/tenants/default_tenant/databases/default_database/collections";

/// A `chroma run` child, killed on drop.
struct Chroma {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Chroma {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn venv() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin")
}

/// Starts Chroma on a free loopback port, or says why it cannot.
async fn chroma() -> Option<Chroma> {
    let bin = venv().join("chroma");
    let has = Command::new(venv().join("python"))
        .args(["-c", "import chromadb"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has || !bin.exists() {
        crate::peers::missing(
            "the Chroma tests",
            &format!(
                "{} has no chromadb (run `cargo xtask setup`, or {}/pip install chromadb)",
                venv().display(),
                venv().display()
            ),
        );
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(&bin)
        .args([
            "run",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--path",
        ])
        .arg(dir.path())
        .env("ANONYMIZED_TELEMETRY", "False")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let c = Chroma {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _dir: dir,
    };
    let (client, target) = client(&c.url);
    let t0 = Instant::now();
    loop {
        if let Ok((200, _)) = call(&client, &target, "GET", "/api/v2/heartbeat", None).await {
            return Some(c);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "chroma did not answer within 90 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn client(url: &str) -> (HttpClient, Target) {
    let target = Target::new(url, []).unwrap();
    (
        build_client(
            &target,
            Duration::from_secs(10),
            inferscope::dial::Reach::Loopback,
        ),
        target,
    )
}

async fn call(
    client: &HttpClient,
    target: &Target,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    use http_body_util::BodyExt as _;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = target
        .request(
            &hyper::Method::from_bytes(method.as_bytes()).unwrap(),
            path,
            Bytes::from(body),
            &[],
        )
        .map_err(|e| e.to_string())?;
    let resp = client.request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    Ok((status, serde_json::from_slice(&b).unwrap_or(Value::Null)))
}

type Seen = Arc<Mutex<Vec<(String, Bytes, Bytes)>>>;

/// A proxy in front of Chroma that keeps every exchange (path, request, answer).
async fn proxy(upstream: &str) -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let (client, target) = client(upstream);
    let state = (client, target, seen.clone());
    let app = axum::Router::new()
        .fallback(
            |State((client, target, seen)): State<(HttpClient, Target, Seen)>,
             req: Request<axum::body::Body>| async move {
                use http_body_util::BodyExt as _;
                let (parts, body) = req.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                let path = parts.uri.path_and_query().unwrap().to_string();
                let up = target
                    .request(&parts.method, &path, body.clone(), &[])
                    .unwrap();
                let resp = client.request(up).await.unwrap();
                let status = resp.status();
                let answer = resp.into_body().collect().await.unwrap().to_bytes();
                seen.lock().unwrap().push((path, body, answer.clone()));
                Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from(answer))
                    .unwrap()
            },
        )
        .with_state(state);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (addr, seen)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// The queries the proxy saw (path ending `/query`) and the ids Chroma answered.
fn sent_queries(seen: &Seen) -> Vec<(Vec<f32>, Vec<String>)> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(path, _, _)| path.ends_with("/query"))
        .map(|(_, req, ans)| {
            let req: Value = serde_json::from_slice(req).unwrap();
            let ans: Value = serde_json::from_slice(ans).unwrap();
            let ids = ans["ids"][0]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect();
            (floats(&req["query_embeddings"][0]), ids)
        })
        .collect()
}

/// recall@k of each query's answer against the exact top-k over `stored` (squared L2).
fn brute_force_recalls(
    stored: &[(String, Vec<f32>)],
    queries: &[(Vec<f32>, Vec<String>)],
    k: usize,
) -> Vec<f64> {
    queries
        .iter()
        .map(|(q, found)| {
            let mut d: Vec<(f32, &str)> = stored
                .iter()
                .map(|(i, v)| {
                    let dist = v.iter().zip(q).map(|(a, b)| (a - b) * (a - b)).sum();
                    (dist, i.as_str())
                })
                .collect();
            d.sort_by(|a, b| a.0.total_cmp(&b.0));
            let exact: Vec<&str> = d[..k].iter().map(|x| x.1).collect();
            let hits = found
                .iter()
                .take(k)
                .filter(|f| exact.contains(&f.as_str()))
                .count();
            hits as f64 / k as f64
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::many_single_char_names)]
async fn chroma_seeded_by_the_client_and_its_recall_matches_a_brute_force_check() {
    let Some(chroma) = chroma().await else {
        return;
    };
    let (addr, seen) = proxy(&chroma.url).await;
    let (n, dims, k) = (1500usize, 24usize, 10usize);
    let s = Plan::from_yaml(
        &format!(
            "target: http://{addr}\nseed: 11\nphases:
  - name: chroma
    duration: 2s
    load: {{shape: constant, rate: 20}}
    request:
      endpoint: vector_search
      api: chroma
      collection: e2e
      top_k: {k}
      ef_search: 10
      recall_sample: 100%
      corpus: {{vectors: {n}, dimensions: {dims}, batch: 500}}
"
        ),
        "c.yaml",
        Path::new("."),
    )
    .unwrap();
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let p = &r.phases[0];
    assert_eq!(p.counts.finished, 40, "{:?}", p.counts);
    assert_eq!(
        p.counts.ok,
        40,
        "{:?} {:?}",
        p.counts.errors,
        r.records.first()
    );
    assert_eq!(p.recall.count, 40);
    let e2e = &p.latency_ms["e2e"];
    assert_eq!(e2e.count, 40);
    assert!(
        e2e.p50 > 0.0 && e2e.p99 >= e2e.p50 && e2e.p999 >= e2e.p99,
        "{e2e:?}"
    );
    eprintln!(
        "chroma: recall@{k} mean {:.4}, e2e p50 {:.2} ms p99 {:.2} ms p999 {:.2} ms",
        p.recall.mean, e2e.p50, e2e.p99, e2e.p999
    );

    // The vectors Chroma holds, read back from Chroma itself.
    let (client, target) = client(&chroma.url);
    let (_, info) = call(&client, &target, "GET", &format!("{BASE}/e2e"), None)
        .await
        .unwrap();
    let id = info["id"].as_str().unwrap();
    let (status, got) = call(
        &client,
        &target,
        "POST",
        &format!("{BASE}/{id}/get"),
        Some(json!({"include": ["embeddings"], "limit": n})),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{got}");
    let stored: Vec<(String, Vec<f32>)> = got["ids"]
        .as_array()
        .unwrap()
        .iter()
        .zip(got["embeddings"].as_array().unwrap())
        .map(|(i, e)| (i.as_str().unwrap().to_string(), floats(e)))
        .collect();
    assert_eq!(stored.len(), n);
    assert!(stored.iter().all(|(_, v)| v.len() == dims));

    // Every query Chroma was sent during the run (the first is setup's test query), the ids it
    // answered, and the exact top-k by brute force over what it holds.
    let queries = sent_queries(&seen);
    assert_eq!(queries.len(), 41);
    // ef_search reached the collection before the phase sent.
    let (_, info) = call(&client, &target, "GET", &format!("{BASE}/e2e"), None)
        .await
        .unwrap();
    assert_eq!(info["configuration_json"]["hnsw"]["ef_search"], json!(10));
    assert!(
        r.events
            .iter()
            .any(|e| e.request.contains("ef_search=10") && e.outcome == "HTTP 200"),
        "{:?}",
        r.events
    );
    let mut checked = brute_force_recalls(&stored, &queries[1..], k);
    let mut client_side: Vec<f64> = r.records.iter().filter_map(|x| x.recall).collect();
    checked.sort_by(f64::total_cmp);
    client_side.sort_by(f64::total_cmp);
    assert_eq!(client_side, checked);
    let mean = checked.iter().sum::<f64>() / checked.len() as f64;
    assert!(
        (p.recall.mean - mean).abs() < 2e-3,
        "{} vs {mean}",
        p.recall.mean
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_adapter_drives_chroma_with_its_own_template() {
    let Some(chroma) = chroma().await else {
        return;
    };
    let (client, target) = client(&chroma.url);
    let (status, made) = call(
        &client,
        &target,
        "POST",
        BASE,
        Some(json!({"name": "by-json", "metadata": {"hnsw:space": "l2"}})),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{made}");
    let id = made["id"].as_str().unwrap();
    let s = Plan::from_yaml(
        &format!(
            "target: {}\nseed: 5\nphases:
  - name: j
    duration: 2s
    load: {{shape: constant, rate: 15}}
    request:
      endpoint: vector_search
      api: json
      path: {BASE}/{id}/query
      top_k: 5
      recall_sample: 100%
      corpus: {{vectors: 600, dimensions: 16}}
      json:
        body: {{query_embeddings: ['${{vector}}'], n_results: '${{top_k}}', include: [distances]}}
        ids: $.ids[0]
        scores: $.distances[0]
        insert:
          path: {BASE}/{id}/add
          body: {{ids: '${{ids}}', embeddings: '${{vectors}}'}}
",
            chroma.url
        ),
        "j.yaml",
        Path::new("."),
    )
    .unwrap();
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let p = &r.phases[0];
    assert_eq!(
        p.counts.ok,
        30,
        "{:?} {:?}",
        p.counts.errors,
        r.records.first()
    );
    assert_eq!(p.recall.count, 30);
    assert!(p.recall.mean > 0.8, "{:?}", p.recall);
    let (_, count) = call(&client, &target, "GET", &format!("{BASE}/{id}/count"), None)
        .await
        .unwrap();
    assert_eq!(count, json!(600));
}
