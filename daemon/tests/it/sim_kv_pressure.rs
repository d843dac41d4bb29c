//! The `kv-pressure` profile under concurrent streams fills the KV cache and preempts; the
//! `healthy` profile under the same load does neither.

use crate::sim_common;

use std::{
    fmt::Write as _,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use serde_json::json;
use sim_common::*;

struct Observed {
    max_kv_usage: f64,
    preemptions: f64,
    completed: usize,
}

async fn drive(profile_name: &str) -> Observed {
    let srv = start(profile(profile_name)).await;
    let c = client();
    let url = format!("{}/v1/completions", srv.url());
    let mut streams = Vec::new();
    for i in 0..40 {
        let (c, url) = (c.clone(), url.clone());
        // Distinct prompts of ~64 tokens, so the prefix cache does not share blocks.
        let prompt = (0..64).fold(String::new(), |mut p, j| {
            let _ = write!(p, " w{i}x{j}");
            p
        });
        streams.push(tokio::spawn(async move {
            let r = stream(
                &c,
                &url,
                &json!({"model": "inferscope-sim", "prompt": prompt, "max_tokens": 120,
                "stream": true, "stream_options": {"include_usage": true}}),
                None,
            )
            .await;
            assert_eq!(r.status, 200);
            let usage: serde_json::Value =
                serde_json::from_str(&r.events[r.events.len() - 2].1).unwrap();
            // Preempted or not, every stream gets all its tokens.
            assert_eq!(usage["usage"]["completion_tokens"], 120);
            assert_eq!(r.events.last().unwrap().1, "[DONE]");
        }));
    }
    let done = Arc::new(AtomicBool::new(false));
    let poller = {
        let (c, done) = (c.clone(), done.clone());
        let murl = format!("{}/metrics", srv.url());
        tokio::spawn(async move {
            let mut max: f64 = 0.0;
            while !done.load(Ordering::SeqCst) {
                let (_, text) = get(&c, &murl).await;
                max = max.max(metric(&text, "vllm:kv_cache_usage_perc"));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            max
        })
    };
    let mut completed = 0;
    for s in streams {
        tokio::time::timeout(Duration::from_mins(2), s)
            .await
            .unwrap()
            .unwrap();
        completed += 1;
    }
    done.store(true, Ordering::SeqCst);
    let max_kv_usage = poller.await.unwrap();
    let text = get(&c, &format!("{}/metrics", srv.url())).await.1;
    assert!(eventually(Duration::from_secs(2), || srv.kv_used_blocks() == 0).await);
    Observed {
        max_kv_usage,
        preemptions: metric(&text, "vllm:num_preemptions_total"),
        completed,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_pressure_fills_the_cache_and_preempts_but_healthy_does_not() {
    let kv = drive("kv-pressure").await;
    eprintln!(
        "kv-pressure: max usage {:.3}, preemptions {}",
        kv.max_kv_usage, kv.preemptions
    );
    assert_eq!(kv.completed, 40);
    assert!(
        kv.max_kv_usage >= 0.95,
        "kv-pressure max usage {}",
        kv.max_kv_usage
    );
    assert!(kv.preemptions > 0.0, "kv-pressure had no preemption");

    let ok = drive("healthy").await;
    eprintln!(
        "healthy: max usage {:.3}, preemptions {}",
        ok.max_kv_usage, ok.preemptions
    );
    assert_eq!(ok.completed, 40);
    assert!(
        ok.max_kv_usage < 0.5,
        "healthy max usage {}",
        ok.max_kv_usage
    );
    assert!(
        ok.max_kv_usage > 0.0,
        "healthy was never observed under load"
    );
    assert!(
        ok.preemptions == 0.0,
        "healthy preempted {} times",
        ok.preemptions
    );
}
