//! Average-linkage (UPGMA) agglomerative clustering by cosine similarity, with the
//! nearest-neighbour-chain algorithm: O(m²) time and memory for m vectors.
//!
//! Used to seed k-means ("buckshot", Cutting et al., Scatter/Gather, 1992): on short texts the
//! TF-IDF vectors are nearly orthogonal, a single query is a poor stand-in for a topic, and
//! k-means++ seeds (single points) leave Lloyd's iterations in poor local optima, while the
//! means of average-linkage groups already sit near the topics.

/// Groups `vectors` into `k` clusters (fewer when there are fewer vectors); returns each
/// vector's group, `0..k`, numbered by the group's first member.
#[must_use]
#[allow(clippy::many_single_char_names)] // a, b, c, k, m as in the algorithm's description
pub fn average_linkage(vectors: &[Vec<f32>], k: usize) -> Vec<usize> {
    let m = vectors.len();
    if m == 0 {
        return Vec::new();
    }
    let k = k.clamp(1, m);
    // Only the non-zero entries of one side: hashed TF-IDF vectors hold a few dozen.
    let sparse: Vec<Vec<(usize, f32)>> = vectors
        .iter()
        .map(|v| {
            v.iter()
                .enumerate()
                .filter(|(_, x)| **x != 0.0)
                .map(|(i, x)| (i, *x))
                .collect()
        })
        .collect();
    let mut sim = vec![0f32; m * m];
    for a in 0..m {
        for b in a + 1..m {
            let s: f32 = sparse[a].iter().map(|(i, x)| x * vectors[b][*i]).sum();
            sim[a * m + b] = s;
            sim[b * m + a] = s;
        }
    }
    // The whole dendrogram by the nearest-neighbour chain, then the cut: the chain finds the
    // merges out of height order, so they are sorted (stably: a merge always comes after
    // those that made its two sides) and the m - k highest-similarity ones applied.
    let mut size = vec![1usize; m];
    let mut active = vec![true; m];
    let mut merges: Vec<(f32, usize, usize)> = Vec::with_capacity(m.saturating_sub(1));
    let mut chain: Vec<usize> = Vec::new();
    while merges.len() + 1 < m {
        let a = if let Some(&a) = chain.last() {
            a
        } else {
            let Some(a) = active.iter().position(|x| *x) else {
                break;
            };
            chain.push(a);
            a
        };
        // The most similar active cluster; on a tie the one before `a` in the chain, so that
        // reciprocal nearest neighbours are found.
        let prev = chain.len().checked_sub(2).map(|i| chain[i]);
        let mut best = prev;
        let mut best_sim = prev.map_or(f32::NEG_INFINITY, |p| sim[a * m + p]);
        for c in (0..m).filter(|&c| c != a && active[c]) {
            if sim[a * m + c] > best_sim {
                best = Some(c);
                best_sim = sim[a * m + c];
            }
        }
        let Some(b) = best else { break };
        if Some(b) != prev {
            chain.push(b);
            continue;
        }
        chain.truncate(chain.len() - 2);
        let (keep, gone) = (a.min(b), a.max(b));
        merges.push((best_sim, keep, gone));
        let (sk, sg) = (size[keep] as f32, size[gone] as f32);
        for c in (0..m).filter(|&c| active[c] && c != keep && c != gone) {
            // Lance-Williams for average linkage: the size-weighted mean of the two.
            let s = (sk * sim[keep * m + c] + sg * sim[gone * m + c]) / (sk + sg);
            sim[keep * m + c] = s;
            sim[c * m + keep] = s;
        }
        active[gone] = false;
        size[keep] += size[gone];
    }
    merges.sort_by(|x, y| y.0.total_cmp(&x.0));
    let mut parent: Vec<usize> = (0..m).collect();
    for &(_, a, b) in merges.iter().take(m - k) {
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        parent[ra.max(rb)] = ra.min(rb);
    }
    // Roots are their groups' smallest members, so numbering by root numbers by first member.
    let mut label = vec![usize::MAX; m];
    let mut next = 0;
    for i in 0..m {
        let r = root(&mut parent, i);
        if label[r] == usize::MAX {
            label[r] = next;
            next += 1;
        }
        label[i] = label[r];
    }
    label
}

/// Union-find root of `i`, halving paths on the way.
fn root(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_the_most_similar_first() {
        let v = vec![
            vec![1.0, 0.0, 0.0],
            vec![0.0, 0.0, 1.0],
            vec![0.9, 0.1, 0.0],
            vec![0.0, 0.1, 0.9],
            vec![0.0, 1.0, 0.0],
        ];
        assert_eq!(average_linkage(&v, 3), [0, 1, 0, 1, 2]);
        assert_eq!(average_linkage(&v, 5), [0, 1, 2, 3, 4]);
        assert_eq!(average_linkage(&v, 1), [0; 5]);
        assert_eq!(average_linkage(&v, 9), [0, 1, 2, 3, 4]);
        assert!(average_linkage(&[], 3).is_empty());
    }

    /// The chain finds the same merges as the naive greedy search (tie-free input).
    #[test]
    fn agrees_with_the_naive_greedy_merge() {
        let mut x = 12345u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 1000) as f32 / 1000.0
        };
        let v: Vec<Vec<f32>> = (0..40).map(|_| (0..6).map(|_| rnd()).collect()).collect();
        for k in [1, 2, 5, 13] {
            assert_eq!(average_linkage(&v, k), naive(&v, k), "k={k}");
        }
    }

    fn naive(v: &[Vec<f32>], k: usize) -> Vec<usize> {
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let mut groups: Vec<Vec<usize>> = (0..v.len()).map(|i| vec![i]).collect();
        let avg = |g: &[usize], h: &[usize]| {
            let s: f64 = g
                .iter()
                .flat_map(|a| h.iter().map(move |b| (a, b)))
                .map(|(a, b)| f64::from(dot(&v[*a], &v[*b])))
                .sum();
            s / (g.len() * h.len()) as f64
        };
        while groups.len() > k {
            let mut best = (0, 1, f64::NEG_INFINITY);
            for i in 0..groups.len() {
                for j in i + 1..groups.len() {
                    let s = avg(&groups[i], &groups[j]);
                    if s > best.2 {
                        best = (i, j, s);
                    }
                }
            }
            let g = groups.remove(best.1);
            groups[best.0].extend(g);
        }
        groups.sort_by_key(|g| g.iter().min().copied());
        let mut label = vec![0; v.len()];
        for (n, g) in groups.iter().enumerate() {
            for &i in g {
                label[i] = n;
            }
        }
        label
    }
}
