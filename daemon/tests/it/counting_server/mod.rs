//! A chat server for tests that count at the server: it holds each request a while (100 ms
//! unless told otherwise), answers with the `max_tokens` it was asked for, and records every
//! request's body and arrival, how many it held at once and each answer's time and tokens.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// What the counting server saw.
#[derive(Default)]
pub struct Seen {
    in_flight: usize,
    /// The most requests held at once.
    pub most_in_flight: usize,
    /// (when it answered, tokens sent).
    pub sent: Vec<(Instant, u64)>,
    /// Every `POST` body, with when it arrived (the model discovery's `GET` is left out).
    pub asked: Vec<(Instant, serde_json::Value)>,
}

/// A chat server that holds each request 100 ms and answers with `max_tokens` tokens.
pub fn counting_server() -> (String, Arc<Mutex<Seen>>) {
    holding_server(Duration::from_millis(100))
}

/// A chat server that holds each request `hold` and answers with `max_tokens` tokens.
pub fn holding_server(hold: Duration) -> (String, Arc<Mutex<Seen>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let seen = shared.clone();
            std::thread::spawn(move || serve(s, &seen, hold));
        }
    });
    (url, seen)
}

/// One keep-alive connection: requests until the client closes it.
fn serve(stream: TcpStream, seen: &Mutex<Seen>, hold: Duration) {
    let mut out = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    loop {
        let mut len = 0;
        let mut line = String::new();
        let mut request_line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if request_line.is_empty() {
                request_line.clone_from(&line);
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
            if request_line.starts_with("POST ") {
                s.asked.push((Instant::now(), asked.clone()));
            }
            s.in_flight += 1;
            s.most_in_flight = s.most_in_flight.max(s.in_flight);
        }
        std::thread::sleep(hold);
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
