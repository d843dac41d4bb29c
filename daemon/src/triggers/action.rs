//! Doing what a rule says, off the window loop: a task receives firings and runs each action
//! in a task of its own (a slow command or webhook never delays collection, nor another
//! rule's action); each firing comes back with its outcome.
//!
//! - `run: [argv...]`: the program is spawned without a shell, stdin and stdout closed,
//!   stderr kept (its last [`STDERR_TAIL`] bytes go into the outcome). The environment adds
//!   `INFERSCOPE_TRIGGER` (the rule), `INFERSCOPE_VERDICT` and `INFERSCOPE_VERDICT_CONFIDENCE`,
//!   `INFERSCOPE_WINDOW_START_UNIX_MS`, `INFERSCOPE_METRIC_<NAME>` for each metric the rule's
//!   conditions read (e.g. `INFERSCOPE_METRIC_KV_USAGE`), the server's identity
//!   (`INFERSCOPE_SERVER`; in a pod `INFERSCOPE_K8S_POD_NAME`, `INFERSCOPE_K8S_NAMESPACE_NAME`,
//!   `INFERSCOPE_K8S_CONTAINER_NAME`, `INFERSCOPE_K8S_POD_UID`) and `INFERSCOPE_EVIDENCE`: the
//!   firing as JSON (with its `server`), as a webhook receives it. Killed at its timeout.
//! - `webhook: URL`: the firing as a JSON body, `POST`ed; each attempt has the timeout; a
//!   connection error, a timeout, a 429 or a 5xx is retried [`RETRIES`] times after 0.25 s,
//!   0.5 s and 1 s; other statuses are final. The connection is opened through the load
//!   generator's guard ([`crate::dial`]): the address actually dialled must be within the
//!   [`Reach`] (loopback unless `--allow-remote`), whatever the URL's spelling; a refusal is
//!   final.

