//! A server that accepts connections and never answers: every request stays in flight
//! (holding its connection and permits) until its timeout or an abort.

use std::{
    net::TcpListener,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

/// Starts it on a loopback port; its base URL and the count of connections accepted.
pub fn hung_server() -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            seen.fetch_add(1, Ordering::Relaxed);
            held.push(s);
        }
    });
    (url, n)
}
