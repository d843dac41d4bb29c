//! More than one watcher of a run's finished requests: [`Options::observer`] is one channel,
//! so a second watcher (live OTLP export, trigger rules) is added with [`add`], which tees.

use tokio::sync::mpsc;

use super::Options;
use crate::measure::RequestRecord;

/// Records queued between the tee and each of its two watchers.
const TEE_QUEUE: usize = 4096;

/// Adds `tx` to the run's watchers: the observer when there is none, otherwise a tee that
/// hands every record to the one already there and to `tx`, in that order. A slow watcher
/// slows the tee and so the run's record collector, never the requests. Needs a tokio
/// runtime when a tee is made.
pub fn add(opts: &mut Options, tx: mpsc::Sender<RequestRecord>) {
    opts.observer = Some(match opts.observer.take() {
        None => tx,
        Some(first) => tee(first, tx),
    });
}

/// A sender whose records go to `a` and to `b`; a watcher that went away is skipped.
fn tee(
    a: mpsc::Sender<RequestRecord>,
    b: mpsc::Sender<RequestRecord>,
) -> mpsc::Sender<RequestRecord> {
    let (tx, mut rx) = mpsc::channel::<RequestRecord>(TEE_QUEUE);
    tokio::spawn(async move {
        while let Some(r) = rx.recv().await {
            if !a.is_closed() {
                let _ = a.send(r.clone()).await;
            }
            if !b.is_closed() {
                let _ = b.send(r).await;
            }
        }
    });
    tx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Endpoint;

    #[tokio::test]
    async fn one_watcher_is_the_observer_two_both_get_every_record() {
        let mut opts = Options::new();
        let (a, mut ra) = mpsc::channel(8);
        add(&mut opts, a);
        assert!(opts.observer.as_ref().is_some());
        let (b, mut rb) = mpsc::channel(8);
        add(&mut opts, b);
        let obs = opts.observer.take().unwrap();
        for id in 0..3 {
            obs.send(RequestRecord::new(id, 0, Endpoint::Chat, 0))
                .await
                .unwrap();
        }
        drop(obs);
        for id in 0..3 {
            assert_eq!(ra.recv().await.unwrap().id, id);
            assert_eq!(rb.recv().await.unwrap().id, id);
        }
        // The tee ends with the run's sender: both watchers see the end.
        assert!(ra.recv().await.is_none());
        assert!(rb.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_watcher_that_left_does_not_stop_the_other() {
        let mut opts = Options::new();
        let (a, ra) = mpsc::channel(1);
        add(&mut opts, a);
        let (b, mut rb) = mpsc::channel(8);
        add(&mut opts, b);
        drop(ra);
        let obs = opts.observer.take().unwrap();
        for id in 0..4 {
            obs.send(RequestRecord::new(id, 0, Endpoint::Http, 0))
                .await
                .unwrap();
        }
        drop(obs);
        for id in 0..4 {
            assert_eq!(rb.recv().await.unwrap().id, id);
        }
    }
}