use std::{process::Stdio, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use tokio::{sync::mpsc, task::JoinSet};

use super::{Firing, Outcome, rule::Action};
use crate::{
    collect::identity::ServerIdentity,
    dial::{DialError, GuardedConnector, Reach},
};

/// Retries of a webhook after its first attempt.
pub const RETRIES: u32 = 3;
/// Bytes of a command's stderr kept in its outcome.
pub const STDERR_TAIL: usize = 1024;
/// First pause before a webhook retry; doubled each time.
const BACKOFF: Duration = Duration::from_millis(250);

/// One firing and what to do about it.
pub struct Job {
    /// The rule's action.
    pub action: Action,
    /// Its timeout.
    pub timeout: Duration,
    /// The firing, without an outcome yet.
    pub firing: Firing,
}

/// Called with each firing once its action is done (the daemon logs and exports it).
pub type OnDone = Arc<dyn Fn(&Firing) + Send + Sync>;

/// Runs jobs until the sender is dropped and every action is done; returns the firings with
/// their outcomes, in firing order. Webhooks connect within `reach`.
pub async fn serve(
    mut rx: mpsc::Receiver<Job>,
    on_done: Option<OnDone>,
    reach: Reach,
) -> Vec<Firing> {
    let mut running = JoinSet::new();
    let mut done = Vec::new();
    let finish = |f: Firing, done: &mut Vec<Firing>| {
        log(&f);
        if let Some(cb) = &on_done {
            cb(&f);
        }
        done.push(f);
    };
    loop {
        tokio::select! {
            job = rx.recv() => match job {
                Some(job) => {
                    running.spawn(execute(job, reach));
                }
                None => break,
            },
            Some(r) = running.join_next(), if !running.is_empty() => {
                if let Ok(f) = r {
                    finish(f, &mut done);
                }
            }
        }
    }
    while let Some(r) = running.join_next().await {
        if let Ok(f) = r {
            finish(f, &mut done);
        }
    }
    done.sort_by(|a, b| (a.window_start_unix_ms, &a.rule).cmp(&(b.window_start_unix_ms, &b.rule)));
    done
}

fn log(f: &Firing) {
    let outcome = f.outcome.as_ref().map_or_else(String::new, Outcome::line);
    if f.outcome.as_ref().is_some_and(Outcome::ok) {
        tracing::info!(rule = %f.rule, "trigger fired: {}; {outcome}", f.values_line());
    } else {
        tracing::warn!(rule = %f.rule, "trigger fired: {}; {outcome}", f.values_line());
    }
}

async fn execute(job: Job, reach: Reach) -> Firing {
    let mut firing = job.firing;
    let outcome = match &job.action {
        Action::Run(argv) => run(argv, job.timeout, &firing).await,
        Action::Webhook(url) => webhook(url, job.timeout, reach, BACKOFF, &firing).await,
    };
    firing.outcome = Some(outcome);
    firing
}

async fn run(argv: &[String], timeout: Duration, f: &Firing) -> Outcome {
    let Some((program, rest)) = argv.split_first() else {
        return Outcome::SpawnFailed {
            error: "empty argv".into(),
        };
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .env("INFERSCOPE_TRIGGER", &f.rule)
        .env("INFERSCOPE_VERDICT", f.verdict.cause.name())
        .env(
            "INFERSCOPE_VERDICT_CONFIDENCE",
            f.verdict.confidence.to_string(),
        )
        .env(
            "INFERSCOPE_WINDOW_START_UNIX_MS",
            f.window_start_unix_ms.to_string(),
        )
        .env("INFERSCOPE_EVIDENCE", f.json());
    for (name, v) in f.server.iter().flat_map(ServerIdentity::env) {
        cmd.env(name, v);
    }
    for (name, v) in &f.values {
        cmd.env(
            format!("INFERSCOPE_METRIC_{}", name.to_ascii_uppercase()),
            v.to_string(),
        );
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Outcome::SpawnFailed {
                error: format!("{program}: {e}"),
            };
        }
    };
    // On timeout the future (and the child with it) is dropped: kill_on_drop ends it.
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            use std::os::unix::process::ExitStatusExt as _;
            let tail = &out.stderr[out.stderr.len().saturating_sub(STDERR_TAIL)..];
            Outcome::Exited {
                code: out.status.code(),
                signal: out.status.signal(),
                stderr: String::from_utf8_lossy(tail).trim_end().to_owned(),
            }
        }
        Ok(Err(e)) => Outcome::SpawnFailed {
            error: format!("{program}: waiting: {e}"),
        },
        Err(_) => Outcome::TimedOut {
            after_ms: timeout.as_millis() as u64,
        },
    }
}

/// POSTs `f` to `url`; `backoff` is the first pause before a retry, doubled each time
/// ([`BACKOFF`] but in tests that do not wait for the schedule).
async fn webhook(
    url: &str,
    timeout: Duration,
    reach: Reach,
    backoff: Duration,
    f: &Firing,
) -> Outcome {
    let guard = GuardedConnector { reach, timeout };
    let client = Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(guard);
    let body = Bytes::from(f.json());
    let mut last = String::new();
    for attempt in 0..=RETRIES {
        if attempt > 0 {
            tokio::time::sleep(backoff * 2u32.pow(attempt - 1)).await;
        }
        let req = match hyper::Request::post(url)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, "inferscope-trigger")
            .body(Full::new(body.clone()))
        {
            Ok(r) => r,
            Err(e) => {
                return Outcome::Failed {
                    error: format!("bad request to {url}: {e}"),
                    attempts: attempt + 1,
                };
            }
        };
        match tokio::time::timeout(timeout, client.request(req)).await {
            Ok(Ok(resp)) => {
                let status = resp.status();
                if status.is_success() {
                    return Outcome::Delivered {
                        status: status.as_u16(),
                        attempts: attempt + 1,
                    };
                }
                last = format!("HTTP {}", status.as_u16());
                if !(status.is_server_error() || status.as_u16() == 429) {
                    return Outcome::Failed {
                        error: last,
                        attempts: attempt + 1,
                    };
                }
            }
            Ok(Err(e)) => {
                if let Some(refused) = refusal(&e) {
                    // The guard's answer does not change on a retry.
                    return Outcome::Failed {
                        error: format!("{url}: {refused}"),
                        attempts: attempt + 1,
                    };
                }
                last = format!("{e}");
            }
            Err(_) => last = format!("no answer within {}", humantime::format_duration(timeout)),
        }
    }
    Outcome::Failed {
        error: format!("{url}: {last}"),
        attempts: RETRIES + 1,
    }
}

