//! The Prometheus exposition passes `promtool check metrics` and is scraped by a real
//! Prometheus (Debian package `prometheus`, installed by `cargo xtask setup`). Everything binds
//! to 127.0.0.1 and lives in temporary directories. No root needed.

use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use inferscope::collect::catalog::{Labels, Totals};
use inferscope::collect::identity::{K8sIdentity, ServerIdentity};
use inferscope::collect::timeline::{GpuSignals, LoadSignals, Quantiles, RunqSignals, Window};
use inferscope::export::prometheus::{CONTENT_TYPE, DropCounter, Series, Snapshot, render};
use inferscope::probes::HookStatus;

fn exposition() -> String {
    let w = Window {
        start_unix_ms: 1_700_000_000_000,
        len_ms: 1000,
        phase: Some("peak".into()),
        load: Some(LoadSignals {
            requests: 7,
            errors: 1,
            target_rps: Some(20.0),
            ttft_ms: Some(Quantiles {
                p50: 10.0,
                p95: 20.0,
                p99: 30.0,
                max: 40.0,
            }),
            ..LoadSignals::default()
        }),
        runq: Some(RunqSignals {
            samples: 9,
            p99_us: 1500.0,
            total_ms: 3.5,
            ..RunqSignals::default()
        }),
        gpu: Some(GpuSignals {
            live_bytes: 1 << 30,
            mem_used_frac: Some(0.5),
            // NVML's energy counter through the window (as the NVML double's 700 W for 1 s).
            devices: vec![inferscope::collect::timeline::GpuDevice {
                energy_j: Some(700.0),
                ..Default::default()
            }],
            ..GpuSignals::default()
        }),
        ..Window::default()
    };
    let mut totals = Totals::default();
    totals.add(&w);
    totals.add(&w);
    let labels = Labels {
        scenario: Some("burst".into()),
        endpoint: Some("http://127.0.0.1:8000/v1/chat \"quoted\"\\path".into()),
        load_level: Some("32".into()),
        ..Labels::default()
    };
    let probes = [
        HookStatus::attached("sched:sched_switch"),
        HookStatus::detached("cuMemAlloc_v2@/usr/lib/libcuda.so.1", "no libcuda"),
    ];
    let drops = [
        DropCounter::new("kernel_ringbuf", "RUNQ_EVENTS", 2),
        DropCounter::new("otlp", "spans", 0),
        // Per hook, as the kernel's losses are exported.
        DropCounter {
            hook: Some("sock:inet_sock_set_state".into()),
            reason: Some("ringbuf_full".into()),
            ..DropCounter::new("kernel", "sockets", 7)
        },
        DropCounter::new("nvml", "samples", 1),
    ];
    // The verdict series are part of what promtool checks.
    let verdict = inferscope::attribute::Verdict {
        cause: inferscope::attribute::Cause::Queue,
        signature: Some("server metrics".into()),
        confidence: 0.8,
        own_confidence: None,
        evidence: Vec::new(),
        contrary: Vec::new(),
        runners_up: Vec::new(),
        missing: Vec::new(),
    };
    // A second server, in a pod: its series carry `server` and the `k8s_*` labels.
    let pod = Labels::of_server(&ServerIdentity {
        server: "pod:6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b".into(),
        process: Some("vllm".into()),
        k8s: Some(K8sIdentity {
            pod_uid: "6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b".into(),
            pod_name: Some("vllm-0".into()),
            namespace: Some("llm".into()),
            container_name: Some("vllm".into()),
            container_id: "5e4d".into(),
        }),
    });
    render(&Snapshot {
        series: &[
            Series {
                latest: Some(&w),
                totals: &totals,
                labels: &labels,
                verdict: Some(&verdict),
                hops: None,
                orchestration: None,
            },
            Series {
                latest: Some(&w),
                totals: &totals,
                labels: &pod,
                verdict: Some(&verdict),
                hops: None,
                orchestration: None,
            },
        ],
        probes: &probes,
        drops: &drops,
    })
}

#[test]
fn promtool_accepts_the_exposition() {
    let text = exposition();
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool not found: install the Debian package prometheus (cargo xtask setup)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool rejected the exposition:\n{said}\n---\n{text}"
    );
    // Energy on /metrics: a counter per GPU, summed over the two windows.
    assert!(
        text.lines().any(
            |l| l.starts_with("inferscope_gpu_device_energy_joules_total{") && l.ends_with(" 1400")
        ),
        "{text}"
    );
    // promtool exits 0 on lint warnings too; there must be none.
    assert!(
        said.trim().is_empty(),
        "promtool lint findings:\n{said}\n---\n{text}"
    );
}

/// Kills the child on drop, so a failing test does not leave Prometheus running.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn get(url: &str) -> (u16, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    match client.get(url.parse().unwrap()).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
        Err(e) => (0, e.to_string()),
    }
}

#[tokio::test]
async fn a_real_prometheus_scrapes_it() {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(|| async {
            (
                [(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)],
                exposition(),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: inferscope\n    \
             static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let web = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus not found: install the Debian package prometheus (cargo xtask setup)");
    let _guard = Killed(prometheus);

    let query = format!("http://{web}/api/v1/query?query=inferscope_load_requests_total");
    let deadline = Instant::now() + Duration::from_mins(1);
    let body = loop {
        let (status, body) = get(&query).await;
        if status == 200 && body.contains("inferscope_load_requests_total") {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "no scrape within 60 s: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let result = &v["data"]["result"][0];
    assert_eq!(result["metric"]["job"], "inferscope");
    assert_eq!(result["metric"]["scenario"], "burst");
    assert_eq!(result["metric"]["phase"], "peak");
    assert_eq!(
        result["metric"]["endpoint"],
        "http://127.0.0.1:8000/v1/chat \"quoted\"\\path"
    );
    assert_eq!(result["value"][1], "14");

    // The probe gauge arrived too, one series per hook.
    let (_, body) = get(&format!(
        "http://{web}/api/v1/query?query=inferscope_probe_attached"
    ))
    .await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"]["result"].as_array().unwrap().len(), 2, "{body}");
}
