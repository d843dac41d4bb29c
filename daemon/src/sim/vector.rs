//! Vector search over a real HNSW index (`hnsw_rs`) built from a seeded synthetic corpus, an
//! exact brute-force search for recall ground truth, and background rebuilds during which
//! queries suffer the latency spikes a real rebuild causes.

use std::{
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hnsw_rs::prelude::{DistL2, Distance, Hnsw};

use super::{config::VectorConfig, sampler::Rng, tokenizer};

/// Bad query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VectorError {
    /// Wrong dimension.
    #[error("vector has dimension {got}, the index has {want}")]
    Dimension {
        /// Given.
        got: usize,
        /// Expected.
        want: usize,
    },
    /// `top_k` out of range.
    #[error("top_k must be within 1..=1000")]
    TopK,
    /// Neither `vector` nor `text`.
    #[error("give exactly one of `vector` or `text`")]
    NoQuery,
    /// A value is NaN or infinite.
    #[error("vector contains a non-finite value")]
    NotFinite,
}

/// One result.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Hit {
    /// Corpus id.
    pub id: usize,
    /// L2 distance to the query.
    pub distance: f32,
}

/// Deterministic embedding of `text`: the normalised sum of a seeded random vector per token,
/// so texts sharing tokens are close.
#[must_use]
pub fn embed(text: &str, dim: usize) -> Vec<f32> {
    embed_tokens(&tokenizer::encode(text), dim)
}

/// Embedding of token ids (see [`embed`]).
#[must_use]
pub fn embed_tokens(tokens: &[u32], dim: usize) -> Vec<f32> {
    let mut v = vec![0f64; dim];
    for t in tokens {
        let mut r = Rng::new(u64::from(*t) ^ 0x5eed);
        for x in &mut v {
            *x += r.normal();
        }
    }
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm == 0.0 {
        // Empty text: a fixed unit vector rather than NaNs.
        let mut e = vec![0f32; dim];
        e[0] = 1.0;
        return e;
    }
    v.iter().map(|x| (x / norm) as f32).collect()
}

/// The seeded synthetic corpus: points around 32 cluster centres, scaled like unit embeddings.
#[must_use]
pub fn corpus(size: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut r = Rng::new(seed);
    let scale = 1.0 / (dim as f64).sqrt();
    let centres: Vec<Vec<f64>> = (0..32)
        .map(|_| (0..dim).map(|_| r.normal() * scale).collect())
        .collect();
    (0..size)
        .map(|i| {
            let c = &centres[i % centres.len()];
            c.iter()
                .map(|x| (x + 0.4 * r.normal() * scale) as f32)
                .collect()
        })
        .collect()
}

fn build(corpus: &[Vec<f32>]) -> Hnsw<'static, f32, DistL2> {
    let n = corpus.len().max(1);
    let layers = 16.min((n as f64).ln().ceil().max(1.0) as usize);
    let h = Hnsw::new(16, n, layers, 200, DistL2 {});
    let data: Vec<(&Vec<f32>, usize)> = corpus.iter().zip(0..).collect();
    h.parallel_insert(&data);
    h
}

/// The vector-search service of one server.
pub struct VectorService {
    cfg: VectorConfig,
    corpus: Arc<Vec<Vec<f32>>>,
    index: RwLock<Arc<Hnsw<'static, f32, DistL2>>>,
    rebuilding: AtomicBool,
    rebuilds: AtomicU64,
    searches: AtomicU64,
}

impl std::fmt::Debug for VectorService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorService")
            .field("corpus", &self.corpus.len())
            .field("rebuilding", &self.rebuilding)
            .finish_non_exhaustive()
    }
}

impl VectorService {
    /// Generates the corpus and builds the index (takes a moment for large corpora).
    #[must_use]
    pub fn new(cfg: &VectorConfig) -> Self {
        let corpus = Arc::new(corpus(cfg.corpus_size, cfg.dim, cfg.seed));
        let index = RwLock::new(Arc::new(build(&corpus)));
        Self {
            cfg: cfg.clone(),
            corpus,
            index,
            rebuilding: AtomicBool::new(false),
            rebuilds: AtomicU64::new(0),
            searches: AtomicU64::new(0),
        }
    }

    /// Dimension of vectors.
    #[must_use]
    pub fn dim(&self) -> usize {
        self.cfg.dim
    }

    /// Whether a rebuild is running.
    #[must_use]
    pub fn rebuilding(&self) -> bool {
        self.rebuilding.load(Ordering::SeqCst)
    }

