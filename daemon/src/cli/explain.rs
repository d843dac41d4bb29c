//! `inferscope stress --explain`: while the load runs, watch the target's processes, scrape its
//! `/metrics` and sample NVML; afterwards join everything on one time line, attribute every
//! window, and print and write the report.

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use inferscope::{
    collect::{discover, load_fold::LoadFold, session::SessionOptions},
    export::report::Report,
    loadgen::{self, Options, Plan, Scenario},
    node::{Node, NodeOptions, Service},
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
        if pids.is_empty()
            && let Some(port) = scenario.target_port()
        {
            pids = discover::pids_listening_on(port);
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

/// Runs `scenario` with the collectors on; returns the load generator's report and the
/// explained report (already printed and written to `--report-dir`).
pub async fn run(
    plan: &Plan,
    opts: Options,
    cancel: CancellationToken,
    args: &ExplainArgs,
) -> anyhow::Result<(loadgen::StressReport, Report)> {
    let scenario = plan.scenario();
    let services = args.services()?;
    let servers = Service::outside(&services, args.servers(scenario)?);
    for s in &services {
        eprintln!("explain: service {} is pids {:?}", s.name, s.pids);
    }
    // The follow-up steps of --confirm run with the same options, unobserved.
    let confirm_opts = Options {
        observer: None,
        progress: false,
        keep_records: true,
        ..opts.clone()
    };
    let confirm_cancel = cancel.clone();
    let metrics_url = args
        .metrics_url
        .clone()
        .unwrap_or_else(|| format!("{}/metrics", scenario.target.trim_end_matches('/')));
    if servers.is_empty() {
        eprintln!(
            "explain: no process listens on the target's port here; kernel evidence of the server is off (give --pid)"
        );
    } else {
        eprintln!("explain: watching server pids {servers:?}, scraping {metrics_url}");
    }
    let mut node_opts = NodeOptions::new(SessionOptions {
        servers: servers
            .iter()
            .chain(services.iter().flat_map(|s| &s.pids))
            .copied()
            .collect(),
        loadgen: Some(std::process::id()),
        cuda_targets: Vec::new(),
        kernel_without_servers: false,
        metrics_url: Some(metrics_url),
        // The target's --ca-file/--insecure hold for its metrics endpoint too.
        tls: opts.tls.clone(),
        window: args.window,
    });
    // The report covers the whole run, however long.
    node_opts.keep = usize::MAX;
    node_opts.max_windows = usize::MAX;
    node_opts.services = services;
    let mut opts = opts;
    let firings = super::triggers::start_for_stress(
        scenario,
        args.triggers.as_deref(),
        &mut opts,
        &mut node_opts,
    )?;
    // Every request into the windows as it finishes, whatever records the run keeps.
    let fold = LoadFold::watch(&mut opts, args.window.as_millis() as u64);
    let (node, _handle) = Node::start(node_opts);
    for m in node.missing() {
        eprintln!("explain: {m}");
    }
    let plan_run = plan.clone();
    let load_done = CancellationToken::new();
    let done = load_done.clone();
    let run = tokio::spawn(async move {
        // Dropped when the load ends, even by a panic: the node must not wait forever.
        let _done = done.drop_guard();
        loadgen::run(&plan_run, opts, cancel).await
    });
    // The node closes windows in step with the load and stops when it ends.
    let finished = node.run(load_done.cancelled_owned()).await;
    let result = run.await;
    let lg = result.context("the load generator task failed")??;
    let firings = match firings {
        Some(runner) => runner.await.context("the trigger action task failed")?,
        None => Vec::new(),
    };
    let fold = fold.await.context("the load fold task failed")?;
    let mut explained = Report::of_run(&lg, &fold, finished).with_triggers(firings);
    if args.confirm && !confirm_cancel.is_cancelled() {
        super::confirm::run(plan, &confirm_opts, &confirm_cancel, &mut explained).await?;
    }
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
