//! The node on its own: windows, marks, readers and servers, without probes.

use super::marks::Mark;
use super::*;
use crate::attribute::Cause;
use tokio::sync::oneshot;

/// Options of a node without collectors (no server, no metrics URL), 100 ms windows.
fn collectorless() -> NodeOptions {
    NodeOptions::new(SessionOptions {
        servers: Vec::new(),
        loadgen: None,
        cuda_targets: Vec::new(),
        kernel_without_servers: false,
        metrics_url: None,
        tls: crate::tls::TlsOptions::default(),
        window: Duration::from_millis(100),
    })
}

/// A node without collectors (no server, no metrics URL): windows are closed empty.
fn node(marks: Marks, keep: usize) -> (Node, NodeHandle) {
    let mut opts = collectorless();
    opts.marks = Some(marks);
    opts.keep = keep;
    Node::start(opts)
}

fn mark(phase: &str, at_unix_ms: u64) -> Mark {
    Mark {
        phase: phase.into(),
        at_unix_ms,
        source: None,
        server: None,
    }
}

#[tokio::test]
async fn windows_close_in_order_with_verdicts_phases_and_a_bound() {
    let marks = Marks::default();
    let (mut n, _handle) = node(marks.clone(), 4);
    let origin = n.origin_unix_ms;
    marks.push(mark("baseline", origin)).unwrap();
    for _ in 0..3 {
        n.tick();
    }
    // Posted late, for the third window on: the recent windows are labelled again.
    marks.push(mark("peak", origin + 200)).unwrap();
    for _ in 0..3 {
        n.tick();
    }
    assert_eq!(n.closed, 6);
    let l = &n.lines[&ServerKey::Target];
    let starts: Vec<u64> = l.timeline.windows.iter().map(|w| w.start_unix_ms).collect();
    assert_eq!(
        starts,
        [200, 300, 400, 500].map(|d| origin + d),
        "kept the newest 4"
    );
    let phases: Vec<Option<&str>> = l
        .timeline
        .windows
        .iter()
        .map(|w| w.phase.as_deref())
        .collect();
    assert_eq!(phases, [Some("peak"); 4]);
    assert_eq!(l.verdicts.len(), 4);
    for (i, v) in l.verdicts.iter().enumerate() {
        assert_eq!(v.index, i);
        assert_eq!(v.start_unix_ms, starts[i]);
        // Empty windows: no latency rose, nothing named.
        assert_eq!(v.verdict.cause, Cause::None);
    }
    assert!(n.missing().iter().any(|m| m.contains("no server process")));
}

// Paused time: the node's window timer advances as the test sleeps, without waiting.
#[tokio::test(start_paused = true)]
async fn readers_ask_the_running_node_and_get_its_time_line() {
    let (n, handle) = node(Marks::default(), 100);
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(n.run(stop.clone().cancelled_owned()));
    tokio::time::sleep(Duration::from_millis(350)).await;
    let latest = handle.latest().await.unwrap();
    let target = &latest.servers[0];
    assert_eq!(target.identity.server, "target");
    assert!(target.window.is_some() && target.verdict.is_some());
    let status = handle.status(true).await.unwrap();
    assert!(status.windows_closed >= 2, "{}", status.windows_closed);
    let timeline = status.servers[0].timeline.as_ref().unwrap();
    assert_eq!(timeline.windows.len() as u64, status.windows_closed);
    assert_eq!(handle.verdicts(2, None).await.unwrap().len(), 2);
    let e = handle
        .select(Selection::Phase("peak".into()), None)
        .await
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("POST /api/v1/marks"), "{e}");
    stop.cancel();
    let finished = task.await.unwrap();
    assert_eq!(finished.verdicts.len(), finished.timeline.windows.len());
    assert_eq!(handle.latest().await.unwrap_err(), NodeGone);
}

#[tokio::test]
async fn each_server_has_its_own_time_line_marks_verdicts_and_a_bound() {
    use std::sync::{Arc, Mutex};
    let spawn = || {
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap()
    };
    let (mut first, mut second, mut third) = (spawn(), spawn(), spawn());
    let (pa, pb, pc) = (first.id(), second.id(), third.id());
    let found = Arc::new(Mutex::new(vec![pa, pb]));
    let marks = Marks::default();
    let mut opts = collectorless();
    opts.grouping = Grouping::PerServer;
    opts.max_servers = 2;
    opts.keep = 5;
    // Two servers share 8 windows: 4 each.
    opts.max_windows = 8;
    opts.rediscover_every = 1;
    opts.marks = Some(marks.clone());
    let shared = Arc::clone(&found);
    opts.discover = Some(Box::new(move || shared.lock().unwrap().clone()));
    let (mut n, _handle) = Node::start(opts);
    let (ka, kb, kc) = (
        ServerKey::Process(pa),
        ServerKey::Process(pb),
        ServerKey::Process(pc),
    );
    marks.push(mark("baseline", n.origin_unix_ms)).unwrap();
    marks
        .push(Mark {
            server: Some(ka.clone()),
            ..mark("peak", n.origin_unix_ms)
        })
        .unwrap();
    for _ in 0..3 {
        n.tick();
    }
    let keys: Vec<&ServerKey> = n.lines.keys().collect();
    assert_eq!(keys, [&ka, &kb]);
    for l in n.lines.values() {
        assert_eq!(l.timeline.windows.len(), 3);
        assert_eq!(l.verdicts.len(), 3);
    }
    let phase = |k: &ServerKey| n.lines[k].timeline.windows[0].phase.clone();
    assert_eq!(phase(&ka).as_deref(), Some("peak"));
    assert_eq!(phase(&kb).as_deref(), Some("baseline"));
    // Each phase is on one server: found without naming it; a server named that has none
    // says which servers there are.
    let sel = n.select(&Selection::Phase("peak".into()), None).unwrap();
    assert_eq!(sel.server.server, ka.to_string());
    let sel = n
        .select(&Selection::Phase("baseline".into()), None)
        .unwrap();
    assert_eq!(sel.server.server, kb.to_string());
    let e = n
        .select(&Selection::Phase("peak".into()), Some(&kc))
        .unwrap_err();
    assert!(e.to_string().contains(&ka.to_string()), "{e}");

    // A third server past the cap is not watched while both others live.
    found.lock().unwrap().push(pc);
    n.tick();
    assert!(!n.lines.contains_key(&kc));
    // Once A is gone, C takes its place; B's time line goes on, bounded by its share.
    first.kill().unwrap();
    first.wait().unwrap();
    *found.lock().unwrap() = vec![pb, pc];
    for _ in 0..6 {
        n.tick();
    }
    let keys: Vec<&ServerKey> = n.lines.keys().collect();
    assert_eq!(keys, [&kb, &kc]);
    assert_eq!(n.lines[&kb].timeline.windows.len(), 4);
    assert!(
        n.lines
            .values()
            .all(|l| l.verdicts.len() == l.timeline.windows.len())
    );
    let mut v = Vec::new();
    n.answer(query::Query::Verdicts(10, Some(kc.clone()), {
        let (tx, rx) = oneshot::channel();
        v.push(rx);
        tx
    }));
    let listed = v.pop().unwrap().await.unwrap();
    assert_eq!(listed.len(), 4);
    assert!(listed.iter().all(|(s, _, _)| s.server == kc.to_string()));
    for p in [&mut second, &mut third] {
        p.kill().unwrap();
        p.wait().unwrap();
    }
}