/// The guard's refusal behind a client error, if that is what it is.
fn refusal<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a DialError> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(d @ DialError::Remote { .. }) = c.downcast_ref::<DialError>() {
            return Some(d);
        }
        cause = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::attribute::{Cause, Verdict};

    fn firing() -> Firing {
        Firing {
            rule: "kv".into(),
            window_start_unix_ms: 1000,
            window_len_ms: 1000,
            phase: Some("peak".into()),
            conditions: vec!["kv_usage >= 0.9".into()],
            values: [("kv_usage".to_owned(), 0.97)].into(),
            baselines: std::collections::BTreeMap::new(),
            server: None,
            verdict: Verdict::bare(Cause::KvCache, 0.8),
            action: "run".into(),
            outcome: None,
        }
    }

    #[tokio::test]
    async fn a_command_gets_the_environment_and_its_exit_status_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        let script = format!(
            "echo \"$INFERSCOPE_TRIGGER $INFERSCOPE_VERDICT $INFERSCOPE_METRIC_KV_USAGE\" > {}; echo \"$INFERSCOPE_EVIDENCE\" >> {}; echo oops >&2; exit 3",
            out.display(),
            out.display()
        );
        let argv = vec!["sh".into(), "-c".into(), script];
        let o = run(&argv, Duration::from_secs(10), &firing()).await;
        assert_eq!(
            o,
            Outcome::Exited {
                code: Some(3),
                signal: None,
                stderr: "oops".into()
            }
        );
        let text = std::fs::read_to_string(&out).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("kv kv_cache 0.97"));
        let json: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(json["rule"], "kv");
        assert_eq!(json["verdict"]["cause"], "kv_cache");
    }

    /// On paused time: the runtime, idle while `sleep` runs, jumps to the timeout.
    #[tokio::test(start_paused = true)]
    async fn a_command_past_its_timeout_is_killed_and_a_missing_one_is_reported() {
        let argv = vec!["sleep".into(), "5".into()];
        let o = run(&argv, Duration::from_millis(100), &firing()).await;
        assert_eq!(o, Outcome::TimedOut { after_ms: 100 });
        let o = run(
            &["/nonexistent/x".into()],
            Duration::from_secs(1),
            &firing(),
        )
        .await;
        assert!(matches!(o, Outcome::SpawnFailed { .. }), "{o:?}");
    }

    /// A webhook receiver on `ip`: its address and the number of calls it got; it answers
    /// 502 to the first `fail` calls, then 204.
    async fn receiver(ip: std::net::IpAddr, fail: u32) -> (std::net::SocketAddr, Arc<AtomicU32>) {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: String| {
                let c = c.clone();
                async move {
                    let n = c.fetch_add(1, Ordering::SeqCst);
                    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                    assert_eq!(v["values"]["kv_usage"], 0.97);
                    if n < fail {
                        axum::http::StatusCode::BAD_GATEWAY
                    } else {
                        axum::http::StatusCode::NO_CONTENT
                    }
                }
            }),
        );
        let l = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        (addr, calls)
    }

    /// [`webhook`] with the test's firing.
    async fn post(url: &str, timeout: Duration, reach: Reach, backoff: Duration) -> Outcome {
        webhook(url, timeout, reach, backoff, &firing()).await
    }

    #[tokio::test]
    async fn a_webhook_is_retried_on_5xx_and_delivered() {
        // A real receiver on real time (paused time would jump to an attempt's timeout while
        // the receiver answers): the pauses are shortened instead.
        let (addr, calls) = receiver([127, 0, 0, 1].into(), 2).await;
        let url = format!("http://{addr}/hook");
        let o = post(
            &url,
            Duration::from_secs(2),
            Reach::Loopback,
            Duration::from_millis(1),
        )
        .await;
        assert_eq!(
            o,
            Outcome::Delivered {
                status: 204,
                attempts: 3
            }
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_webhook_nobody_answers_is_retried_after_each_pause_then_given_up() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dead = format!("http://127.0.0.1:{port}/hook");
        let t = tokio::time::Instant::now();
        let attempt = Duration::from_millis(200);
        let o = post(&dead, attempt, Reach::Loopback, BACKOFF).await;
        assert!(matches!(o, Outcome::Failed { attempts: 4, .. }), "{o:?}");
        // The three pauses (0.25 s, 0.5 s, 1 s), and each attempt refused at once or given up
        // at its timeout.
        let paused = Duration::from_millis(1750);
        let took = t.elapsed();
        assert!(
            took >= paused && took <= paused + attempt * (RETRIES + 1),
            "{took:?}"
        );
    }

    /// The guard's refusal: final at the first attempt, said with what to do.
    fn assert_refused(o: &Outcome, url: &str) {
        let Outcome::Failed { error, attempts } = o else {
            panic!("{url}: {o:?}");
        };
        assert_eq!(*attempts, 1, "{url}: {error}");
        assert!(error.contains("refusing to connect"), "{url}: {error}");
        assert!(error.contains("--allow-remote"), "{url}: {error}");
    }

    /// On paused time (the resolver's blocking lookups hold the clock): a refusal waits for
    /// no timer at all.
    #[tokio::test(start_paused = true)]
    async fn a_webhook_outside_loopback_is_refused_at_dial_time_by_every_spelling() {
        // 10.0.0.1 written four ways: the URL's text never reaches the guard, the address does
        // (decimal and hex go to the resolver, which reads them as inet_aton does).
        for url in [
            "http://10.0.0.1:9/h",
            "http://167772161:9/h",
            "http://0x0a000001:9/h",
            "http://[::ffff:10.0.0.1]:9/h",
        ] {
            let t = tokio::time::Instant::now();
            let o = post(url, Duration::from_secs(5), Reach::Loopback, BACKOFF).await;
            assert_refused(&o, url);
            // Refused before any packet: no connect timeout, no retry pauses.
            assert_eq!(t.elapsed(), Duration::ZERO, "{url}");
        }
    }

    #[tokio::test]
    async fn a_webhook_to_loopback_by_any_spelling_is_delivered() {
        let (addr, calls) = receiver([127, 0, 0, 1].into(), 0).await;
        let port = addr.port();
        for url in [
            format!("http://0x7f000001:{port}/hook"),
            format!("http://2130706433:{port}/hook"),
            format!("http://localhost:{port}/hook"),
        ] {
            let o = post(&url, Duration::from_secs(2), Reach::Loopback, BACKOFF).await;
            assert!(o.ok(), "{url}: {o:?}");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    /// This host's own address outside loopback (the source address of its route out), to
    /// stand for a remote receiver that really answers; `None` without such a route.
    fn outside_loopback() -> Option<std::net::IpAddr> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        // A UDP connect sends nothing: it only picks the route and the source address.
        s.connect("192.0.2.1:9").ok()?;
        let ip = s.local_addr().ok()?.ip();
        (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
    }

    #[tokio::test]
    async fn allow_remote_lets_a_webhook_reach_a_receiver_outside_loopback() {
        let Some(ip @ std::net::IpAddr::V4(v4)) = outside_loopback() else {
            eprintln!("skipped: this host has no IPv4 address outside loopback");
            return;
        };
        let (addr, calls) = receiver(ip, 0).await;
        let port = addr.port();
        // The address as written, and as one decimal number (through the resolver).
        for url in [
            format!("http://{addr}/hook"),
            format!("http://{}:{port}/hook", u32::from(v4)),
        ] {
            let o = post(&url, Duration::from_secs(2), Reach::Loopback, BACKOFF).await;
            assert_refused(&o, &url);
            let o = post(&url, Duration::from_secs(2), Reach::Anywhere, BACKOFF).await;
            assert_eq!(
                o,
                Outcome::Delivered {
                    status: 204,
                    attempts: 1
                },
                "{url}"
            );
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "a refused webhook sent nothing"
        );
    }
}
