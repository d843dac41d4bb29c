//! `inferscope workload build --from queries.jsonl --out dataset.jsonl`: a stress dataset of
//! representative prompts, built by clustering a query log (see `inferscope::workload`).

use std::{path::PathBuf, process::ExitCode, time::Instant};

use anyhow::Context as _;
use inferscope::workload::{self, BuildSpec, embed::Embedder};

/// Arguments of `inferscope workload`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Cluster a query log (JSONL) and write up to --per-cluster representatives of each
    /// cluster as a stress dataset, with a report of the clusters next to it.
    Build(BuildArgs),
}

#[derive(clap::Args)]
struct BuildArgs {
    /// Query log: one JSON object per line, the query in `prompt` or `text` (or --field).
    #[arg(long, value_name = "FILE")]
    from: PathBuf,
    /// Number of clusters (k of k-means).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    clusters: u32,
    /// Representatives kept per cluster at most (those nearest its centroid).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    per_cluster: u32,
    /// Dataset to write (JSONL); the report goes next to it as NAME.clusters.json.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Seed of k-means and of the temperatures: the same seed gives the same bytes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// OpenAI-compatible embeddings server (base URL, e.g. `http://127.0.0.1:8000`); default:
    /// the local hashed n-gram TF-IDF embedding, which needs no model or server.
    #[arg(long, value_name = "URL", requires = "embed_model")]
    embed_url: Option<String>,
    /// Model name sent to --embed-url.
    #[arg(long, value_name = "MODEL", requires = "embed_url")]
    embed_model: Option<String>,
    /// JSON key of the query (default: `prompt`, then `text`).
    #[arg(long, value_name = "KEY")]
    field: Option<String>,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let Command::Build(a) = &args.command;
    let t0 = Instant::now();
    let text = std::fs::read_to_string(&a.from)
        .with_context(|| format!("cannot read the query log {}", a.from.display()))?;
    let queries = workload::read_queries(&text, &a.from, a.field.as_deref())?;
    let embedder = match (&a.embed_url, &a.embed_model) {
        (Some(url), Some(model)) => Embedder::Remote {
            url: url.clone(),
            model: model.clone(),
        },
        _ => Embedder::Local,
    };
    let spec = BuildSpec {
        clusters: a.clusters as usize,
        per_cluster: a.per_cluster as usize,
        seed: a.seed,
        embedder,
    };
    let built = workload::build(&queries, &a.from.display().to_string(), &spec)?;
    let report_path = built.write(&a.out)?;
    print!("{}", built.report.text());
    println!(
        "wrote {} ({} rows) and {} in {:.2} s",
        a.out.display(),
        built.rows.len(),
        report_path.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
