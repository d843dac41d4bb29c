//! A run's provenance ([`Provenance`]), gathered before its first request: the engine behind
//! the target and its version, the machine's GPUs (NVML), CPU and kernel, the scenario's hash,
//! the seed the run will use and the trace id of its requests.
//!
//! The engine is asked only when the target listed its models (an `OpenAI`-compatible
//! engine): `owned_by` of `/v1/models` names vLLM, `SGLang`, llama.cpp and the sim;
//! `GET /version` gives vLLM's and the sim's version; otherwise `/metrics` names the engine by
//! its metric names and may carry a `*_build_info{version=..}`; last, the engine's own info
//! path (`SGLang`'s `/get_server_info`, TGI's `/info`, llama.cpp's `/props`). One request at a
//! time, each within [`PROBE_TIMEOUT`]: what does not answer stays unknown.

use std::{fmt::Write as _, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use hyper::Method;

use super::{Options, RunError, models};
use crate::clock;
use crate::loadgen::{
    client::{HttpClient, Target, build_client},
    scenario::{Scenario, plan::Plan},
};
use crate::measure::{
    provenance::{Cpu, Engine, Gpu, Provenance},
    trace_context::TraceId,
};
use crate::scrape::{ServerKind, engine_info, mapping::detect_server, prom_text};

/// The longest wait for one of the engine's answers (less when the scenario's timeout is).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer read (a `/metrics` page of a large server fits).
const MAX_ANSWER: usize = 8 << 20;

/// Gathers the provenance of a run of `plan` with `opts` (after the model discovery, which it
/// makes when no one has yet): a model the scenario names that is not served is the run's
/// error, as it would be at its start.
pub async fn gather(plan: &Plan, opts: &Options) -> Result<Provenance, RunError> {
    let scenario = plan.scenario();
    let found = models::discover_once(plan, opts).await?;
    let engine = if found.listed() {
        engine(scenario, opts, found.owned_by()).await
    } else {
        None
    };
    let gpu = tokio::task::spawn_blocking(crate::gpu::inventory::read)
        .await
        .ok()
        .flatten()
        .map(|g| Gpu {
            model: g.model,
            count: g.count,
            driver: g.driver,
        });
    Ok(Provenance {
        engine,
        gpu,
        cpu: cpu(&read("/proc/cpuinfo").unwrap_or_default()),
        kernel: read("/proc/sys/kernel/osrelease")
            .map(|k| k.trim().to_owned())
            .filter(|k| !k.is_empty()),
        scenario_sha256: sha256(&scenario.origin.text),
        seed: Some(scenario.seed.unwrap_or_else(clock::unix_ns)),
        trace_id: scenario.trace_headers.then(TraceId::random),
    })
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// SHA-256 of a scenario's text, hex; `None` for no text (a run made from flags).
fn sha256(text: &str) -> Option<String> {
    if text.is_empty() {
        return None;
    }
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    Some(d.as_ref().iter().fold(String::new(), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    }))
}

/// The CPU `/proc/cpuinfo` describes: the first `model name` and the number of `processor`
/// entries (online logical CPUs); the scheduler's count when the file says none.
fn cpu(cpuinfo: &str) -> Option<Cpu> {
    let field = |line: &str, name: &str| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == name).then(|| v.trim().to_owned())
    };
    let model = cpuinfo
        .lines()
        .find_map(|l| field(l, "model name"))
        .filter(|m| !m.is_empty());
    let listed = cpuinfo
        .lines()
        .filter(|l| field(l, "processor").is_some())
        .count();
    let cores = match u32::try_from(listed) {
        Ok(n) if n > 0 => n,
        _ => std::thread::available_parallelism()
            .ok()
            .and_then(|n| u32::try_from(n.get()).ok())?,
    };
    Some(Cpu { model, cores })
}

/// The engine an `owned_by` names, when it is one inferscope knows.
fn owner_engine(owned_by: &str) -> Option<&'static str> {
    match owned_by.to_ascii_lowercase().as_str() {
        "vllm" => Some("vllm"),
        "sglang" => Some("sglang"),
        "llamacpp" | "llama.cpp" => Some("llama.cpp"),
        "tgi" | "text-generation-inference" => Some("tgi"),
        "inferscope-sim" => Some("inferscope-sim"),
        _ => None,
    }
}

/// The engine the metric names say, and the reverse.
fn kind_engine(kind: ServerKind) -> Option<&'static str> {
    match kind {
        ServerKind::Vllm => Some("vllm"),
        ServerKind::Sglang => Some("sglang"),
        ServerKind::Tgi => Some("tgi"),
        ServerKind::LlamaCpp => Some("llama.cpp"),
        ServerKind::Unknown => None,
    }
}

fn engine_kind(name: &str) -> ServerKind {
    match name {
        "vllm" => ServerKind::Vllm,
        "sglang" => ServerKind::Sglang,
        "tgi" => ServerKind::Tgi,
        "llama.cpp" => ServerKind::LlamaCpp,
        _ => ServerKind::Unknown,
    }
}

