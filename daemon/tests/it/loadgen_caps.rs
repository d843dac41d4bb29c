//! A phase's caps hold in every mode: open-loop arrivals, closed-loop users and the later turns
//! of conversations. Measured at the server: a counting test server answers each chat request
//! after 100 ms with the tokens it asked for, and records how many requests it held at once and
//! the tokens it sent in each second.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use inferscope::loadgen::{self, Options, Plan};
use tokio_util::sync::CancellationToken;

/// What the counting server saw.
#[derive(Default)]
struct Seen {
    in_flight: usize,
    most_in_flight: usize,
    /// (when it answered, tokens sent).
    sent: Vec<(Instant, u64)>,
}

/// A chat server that holds each request 100 ms and answers with `max_tokens` tokens.
fn counting_server() -> (String, Arc<Mutex<Seen>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let seen = shared.clone();
            std::thread::spawn(move || serve(s, &seen));
        }
    });
    (url, seen)
}

/// One keep-alive connection: requests until the client closes it.
fn serve(stream: TcpStream, seen: &Mutex<Seen>) {
    let mut out = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    loop {
        let mut len = 0;
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let asked: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let tokens = asked["max_tokens"].as_u64().unwrap_or(0);
        {
            let mut s = seen.lock().unwrap();
            s.in_flight += 1;
            s.most_in_flight = s.most_in_flight.max(s.in_flight);
        }
        std::thread::sleep(Duration::from_millis(100));
        let answer = serde_json::json!({
            "id": "c", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": "tok ".repeat(tokens as usize)}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": tokens + 3}
        })
        .to_string();
        {
            let mut s = seen.lock().unwrap();
            s.in_flight -= 1;
            s.sent.push((Instant::now(), tokens));
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// Runs one 2 s phase of `phase` (YAML lines under the phase) against a fresh counting server.
async fn run(phase: &str) -> (Seen, loadgen::StressReport) {
    let (url, seen) = counting_server();
    let yaml = format!(
        "target: {url}\ntimeout: 5s\ngrace: 1s\nphases:\n  - name: p\n    duration: 2s\n{phase}"
    );
    let plan = Plan::from_yaml(&yaml, "caps.yaml", Path::new(".")).unwrap();
    let r = loadgen::run(&plan, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (seen, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_in_flight_cap_holds_for_users_and_conversation_turns() {
    // Closed loop: 8 users, at most 2 in flight.
    let (seen, r) = run(
        "    load: {shape: concurrency, users: 8}\n    max_in_flight: 2\n    request: {endpoint: chat, model: m, max_tokens: 4, stream: false}\n",
    )
    .await;
    assert!(
        seen.most_in_flight <= 2,
        "{} in flight",
        seen.most_in_flight
    );
    assert!(r.phases[0].counts.ok >= 20, "{:?}", r.phases[0].counts);

    // Open loop whose conversations go on for 4 turns each: the later turns take the cap too.
    let (seen, r) = run(
        "    load: {shape: constant, rate: 20}\n    max_in_flight: 2\n    request: {endpoint: chat, model: m, max_tokens: 4, stream: false, conversation: {turns: 4}}\n",
    )
    .await;
    assert!(
        seen.most_in_flight <= 2,
        "{} in flight",
        seen.most_in_flight
    );
    let c = &r.phases[0].counts;
    assert!(c.ok >= 20, "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tokens_per_second_cap_holds_at_the_server_in_every_mode() {
    for load in [
        "{shape: constant, rate: 50}",
        "{shape: concurrency, users: 8}",
    ] {
        let (seen, r) = run(&format!(
            "    load: {load}\n    max_tokens_per_s: 100\n    request: {{endpoint: chat, model: m, max_tokens: 10, stream: false, conversation: {{turns: 2}}}}\n"
        ))
        .await;
        // A bucket of 100 tokens/s with one second of burst: over the 2 s phase at most
        // 100 + 2 x 100 tokens, whatever the mode. Uncapped, 8 users send ~1,600.
        let tokens: u64 = seen.sent.iter().map(|(_, t)| t).sum();
        assert!(tokens <= 300, "{load}: {tokens} tokens in 2 s");
        assert!(
            tokens >= 150,
            "{load}: {tokens} tokens: the cap starved the phase"
        );
        let first = seen.sent.first().map(|(t, _)| *t).unwrap();
        let late: u64 = seen
            .sent
            .iter()
            .filter(|(t, _)| t.duration_since(first) >= Duration::from_secs(1))
            .map(|(_, t)| t)
            .sum();
        // After the first second (the burst spent), the rate itself: 100/s (plus one
        // request's worth of slack for the edges).
        assert!(
            late <= 100 + 2 * 10,
            "{load}: {late} tokens after the first second"
        );
        assert!(r.phases[0].counts.ok > 0, "{:?}", r.phases[0].counts);
    }
}

#[test]
fn caps_that_could_not_hold_are_refused() {
    let base = "target: http://127.0.0.1:1\nphases:\n  - name: p\n    duration: 1s\n";
    for (phase, want) in [
        (
            "    load: {shape: constant, rate: 5}\n    max_tokens_per_s: 100\n    request: {endpoint: chat}\n",
            "set `request.max_tokens`",
        ),
        (
            "    load: {shape: constant, rate: 5}\n    max_tokens_per_s: 100\n    request: {endpoint: http}\n",
            "needs an LLM endpoint",
        ),
        (
            "    load: {shape: concurrency, users: 2}\n    max_in_flight: 1\n    when_capped: drop\n    request: {endpoint: chat}\n",
            "a closed loop (`concurrency`) waits",
        ),
    ] {
        let e = Plan::from_yaml(&format!("{base}{phase}"), "c.yaml", Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
        assert!(e.starts_with("c.yaml:"), "{e}");
    }
    let body = "    load: {shape: constant, rate: 5}\n    max_tokens_per_s: 100\n    request: {endpoint: chat, body: {max_tokens: 8}}\n";
    assert!(Plan::from_yaml(&format!("{base}{body}"), "c.yaml", Path::new(".")).is_ok());
}
