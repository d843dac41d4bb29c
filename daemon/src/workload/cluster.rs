//! k-means over query embeddings with `linfa-clustering`, from two kinds of start, keeping
//! the result of least inertia (the k-means objective decides):
//!
//! - k-means++ seeds, [`RUNS`] runs from a generator seeded with the build's seed;
//! - "buckshot" seeds (Cutting et al., 1992): the means of the `k` groups that average-linkage
//!   clustering ([`super::linkage`]) makes of a seeded sample of up to [`SAMPLE`] vectors.
//!
//! Why both: on short queries the hashed TF-IDF vectors are nearly orthogonal (two queries of
//! one topic share a word or two), so one query is a poor stand-in for a topic and Lloyd's
//! iterations from k-means++ seeds stop in poor local optima. On the checked-in 8-topic log,
//! k-means++ alone reached 45-66% purity; buckshot seeds reach the topics. On dense model
//! embeddings k-means++ often wins, and then it is kept.
//!
//! The same vectors and seed give the same clusters. Clusters are numbered by size, largest
//! first (ties: the one whose first member comes first in the log), so that the numbering does
//! not depend on the seeds' order.

use linfa::{
    DatasetBase,
    traits::{Fit as _, Predict as _},
};
use linfa_clustering::{KMeans, KMeansInit};
use ndarray::Array2;
use rand_xoshiro::{
    Xoshiro256Plus, Xoshiro256PlusPlus,
    rand_core::{RngCore as _, SeedableRng as _},
};
use serde::Serialize;

use super::linkage;

/// k-means runs from different k-means++ starts; the one of least inertia is kept (linfa's
/// default is 10; the buckshot start is a further, usually better, one).
pub const RUNS: usize = 4;
/// Iterations of one run at most.
pub const MAX_ITERATIONS: u64 = 300;
/// A run stops when its centroids move less than this (Euclidean, all together).
pub const TOLERANCE: f32 = 1e-4;
/// Vectors that average linkage groups for the buckshot seeds at most (its time and memory
/// grow with the square: 2000 take 16 MB).
pub const SAMPLE: usize = 2000;

/// Which seeds gave the clusters kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Seeding {
    /// k-means++.
    KmeansPlusPlus,
    /// Means of average-linkage groups of a sample.
    Buckshot,
}

/// Each vector's cluster and its distance to that cluster's centroid.
#[derive(Debug, Clone, PartialEq)]
pub struct Clusters {
    /// Number of clusters asked for (some may be empty).
    pub k: usize,
    /// Cluster of each vector, `0..k`.
    pub assignment: Vec<usize>,
    /// Euclidean distance of each vector to its cluster's centroid.
    pub distance: Vec<f32>,
    /// The seeds of the run kept.
    pub seeding: Seeding,
}

impl Clusters {
    /// Members of each cluster, in log order.
    #[must_use]
    pub fn members(&self) -> Vec<Vec<usize>> {
        let mut m = vec![Vec::new(); self.k];
        for (i, c) in self.assignment.iter().enumerate() {
            m[*c].push(i);
        }
        m
    }
}

/// Vectors that cannot be clustered as asked.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Fewer vectors than clusters, or no clusters.
    #[error("{n} distinct queries cannot make {k} clusters: lower --clusters or add queries")]
    TooFew {
        /// Vectors.
        n: usize,
        /// Clusters asked for.
        k: usize,
    },
    /// Vectors of different lengths.
    #[error("embeddings of different dimensions ({0} and {1})")]
    Ragged(usize, usize),
    /// k-means itself failed.
    #[error("k-means failed: {0}")]
    Kmeans(String),
}

/// k-means with `k` clusters over `vectors`, seeded by `seed`.
pub fn kmeans(vectors: &[Vec<f32>], k: usize, seed: u64) -> Result<Clusters, ClusterError> {
    let n = vectors.len();
    if k == 0 || n < k {
        return Err(ClusterError::TooFew { n, k });
    }
    let dim = vectors[0].len();
    if let Some(v) = vectors.iter().find(|v| v.len() != dim) {
        return Err(ClusterError::Ragged(dim, v.len()));
    }
    let flat: Vec<f32> = vectors.iter().flatten().copied().collect();
    let records =
        Array2::from_shape_vec((n, dim), flat).map_err(|e| ClusterError::Kmeans(e.to_string()))?;
    let data = DatasetBase::from(records.clone());
    let fit = |init: KMeansInit<f32>, runs: usize| {
        KMeans::params_with_rng(k, Xoshiro256Plus::seed_from_u64(seed))
            .init_method(init)
            .n_runs(runs)
            .max_n_iterations(MAX_ITERATIONS)
            .tolerance(TOLERANCE)
            .fit(&data)
            .map_err(|e| ClusterError::Kmeans(e.to_string()))
    };
    let plus = fit(KMeansInit::KMeansPlusPlus, RUNS)?;
    let init = buckshot(vectors, k, seed);
    let buckshot = fit(KMeansInit::Precomputed(init), 1)?;
    // Ties go to buckshot: its start does not depend on which points were drawn.
    let (model, seeding) = if buckshot.inertia() <= plus.inertia() {
        (buckshot, Seeding::Buckshot)
    } else {
        (plus, Seeding::KmeansPlusPlus)
    };
    let predicted = model.predict(&records);
    let centroids = model.centroids();
    let assignment: Vec<usize> = predicted.iter().copied().collect();
    let distance = assignment
        .iter()
        .enumerate()
        .map(|(i, c)| {
            vectors[i]
                .iter()
                .zip(centroids.row(*c))
                .map(|(x, y)| (x - y) * (x - y))
                .sum::<f32>()
                .sqrt()
        })
        .collect();
    Ok(renumbered(Clusters {
        k,
        assignment,
        distance,
        seeding,
    }))
}

