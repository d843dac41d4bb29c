//! The loopback guardrail holds at the address actually dialled: a listener on a
//! non-loopback address (the far end of a veth pair in a namespace this test creates) receives
//! nothing from a run that did not pass `--allow-remote`, however the scenario names it.

use std::{
    net::{SocketAddr, TcpListener},
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use inferscope::{
    dial::Reach,
    loadgen::{
        self, Options, Plan,
        client::{OwnConn, Target, build_client, via::Via},
    },
};
use inferscope_tests::{NetNs, free_port, inferscope_bin, root_or_skip};
use tokio_util::sync::CancellationToken;

fn get(target: &Target, path: &str) -> hyper::Request<http_body_util::Full<bytes::Bytes>> {
    target
        .request(&hyper::Method::GET, path, bytes::Bytes::new(), &[])
        .expect("a valid path")
}

/// Counts connections accepted on `ip:port` inside the namespace until `stop`.
struct Listener {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    fn start(ns: &NetNs, ip: [u8; 4]) -> Self {
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (a, s) = (accepted.clone(), stop.clone());
        let thread = ns.spawn_inside(move || {
            let l = TcpListener::bind(SocketAddr::from((ip, 0))).expect("bind");
            l.set_nonblocking(true).expect("nonblocking");
            tx.send(l.local_addr().expect("local_addr")).expect("send");
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok(_) => {
                        a.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("listener up");
        Self {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    fn count(&self) -> usize {
        // Let a connection that is under way land before counting.
        std::thread::sleep(Duration::from_millis(200));
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn scenario(target: &str, request: &str, events: &str) -> String {
    format!(
        "target: {target}\ntimeout: 2s\ngrace: 1s\nphases:\n  - name: p\n    duration: 1s\n    load: {{shape: constant, rate: 20}}\n    request: {request}\n{events}"
    )
}

fn stress(dir: &Path, yaml: &str, extra: &[&str]) -> std::process::Output {
    let file = dir.join("s.yaml");
    std::fs::write(&file, yaml).expect("write scenario");
    std::process::Command::new(inferscope_bin())
        .arg("stress")
        .arg(&file)
        .args(["--quiet"])
        .args(extra)
        .output()
        .expect("run inferscope stress")
}

#[test]
#[allow(clippy::too_many_lines)] // one story: every way of naming the remote host, then the control
fn nothing_reaches_a_non_loopback_listener_without_allow_remote() {
    let Some(_machine) =
        root_or_skip("nothing_reaches_a_non_loopback_listener_without_allow_remote")
    else {
        return;
    };
    // A /24 of its own: other root tests use NetNs's default addresses, and a second pair on
    // the same /24 would route our packets elsewhere (the control below catches that).
    let ns = NetNs::create_in("guard", [10, 213, 91]);
    let l = Listener::start(&ns, [10, 213, 91, 2]);
    let remote = l.addr;
    let local = format!("http://127.0.0.1:{}", free_port());
    let dir = std::env::temp_dir().join(format!("isc-guard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");

    // The path of the issue: "@HOST:PORT/" glued to the base URL made HOST the authority.
    let sneaky = format!("\"@{remote}/\"");
    let cases = [
        scenario(&local, &format!("{{endpoint: http, path: {sneaky}}}"), ""),
        scenario(
            &local,
            "{endpoint: http}",
            &format!("    events:\n      - {{at: 0s, path: {sneaky}}}\n"),
        ),
        scenario(
            &local,
            &format!(
                "{{endpoint: vector_search, dimensions: 4, recall_sample: 1.0, exact_path: {sneaky}}}"
            ),
            "",
        ),
    ];
    for yaml in &cases {
        let out = stress(&dir, yaml, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{yaml}\n{err}");
        assert!(err.contains("must start with `/`"), "{err}");
        assert!(err.contains("s.yaml:"), "a FILE:LINE:COL error: {err}");
    }
    // A remote target itself, without the flag.
    let out = stress(
        &dir,
        &scenario(&format!("http://{remote}"), "{endpoint: http}", ""),
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // The library: a plan derived in code with a path naming another host is refused when
        // the run is built.
        let plan = Plan::from_yaml(
            &scenario(&local, "{endpoint: http}", ""),
            "s.yaml",
            Path::new("."),
        )
        .expect("valid");
        let mut phase = plan.scenario().phases[0].clone();
        phase.request.path = Some(format!("@{remote}/"));
        let s = plan.with_phases(vec![phase]).expect("ranges hold");
        let e = loadgen::run(&s, Options::new(), CancellationToken::default())
            .await
            .expect_err("a path naming another host");
        assert!(e.to_string().contains("must start with `/`"), "{e}");

        // The connector itself: the pool and a closed-loop user's own connection.
        let target = Target::new(&format!("http://{remote}"), []).expect("target");
        let client = build_client(&target, Duration::from_secs(2), Reach::Loopback);
        let e = client
            .request(get(&target, "/"))
            .await
            .expect_err("refused");
        assert!(
            inferscope::loadgen::client::error_chain(&e).contains("--allow-remote"),
            "{e:?}"
        );
        let mut own = OwnConn::new(&target, Duration::from_secs(2), Reach::Loopback);
        let mut via = Via::Own(&mut own);
        let (_, msg) = via.request(get(&target, "/")).await.expect_err("refused");
        assert!(msg.contains("--allow-remote"), "{msg}");
    });
    assert_eq!(l.count(), 0, "a connection reached {remote}");

    // The control: with permission the same listener is reached, so the count can move.
    rt.block_on(async {
        let target = Target::new(&format!("http://{remote}"), []).expect("target");
        let mut own = OwnConn::new(&target, Duration::from_secs(2), Reach::Anywhere);
        let mut via = Via::Own(&mut own);
        let _ =
            tokio::time::timeout(Duration::from_millis(500), via.request(get(&target, "/"))).await;
    });
    assert!(l.count() >= 1, "the control connection did not arrive");
    let _ = std::fs::remove_dir_all(&dir);
}
