//! The recall ground truth computed on the client: sampled queries go to one worker thread
//! that searches the inserted corpus exactly. The request task hands its query over after
//! its latency is taken and never waits for the answer: the record reaches the collector
//! when its recall is known. A full queue drops the sample (counted), it never slows sending.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
    mpsc::{SyncSender, TrySendError, sync_channel},
};

use tokio::sync::oneshot;

use crate::loadgen::engine::vector::{corpus::Corpus, recall_at_k};

/// Samples queued at most.
const QUEUE: usize = 4096;

struct Job {
    corpus: Arc<Corpus>,
    query: Arc<Vec<f32>>,
    found: Vec<String>,
    k: usize,
    reply: oneshot::Sender<f64>,
}

/// A query waiting for its ground truth.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The corpus searched.
    pub corpus: Arc<Corpus>,
    /// The query.
    pub query: Arc<Vec<f32>>,
    /// Ids the server found, best first.
    pub found: Vec<String>,
    /// `top_k`.
    pub k: usize,
}

/// The worker; dropping it ends the thread once the queue is drained.
pub struct Truth {
    tx: SyncSender<Job>,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for Truth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Truth").finish_non_exhaustive()
    }
}

impl Truth {
    /// Starts the worker thread.
    pub fn start() -> std::io::Result<Self> {
        let (tx, rx) = sync_channel::<Job>(QUEUE);
        std::thread::Builder::new()
            .name("inferscope-recall".into())
            .spawn(move || {
                let mut scratch = Vec::new();
                while let Ok(job) = rx.recv() {
                    let exact = job.corpus.exact(&job.query, job.k, &mut scratch);
                    let _ = job.reply.send(recall_at_k(&job.found, &exact, job.k));
                }
            })?;
        Ok(Truth {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Queues `p`; `None` (and counted) when the queue is full.
    #[must_use]
    pub fn submit(&self, p: Pending) -> Option<oneshot::Receiver<f64>> {
        let (reply, rx) = oneshot::channel();
        let job = Job {
            corpus: p.corpus,
            query: p.query,
            found: p.found,
            k: p.k,
            reply,
        };
        match self.tx.try_send(job) {
            Ok(()) => Some(rx),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Samples dropped because the worker was behind.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn recall_of_a_sample() {
        let corpus = Arc::new(Corpus::generate(300, 8, 3));
        let t = Truth::start().unwrap();
        let q = Arc::new(corpus.data[8..16].to_vec());
        let exact = corpus.exact(&q, 4, &mut Vec::new());
        let half = vec![exact[0].clone(), exact[1].clone(), "x".into(), "y".into()];
        let rx = t
            .submit(Pending {
                corpus,
                query: q,
                found: half,
                k: 4,
            })
            .unwrap();
        assert!((rx.await.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(t.dropped(), 0);
    }
}
