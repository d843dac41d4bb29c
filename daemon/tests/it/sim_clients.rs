//! Real third-party clients against the simulator: the `openai` Python package (streaming and
//! not), `curl -N`, and `promtool check metrics`. `cargo xtask setup` installs them (a venv at
//! `target/venv` with `openai`; Debian packages `curl` and `prometheus`). A missing tool fails
//! the test: it never passes silently.

use crate::sim_common;

use std::{
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use serde_json::Value;
use sim_common::*;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::Command,
};

fn venv_python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run `cargo xtask setup` (it creates the venv with the `openai` package)",
        p.display()
    );
    p
}

fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("`{name}` is not on PATH: run `cargo xtask setup`"))
}

const OPENAI_SCRIPT: &str = r#"
import json, sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", max_retries=0)
out = {}
r = c.chat.completions.create(model="inferscope-sim", messages=[{"role": "user", "content": "Hello, world!"}],
                              max_tokens=12, seed=1, logprobs=True, top_logprobs=2)
out["chat"] = {"text": r.choices[0].message.content, "usage": r.usage.model_dump(),
               "finish": r.choices[0].finish_reason, "lp": len(r.choices[0].logprobs.content)}
chunks, usage, text = 0, None, ""
for ch in c.chat.completions.create(model="inferscope-sim", messages=[{"role": "user", "content": "Stream please"}],
                                    max_tokens=20, stream=True, stream_options={"include_usage": True}):
    if ch.usage is not None:
        usage = ch.usage.model_dump()
    for choice in ch.choices:
        if choice.delta.content:
            chunks += 1
            text += choice.delta.content
out["stream"] = {"chunks": chunks, "usage": usage, "text": text}
t = "".join(x.choices[0].text for x in c.completions.create(model="inferscope-sim", prompt="one two", max_tokens=5, stream=True))
out["completion_stream"] = t
r = c.completions.create(model="inferscope-sim", prompt="one two", max_tokens=5)
out["completion"] = {"text": r.choices[0].text, "usage": r.usage.model_dump()}
e = c.embeddings.create(model="inferscope-sim", input=["alpha beta", "gamma"])
out["embeddings"] = [len(d.embedding) for d in e.data]
out["norm"] = sum(x * x for x in e.data[0].embedding)
try:
    c.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    out["not_found"] = None
except openai.NotFoundError as err:
    out["not_found"] = err.status_code
out["models"] = [m.id for m in c.models.list()]
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_package_streaming_and_not() {
    let python = venv_python();
    let srv = start(profile("healthy")).await;
    let out = Command::new(python)
        .arg("-c")
        .arg(OPENAI_SCRIPT)
        .arg(srv.url())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "openai client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["chat"]["usage"]["completion_tokens"], 12);
    assert_eq!(v["chat"]["usage"]["prompt_tokens"], 11);
    assert_eq!(v["chat"]["finish"], "length");
    assert_eq!(v["chat"]["lp"], 12);
    assert_eq!(
        inferscope::sim::tokenizer::count(v["chat"]["text"].as_str().unwrap()),
        12
    );
    assert_eq!(v["stream"]["chunks"], 20);
    assert_eq!(v["stream"]["usage"]["completion_tokens"], 20);
    assert_eq!(
        inferscope::sim::tokenizer::count(v["stream"]["text"].as_str().unwrap()),
        20
    );
    assert_eq!(
        inferscope::sim::tokenizer::count(v["completion_stream"].as_str().unwrap()),
        5
    );
    assert_eq!(v["completion"]["usage"]["total_tokens"], 7);
    assert_eq!(v["embeddings"], serde_json::json!([64, 64]));
    assert!((v["norm"].as_f64().unwrap() - 1.0).abs() < 1e-3);
    assert_eq!(v["not_found"], 404);
    assert_eq!(v["models"], serde_json::json!(["inferscope-sim"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_n_receives_tokens_as_they_are_generated() {
    let curl = tool("curl");
    let mut cfg = profile("fixed");
    cfg.fixed = Some(inferscope::sim::config::FixedTiming {
        ttft_ms: 50.0,
        itl_ms: 30.0,
    });
    let srv = start(cfg).await;
    let body = r#"{"model":"inferscope-sim","prompt":"hi","max_tokens":10,"stream":true}"#;
    let mut child = Command::new(curl)
        .args(["-sN", "-H", "content-type: application/json", "-d", body])
        .arg(format!("{}/v1/completions", srv.url()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut tokens = Vec::new();
    let mut done = false;
    while let Some(l) = lines.next_line().await.unwrap() {
        if l.contains("\"finish_reason\":null") {
            tokens.push(Instant::now());
        }
        done |= l == "data: [DONE]";
    }
    assert!(child.wait().await.unwrap().success());
    assert!(done, "no [DONE]");
    assert_eq!(tokens.len(), 10);
    // Delivered as generated (9 gaps of 30 ms), not buffered to the end.
    let spread = tokens[9] - tokens[0];
    assert!(
        spread >= Duration::from_millis(250),
        "tokens arrived together: {spread:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_metrics() {
    let promtool = tool("promtool");
    let srv = start(profile("healthy")).await;
    let c = client();
    for _ in 0..3 {
        let (s, _) = post(
            &c,
            &format!("{}/v1/completions", srv.url()),
            r#"{"model":"inferscope-sim","prompt":"a b c","max_tokens":4}"#,
        )
        .await;
        assert_eq!(s, 200);
    }
    let (_, text) = get(&c, &format!("{}/metrics", srv.url())).await;
    let check = |input: String| {
        let promtool = promtool.clone();
        async move {
            let mut ch = Command::new(promtool)
                .args(["check", "metrics"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            ch.stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .await
                .unwrap();
            let out = ch.wait_with_output().await.unwrap();
            let msg = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.code(), msg)
        }
    };
    // promtool's linter objects to ':' in names, which vLLM's own names (required here) contain;
    // every other rule must pass and the text must parse (exit 1 = parse error).
    let (code, msg) = check(text.clone()).await;
    assert_ne!(code, Some(1), "promtool cannot parse /metrics:\n{msg}");
    for line in msg.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            line.ends_with("metric names should not contain ':'"),
            "promtool lint: {line}"
        );
    }
    let (code, msg) = check(text.replace("vllm:", "vllm_")).await;
    assert_eq!(code, Some(0), "promtool check metrics failed:\n{msg}");
}
