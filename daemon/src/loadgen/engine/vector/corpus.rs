//! The corpus the client inserts (`request.corpus`): unit vectors around cluster centres,
//! deterministic from a seed, kept flat in memory so that the exact search of the recall
//! ground truth is a tight, auto-vectorised loop over contiguous rows.

use rand::{Rng, SeedableRng as _, rngs::StdRng};
use rand_distr::{Distribution, StandardNormal};

pub use crate::loadgen::scenario::vector::{CorpusSpec, MAX_CORPUS_FLOATS, Metric};

/// The vectors, flat: row `i` is `data[i*dims..(i+1)*dims]`, id `i`.
#[derive(Debug)]
pub struct Corpus {
    /// Dimensions.
    pub dims: usize,
    /// All rows.
    pub data: Vec<f32>,
    centres: Vec<f32>,
    spread: f32,
}

const CLUSTERS: usize = 32;

fn normalise(v: &mut [f32]) {
    let n = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    for x in v {
        *x /= n;
    }
}

impl Corpus {
    /// `n` unit vectors of `dims` dimensions around 32 centres, from `seed`.
    #[must_use]
    pub fn generate(n: usize, dims: usize, seed: u64) -> Self {
        let mut r = StdRng::seed_from_u64(seed);
        let mut normal = || -> f32 { StandardNormal.sample(&mut r) };
        let mut centres = vec![0f32; CLUSTERS * dims];
        for c in centres.chunks_exact_mut(dims) {
            for x in c.iter_mut() {
                *x = normal();
            }
            normalise(c);
        }
        // Noise of about 0.6 of a centre's length: clusters overlap, neighbours are not trivial.
        let spread = 0.6 / (dims as f32).sqrt();
        let mut data = vec![0f32; n * dims];
        for (i, row) in data.chunks_exact_mut(dims).enumerate() {
            let c = &centres[(i % CLUSTERS) * dims..][..dims];
            for (x, m) in row.iter_mut().zip(c) {
                *x = m + spread * normal();
            }
            normalise(row);
        }
        Corpus {
            dims,
            data,
            centres,
            spread,
        }
    }

    /// Number of vectors.
    #[must_use]
    pub fn len(&self) -> usize {
        self.data.len() / self.dims.max(1)
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// A query as users ask them: near one of the clusters, not one of the stored points.
    pub fn query<R: Rng>(&self, rng: &mut R) -> Vec<f32> {
        let c = rng.random_range(0..CLUSTERS);
        let centre = &self.centres[c * self.dims..][..self.dims];
        let mut q: Vec<f32> = centre
            .iter()
            .map(|m| {
                let n: f32 = StandardNormal.sample(&mut *rng);
                m + self.spread * n
            })
            .collect();
        normalise(&mut q);
        q
    }

    /// The ids of the `k` nearest rows to `q` (squared L2), nearest first; `scratch` is
    /// reused between calls.
    #[must_use]
    pub fn exact(&self, q: &[f32], k: usize, scratch: &mut Vec<(f32, u32)>) -> Vec<String> {
        scratch.clear();
        scratch.extend(
            self.data
                .chunks_exact(self.dims)
                .enumerate()
                .map(|(i, row)| (l2(q, row), i as u32)),
        );
        let k = k.min(scratch.len());
        if k == 0 {
            return Vec::new();
        }
        scratch.select_nth_unstable_by(k - 1, |a, b| a.0.total_cmp(&b.0));
        let top = &mut scratch[..k];
        top.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        top.iter().map(|(_, i)| i.to_string()).collect()
    }
}

/// Squared L2 distance; eight independent sums so that the compiler vectorises the loop.
#[must_use]
pub fn l2(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| (x - y) * (x - y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            let d = x[j] - y[j];
            acc[j] += d * d;
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_unit_rows_and_exact_search() {
        let a = Corpus::generate(500, 20, 7);
        let b = Corpus::generate(500, 20, 7);
        assert_eq!(a.data, b.data);
        assert_ne!(a.data, Corpus::generate(500, 20, 8).data);
        assert_eq!(a.len(), 500);
        for row in a.data.chunks_exact(20) {
            let n: f32 = row.iter().map(|x| x * x).sum();
            assert!((n - 1.0).abs() < 1e-4);
        }
        // A stored row is its own nearest neighbour; the order is by distance.
        let mut s = Vec::new();
        let q = a.data[42 * 20..43 * 20].to_vec();
        let top = a.exact(&q, 5, &mut s);
        assert_eq!(top[0], "42");
        assert_eq!(top.len(), 5);
        let mut naive: Vec<(f32, usize)> = a
            .data
            .chunks_exact(20)
            .enumerate()
            .map(|(i, r)| (r.iter().zip(&q).map(|(x, y)| (x - y) * (x - y)).sum(), i))
            .collect();
        naive.sort_by(|x, y| x.0.total_cmp(&y.0));
        let want: Vec<String> = naive[..5].iter().map(|(_, i)| i.to_string()).collect();
        assert_eq!(top, want);
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(a.query(&mut rng).len(), 20);
    }

    #[test]
    fn sizes_are_checked() {
        let spec = |n, d| CorpusSpec {
            vectors: n,
            dimensions: d,
            seed: None,
            metric: Metric::L2,
            insert: true,
            batch: None,
        };
        assert!(spec(100, 8).problem().is_none());
        assert!(spec(0, 8).problem().is_some());
        assert!(
            spec(10_000_000, 100)
                .problem()
                .unwrap()
                .contains("fewer vectors")
        );
    }
}
