//! `inferscope stress --explain` driven from tests and benchmarks: a scenario with a
//! `baseline` phase at low load, a `peak` phase and a `cooldown`, run against a target, and
//! report.json read back with helpers that describe and check a phase's verdict.

use std::{
    fmt::Write as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::Value;

use crate::{Sim, free_port, inferscope_bin};

pub const SIM_CPU: usize = 1;
pub const LOADGEN_CPU: usize = 0;
pub const BASELINE: Duration = Duration::from_secs(8);
pub const PEAK: Duration = Duration::from_secs(10);
pub const COOLDOWN: Duration = Duration::from_secs(4);

/// Load of one test: request rates of the two phases and the synthetic request sizes.
pub struct Load {
    pub baseline_rps: f64,
    pub peak_rps: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Prompt size of the peak phase, when it differs from `input_tokens`.
    pub peak_input_tokens: Option<u32>,
    /// Answer size of the peak phase, when it differs from `output_tokens`.
    pub peak_output_tokens: Option<u32>,
}

/// One phase of [`three_phases`]: its load and request (YAML flow maps) and any more lines
/// of it (`    chaos: ...\n`).
pub struct Phase {
    pub load: String,
    pub request: String,
    pub more: String,
}

/// A scenario `e2e-{name}` against `target` of a baseline, a peak and a cooldown
/// ([`BASELINE`], [`PEAK`], [`COOLDOWN`] long), each phase from `phase(its name)`, with `head`
/// (top-level lines such as `datasets:`) before the phases.
#[must_use]
pub fn three_phases(name: &str, target: &str, head: &str, phase: impl Fn(&str) -> Phase) -> String {
    let mut yaml = format!(
        "name: e2e-{name}\ntarget: {target}\ntimeout: 30s\ngrace: 2s\nseed: 7\n{head}phases:\n"
    );
    for (p, len) in [
        ("baseline", BASELINE),
        ("peak", PEAK),
        ("cooldown", COOLDOWN),
    ] {
        let Phase {
            load,
            request,
            more,
        } = phase(p);
        let _ = write!(
            yaml,
            "  - name: {p}\n    duration: {}s\n    load: {load}\n    request: {request}\n{more}",
            len.as_secs()
        );
    }
    yaml
}

/// A synthetic dataset `name` of 500 prompts (YAML lines under `datasets:`).
fn dataset(name: &str, input: u32, output: u32) -> String {
    format!(
        "  {name}:\n    synthetic:\n      input_tokens: {{mean: {input}, stddev: {}}}\n      output_tokens: {{mean: {output}, stddev: {}}}\n      count: 500\n",
        input / 8,
        output / 8,
    )
}

#[must_use]
pub fn scenario(name: &str, target: &str, l: &Load) -> String {
    let datasets = format!(
        "datasets:\n{}{}",
        dataset("chat", l.input_tokens, l.output_tokens),
        dataset(
            "peak",
            l.peak_input_tokens.unwrap_or(l.input_tokens),
            l.peak_output_tokens.unwrap_or(l.output_tokens)
        ),
    );
    // Requests queued at the peak drain in the cooldown, with the generator still sending
    // (windows where it sends nothing have no send lag to judge it by).
    three_phases(name, target, &datasets, |p| {
        let (rate, dataset) = if p == "peak" {
            (l.peak_rps, "peak")
        } else {
            (l.baseline_rps, "chat")
        };
        Phase {
            load: format!("{{shape: constant, rate: {rate}}}"),
            request: format!(
                "{{endpoint: chat, model: inferscope-sim, dataset: {dataset}, stream: true}}"
            ),
            more: String::new(),
        }
    })
}

/// A closed-loop scenario: `peak_users` streams at the peak, one in the baseline and the
/// cooldown, each asking `output_tokens` tokens for a prompt of `input_tokens` (streamed).
#[must_use]
pub fn streams_scenario(
    name: &str,
    target: &str,
    model: &str,
    peak_users: u32,
    input_tokens: u32,
    output_tokens: u32,
) -> String {
    let datasets = format!(
        "datasets:\n{}",
        dataset("chat", input_tokens, output_tokens)
    );
    three_phases(name, target, &datasets, |p| Phase {
        load: format!(
            "{{shape: concurrency, users: {}}}",
            if p == "peak" { peak_users } else { 1 }
        ),
        request: format!(
            "{{endpoint: chat, model: {model}, dataset: chat, stream: true, ignore_eos: true}}"
        ),
        more: String::new(),
    })
}

/// `stress --explain` flags that leave the server's `/metrics` unread (a port nothing listens
/// on): the verdict rests on the kernel's and the client's evidence alone.
pub const NO_SERVER_METRICS: [&str; 2] = ["--metrics-url", "http://127.0.0.1:9/metrics"];

/// A running `inferscope stress --explain`.
pub struct Stress {
    child: Child,
    dir: PathBuf,
}

impl Stress {
    /// Writes the scenario and starts the run at niceness `nice`, on `cpu` when given.
    #[must_use]
    pub fn start(name: &str, yaml: &str, cpu: Option<usize>, nice: i32, extra: &[&str]) -> Self {
        let dir =
            std::env::temp_dir().join(format!("inferscope-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("scenario.yaml");
        std::fs::write(&file, yaml).unwrap();
        let cpus = cpu.map_or_else(|| "0-1023".to_owned(), |c| c.to_string());
        let child = Command::new("taskset")
            .args(["-c", &cpus, "nice", "-n", &nice.to_string()])
            .arg(inferscope_bin())
            .arg("stress")
            .arg(&file)
            .args(["--explain", "--quiet", "--report-dir"])
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Self { child, dir }
    }

    /// The run's process (`taskset` and `nice` exec it in place).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the run, which must succeed; returns report.json.
    #[must_use]
    pub fn finish(self) -> Value {
        self.wait(true)
    }

    /// Waits for the run, which may fail (its SLOs, an error-rate abort) as long as it wrote
    /// its report; returns report.json.
    #[must_use]
    pub fn finish_with_report(self) -> Value {
        self.wait(false)
    }

    fn wait(self, must_succeed: bool) -> Value {
        let out = self.child.wait_with_output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        println!("{stdout}");
        assert!(
            out.status.success() || !must_succeed,
            "inferscope stress --explain failed ({}):\n{stderr}",
            out.status
        );
        let path = self.dir.join("report.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\nstderr:\n{stderr}", path.display()));
        let report: Value = serde_json::from_str(&text).unwrap();
        // INFERSCOPE_E2E_KEEP=1 keeps the scenario and the report, to read a verdict again.
        if std::env::var_os("INFERSCOPE_E2E_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            println!("kept {}", self.dir.display());
        }
        report
    }
}

#[must_use]
pub fn peak(report: &Value) -> &Value {
    report["phases"]
        .as_array()
        .expect("report.phases")
        .iter()
        .find(|p| p["name"] == "peak")
        .unwrap_or_else(|| panic!("no peak phase in {:#}", report["phases"]))
}

/// Summary of a phase for failure messages: verdict shares and the evidence lines.
#[must_use]
pub fn describe(p: &Value) -> String {
    let ev: Vec<String> = p["evidence"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    format!(
                        "{}={} ({}, met {})",
                        e["signal"].as_str().unwrap_or("?"),
                        e["value"],
                        e["note"].as_str().unwrap_or(""),
                        e["met"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "phase {}: dominant {} confidence {}; shares {}; evidence [{}]; runners-up {}; missing {}",
        p["name"],
        p["dominant"],
        p["confidence"],
        p["shares"],
        ev.join(", "),
        p["runners_up"],
        p["missing"]
    )
}

/// Signals whose test held in the phase's evidence.
#[must_use]
pub fn met_signals(p: &Value) -> Vec<String> {
    p["evidence"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| e["met"] == true)
                .filter_map(|e| e["signal"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts the peak phase's verdict and that every signal of `all` (and at least one of `any`,
/// when given) held in its evidence. Returns the peak phase.
pub fn assert_peak<'a>(report: &'a Value, verdict: &str, all: &[&str], any: &[&str]) -> &'a Value {
    let base = report["phases"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "baseline"))
        .map_or_else(|| "no baseline phase".to_owned(), describe);
    let p = peak(report);
    println!("{base}\n{}", describe(p));
    assert_eq!(
        p["dominant"],
        verdict,
        "dominant verdict of the peak phase\n{base}\n{}",
        describe(p)
    );
    let met = met_signals(p);
    for s in all {
        assert!(
            met.iter().any(|m| m == s),
            "evidence of {verdict} lacks {s}: {}",
            describe(p)
        );
    }
    if !any.is_empty() {
        assert!(
            any.iter().any(|s| met.iter().any(|m| m == s)),
            "evidence of {verdict} names none of {any:?}: {}",
            describe(p)
        );
    }
    assert_other_phases(report, verdict);
    assert_consistent(report);
    p
}

/// Every phase besides the peak: the baseline `none` (each case starts from a healthy load);
/// a drain or cooldown `none`, the peak's own cause lingering, or `queue`: a peak that served
/// slower than requests arrived leaves a backlog, and the next phase's requests wait behind it
/// for slots (llama-server after a CPU quota: 7 waiting, every slot taken, in 3 of its 4
/// cooldown windows). With free slots the backlog is batched instead, and a phase holding one
/// (at least twice the baseline's requests in flight) may be `compute`: the engine stepping
/// more sequences at once (llama-server after loss on its path: the delayed requests arrive
/// together, 8 in flight against 2, ITL p50 doubled). Never a cause the case did not make.
pub fn assert_other_phases(report: &Value, verdict: &str) {
    let phases: Vec<&Value> = report["phases"].as_array().into_iter().flatten().collect();
    let in_flight = |p: &Value| p["load"]["in_flight_max"].as_f64().unwrap_or_default();
    let baseline = phases
        .iter()
        .find(|p| p["name"] == "baseline")
        .map_or(0.0, |p| in_flight(p));
    for p in phases {
        let (name, got) = (p["name"].as_str().unwrap_or("?"), &p["dominant"]);
        let backlog = baseline > 0.0 && in_flight(p) >= 2.0 * baseline;
        match name {
            "peak" => {}
            "baseline" => assert_eq!(got, "none", "the baseline\n{}", describe(p)),
            _ => assert!(
                *got == "none"
                    || *got == verdict
                    || *got == "queue"
                    || (backlog && *got == "compute"),
                "{name} after a {verdict} peak\n{}",
                describe(p)
            ),
        }
    }
}

/// Every phase of `report`: no runner-up ranks above a named verdict, and each decomposition's
/// parts are never negative and add up to its rise (a fall is not split).
pub fn assert_consistent(report: &Value) {
    let parts = [
        "loadgen_lag_ms",
        "queue_ms",
        "server_compute_ms",
        "cpu_scheduling_ms",
        "network_ms",
        "unexplained_ms",
    ];
    for p in report["phases"].as_array().into_iter().flatten() {
        let score = p["confidence"].as_f64().unwrap_or(0.0);
        if !matches!(p["dominant"].as_str(), Some("none" | "unexplained")) {
            for r in p["runners_up"].as_array().into_iter().flatten() {
                let c = r["confidence"].as_f64().unwrap_or(0.0);
                assert!(
                    c <= score + 1e-9,
                    "runner-up above the winner: {}",
                    describe(p)
                );
            }
        }
        for d in [&p["decomposition"], &p["tail_decomposition"]] {
            let Some(rise) = d["increase_ms"].as_f64() else {
                continue;
            };
            let values: Vec<f64> = parts.iter().filter_map(|k| d[*k].as_f64()).collect();
            assert!(values.iter().all(|v| *v >= 0.0), "a negative part: {d}");
            let sum: f64 = values.iter().sum();
            let want = rise.max(0.0);
            assert!(
                (sum - want).abs() < 0.01 * want.max(1.0),
                "{sum} vs {rise}: {d}"
            );
            let unexplained = d["unexplained_ms"].as_f64().unwrap_or(0.0);
            assert!(
                unexplained <= want + 1e-9,
                "unexplained above the rise: {d}"
            );
        }
    }
}

#[must_use]
pub fn loopback() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Niceness of the load generator and the sim when they must not be the ones starved: the
/// machine may be busy with other work (a shared 2-CPU builder), and a generator or engine that
/// waits for a CPU is (rightly) called `loadgen` or `cpu_runqueue`.
pub const FIRST: i32 = -10;

/// Niceness of servers that outnumber the CPUs (a pipeline's five processes on two): above
/// anything else on the machine, below the generator loading them. At [`FIRST`] beside them a
/// generator waited 8 ms for a CPU in a quiet baseline (once in eight runs), and its
/// `loadgen` verdict read the test's packing, not the pipeline.
pub const SECOND: i32 = -5;

/// Starts the sim, runs the scenario, returns report.json. Neither is pinned: on a busy
/// machine a generator confined to one CPU lags, and the verdict is (rightly) `loadgen`.
#[must_use]
pub fn run(name: &str, profile: &str, sim_flags: &[&str], load: &Load) -> Value {
    run_with(name, profile, sim_flags, load, &[])
}

/// [`run`] with more flags for `stress` (`extra`, e.g. an OTLP endpoint).
#[must_use]
pub fn run_with(
    name: &str,
    profile: &str,
    sim_flags: &[&str],
    load: &Load,
    extra: &[&str],
) -> Value {
    let sim = Sim::start(
        &["nice", "-n", &FIRST.to_string()],
        profile,
        loopback(),
        sim_flags,
    );
    Stress::start(name, &scenario(name, &sim.url(), load), None, FIRST, extra).finish()
}

#[cfg(test)]
mod tests {
    use inferscope::loadgen::Scenario;

    #[test]
    fn three_phase_scenarios_parse_with_their_loads() {
        let l = super::Load {
            baseline_rps: 1.0,
            peak_rps: 5.0,
            input_tokens: 64,
            output_tokens: 16,
            peak_input_tokens: Some(512),
            peak_output_tokens: None,
        };
        for yaml in [
            super::scenario("t", "http://127.0.0.1:9", &l),
            super::streams_scenario("t", "http://127.0.0.1:9", "m", 8, 64, 16),
        ] {
            let s = Scenario::parse_yaml(&yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
            let names: Vec<&str> = s.phases.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names, ["baseline", "peak", "cooldown"]);
        }
        let open = super::scenario("t", "http://127.0.0.1:9", &l);
        assert!(
            open.contains("rate: 5}") && open.contains("mean: 512"),
            "{open}"
        );
    }
}
