//! The control API over real sockets, with a test double for the load-generator launcher.
//! Loopback and a unix socket in a temporary directory only. No root needed.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use inferscope::api::{
    Api, ApiConfig, ApiError, Bind, LaunchError, Marks, RunHandle, RunLauncher, RunState, RunStatus,
};
use inferscope::loadgen::{PlanError, ScenarioError};
use serde_json::{Value, json};

/// Test double for the embedded load generator: remembers scenarios, runs nothing.
#[derive(Default)]
struct LauncherDouble {
    runs: Mutex<HashMap<String, (RunStatus, String)>>,
}

impl RunLauncher for LauncherDouble {
    fn start(&self, scenario: &str) -> Result<RunHandle, LaunchError> {
        if !scenario.contains("duration:") {
            let e = ScenarioError {
                file: "scenario".into(),
                line: None,
                msg: "duration is required".into(),
            };
            return Err(LaunchError::InvalidScenario(PlanError::Scenario(e)));
        }
        let mut runs = self.runs.lock().unwrap();
        let id = format!("run-{}", runs.len() + 1);
        let status = RunStatus {
            id: id.clone(),
            state: RunState::Running,
            phase: Some("baseline".into()),
            started_unix_ms: 1_700_000_000_000,
            finished_unix_ms: None,
            error: None,
        };
        runs.insert(id.clone(), (status, scenario.to_owned()));
        Ok(RunHandle { id })
    }

    fn status(&self, id: &str) -> Option<RunStatus> {
        self.runs.lock().unwrap().get(id).map(|(s, _)| s.clone())
    }

    fn stop(&self, id: &str) -> Result<RunStatus, LaunchError> {
        let mut runs = self.runs.lock().unwrap();
        let (status, _) = runs
            .get_mut(id)
            .ok_or_else(|| LaunchError::NotFound(id.into()))?;
        status.state = RunState::Finished;
        status.finished_unix_ms = Some(1_700_000_060_000);
        Ok(status.clone())
    }

    fn report(&self, id: &str) -> Option<Value> {
        let runs = self.runs.lock().unwrap();
        runs.get(id).map(|(s, scenario)| {
            json!({ "scenario_bytes": scenario.len(), "final": s.state == RunState::Finished })
        })
    }
}

async fn call(
    base: &str,
    method: Method,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

async fn start(config: ApiConfig, marks: Marks) -> String {
    let api = Api::bind(&config, Arc::new(LauncherDouble::default()), marks)
        .await
        .unwrap();
    let addr = api.local_addr().unwrap();
    tokio::spawn(api.serve(std::future::pending()));
    format!("http://{addr}")
}

fn loopback() -> ApiConfig {
    ApiConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        ..ApiConfig::default()
    }
}

const SCENARIO: &str = "target: http://127.0.0.1:8000\nrate: 20\nduration: 30s\n";

