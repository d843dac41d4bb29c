//! The `max_tokens_one` chaos knob does what the scenario says: the configured share of
//! requests reaches the server with `max_tokens: 1` (counted at the server), and the report
//! counts them apart (`counts.chaos`) with the same number.

use std::path::Path;

use inferscope::loadgen::{self, Options, Plan};
use tokio_util::sync::CancellationToken;

use crate::counting_server::counting_server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_one_reaches_the_server_at_its_share_and_is_reported_apart() {
    let (url, seen) = counting_server();
    let yaml = format!(
        "target: {url}\nseed: 7\ntimeout: 5s\nphases:\n  - name: p\n    duration: 4s\n\
         \x20   load: {{shape: constant, rate: 50}}\n\
         \x20   request: {{endpoint: chat, model: m, max_tokens: 16, stream: false}}\n\
         \x20   chaos: {{max_tokens_one: 0.25}}\n"
    );
    let plan = Plan::from_yaml(&yaml, "chaos.yaml", Path::new(".")).unwrap();
    let r = loadgen::run(&plan, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let mut sent = std::mem::take(&mut seen.lock().unwrap().sent);
    // The model discovery's GET /v1/models asks for no tokens.
    sent.retain(|(_, t)| *t > 0);
    let ones = sent.iter().filter(|(_, t)| *t == 1).count() as u64;
    let others = sent.iter().filter(|(_, t)| *t == 16).count() as u64;
    assert_eq!(
        ones + others,
        sent.len() as u64,
        "only 1 or 16 tokens asked"
    );
    let c = &r.phases[0].counts;
    assert_eq!(c.finished, sent.len() as u64, "{c:?}");
    assert_eq!(c.chaos.get("max_tokens_one").copied(), Some(ones), "{c:?}");
    // 200 requests at a share of 0.25: 50 expected, within four standard deviations
    // (sd = sqrt(200 x 0.25 x 0.75) = 6.1).
    let share = ones as f64 / sent.len() as f64;
    assert!(
        (share - 0.25).abs() < 4.0 * 6.1 / 200.0,
        "{ones} of {}",
        sent.len()
    );
    assert!(
        r.table().contains("chaos (on purpose): max_tokens_one"),
        "{}",
        r.table()
    );
}
