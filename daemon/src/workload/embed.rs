//! Query embeddings: unit vectors, one per query, from one of two sources.
//!
//! **Local (the default)**: hashed word unigrams and bigrams, TF-IDF weighted, L2-normalised,
//! in [`LOCAL_DIM`] = 1024 dimensions. Words are lower-cased runs of letters and digits; each
//! unigram and bigram is hashed (FNV-1a) to one of the 1024 buckets with a sign taken from the
//! hash, so that colliding features cancel rather than pile up; its weight is
//! `(1 + ln tf) * (ln((1 + n) / (1 + df)) + 1)` (sublinear term frequency, smoothed inverse
//! document frequency over the log itself). It is the default because it needs no model
//! download and no server, is deterministic across machines and releases, runs in
//! milliseconds for thousands of queries, and separates topics well enough: queries about one
//! topic share content words and phrases, which TF-IDF weights above the function words every
//! query has. It does not know synonyms; for paraphrase-level similarity use a real embedding
//! model through `--embed-url`. 1024 buckets keep collisions rare for the few thousand distinct
//! words of a query log while a query's vector stays 4 KiB.
//!
//! **Remote**: `POST {url}/v1/embeddings` with `{"model": M, "input": [..]}` in batches of
//! [`BATCH`], as `OpenAI`, vLLM, TEI and the simulator serve it; the vectors are L2-normalised
//! so that k-means' Euclidean distance orders pairs as cosine similarity does.

use std::{collections::HashMap, time::Duration};

use serde_json::{Value, json};

use crate::{loadgen::client::error_chain, sim::tokenizer::fnv1a};

/// Dimensions of the local embedding.
pub const LOCAL_DIM: usize = 1024;
/// Queries per request to an embedding endpoint.
pub const BATCH: usize = 64;
/// Per-request timeout of the embedding endpoint.
pub const TIMEOUT: Duration = Duration::from_mins(1);

/// Where embeddings come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Embedder {
    /// Hashed word uni+bi-grams with TF-IDF (see the module documentation).
    Local,
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    Remote {
        /// Base URL (`http://host:port`, with or without `/v1` or `/v1/embeddings`).
        url: String,
        /// `model` sent with each request.
        model: String,
    },
}

impl Embedder {
    /// A short description for the report: `local hashed uni+bi-gram TF-IDF` or the endpoint.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Embedder::Local => "local hashed word uni+bi-gram TF-IDF".into(),
            Embedder::Remote { url, model } => format!("{} (model {model})", endpoint(url)),
        }
    }

    /// One unit vector per text, all of one dimension.
    pub fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        match self {
            Embedder::Local => Ok(local(texts)),
            Embedder::Remote { url, model } => remote(url, model, texts),
        }
    }
}

/// Embeddings that could not be had from the endpoint.
#[derive(Debug, thiserror::Error)]
#[error("embedding endpoint {url}: {what}")]
pub struct EmbedError {
    /// The endpoint called.
    pub url: String,
    /// What went wrong and what to do.
    pub what: String,
}

/// English function words, dropped before n-grams are formed: they are in every topic, so
/// they (and bigrams such as "how do") would pull queries of different topics together.
const STOP_WORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but",
    "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for",
    "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his",
    "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most",
    "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other",
    "our", "ours", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than",
    "that", "the", "their", "theirs", "them", "then", "there", "these", "they", "this", "those",
    "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when",
    "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your",
    "yours", "s", "t", "m", "ll", "re", "ve", "d",
];

/// Lower-cased runs of letters and digits, without [`STOP_WORDS`].
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

/// The hashed features of a text: unigrams and bigrams, with their counts.
fn features(text: &str) -> HashMap<u64, u32> {
    let w = words(text);
    let mut f = HashMap::new();
    for x in &w {
        *f.entry(fnv1a(x.as_bytes())).or_insert(0) += 1;
    }
    for pair in w.windows(2) {
        // A separator no word contains keeps "a b" apart from the unigram "ab".
        let bigram = format!("{}\u{1}{}", pair[0], pair[1]);
        *f.entry(fnv1a(bigram.as_bytes())).or_insert(0) += 1;
    }
    f
}

/// The local embedding of every text (see the module documentation). A text without words
/// gets the zero vector.
#[must_use]
pub fn local(texts: &[String]) -> Vec<Vec<f32>> {
    let feats: Vec<HashMap<u64, u32>> = texts.iter().map(|t| features(t)).collect();
    let mut df: HashMap<u64, u32> = HashMap::new();
    for f in &feats {
        for h in f.keys() {
            *df.entry(*h).or_insert(0) += 1;
        }
    }
    let n = texts.len() as f64;
    // A feature of one query only cannot make two queries alike; it would only shrink that
    // query's similarity to every other (the usual `min_df = 2`). Below 10 queries all count.
    let min_df = if texts.len() >= 10 { 2 } else { 1 };
    feats
        .iter()
        .map(|f| {
            let mut v = vec![0f64; LOCAL_DIM];
            // Bucket sums in a fixed order: the same text gives the same bits everywhere.
            let mut sorted: Vec<(&u64, &u32)> =
                f.iter().filter(|(h, _)| df[*h] >= min_df).collect();
            sorted.sort_unstable();
            for (h, tf) in sorted {
                let idf = ((1.0 + n) / (1.0 + f64::from(df[h]))).ln() + 1.0;
                let w = (1.0 + f64::from(*tf).ln()) * idf;
                let sign = if h >> 63 == 1 { -1.0 } else { 1.0 };
                v[(h % LOCAL_DIM as u64) as usize] += sign * w;
            }
            normalised(&v)
        })
        .collect()
}

