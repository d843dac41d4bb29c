//! Where a run's numbers came from: the engine that served it and its version, the GPUs and
//! the CPU of the machine inferscope ran on, its kernel, the scenario (a hash of its text) and
//! the seed the run used, and the trace id its requests carried. Two reports are comparable
//! when these agree; the load generator gathers them before its first request
//! (`loadgen::engine::provenance`).

use serde::{Deserialize, Serialize};

use super::trace_context::TraceId;

/// What a run ran against and on (the report's `run`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Provenance {
    /// The inference engine behind the target, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Engine>,
    /// The GPUs NVML lists on the machine inferscope ran on (the server's when it runs
    /// beside it); absent without an NVIDIA driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Gpu>,
    /// The CPU of the machine inferscope ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    /// The kernel release (`uname -r`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// SHA-256 of the scenario file's text (hex); absent for a run made from flags alone.
    /// Flags given over the file are not in it (the report says the target and the seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_sha256: Option<String>,
    /// The seed of the run's schedules, templates and chaos: the scenario's (or `--seed`), or
    /// the one drawn from the clock; `--seed` with it runs the same requests again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The trace id of the run's requests (those outside a conversation); absent when they
    /// carry no trace headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<TraceId>,
}

/// The inference engine behind the target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Engine {
    /// `vllm`, `sglang`, `tgi`, `llama.cpp` or `inferscope-sim`.
    pub name: String,
    /// Its version, when it says it (`/version`, `SGLang`'s `/get_server_info`, TGI's `/info`,
    /// llama.cpp's `/props` `build_info`, a `*_build_info` metric).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Where the name was read: `/v1/models` (its `owned_by`) or `/metrics` (the metric names).
    pub from: String,
}

/// The GPUs of the machine, as NVML names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Gpu {
    /// The product name of the first GPU (e.g. `NVIDIA H100 80GB HBM3`).
    pub model: String,
    /// How many GPUs NVML lists.
    pub count: u32,
    /// The NVIDIA driver's version.
    pub driver: String,
}

/// The CPU of the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cpu {
    /// `model name` of `/proc/cpuinfo`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Logical CPUs online.
    pub cores: u32,
}

impl Provenance {
    /// The facts as OpenTelemetry resource attributes: `inferscope.engine.name` and
    /// `.version`, `inferscope.gpu.model`, `.count` and `.driver`, `host.cpu.model.name`,
    /// `inferscope.host.cpus`, `os.type` and `os.version` (the kernel release),
    /// `inferscope.scenario.sha256`, `inferscope.seed` and `inferscope.trace_id`.
    #[must_use]
    pub fn resource_attributes(&self) -> Vec<(String, String)> {
        let mut out: Vec<(&str, String)> = Vec::new();
        if let Some(e) = &self.engine {
            out.push(("inferscope.engine.name", e.name.clone()));
            if let Some(v) = &e.version {
                out.push(("inferscope.engine.version", v.clone()));
            }
        }
        if let Some(g) = &self.gpu {
            out.push(("inferscope.gpu.model", g.model.clone()));
            out.push(("inferscope.gpu.count", g.count.to_string()));
            out.push(("inferscope.gpu.driver", g.driver.clone()));
        }
        if let Some(c) = &self.cpu {
            if let Some(m) = &c.model {
                out.push(("host.cpu.model.name", m.clone()));
            }
            out.push(("inferscope.host.cpus", c.cores.to_string()));
        }
        if let Some(k) = &self.kernel {
            out.push(("os.type", "linux".to_owned()));
            out.push(("os.version", k.clone()));
        }
        if let Some(h) = &self.scenario_sha256 {
            out.push(("inferscope.scenario.sha256", h.clone()));
        }
        if let Some(s) = self.seed {
            out.push(("inferscope.seed", s.to_string()));
        }
        if let Some(t) = self.trace_id {
            out.push(("inferscope.trace_id", t.to_string()));
        }
        out.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }

    /// One line for a report's header: `vllm 0.8.5 · 2× NVIDIA H100 (driver 550.54) · …`.
    #[must_use]
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(e) = &self.engine {
            parts.push(match &e.version {
                Some(v) => format!("{} {v}", e.name),
                None => e.name.clone(),
            });
        }
        if let Some(g) = &self.gpu {
            parts.push(format!("{}× {} (driver {})", g.count, g.model, g.driver));
        }
        if let Some(c) = &self.cpu {
            parts.push(match &c.model {
                Some(m) => format!("{} CPUs ({m})", c.cores),
                None => format!("{} CPUs", c.cores),
            });
        }
        if let Some(k) = &self.kernel {
            parts.push(format!("Linux {k}"));
        }
        if let Some(s) = self.seed {
            parts.push(format!("seed {s}"));
        }
        if let Some(h) = &self.scenario_sha256 {
            parts.push(format!("scenario sha256 {}", &h[..h.len().min(12)]));
        }
        parts.join(" · ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_and_summary_say_what_is_known() {
        let p = Provenance {
            engine: Some(Engine {
                name: "vllm".into(),
                version: Some("0.8.5".into()),
                from: "/v1/models".into(),
            }),
            gpu: None,
            cpu: Some(Cpu {
                model: None,
                cores: 8,
            }),
            kernel: Some("6.18.0".into()),
            scenario_sha256: Some("ab".repeat(32)),
            seed: Some(7),
            trace_id: None,
        };
        let a = p.resource_attributes();
        let get = |k: &str| a.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("inferscope.engine.version"), Some("0.8.5"));
        assert_eq!(get("inferscope.host.cpus"), Some("8"));
        assert_eq!(get("os.version"), Some("6.18.0"));
        assert_eq!(get("inferscope.gpu.model"), None);
        assert_eq!(get("host.cpu.model.name"), None);
        assert_eq!(
            p.summary(),
            "vllm 0.8.5 · 8 CPUs · Linux 6.18.0 · seed 7 · scenario sha256 abababababab"
        );
        assert_eq!(Provenance::default().summary(), "");
    }
}
