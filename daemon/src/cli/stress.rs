//! `inferscope stress`: run a load scenario (YAML) or a one-phase load from flags.
//!
//! Without a model (no `--model`, no `model:`), LLM phases use the first model the target's
//! `/v1/models` lists (`loadgen::engine::models`); a model it does not list stops the run before it
//! starts.
//!
//! Exit status: 0 all SLOs held; 2 an SLO failed, or the model asked for is not served;
//! 3 aborted (error rate above `abort_error_rate`); 130 interrupted by SIGINT (Ctrl-C), 143 by
//! SIGTERM (the report is still written; a second signal exits at once without it); 1 bad
//! input, setup failure, or a failed run: one that broke, or in which not one request
//! succeeded (its report is written).

use std::{io::IsTerminal as _, path::PathBuf, process::ExitCode, time::Duration};

use std::sync::{
    Arc,
    atomic::{AtomicU8, Ordering},
};

use anyhow::{Context as _, bail};
use inferscope::atomic;
use inferscope::collect::load_fold::LoadFold;
use inferscope::dial::Reach;
use inferscope::loadgen::{
    self, Endpoint, Notes, Options, Plan, Scenario, Shard, StopKind,
    client::Target,
    engine::barrier::StartAt,
    scenario::files::Files,
    scenario::overrides::{Overrides, PhaseFlag},
    scenario::template::{JsonTemplate, Template},
    scenario::{CapPolicy, ChaosSpec, Load, Phase, RequestSpec},
};
use inferscope::measure::{failures, slo::Slo};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Arguments of `inferscope stress`.
#[derive(clap::Args)]
// Independent on/off flags of a CLI, not a state machine.
#[allow(clippy::struct_excessive_bools)]
pub struct Args {
    /// Scenario file (YAML; see docs/stress.md). Without one, the flags below describe one phase.
    scenario: Option<PathBuf>,
    /// Base URL of the service (over the scenario's `target`). With a scenario file,
    /// --timeout, --max-in-flight, --seed, --no-trace-headers, --slo and the LLM flags (--model,
    /// --max-tokens, --temperature, --no-stream) also go over the file's; the flags of the one phase
    /// (--rate, --duration, ...) are refused (docs/stress.md, "Flags over a scenario file").
    #[arg(long)]
    target: Option<inferscope::target_url::TargetUrl>,
    /// Open-loop requests per second.
    #[arg(long)]
    rate: Option<f64>,
    /// Arrival process for --rate (default constant).
    #[arg(long, value_enum)]
    arrival: Option<ArrivalArg>,
    /// Closed loop with this many connections (virtual users); with --rate, a cap on in-flight requests.
    #[arg(long, visible_alias = "concurrency")]
    connections: Option<usize>,
    /// How long to send (required without a scenario file), e.g. 60s.
    #[arg(long, value_parser = super::args::positive_duration)]
    duration: Option<Duration>,
    /// What to call: chat, completions, vector-search or http (default chat; http when --method is given).
    #[arg(long, value_enum)]
    endpoint: Option<EndpointArg>,
    /// Vector search: dimensions of the query vectors (default: the dimension the server's
    /// index reports; a mismatch stops the run before it starts).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    dimensions: Option<u32>,
    /// HTTP method (implies --endpoint http).
    #[arg(long)]
    method: Option<String>,
    /// Request body (JSON; templated). For LLM endpoints: extra fields merged into the body.
    #[arg(long)]
    body: Option<String>,
    /// `model` field (default: the first model the target's /v1/models lists; one it does not
    /// list stops before the run).
    #[arg(long)]
    model: Option<String>,
    /// Prompt template, e.g. "Tell me about ${choice(cats,dogs)}".
    #[arg(long)]
    prompt: Option<String>,
    /// `max_tokens`.
    #[arg(long)]
    max_tokens: Option<u32>,
    /// `temperature`.
    #[arg(long)]
    temperature: Option<f64>,
    /// Do not stream LLM answers.
    #[arg(long)]
    no_stream: bool,
    /// Send no W3C `traceparent` and no `x-request-id` with the requests (over the
    /// scenario's `trace_headers`).
    #[arg(long)]
    no_trace_headers: bool,
    /// SLO checked at the end of every phase, e.g. `ttft_p95 < 500ms`; repeat for more (over a
    /// file's SLO on the same metric and side).
    #[arg(long = "slo", value_name = "SLO")]
    slos: Vec<String>,
    /// Cap on requests in flight over the whole run.
    #[arg(long, value_parser = super::args::in_flight)]
    max_in_flight: Option<usize>,
    /// Per-request timeout.
    #[arg(long, value_parser = super::args::positive_duration)]
    timeout: Option<Duration>,
    /// Allow a target outside loopback.
    #[arg(long)]
    allow_remote: bool,
    /// Write the JSON report (aggregates and per-request records) here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Leave per-request records out of the report.
    #[arg(long)]
    no_records: bool,
    /// No progress line.
    #[arg(long, short)]
    quiet: bool,
    /// Random seed (schedules, templates, chaos).
    #[arg(long)]
    seed: Option<u64>,
    /// Produce shard i of N of the load (0-based), e.g. `--shard $(JOB_COMPLETION_INDEX)/4`:
    /// N such processes together produce the scenario's load; merge their reports with
    /// `inferscope report merge`.
    #[arg(long, value_name = "i/N")]
    shard: Option<Shard>,
    /// Start the first request at this time, after the setup: the shards of one load start
    /// together (`report merge` refuses shards that did not run at once). A time
    /// (`2026-12-02T12:30:00Z`), `@UNIX_SECONDS`, or `next:2m` (the next whole two minutes,
    /// which every shard started within the same two minutes agrees on).
    #[arg(long, value_name = "TIME")]
    start_at: Option<StartAt>,
    #[command(flatten)]
    tls: super::tls::TlsArgs,
    #[command(flatten)]
    explain: super::explain::ExplainArgs,
    #[command(flatten)]
    find_max: super::find_max::FindMaxArgs,
    #[command(flatten)]
    otlp: super::live_otlp::LiveOtlpArgs,
    #[command(flatten)]
    html: super::html::HtmlArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ArrivalArg {
    Constant,
    Poisson,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum EndpointArg {
    Chat,
    Completions,
    VectorSearch,
    Http,
}

/// The plan to run: the file, or one phase from the flags, with the flags over it
/// (`loadgen::scenario::overrides`: flag over file, or refused), validated once.
fn plan(args: &Args) -> anyhow::Result<Plan> {
    let mut overrides = overrides(args)?;
    let plan = if let Some(path) = &args.scenario {
        overrides.phase_flags = phase_flags(args);
        Plan::from_file(path, &overrides)?
    } else {
        let files = Files::Relative(std::path::Path::new("."));
        Plan::compile(from_flags(args)?, &files, &overrides)?
    };
    args.find_max.check(plan.scenario())?;
    Ok(plan)
}

/// The flags that go over any scenario, the file's or the one [`from_flags`] makes.
fn overrides(args: &Args) -> anyhow::Result<Overrides> {
    Ok(Overrides {
        target: args.target.clone(),
        timeout: args.timeout,
        max_in_flight: args.max_in_flight,
        seed: args.seed,
        model: args.model.clone(),
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        no_stream: args.no_stream,
        no_trace_headers: args.no_trace_headers,
        slos: args
            .slos
            .iter()
            .map(|s| Slo::parse(s))
            .collect::<Result<_, _>>()?,
        phase_flags: Vec::new(),
    })
}

/// The flags given that describe the single phase of a run without a file.
fn phase_flags(args: &Args) -> Vec<PhaseFlag> {
    [
        (PhaseFlag::Rate, args.rate.is_some()),
        (PhaseFlag::Arrival, args.arrival.is_some()),
        (PhaseFlag::Connections, args.connections.is_some()),
        (PhaseFlag::Duration, args.duration.is_some()),
        (PhaseFlag::Endpoint, args.endpoint.is_some()),
        (PhaseFlag::Method, args.method.is_some()),
        (PhaseFlag::Body, args.body.is_some()),
        (PhaseFlag::Prompt, args.prompt.is_some()),
        (PhaseFlag::Dimensions, args.dimensions.is_some()),
    ]
    .into_iter()
    .filter_map(|(f, given)| given.then_some(f))
    .collect()
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let plan = plan(args)?;
    let scenario = plan.scenario();
    // A search that cannot run is said before anything is asked of the target.
    let search = if args.find_max.wanted(scenario) {
        Some(args.find_max.spec(scenario)?)
    } else {
        None
    };
    check_output_flags(args, search.is_some())?;
    let tls = args.tls.options()?;
    if args.tls.insecure() {
        eprintln!("inferscope: {}", super::tls::INSECURE_WARNING);
    }
    let reach = Reach::from_flag(args.allow_remote);
    let opts = Options {
        reach,
        keep_records: !args.no_records,
        observer: None,
        progress: !args.quiet && std::io::stderr().is_terminal(),
        shard: args.shard.unwrap_or(Shard::WHOLE),
        tls,
        notes: Notes::Stderr,
        start_at: args.start_at,
        ..Options::new()
    };
    // One CPU to run on (a pinned run, a one-core container): the single-threaded scheduler
    // wakes a task with a local queue push, where the multi-threaded one, even with one worker,
    // pays for work stealing and cross-thread notification on every request.
    let one_cpu = std::thread::available_parallelism().is_ok_and(|n| n.get() == 1);
    let rt = if one_cpu {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .build()
    .context("starting the tokio runtime")?;
    check_before_run(args, scenario, reach)?;
    let signalled = Arc::new(AtomicU8::new(0));
    if let Some(spec) = search {
        let searched = rt.block_on(async {
            let cancel = CancellationToken::new();
            watch_signals(scenario.grace, cancel.clone(), signalled.clone())?;
            // Boxed: a search's future holds every step's run; it is awaited once.
            Box::pin(super::find_max::run(
                &plan,
                &spec,
                opts,
                cancel,
                &args.explain,
                args.out.as_deref(),
            ))
            .await
        });
        let code = match searched {
            Ok((_, code)) => code,
            Err(e) => return model_not_served(e),
        };
        let signal = signalled.load(Ordering::Relaxed);
        return Ok(if signal == 0 {
            code
        } else {
            ExitCode::from(signal)
        });
    }
    let report = rt.block_on(async {
        let cancel = CancellationToken::new();
        let (c, sig) = (cancel.clone(), signalled.clone());
        let grace = scenario.grace;
        watch_signals(grace, c, sig)?;
        run_load(args, &plan, opts, cancel).await
    });
    let (report, page) = match report {
        Ok(done) => done,
        Err(e) => return model_not_served(e),
    };
    if !args.explain.explain {
        print!("{}", report.table());
    }
    if let Some(out) = &args.out {
        report
            .write(out)
            .with_context(|| format!("writing the report to {}", out.display()))?;
        eprintln!("report written to {}", out.display());
    }
    if let Some(fold) = &page {
        args.html.write(&report, fold)?;
    }
    for line in failures::by_class(&report) {
        eprintln!("inferscope: {line}");
    }
    Ok(exit_code(&report, signalled.load(Ordering::Relaxed)))
}

/// The flags that depend on whether the run is a knee search.
/// Runs `plan` (explained with `--explain`), exporting it live with `--otlp-endpoint`: its
/// requests as they finish, and its explained phases at the end. With `--html`, its requests
/// are folded into the page's windows as they finish too.
async fn run_load(
    args: &Args,
    plan: &Plan,
    mut opts: loadgen::Options,
    cancel: CancellationToken,
) -> anyhow::Result<(loadgen::StressReport, Option<LoadFold>)> {
    if args.otlp.wanted() {
        // The exporter's resource carries the run's provenance: gathered before it starts,
        // and handed to the run.
        opts.provenance = Some(Box::pin(loadgen::engine::provenance::gather(plan, &opts)).await?);
    }
    let mut live = args.otlp.start(plan, &mut opts, args.explain.explain)?;
    let page = args.html.watch(&mut opts);
    let report = if args.explain.explain {
        match super::explain::run(plan, opts, cancel, &args.explain).await {
            Ok((lg, explained)) => {
                if let Some(live) = &mut live {
                    live.trace_explained(plan, &lg, &explained).await?;
                }
                Ok(lg)
            }
            Err(e) => Err(e),
        }
    } else {
        Ok(loadgen::run(plan, opts, cancel).await?)
    };
    if let Some(live) = live {
        live.finish().await?;
    }
    let fold = match page {
        Some(task) => Some(task.await.context("the page's load fold task failed")?),
        None => None,
    };
    Ok((report?, fold))
}

fn check_output_flags(args: &Args, searching: bool) -> anyhow::Result<()> {
    args.otlp.check(searching, args.explain.explain)?;
    if searching && args.start_at.is_some() {
        bail!(
            "--start-at starts the shards of one load together; a knee search is one process: drop --start-at"
        );
    }
    args.html.check(args.explain.explain, searching)
}

/// What can be checked before the run spends its time, not after: the outputs can be
/// written, the trigger rules hold.
fn check_before_run(args: &Args, scenario: &Scenario, reach: Reach) -> anyhow::Result<()> {
    if let Some(out) = &args.out {
        atomic::check_output_file(out)
            .with_context(|| format!("--out {} cannot be written", out.display()))?;
    }
    super::triggers::check_stress(
        scenario,
        args.explain.triggers_file(),
        args.explain.explain,
        reach,
    )?;
    if args.explain.explain {
        let dir = args.explain.report_dir();
        atomic::check_output_dir(dir)
            .with_context(|| format!("--report-dir {} cannot be written", dir.display()))?;
    }
    Ok(())
}

/// A run that ended before its first request because the model it names is not served exits
/// 2 with that one line; any other error is the caller's.
fn model_not_served(e: anyhow::Error) -> anyhow::Result<ExitCode> {
    match e.downcast_ref::<loadgen::RunError>() {
        Some(loadgen::RunError::Model(m)) => {
            eprintln!("inferscope: {m}");
            Ok(ExitCode::from(2))
        }
        _ => Err(e),
    }
}

/// The exit status of a finished run (see the module's documentation); `signal` is the code
/// of the signal that stopped it, 0 when none did.
fn exit_code(report: &loadgen::StressReport, signal: u8) -> ExitCode {
    match report.stopped.as_ref().map(|s| (s.kind, s)) {
        Some((StopKind::Aborted, _)) => ExitCode::from(3),
        Some(_) if signal != 0 => ExitCode::from(signal),
        Some((StopKind::Failed, why)) => {
            eprintln!("inferscope: the run {why}");
            ExitCode::FAILURE
        }
        Some((StopKind::Interrupted, _)) => ExitCode::from(130),
        None if failures::nothing_succeeded(report) => {
            eprintln!("inferscope: the run failed: not one request succeeded");
            ExitCode::FAILURE
        }
        None if !report.slo_pass => ExitCode::from(2),
        None => ExitCode::SUCCESS,
    }
}

/// SIGTERM (Kubernetes, `timeout`) and SIGINT (Ctrl-C) stop sending and leave `grace` for
/// requests in flight, then the report is written; `signalled` gets the exit code (143 or
/// 130). A second signal exits at once.
fn watch_signals(
    grace: Duration,
    cancel: CancellationToken,
    signalled: Arc<AtomicU8>,
) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("watching SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("watching SIGINT")?;
    tokio::spawn(async move {
        let code = tokio::select! { _ = term.recv() => 143, _ = int.recv() => 130 };
        signalled.store(code, Ordering::Relaxed);
        eprintln!(
            "\ninferscope: stopping; requests in flight get {} to finish, then the report is written (signal again to exit now)",
            humantime::format_duration(grace)
        );
        cancel.cancel();
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        eprintln!("inferscope: second signal: exiting without a report");
        std::process::exit(i32::from(code));
    });
    Ok(())
}

/// A one-phase scenario from flags.
#[allow(clippy::too_many_lines)] // one flag after the other
fn from_flags(args: &Args) -> anyhow::Result<Scenario> {
    let Some(target) = &args.target else {
        bail!(
            "give a scenario file or --target URL (e.g. --target http://127.0.0.1:8000 --rate 20 --duration 60s)"
        )
    };
    if args.duration.is_some() && args.find_max.find_max.is_some() {
        bail!("--duration does not apply to --find-max: give --step-duration (and --search-time)");
    }
    let Some(duration) = args.duration.or_else(|| args.find_max.step()) else {
        bail!("--duration is required (e.g. --duration 60s): a run never goes on forever")
    };
    let load = match (args.rate, args.connections) {
        (Some(rate), _) if !(rate > 0.0 && rate <= loadgen::scenario::HARD_MAX_RATE) => {
            bail!(
                "--rate must be > 0 and <= {}",
                loadgen::scenario::HARD_MAX_RATE
            )
        }
        (Some(rate), _) => arrivals(args.arrival, rate),
        (None, Some(_)) if args.arrival.is_some() => {
            bail!(
                "--arrival shapes the arrivals of --rate; a closed loop (--connections) has none: drop --arrival"
            )
        }
        (None, Some(users)) => Load::Concurrency { users },
        // A knee search starts at 1 req/s unless told.
        (None, None) if args.find_max.find_max.is_some() => arrivals(args.arrival, 1.0),
        (None, None) => bail!("give --rate (open loop, requests/s) or --connections (closed loop)"),
    };
    let endpoint = match (args.endpoint, &args.method) {
        (Some(EndpointArg::Chat), _) | (None, None) => Endpoint::Chat,
        (Some(EndpointArg::Completions), _) => Endpoint::Completions,
        (Some(EndpointArg::VectorSearch), _) => Endpoint::VectorSearch,
        (Some(EndpointArg::Http), _) | (None, Some(_)) => Endpoint::Http,
    };
    if args.dimensions.is_some() && endpoint != Endpoint::VectorSearch {
        bail!("--dimensions applies to --endpoint vector-search only");
    }
    let body = args
        .body
        .as_ref()
        .map(|b| {
            let v =
                serde_json::from_str(b).unwrap_or_else(|_| serde_json::Value::String(b.clone()));
            JsonTemplate::compile(&v).map_err(|e| anyhow::anyhow!("--body: {e}"))
        })
        .transpose()?;
    let request = RequestSpec {
        endpoint: Some(endpoint),
        path: Target::url_path(target.as_str()),
        method: args.method.clone(),
        prompt: args
            .prompt
            .as_deref()
            .map(Template::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--prompt: {e}"))?,
        body,
        // Without --dimensions the server's index says (`vector::setup`).
        dimensions: args
            .dimensions
            .filter(|_| endpoint == Endpoint::VectorSearch)
            .map(|d| d as usize),
        ..RequestSpec::default()
    };
    let phase = Phase {
        name: "main".into(),
        label: None,
        duration,
        max_in_flight: args.rate.and(args.connections),
        load,
        ramp_up: None,
        request,
        max_tokens_per_s: None,
        when_capped: CapPolicy::Wait,
        chaos: ChaosSpec::default(),
        // --slo, like --model, --timeout and the rest, is applied by `scenario()`.
        slo: Vec::new(),
        events: Vec::new(),
        sweep: None,
        sweep_of: None,
    };
    Ok(Scenario::one_phase(target.clone(), phase))
}

/// The open-loop load of `--rate` with `--arrival` (default constant).
fn arrivals(arrival: Option<ArrivalArg>, rate: f64) -> Load {
    match arrival.unwrap_or(ArrivalArg::Constant) {
        ArrivalArg::Constant => Load::Constant { rate },
        ArrivalArg::Poisson => Load::Poisson { rate },
    }
}