fn normalised(v: &[f64]) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter().map(|x| (x / norm) as f32).collect()
    } else {
        vec![0.0; v.len()]
    }
}

/// `{base}/v1/embeddings`, accepting a base that already ends in `/v1` or `/v1/embeddings`.
#[must_use]
pub fn endpoint(url: &str) -> String {
    let base = url.trim_end_matches('/');
    if base.ends_with("/v1/embeddings") {
        base.to_string()
    } else if base.ends_with("/v1") {
        format!("{base}/embeddings")
    } else {
        format!("{base}/v1/embeddings")
    }
}

/// Embeddings from an OpenAI-compatible endpoint, in batches of [`BATCH`].
fn remote(url: &str, model: &str, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
    let url = endpoint(url);
    let fail = |what: String| EmbedError {
        url: url.clone(),
        what,
    };
    // reqwest is built without a default TLS provider: the OTLP exporter installs the same.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::blocking::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| fail(format!("cannot make an HTTP client: {e}")))?;
    let mut out: Vec<Vec<f32>> = Vec::with_capacity(texts.len());
    for batch in texts.chunks(BATCH) {
        let body = json!({"model": model, "input": batch}).to_string();
        let resp = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .map_err(|e| fail(format!("{}: check --embed-url", error_chain(&e))))?;
        let status = resp.status();
        let text = resp
            .text()
            .map_err(|e| fail(format!("reading the answer: {}", error_chain(&e))))?;
        if !status.is_success() {
            let snippet: String = text.chars().take(200).collect();
            return Err(fail(format!(
                "HTTP {}: {snippet} (check --embed-url and --embed-model)",
                status.as_u16()
            )));
        }
        let vectors = parse_answer(&text, batch.len()).map_err(&fail)?;
        if let (Some(first), Some(v)) = (out.first(), vectors.first())
            && first.len() != v.len()
        {
            return Err(fail(format!(
                "vectors of {} and {} dimensions in one run",
                first.len(),
                v.len()
            )));
        }
        out.extend(vectors);
    }
    Ok(out)
}

/// The unit vectors of an embeddings answer to `n` inputs, in input order.
fn parse_answer(text: &str, n: usize) -> Result<Vec<Vec<f32>>, String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("the answer is not JSON: {e}"))?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or("the answer has no `data` array (is this an embeddings endpoint?)")?;
    if data.len() != n {
        return Err(format!("{} vectors for {n} inputs", data.len()));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    for (pos, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .map_or(pos, |i| i as usize);
        let emb = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or("an item has no float `embedding` array (base64 answers are not read)")?;
        let raw: Vec<f64> = emb
            .iter()
            .map(|x| x.as_f64().filter(|f| f.is_finite()))
            .collect::<Option<_>>()
            .ok_or("an embedding holds a value that is not a finite number")?;
        if raw.is_empty() {
            return Err("an embedding is empty".into());
        }
        let slot = out
            .get_mut(index)
            .ok_or_else(|| format!("index {index} is out of range for {n} inputs"))?;
        *slot = Some(normalised(&raw));
    }
    let vectors: Vec<Vec<f32>> = out
        .into_iter()
        .collect::<Option<_>>()
        .ok_or("two vectors share an index")?;
    if vectors.iter().any(|v| v.len() != vectors[0].len()) {
        return Err("vectors of different dimensions in one answer".into());
    }
    Ok(vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn local_vectors_are_unit_deterministic_and_topical() {
        let texts: Vec<String> = [
            "how do I bake sourdough bread at home",
            "best flour for baking sourdough bread",
            "kubernetes pod stuck in crashloopbackoff",
            "why is my kubernetes pod restarting",
            "",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        let v = local(&texts);
        assert_eq!(v, local(&texts));
        assert!(v.iter().all(|x| x.len() == LOCAL_DIM));
        for x in &v[..4] {
            assert!((dot(x, x) - 1.0).abs() < 1e-4);
        }
        assert!(v[4].iter().all(|x| *x == 0.0));
        // Same topic closer than across topics.
        assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]) + 0.1);
        assert!(dot(&v[2], &v[3]) > dot(&v[1], &v[3]) + 0.1);
    }

    #[test]
    fn endpoint_paths_and_answers() {
        assert_eq!(endpoint("http://h:1/"), "http://h:1/v1/embeddings");
        assert_eq!(endpoint("http://h:1/v1"), "http://h:1/v1/embeddings");
        assert_eq!(
            endpoint("http://h:1/v1/embeddings"),
            "http://h:1/v1/embeddings"
        );
        let ok = r#"{"data":[{"index":1,"embedding":[0,2]},{"index":0,"embedding":[3,4]}]}"#;
        assert_eq!(
            parse_answer(ok, 2).unwrap(),
            vec![vec![0.6, 0.8], vec![0.0, 1.0]]
        );
        for (bad, says) in [
            ("nope", "not JSON"),
            ("{}", "no `data`"),
            (r#"{"data":[]}"#, "0 vectors for 2"),
            (
                r#"{"data":[{"embedding":"AAA="},{"embedding":[1]}]}"#,
                "base64",
            ),
            (
                r#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#,
                "share an index",
            ),
            (
                r#"{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[1,2]}]}"#,
                "different dimensions",
            ),
        ] {
            let e = parse_answer(bad, 2).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
