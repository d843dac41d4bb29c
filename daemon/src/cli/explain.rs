//! `inferscope stress --explain`'s flags: which processes are the server and its hops, where
//! its metrics are, the window, triggers, `--confirm`; read into an [`Explain`] (the run
//! itself is `inferscope::explain`), whose report is printed and written here.

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use inferscope::{
    collect::discover,
    explain::Explain,
    export::report::Report,
    loadgen::{self, Options, Plan, Scenario},
    node::Service,
};
use tokio_util::sync::CancellationToken;

/// Flags of `--explain`.
#[derive(clap::Args, Debug, Clone)]
pub struct ExplainArgs {
    /// Explain the run: watch the target's processes with eBPF (needs root), scrape its
    /// `/metrics`, and name the bottleneck of every window with its evidence.
    #[arg(long)]
    pub explain: bool,
    /// With --explain: the server's processes (default: whatever listens on the target's port
    /// on this host). Repeatable.
    #[arg(long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// With --explain: a cgroup (path under /sys/fs/cgroup, or absolute) holding the server.
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,
    /// With --explain: the server's Prometheus endpoint (default: `<target>/metrics`; an
    /// https:// one is checked with --ca-file/--insecure as the target is).
    #[arg(long, value_name = "URL")]
    metrics_url: Option<String>,
    /// With --explain: where `report.json` and `report.html` are written.
    #[arg(long, default_value = ".", value_name = "DIR")]
    report_dir: PathBuf,
    /// With --explain: length of a time-line window.
    #[arg(long, default_value = "1s", value_parser = super::args::positive_duration)]
    window: Duration,
    /// With --explain: trigger rules (YAML `triggers:`; see docs/stress.md, "Triggers"),
    /// evaluated on every window with the scenario's own `triggers:`.
    #[arg(long, value_name = "FILE")]
    triggers: Option<PathBuf>,
    /// With --explain: after the verdicts, put each phase's verdict to the test with one short
    /// step at half its load (a full KV cache, a queue, saturated compute or GPU memory must
    /// give back half the latency rise there; other causes cannot be confirmed by load alone,
    /// and the report says so).
    #[arg(long, requires = "explain")]
    confirm: bool,
    /// With --explain: a hop of the pipeline behind the target (embeddings, vector DB,
    /// re-ranker, LLM, ...), as `NAME=PORT`: whatever listens on PORT here gets its own time
    /// line and verdict, and each phase says which hop holds the latency rise. Repeatable.
    #[arg(long = "service", value_name = "NAME=PORT", requires = "explain", value_parser = parse_service)]
    services: Vec<(String, u16)>,
}

/// `NAME=PORT` of `--service`.
fn parse_service(s: &str) -> Result<(String, u16), String> {
    let bad = || format!("{s:?}: give NAME=PORT, e.g. search=6333");
    let (name, port) = s.split_once('=').ok_or_else(bad)?;
    let name = name.trim();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(bad());
    }
    let port = port
        .trim()
        .parse::<u16>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(bad)?;
    Ok((name.to_owned(), port))
}

impl ExplainArgs {
    /// `--triggers`, when given.
    pub fn triggers_file(&self) -> Option<&std::path::Path> {
        self.triggers.as_deref()
    }

    /// `--report-dir`, for checking it before the run starts.
    pub fn report_dir(&self) -> &std::path::Path {
        &self.report_dir
    }

    /// The server's processes: given pids, the cgroup's, and the listeners on the target port.
    fn servers(&self, scenario: &Scenario) -> anyhow::Result<Vec<u32>> {
        let mut pids = self.pids.clone();
        if let Some(cg) = &self.cgroup {
            let dir = if cg.is_absolute() {
                cg.clone()
            } else {
                PathBuf::from("/sys/fs/cgroup").join(cg)
            };
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).with_context(|| {
                format!(
                    "reading {}/cgroup.procs (give --cgroup as a cgroup directory)",
                    dir.display()
                )
            })?;
            pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if pids.is_empty() {
            pids = discover::pids_listening_on(scenario.target.port());
        }
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    /// The `--service` hops with the processes listening on their ports; a port nothing
    /// listens on is refused.
    fn services(&self) -> anyhow::Result<Vec<Service>> {
        let mut names = std::collections::BTreeSet::new();
        self.services
            .iter()
            .map(|(name, port)| {
                anyhow::ensure!(
                    names.insert(name),
                    "--service {name}: the name is given twice; give each hop its own name"
                );
                let pids = discover::pids_listening_on(*port);
                anyhow::ensure!(
                    !pids.is_empty(),
                    "--service {name}={port}: nothing listens on port {port} here; start the service first or fix the port"
                );
                Ok(Service {
                    name: name.clone(),
                    pids,
                    metrics_url: Some(format!("http://127.0.0.1:{port}/metrics")),
                })
            })
            .collect()
    }
}

/// Runs `plan` explained (see [`Explain`]); prints the report and writes it to
/// `--report-dir`. Returns the load generator's report and the explained report.
pub async fn run(
    plan: &Plan,
    opts: Options,
    cancel: CancellationToken,
    args: &ExplainArgs,
) -> anyhow::Result<(loadgen::StressReport, Report)> {
    let scenario = plan.scenario();
    let explain = Explain {
        servers: args.servers(scenario)?,
        services: args.services()?,
        metrics_url: args
            .metrics_url
            .clone()
            .unwrap_or_else(|| format!("{}/metrics", scenario.target.trimmed())),
        window: args.window,
        triggers: super::triggers::rules(scenario, args.triggers.as_deref(), opts.reach)?,
        confirm: args.confirm,
    };
    let (lg, explained) = explain.run(plan, opts, cancel).await?;
    std::fs::create_dir_all(&args.report_dir)
        .with_context(|| format!("creating --report-dir {}", args.report_dir.display()))?;
    let (json, html) = explained.write_files(&args.report_dir)?;
    print!(
        "{}",
        explained.terminal_with(inferscope::export::report::colour::for_stdout())
    );
    eprintln!(
        "explained report written to {} and {}",
        json.display(),
        html.display()
    );
    Ok((lg, explained))
}