#[tokio::test]
async fn a_run_is_started_marked_stopped_and_reported() {
    let marks = Marks::new(16);
    let base = start(loopback(), marks.clone()).await;

    let (status, created) = call(&base, Method::POST, "/api/v1/runs", SCENARIO, None).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["status"]["state"], "running");

    // An external load generator marks its phases: one late with an explicit time, one now.
    let (s, m) = call(
        &base,
        Method::POST,
        "/api/v1/marks",
        r#"{"phase":"peak","at":2000,"source":"k6"}"#,
        None,
    )
    .await;
    assert_eq!(s, 201, "{m}");
    assert_eq!(m["at_unix_ms"], 2000);
    let (s, _) = call(
        &base,
        Method::POST,
        "/api/v1/marks",
        r#"{"phase":"baseline","at":1000,"source":"k6"}"#,
        None,
    )
    .await;
    assert_eq!(s, 201);
    let (s, m) = call(
        &base,
        Method::POST,
        "/api/v1/marks",
        r#"{"phase":"chaos"}"#,
        None,
    )
    .await;
    assert_eq!(s, 201);
    assert!(m["at_unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
    // The time line reads them.
    assert_eq!(marks.phase_at(500), None);
    assert_eq!(marks.phase_at(1500).as_deref(), Some("baseline"));
    assert_eq!(marks.phase_at(2500).as_deref(), Some("peak"));
    assert_eq!(marks.phase_at(u64::MAX).as_deref(), Some("chaos"));
    let (_, list) = call(&base, Method::GET, "/api/v1/marks", "", None).await;
    assert_eq!(list.as_array().unwrap().len(), 3);
    // Control characters would reach terminal reports: refused.
    let (s, _) = call(
        &base,
        Method::POST,
        "/api/v1/marks",
        "{\"phase\":\"a\\u001b[1Ab\"}",
        None,
    )
    .await;
    assert_eq!(s, 400);
    let (s, _) = call(&base, Method::POST, "/api/v1/marks", "not json", None).await;
    assert_eq!(s, 400);

    let (s, run) = call(&base, Method::GET, &format!("/api/v1/runs/{id}"), "", None).await;
    assert_eq!(s, 200);
    assert_eq!(run["status"]["state"], "running");
    assert_eq!(run["report"]["scenario_bytes"], SCENARIO.len());
    assert_eq!(run["report"]["final"], false);

    let (s, stopped) = call(
        &base,
        Method::POST,
        &format!("/api/v1/runs/{id}/stop"),
        "",
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(stopped["status"]["state"], "finished");
    let (_, run) = call(&base, Method::GET, &format!("/api/v1/runs/{id}"), "", None).await;
    assert_eq!(run["report"]["final"], true);

    let (s, _) = call(&base, Method::GET, "/api/v1/runs/run-99", "", None).await;
    assert_eq!(s, 404);
    let (s, _) = call(&base, Method::POST, "/api/v1/runs/run-99/stop", "", None).await;
    assert_eq!(s, 404);
    let (s, e) = call(&base, Method::POST, "/api/v1/runs", "rate: 20\n", None).await;
    assert_eq!(s, 400);
    assert!(e["error"].as_str().unwrap().contains("duration"));
    let (s, _) = call(&base, Method::POST, "/api/v1/runs", "  ", None).await;
    assert_eq!(s, 400);
}

#[tokio::test]
async fn a_non_loopback_bind_without_a_token_is_refused() {
    let config = ApiConfig {
        bind: "0.0.0.0:0".parse().unwrap(),
        ..ApiConfig::default()
    };
    let Err(err) = Api::bind(
        &config,
        Arc::new(LauncherDouble::default()),
        Marks::default(),
    )
    .await
    else {
        panic!("bound 0.0.0.0 without a token")
    };
    assert!(matches!(err, ApiError::TokenRequired(_)));
    let msg = err.to_string();
    assert!(
        !msg.contains('\n') && msg.contains("--api-token-file"),
        "{msg}"
    );

    // A token file that is missing or too short is refused too, whatever the address.
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "abc\n").unwrap();
    for file in [dir.path().join("missing"), short] {
        let config = ApiConfig {
            token_file: Some(file),
            ..loopback()
        };
        let r = Api::bind(
            &config,
            Arc::new(LauncherDouble::default()),
            Marks::default(),
        )
        .await;
        assert!(matches!(r, Err(ApiError::TokenFile { .. })));
    }
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let config = ApiConfig {
        scenario_limit: 1024,
        mark_limit: 256,
        ..loopback()
    };
    let base = start(config, Marks::default()).await;
    let big = format!("duration: 1s\n# {}\n", "x".repeat(2048));
    let (s, _) = call(&base, Method::POST, "/api/v1/runs", &big, None).await;
    assert_eq!(s, 413);
    let mark = format!(r#"{{"phase":"p","source":"{}"}}"#, "y".repeat(512));
    let (s, _) = call(&base, Method::POST, "/api/v1/marks", &mark, None).await;
    assert_eq!(s, 413);
    // Just under the limit is fine.
    let (s, _) = call(&base, Method::POST, "/api/v1/runs", SCENARIO, None).await;
    assert_eq!(s, 201);
}

#[tokio::test]
async fn a_wrong_or_missing_token_gets_401() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let token = "s3cret-token-0123456789";
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let base = start(
        ApiConfig {
            token_file: Some(file),
            ..loopback()
        },
        Marks::default(),
    )
    .await;
    let (s, body) = call(&base, Method::POST, "/api/v1/runs", SCENARIO, None).await;
    assert_eq!(s, 401);
    assert!(!body.to_string().contains(token));
    let (s, _) = call(
        &base,
        Method::POST,
        "/api/v1/runs",
        SCENARIO,
        Some("s3cret-token-0123456788"),
    )
    .await;
    assert_eq!(s, 401);
    let (s, _) = call(&base, Method::GET, "/api/v1/marks", "", Some("short")).await;
    assert_eq!(s, 401);
    let (s, _) = call(&base, Method::POST, "/api/v1/runs", SCENARIO, Some(token)).await;
    assert_eq!(s, 201);
}

#[tokio::test]
async fn serves_on_a_private_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let config = ApiConfig {
        bind: Bind::Unix(path.clone()),
        ..ApiConfig::default()
    };
    let marks = Marks::default();
    let api = Api::bind(&config, Arc::new(LauncherDouble::default()), marks.clone())
        .await
        .unwrap();
    assert_eq!(api.local_addr(), None);
    tokio::spawn(api.serve(std::future::pending()));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let stream = tokio::net::UnixStream::connect(&path).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::post("/api/v1/marks")
        .header("host", "localhost")
        .body(Full::new(Bytes::from_static(
            br#"{"phase":"warmup","at":5}"#,
        )))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    assert_eq!(marks.phase_at(6).as_deref(), Some("warmup"));
}
