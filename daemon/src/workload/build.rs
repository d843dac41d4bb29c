//! `workload build`: from a query log to a stress dataset and its cluster report.
//!
//! 1. Read the log: JSONL, one object per line, the query in `prompt`, else `text`, or the
//!    key given. Blank queries are skipped and exact duplicates kept once.
//! 2. Embed every distinct query ([`super::embed`]) and run k-means ([`super::cluster`]).
//! 3. Keep, per cluster, the `per_cluster` queries nearest its centroid (ties: log order).
//! 4. Write one row per kept query, cluster by cluster, nearest first:
//!    `{"prompt": .., "cluster": k, "temperature": t, "complexity": s}` with `t` uniform in
//!    [0.3, 0.8] (3 decimals) from the seed and `s` the prompt's 0-100 complexity
//!    ([`crate::loadgen::engine::complexity`]).
//!
//! Random draws use `Xoshiro256` generators, whose sequences are fixed by their algorithm,
//! so a seed gives the same bytes on every machine and release.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
};

use rand_xoshiro::{
    Xoshiro256PlusPlus,
    rand_core::{RngCore as _, SeedableRng as _},
};
use serde::Serialize;
use serde_json::{Map, Value};

use super::{
    cluster::{self, ClusterError},
    embed::{EmbedError, Embedder},
};
use crate::loadgen::engine::complexity;

/// Most distinct queries clustered in one build (about 400 MB of local embeddings).
pub const MAX_QUERIES: usize = 100_000;
/// Longest query, bytes (as the load generator's datasets).
pub const MAX_QUERY_BYTES: usize = crate::loadgen::scenario::dataset::MAX_PROMPT_BYTES;
/// Temperatures are drawn uniformly from this range (the seed's [0.3, 0.8]).
pub const TEMPERATURE: (f64, f64) = (0.3, 0.8);
/// Exemplars per cluster in the report, and the characters each is cut to.
pub const EXEMPLARS: usize = 3;
/// See [`EXEMPLARS`].
pub const EXEMPLAR_CHARS: usize = 80;
/// `schema` of the report.
pub const SCHEMA: &str = "inferscope.workload.clusters/v1";

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildSpec {
    /// k.
    pub clusters: usize,
    /// Representatives kept per cluster at most.
    pub per_cluster: usize,
    /// Seeds k-means and the temperatures.
    pub seed: u64,
    /// Embedding source.
    pub embedder: Embedder,
}

/// A log that could not be made into a workload.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The log could not be read.
    #[error("cannot read {path}: {what}")]
    Read {
        /// The log.
        path: PathBuf,
        /// The OS error.
        what: String,
    },
    /// A line is unusable.
    #[error("{path}:{line}: {what}")]
    Line {
        /// The log.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong and what to do.
        what: String,
    },
    /// No queries at all.
    #[error(
        "{0} has no queries: it needs one JSON object per line with a `prompt` or `text` string (or pass --field KEY)"
    )]
    Empty(PathBuf),
    /// More distinct queries than one build clusters.
    #[error(
        "{path} has {n} distinct queries, above {MAX_QUERIES}: build from a sample (e.g. `shuf -n {MAX_QUERIES} {path}`)"
    )]
    TooMany {
        /// The log.
        path: PathBuf,
        /// Distinct queries.
        n: usize,
    },
    /// The embedding endpoint failed.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// k-means failed or cannot make the clusters asked for.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The output could not be written.
    #[error("cannot write {path}: {what}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        what: String,
    },
}

/// The queries of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queries {
    /// Distinct queries, in the order of their first line.
    pub distinct: Vec<String>,
    /// Non-blank queries read, duplicates included.
    pub read: usize,
    /// Blank queries skipped.
    pub blank: usize,
}

/// Reads the queries of a JSONL log held in `text` (`path` names it in errors). The query is
/// the string at `field`, else `prompt`, else `text`.
pub fn read_queries(text: &str, path: &Path, field: Option<&str>) -> Result<Queries, BuildError> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut q = Queries {
        distinct: Vec::new(),
        read: 0,
        blank: 0,
    };
    for (i, line) in text.lines().enumerate() {
        let err = |what: String| BuildError::Line {
            path: path.to_path_buf(),
            line: i + 1,
            what,
        };
        if line.trim().is_empty() {
            continue;
        }
        let row: Map<String, Value> = serde_json::from_str(line).map_err(|e| {
            err(format!(
                "not a JSON object ({e}): fix the line or delete it"
            ))
        })?;
        let key = field.unwrap_or(if row.contains_key("prompt") {
            "prompt"
        } else {
            "text"
        });
        let query = row.get(key).and_then(Value::as_str).ok_or_else(|| {
            err(format!(
                "no string field `{key}`: pass --field with the key that holds the query"
            ))
        })?;
        if query.len() > MAX_QUERY_BYTES {
            return Err(err(format!(
                "the query is {} bytes, above {} MiB: shorten it or delete the line",
                query.len(),
                MAX_QUERY_BYTES >> 20
            )));
        }
        if query.trim().is_empty() {
            q.blank += 1;
            continue;
        }
        q.read += 1;
        if !seen.contains(query) {
            seen.insert(query.to_string());
            q.distinct.push(query.to_string());
        }
    }
    if q.distinct.is_empty() {
        return Err(BuildError::Empty(path.to_path_buf()));
    }
    if q.distinct.len() > MAX_QUERIES {
        return Err(BuildError::TooMany {
            path: path.to_path_buf(),
            n: q.distinct.len(),
        });
    }
    Ok(q)
}