/// Buckshot seeds: the means of the average-linkage groups of a seeded sample of at most
/// [`SAMPLE`] vectors (all of them when there are fewer), as a `k x dim` matrix.
fn buckshot(vectors: &[Vec<f32>], k: usize, seed: u64) -> Array2<f32> {
    let n = vectors.len();
    let mut idx: Vec<usize> = (0..n).collect();
    if n > SAMPLE {
        // A partial Fisher-Yates shuffle: the first SAMPLE are a uniform sample.
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xb0c5_a0f7);
        for i in 0..SAMPLE {
            let j = i + (rng.next_u64() % (n - i) as u64) as usize;
            idx.swap(i, j);
        }
        idx.truncate(SAMPLE);
        idx.sort_unstable();
    }
    let sample: Vec<Vec<f32>> = idx.iter().map(|&i| vectors[i].clone()).collect();
    let labels = linkage::average_linkage(&sample, k);
    let dim = vectors[0].len();
    let mut sums = Array2::<f32>::zeros((k, dim));
    let mut counts = vec![0f32; k];
    for (v, &g) in sample.iter().zip(&labels) {
        counts[g] += 1.0;
        for (s, x) in sums.row_mut(g).iter_mut().zip(v) {
            *s += x;
        }
    }
    for (mut row, c) in sums.rows_mut().into_iter().zip(&counts) {
        if *c > 0.0 {
            row.mapv_inplace(|x| x / c);
        }
    }
    sums
}

/// The same clusters numbered by size, largest first; ties by first member.
fn renumbered(c: Clusters) -> Clusters {
    let members = c.members();
    let mut order: Vec<usize> = (0..c.k).collect();
    order.sort_by_key(|&j| {
        (
            std::cmp::Reverse(members[j].len()),
            members[j].first().copied(),
        )
    });
    let mut new_of = vec![0; c.k];
    for (new, old) in order.iter().enumerate() {
        new_of[*old] = new;
    }
    Clusters {
        assignment: c.assignment.iter().map(|a| new_of[*a]).collect(),
        ..c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blobs() -> Vec<Vec<f32>> {
        // Three tight groups of 10, 6 and 4 points in 3-D, interleaved.
        let centres = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let sizes = [10, 6, 4];
        let mut v = Vec::new();
        for i in 0..10 {
            for (c, centre) in centres.iter().enumerate() {
                if i < sizes[c] {
                    let j = i as f32 * 0.001;
                    v.push(vec![centre[0] + j, centre[1] - j, centre[2] + j]);
                }
            }
        }
        v
    }

    #[test]
    fn finds_the_groups_numbered_by_size() {
        let v = blobs();
        let b = buckshot(&v, 3, 1);
        assert_eq!(b.dim(), (3, 3));
        let c = kmeans(&v, 3, 7).unwrap();
        let sizes: Vec<usize> = c.members().iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 6, 4]);
        // Members of a group share a cluster: the x-heavy points are cluster 0.
        for (i, x) in v.iter().enumerate() {
            let want = if x[0] > 0.5 {
                0
            } else if x[1] > 0.5 {
                1
            } else {
                2
            };
            assert_eq!(c.assignment[i], want);
        }
        assert!(c.distance.iter().all(|d| *d < 0.05), "{:?}", c.distance);
        assert_eq!(kmeans(&v, 3, 7).unwrap(), c);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let v = blobs();
        let e = kmeans(&v[..2], 3, 1).unwrap_err().to_string();
        assert!(e.contains("lower --clusters"), "{e}");
        assert!(kmeans(&[], 1, 1).is_err());
        assert!(kmeans(&v, 0, 1).is_err());
        let ragged = vec![vec![1.0, 0.0], vec![1.0]];
        assert!(matches!(
            kmeans(&ragged, 1, 1),
            Err(ClusterError::Ragged(2, 1))
        ));
    }
}