/// Asks the target which engine it is and its version (see the module's documentation).
async fn engine(scenario: &Scenario, opts: &Options, owned_by: Option<&str>) -> Option<Engine> {
    let target = Target::of(&scenario.target, &scenario.headers)
        .and_then(|t| t.with_tls(&opts.tls))
        .ok()?;
    let timeout = scenario.timeout.min(PROBE_TIMEOUT);
    let client = build_client(&target, timeout, opts.reach);
    let ask = Ask {
        client: &client,
        target: &target,
        timeout,
    };
    let mut name = owned_by
        .and_then(owner_engine)
        .map(|n| (n, models::MODELS_PATH));
    let mut version = ask.json_text("/version", &["version"]).await;
    if (name.is_none() || version.is_none())
        && let Some(page) = ask.get("/metrics").await
    {
        let exp = prom_text::parse(&String::from_utf8_lossy(&page));
        name = name.or_else(|| kind_engine(detect_server(&exp)).map(|n| (n, "/metrics")));
        version = version.or_else(|| build_info_version(&exp));
    }
    let (name, from) = name?;
    if version.is_none()
        && let Some(path) = engine_info::path(engine_kind(name))
    {
        version = ask.json_text(path, &["version", "build_info"]).await;
    }
    Some(Engine {
        name: name.to_owned(),
        version,
        from: from.to_owned(),
    })
}

/// The `version` label of a `*_build_info` family (the Prometheus convention).
fn build_info_version(exp: &prom_text::Exposition) -> Option<String> {
    exp.families()
        .iter()
        .filter(|f| f.name.ends_with("build_info"))
        .flat_map(|f| &f.samples)
        .find_map(|s| s.label("version").filter(|v| !v.is_empty()))
        .map(str::to_owned)
}

/// How the engine is asked: one GET at a time, each within the timeout.
struct Ask<'a> {
    client: &'a HttpClient,
    target: &'a Target,
    timeout: Duration,
}

impl Ask<'_> {
    /// The body of a 2xx answer to `GET path`; `None` for anything else.
    async fn get(&self, path: &str) -> Option<Bytes> {
        let req = self
            .target
            .request(&Method::GET, path, Bytes::new(), &[])
            .ok()?;
        let answer = async {
            let resp = self.client.request(req).await.ok()?;
            if !resp.status().is_success() {
                return None;
            }
            let body = Limited::new(resp.into_body(), MAX_ANSWER).collect().await;
            body.ok().map(http_body_util::Collected::to_bytes)
        };
        tokio::time::timeout(self.timeout, answer)
            .await
            .ok()
            .flatten()
    }

    /// The first of `keys` that is a non-empty string in the JSON answer to `GET path`.
    async fn json_text(&self, path: &str, keys: &[&str]) -> Option<String> {
        let body = self.get(path).await?;
        json_text(&body, keys)
    }
}

fn json_text(body: &[u8], keys: &[&str]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    keys.iter()
        .find_map(|k| v.get(*k)?.as_str().filter(|s| !s.is_empty()))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_is_read_from_cpuinfo() {
        let info = "processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n\n\
                    processor\t: 1\nmodel name\t: AMD EPYC 9654 96-Core Processor\n";
        assert_eq!(
            cpu(info),
            Some(Cpu {
                model: Some("AMD EPYC 9654 96-Core Processor".into()),
                cores: 2
            })
        );
        // An ARM machine names no model; the scheduler counts when the file lists nothing.
        let arm = cpu("processor\t: 0\nCPU part\t: 0xd0c\n").unwrap();
        assert_eq!((arm.model, arm.cores), (None, 1));
        assert!(cpu("").unwrap().cores >= 1);
    }

    #[test]
    fn engines_are_named_from_their_owner_metrics_and_info() {
        assert_eq!(owner_engine("vllm"), Some("vllm"));
        assert_eq!(owner_engine("llamacpp"), Some("llama.cpp"));
        assert_eq!(owner_engine("organization-owner"), None);
        for kind in [
            ServerKind::Vllm,
            ServerKind::Sglang,
            ServerKind::Tgi,
            ServerKind::LlamaCpp,
        ] {
            assert_eq!(engine_kind(kind_engine(kind).unwrap()), kind);
        }
        let exp = prom_text::parse(
            "# TYPE tgi_build_info gauge\ntgi_build_info{version=\"3.0.1\",sha=\"ab\"} 1\n",
        );
        assert_eq!(build_info_version(&exp).as_deref(), Some("3.0.1"));
        assert_eq!(
            json_text(
                br#"{"version": "", "build_info": "b4567-abc"}"#,
                &["version", "build_info"]
            )
            .as_deref(),
            Some("b4567-abc")
        );
        assert_eq!(json_text(b"<html>", &["version"]), None);
    }

    #[test]
    fn the_scenario_hash_is_of_its_text() {
        assert_eq!(sha256(""), None);
        assert_eq!(
            sha256("abc").as_deref(),
            Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
    }
}