/// One row of the dataset written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The query.
    pub prompt: String,
    /// Its cluster, `0..k`, largest cluster first.
    pub cluster: usize,
    /// Sampling temperature, uniform in [0.3, 0.8].
    pub temperature: f64,
    /// Complexity score, 0-100.
    pub complexity: u8,
}

/// One cluster in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterSummary {
    /// Its number.
    pub cluster: usize,
    /// Distinct queries in it.
    pub size: usize,
    /// Representatives written.
    pub kept: usize,
    /// Mean complexity of the representatives.
    pub mean_complexity: f64,
    /// The queries nearest the centroid, cut to [`EXEMPLAR_CHARS`] characters.
    pub exemplars: Vec<String>,
}

/// The report (`<out>.clusters.json`, also printed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The log.
    pub source: String,
    /// Non-blank queries read.
    pub queries: usize,
    /// Distinct queries clustered.
    pub distinct: usize,
    /// Blank queries skipped.
    pub blank: usize,
    /// k.
    pub k: usize,
    /// Representatives kept per cluster at most.
    pub per_cluster: usize,
    /// The seed.
    pub seed: u64,
    /// The embedding source.
    pub embedding: String,
    /// Dimensions of the embeddings.
    pub dimensions: usize,
    /// The k-means start kept (the one of least inertia).
    pub seeding: cluster::Seeding,
    /// Rows written.
    pub rows: usize,
    /// One entry per cluster, largest first.
    pub clusters: Vec<ClusterSummary>,
}

/// The dataset and its report.
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    /// Rows, cluster by cluster, nearest the centroid first.
    pub rows: Vec<Row>,
    /// The report.
    pub report: Report,
}

/// Embeds and clusters `q` and picks the representatives; `source` names the log.
pub fn build(q: &Queries, source: &str, spec: &BuildSpec) -> Result<Built, BuildError> {
    let vectors = spec.embedder.embed(&q.distinct)?;
    let dimensions = vectors.first().map_or(0, Vec::len);
    let clusters = cluster::kmeans(&vectors, spec.clusters, spec.seed)?;
    let mut temps = Xoshiro256PlusPlus::seed_from_u64(spec.seed ^ 0x7e3a_5f1c_d00d_cafe);
    let mut rows = Vec::new();
    let mut summaries = Vec::new();
    for (c, mut members) in clusters.members().into_iter().enumerate() {
        let size = members.len();
        members.sort_by(|a, b| {
            clusters.distance[*a]
                .total_cmp(&clusters.distance[*b])
                .then(a.cmp(b))
        });
        members.truncate(spec.per_cluster);
        let mut complexity_sum = 0.0;
        for &i in &members {
            let prompt = q.distinct[i].clone();
            let complexity = complexity::of_text(&prompt).score;
            complexity_sum += f64::from(complexity);
            rows.push(Row {
                prompt,
                cluster: c,
                temperature: temperature(temps.next_u64()),
                complexity,
            });
        }
        summaries.push(ClusterSummary {
            cluster: c,
            size,
            kept: members.len(),
            mean_complexity: if members.is_empty() {
                0.0
            } else {
                (complexity_sum / members.len() as f64 * 10.0).round() / 10.0
            },
            exemplars: members
                .iter()
                .take(EXEMPLARS)
                .map(|&i| cut(&q.distinct[i], EXEMPLAR_CHARS))
                .collect(),
        });
    }
    let report = Report {
        schema: SCHEMA,
        source: source.to_string(),
        queries: q.read,
        distinct: q.distinct.len(),
        blank: q.blank,
        k: spec.clusters,
        per_cluster: spec.per_cluster,
        seed: spec.seed,
        embedding: spec.embedder.describe(),
        dimensions,
        seeding: clusters.seeding,
        rows: rows.len(),
        clusters: summaries,
    };
    Ok(Built { rows, report })
}