    /// Completed rebuilds.
    #[must_use]
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::SeqCst)
    }

    /// Approximate searches answered.
    #[must_use]
    pub fn searches(&self) -> u64 {
        self.searches.load(Ordering::SeqCst)
    }

    /// The `/metrics` lines of the vector service: searches, and the index's rebuild state
    /// (what a vector database's own exposition tells a scraper).
    #[must_use]
    pub fn metrics_text(&self) -> String {
        let mut o = String::new();
        super::exposition::counter(
            &mut o,
            "inferscope_sim_vector_searches_total",
            "Vector searches answered.",
            "",
            self.searches(),
        );
        super::exposition::gauge(
            &mut o,
            "inferscope_sim_vector_index_rebuilding",
            "1 while the vector index is being rebuilt.",
            "",
            f64::from(u8::from(self.rebuilding())),
        );
        super::exposition::counter(
            &mut o,
            "inferscope_sim_vector_index_rebuilds_total",
            "Vector index rebuilds completed.",
            "",
            self.rebuilds(),
        );
        o
    }

    /// The query vector from `vector` or `text`, checked.
    pub fn query(
        &self,
        vector: Option<Vec<f32>>,
        text: Option<&str>,
    ) -> Result<Vec<f32>, VectorError> {
        let v = match (vector, text) {
            (Some(v), None) => v,
            (None, Some(t)) => embed(t, self.cfg.dim),
            _ => return Err(VectorError::NoQuery),
        };
        if v.len() != self.cfg.dim {
            return Err(VectorError::Dimension {
                got: v.len(),
                want: self.cfg.dim,
            });
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(VectorError::NotFinite);
        }
        Ok(v)
    }

    /// Extra latency a query pays now: the base delay, plus the rebuild spike during a rebuild.
    #[must_use]
    pub fn delay(&self) -> Duration {
        let spike = if self.rebuilding() {
            self.cfg.rebuild_spike_ms
        } else {
            0
        };
        Duration::from_millis(self.cfg.query_delay_ms + spike)
    }

    /// Approximate search through HNSW.
    pub fn search(
        &self,
        q: &[f32],
        top_k: usize,
        ef_search: Option<usize>,
    ) -> Result<Vec<Hit>, VectorError> {
        if !(1..=1000).contains(&top_k) {
            return Err(VectorError::TopK);
        }
        let ef = ef_search
            .unwrap_or(self.cfg.default_ef_search)
            .clamp(top_k, 10_000);
        self.searches.fetch_add(1, Ordering::Relaxed);
        let index = self
            .index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        Ok(index
            .search(q, top_k, ef)
            .into_iter()
            .map(|n| Hit {
                id: n.d_id,
                distance: n.distance,
            })
            .collect())
    }

    /// Exact nearest neighbours by brute force (the recall ground truth).
    pub fn exact(&self, q: &[f32], top_k: usize) -> Result<Vec<Hit>, VectorError> {
        if !(1..=1000).contains(&top_k) {
            return Err(VectorError::TopK);
        }
        let mut all: Vec<Hit> = self
            .corpus
            .iter()
            .enumerate()
            .map(|(id, v)| Hit {
                id,
                distance: DistL2 {}.eval(q, v),
            })
            .collect();
        let k = top_k.min(all.len());
        if k == 0 {
            return Ok(Vec::new());
        }
        all.select_nth_unstable_by(k - 1, |a, b| a.distance.total_cmp(&b.distance));
        all.truncate(k);
        all.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.id.cmp(&b.id)));
        Ok(all)
    }

    /// Starts a rebuild on a background thread; false when one is already running.
    pub fn start_rebuild(self: &Arc<Self>) -> bool {
        if self.rebuilding.swap(true, Ordering::SeqCst) {
            return false;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("sim-index-rebuild".to_owned())
            .spawn(move || {
                let t0 = Instant::now();
                let fresh = Arc::new(build(&me.corpus));
                let min = Duration::from_millis(me.cfg.rebuild_min_ms);
                if let Some(rest) = min.checked_sub(t0.elapsed()) {
                    std::thread::sleep(rest);
                }
                *me.index
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
                me.rebuilds.fetch_add(1, Ordering::SeqCst);
                me.rebuilding.store(false, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.rebuilding.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> Arc<VectorService> {
        Arc::new(VectorService::new(&VectorConfig {
            corpus_size: 2000,
            dim: 32,
            rebuild_min_ms: 300,
            ..VectorConfig::default()
        }))
    }

    #[test]
    fn hnsw_recall_against_exact_is_high() {
        let s = svc();
        let mut found = 0;
        let mut total = 0;
        for i in 0..50 {
            let q = s
                .query(None, Some(&format!("query number {i} about caches")))
                .unwrap();
            let exact: Vec<usize> = s.exact(&q, 10).unwrap().iter().map(|h| h.id).collect();
            let approx = s.search(&q, 10, Some(128)).unwrap();
            assert_eq!(approx.len(), 10);
            assert!(approx.windows(2).all(|w| w[0].distance <= w[1].distance));
            found += approx.iter().filter(|h| exact.contains(&h.id)).count();
            total += 10;
        }
        let recall = found as f64 / f64::from(total);
        assert!(recall > 0.9, "recall {recall}");
    }

    #[test]
    fn bad_queries_are_errors() {
        let s = svc();
        assert_eq!(s.query(None, None), Err(VectorError::NoQuery));
        assert!(matches!(
            s.query(Some(vec![0.0; 3]), None),
            Err(VectorError::Dimension { .. })
        ));
        assert_eq!(
            s.query(Some(vec![f32::NAN; 32]), None),
            Err(VectorError::NotFinite)
        );
        assert_eq!(s.search(&[0.0; 32], 0, None), Err(VectorError::TopK));
    }

    #[test]
    fn rebuild_spikes_then_recovers() {
        let s = svc();
        assert_eq!(s.delay(), Duration::ZERO);
        assert!(s.start_rebuild());
        assert!(!s.start_rebuild());
        assert_eq!(s.delay(), Duration::from_millis(500));
        let t0 = Instant::now();
        while s.rebuilding() {
            assert!(t0.elapsed() < Duration::from_secs(30));
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(s.rebuilds(), 1);
        assert_eq!(s.delay(), Duration::ZERO);
    }

    #[test]
    fn embeddings_are_deterministic_unit_vectors() {
        let a = embed("hello world", 16);
        assert_eq!(a, embed("hello world", 16));
        let n: f32 = a.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-4);
        assert_ne!(a, embed("goodbye", 16));
    }
}