/// A draw of 64 random bits as a temperature in [0.3, 0.8], 3 decimals.
fn temperature(bits: u64) -> f64 {
    let u = (bits >> 11) as f64 / (1u64 << 53) as f64;
    let t = TEMPERATURE.0 + u * (TEMPERATURE.1 - TEMPERATURE.0);
    (t * 1000.0).round() / 1000.0
}

/// `s` on one line, cut to `n` characters with `…` when longer.
fn cut(s: &str, n: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= n {
        flat
    } else {
        let mut out: String = flat.chars().take(n - 1).collect();
        out.push('…');
        out
    }
}

/// The report's file next to the dataset: `dataset.jsonl` -> `dataset.clusters.json`.
#[must_use]
pub fn report_path(out: &Path) -> PathBuf {
    out.with_extension("clusters.json")
}

impl Built {
    /// The dataset as JSONL.
    #[must_use]
    pub fn jsonl(&self) -> String {
        let mut s = String::new();
        for r in &self.rows {
            // A struct of strings and numbers always serialises.
            s.push_str(&serde_json::to_string(r).unwrap_or_default());
            s.push('\n');
        }
        s
    }

    /// Writes the dataset to `out` and the report next to it ([`report_path`]).
    pub fn write(&self, out: &Path) -> Result<PathBuf, BuildError> {
        let write = |path: &Path, text: String| {
            std::fs::write(path, text).map_err(|e| BuildError::Write {
                path: path.to_path_buf(),
                what: e.to_string(),
            })
        };
        write(out, self.jsonl())?;
        let report = report_path(out);
        let mut json = serde_json::to_string_pretty(&self.report).unwrap_or_default();
        json.push('\n');
        write(&report, json)?;
        Ok(report)
    }
}

impl Report {
    /// The report as text: a header line and each cluster with its exemplars.
    #[must_use]
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = format!(
            "{} queries ({} distinct) from {} -> {} clusters, {} prompts (seed {}, {}, {} dimensions, {} seeds)\n",
            self.queries,
            self.distinct,
            self.source,
            self.k,
            self.rows,
            self.seed,
            self.embedding,
            self.dimensions,
            match self.seeding {
                cluster::Seeding::Buckshot => "average-linkage",
                cluster::Seeding::KmeansPlusPlus => "k-means++",
            }
        );
        for c in &self.clusters {
            let _ = writeln!(
                s,
                "  cluster {}: {} queries, {} kept, mean complexity {}",
                c.cluster, c.size, c.kept, c.mean_complexity
            );
            for e in &c.exemplars {
                let _ = writeln!(s, "    - {e}");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Queries, BuildError> {
        read_queries(text, Path::new("q.jsonl"), None)
    }

    #[test]
    fn reading_keys_blanks_duplicates_and_errors() {
        let q = read(
            "{\"prompt\":\"a\"}\n\n{\"text\":\"b\"}\n{\"prompt\":\" \"}\n{\"prompt\":\"a\"}\n",
        )
        .unwrap();
        assert_eq!(q.distinct, ["a", "b"]);
        assert_eq!((q.read, q.blank), (3, 1));
        let q = read_queries("{\"q\":\"x\",\"prompt\":\"y\"}", Path::new("q"), Some("q")).unwrap();
        assert_eq!(q.distinct, ["x"]);
        for (text, says) in [
            ("", "q.jsonl has no queries"),
            ("\n  \n", "has no queries"),
            ("{\"prompt\":\" \"}", "has no queries"),
            (
                "{\"prompt\":\"a\"}\nnot json\n",
                "q.jsonl:2: not a JSON object",
            ),
            ("[1]", "q.jsonl:1: not a JSON object"),
            (
                "{\"prompt\":3}",
                "q.jsonl:1: no string field `prompt`: pass --field",
            ),
            ("{\"other\":\"x\"}", "no string field `text`"),
        ] {
            let e = read(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn temperatures_stay_in_range_and_cuts_on_a_char() {
        assert!((temperature(0) - 0.3).abs() < 1e-12);
        assert!(temperature(u64::MAX) <= 0.8);
        assert_eq!(cut("a\n b", 10), "a b");
        assert_eq!(cut("ééééé", 3), "éé…");
        assert_eq!(
            report_path(Path::new("d/dataset.jsonl")),
            Path::new("d/dataset.clusters.json")
        );
    }

    #[test]
    fn too_few_queries_for_the_clusters_is_an_error() {
        let q = read("{\"prompt\":\"a b\"}\n{\"prompt\":\"c d\"}\n").unwrap();
        let spec = BuildSpec {
            clusters: 8,
            per_cluster: 50,
            seed: 1,
            embedder: Embedder::Local,
        };
        let e = build(&q, "q.jsonl", &spec).unwrap_err().to_string();
        assert_eq!(
            e,
            "2 distinct queries cannot make 8 clusters: lower --clusters or add queries"
        );
    }
}
