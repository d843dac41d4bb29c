// Expected values here are exact binary fractions or sums of them.
#![allow(clippy::float_cmp)]

use super::*;

const INF: f64 = f64::INFINITY;

/// The `q` quantile of cumulative `buckets`, in the argument order the cases below are written.
fn bucket_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    Cumulative(buckets).quantile(q)
}

fn empty(server: ServerKind) -> Signals {
    Signals {
        server,
        running: None,
        waiting: None,
        kv_usage: None,
        num_gpu_blocks: None,
        max_running: None,
        preemptions_total: None,
        retracted_reqs: None,
        prefix_cache_queries_total: None,
        prefix_cache_hits_total: None,
        prefix_cache_hit_rate: None,
        prompt_tokens_total: None,
        generation_tokens_total: None,
        generation_seconds_total: None,
        decode_steps_total: None,
        busy_slots_per_decode: None,
        queue_time: None,
        ttft: None,
        itl: None,
        vector_searches_total: None,
        index_rebuilding: None,
        index_rebuilds_total: None,
    }
}

#[test]
fn a_rebuild_shorter_than_a_scrape_interval_still_counts() {
    let at = |i: u64| Instant::now() + Duration::from_millis(500 * i);
    let scrape = |searches: f64, rebuilding: f64, rebuilds: f64| Signals {
        vector_searches_total: Some(searches),
        index_rebuilding: Some(rebuilding),
        index_rebuilds_total: Some(rebuilds),
        ..empty(ServerKind::Vllm)
    };
    let t0 = at(0);
    let mut b = WindowBuilder::new();
    b.push(t0, scrape(100.0, 0.0, 0.0));
    b.push(t0 + Duration::from_millis(500), scrape(125.0, 0.0, 0.0));
    b.push(t0 + Duration::from_secs(1), scrape(150.0, 0.0, 0.0));
    let idle = b.finish().unwrap();
    assert_eq!(idle.index_rebuild, Some(0.0));
    assert!((idle.vector_searches_per_s.unwrap() - 50.0).abs() < 1e-9);
    // Rebuilt between two scrapes: neither saw it running, the counter did.
    b.push(t0 + Duration::from_millis(1500), scrape(170.0, 0.0, 1.0));
    b.push(t0 + Duration::from_secs(2), scrape(190.0, 1.0, 1.0));
    let busy = b.finish().unwrap();
    assert_eq!(busy.index_rebuild, Some(2.0));
    // An engine without a vector index reports none.
    b.push(t0 + Duration::from_millis(2500), empty(ServerKind::Vllm));
    b.push(t0 + Duration::from_secs(3), empty(ServerKind::Vllm));
    assert_eq!(b.finish().unwrap().index_rebuild, None);
}

fn hist(buckets: &[(f64, f64)], sum: f64) -> Histogram {
    Histogram {
        buckets: buckets.to_vec(),
        count: buckets.last().unwrap().1,
        sum,
    }
}

#[test]
fn quantile_interpolates_like_histogram_quantile() {
    let b = [(1.0, 10.0), (2.0, 20.0), (4.0, 40.0), (INF, 40.0)];
    assert_eq!(bucket_quantile(0.25, &b), Some(1.0));
    assert_eq!(bucket_quantile(0.5, &b), Some(2.0));
    assert_eq!(bucket_quantile(0.75, &b), Some(3.0));
    assert_eq!(
        bucket_quantile(0.125, &b),
        Some(0.5),
        "lowest bucket starts at 0"
    );
    // Rank in the +Inf bucket: the largest finite bound.
    assert_eq!(bucket_quantile(0.99, &[(1.0, 1.0), (INF, 10.0)]), Some(1.0));
    // A non-positive first bound is returned as is.
    assert_eq!(
        bucket_quantile(0.1, &[(0.0, 5.0), (1.0, 10.0), (INF, 10.0)]),
        Some(0.0)
    );
    assert_eq!(
        bucket_quantile(0.5, &[(1.0, 0.0), (INF, 0.0)]),
        None,
        "no observations"
    );
    assert_eq!(
        bucket_quantile(0.5, &[(1.0, 3.0), (2.0, 4.0)]),
        None,
        "no +Inf bucket"
    );
    assert_eq!(bucket_quantile(0.5, &[(INF, 4.0)]), None, "no finite bound");
    assert_eq!(bucket_quantile(0.5, &[]), None);
    // Non-monotonic counts are forced monotonic rather than producing garbage.
    let q = bucket_quantile(0.5, &[(1.0, 6.0), (2.0, 2.0), (INF, 10.0)]).unwrap();
    assert!((0.0..=1.0).contains(&q), "{q}");
}

#[test]
fn rates_quantiles_and_gauges_over_a_window() {
    let t0 = Instant::now();
    let mut a = empty(ServerKind::Vllm);
    a.running = Some(4.0);
    a.preemptions_total = Some(10.0);
    a.prompt_tokens_total = Some(1000.0);
    a.prefix_cache_queries_total = Some(100.0);
    a.prefix_cache_hits_total = Some(50.0);
    // 1000 fast requests before the window: they must not count in it.
    a.ttft = Some(hist(
        &[(0.1, 1000.0), (1.0, 1000.0), (10.0, 1000.0), (INF, 1000.0)],
        50.0,
    ));
    let mut b = a.clone();
    b.running = Some(9.0);
    b.preemptions_total = Some(14.0);
    b.prompt_tokens_total = Some(3000.0);
    let mut c = b.clone();
    c.running = Some(6.0);
    c.preemptions_total = Some(16.0);
    c.prompt_tokens_total = Some(5000.0);
    c.prefix_cache_queries_total = Some(300.0);
    c.prefix_cache_hits_total = Some(100.0);
    // 100 slow requests in the window, all between 1 s and 10 s.
    c.ttft = Some(hist(
        &[(0.1, 1000.0), (1.0, 1000.0), (10.0, 1100.0), (INF, 1100.0)],
        600.0,
    ));

    let mut w = WindowBuilder::new();
    w.push(t0, a);
    assert!(w.finish().is_none(), "a single scrape is only a baseline");
    w.push(t0 + Duration::from_millis(500), b);
    w.push(t0 + Duration::from_secs(2), c);
    let win = w.finish().unwrap();
    assert_eq!(win.elapsed, Duration::from_secs(2));
    assert_eq!(
        win.running,
        Some(GaugeWindow {
            last: 6.0,
            max: 9.0
        })
    );
    assert_eq!(win.preemptions_per_s, Some(3.0));
    assert_eq!(win.preemption_activity(), Some(3.0));
    assert_eq!(win.prompt_tokens_per_s, Some(2000.0));
    assert_eq!(win.generation_tokens_per_s, None);
    assert_eq!(win.prefix_cache_hit_rate, Some(0.25));
    let ttft = win.ttft.unwrap();
    assert_eq!(ttft.count, 100.0);
    assert!((ttft.mean - 5.5).abs() < 1e-9);
    assert!((ttft.p50 - 5.5).abs() < 1e-9, "{ttft:?}");
    assert!((ttft.p99 - 9.91).abs() < 1e-9, "{ttft:?}");
    assert!(win.queue_time.is_none());
    // Nothing new since: no window.
    assert!(w.finish().is_none());
}

#[test]
fn counter_and_histogram_resets_count_the_new_value() {
    let t0 = Instant::now();
    let mut a = empty(ServerKind::Vllm);
    a.generation_tokens_total = Some(90_000.0);
    a.itl = Some(hist(&[(0.01, 500.0), (0.1, 900.0), (INF, 900.0)], 40.0));
    let mut b = empty(ServerKind::Vllm);
    // The server restarted: totals start again from zero.
    b.generation_tokens_total = Some(300.0);
    b.itl = Some(hist(&[(0.01, 0.0), (0.1, 10.0), (INF, 10.0)], 0.5));
    let mut w = WindowBuilder::new();
    w.push(t0, a);
    w.push(t0 + Duration::from_secs(1), b);
    let win = w.finish().unwrap();
    assert_eq!(win.generation_tokens_per_s, Some(300.0));
    let itl = win.itl.unwrap();
    assert_eq!(itl.count, 10.0);
    assert!(itl.p50 > 0.01 && itl.p50 <= 0.1, "{itl:?}");
}

#[test]
fn next_window_starts_at_the_previous_last_scrape() {
    let t0 = Instant::now();
    let mut s = empty(ServerKind::Sglang);
    let mut w = WindowBuilder::new();
    for (i, (retracted, hit)) in [(0.0, 0.5), (3.0, 0.4), (1.0, 0.3)].into_iter().enumerate() {
        s.retracted_reqs = Some(retracted);
        s.prefix_cache_hit_rate = Some(hit);
        s.prompt_tokens_total = Some(100.0 * i as f64);
        w.push(t0 + Duration::from_secs(i as u64), s.clone());
        if i == 1 {
            let first = w.finish().unwrap();
            assert_eq!(
                first.retracted_reqs,
                Some(GaugeWindow {
                    last: 3.0,
                    max: 3.0
                })
            );
            assert_eq!(first.preemption_activity(), Some(3.0));
        }
    }
    let second = w.finish().unwrap();
    assert_eq!(second.elapsed, Duration::from_secs(1));
    assert_eq!(second.prompt_tokens_per_s, Some(100.0));
    // Gauges restart with the window.
    assert_eq!(
        second.retracted_reqs,
        Some(GaugeWindow {
            last: 1.0,
            max: 1.0
        })
    );
    assert_eq!(
        second.prefix_cache_hit_rate,
        Some(0.3),
        "SGLang's gauge is used as is"
    );
    assert_eq!(second.server, ServerKind::Sglang);
}

#[test]
fn baseline_gauges_and_changed_bucket_layouts() {
    let t0 = Instant::now();
    let mut a = empty(ServerKind::Vllm);
    a.kv_usage = Some(0.99);
    a.ttft = Some(hist(&[(0.5, 900.0), (1.0, 1000.0), (INF, 1000.0)], 600.0));
    let mut b = empty(ServerKind::Vllm);
    b.kv_usage = Some(0.2);
    // Same number of buckets, other bounds, and a larger count: still a
    // restart with a new layout, not an increase.
    b.ttft = Some(hist(&[(2.0, 1200.0), (4.0, 1500.0), (INF, 1500.0)], 2000.0));
    let mut w = WindowBuilder::new();
    w.push(t0, a);
    w.push(t0 + Duration::from_secs(1), b);
    let win = w.finish().unwrap();
    // The baseline scrape belongs to the previous window.
    assert_eq!(
        win.kv_usage,
        Some(GaugeWindow {
            last: 0.2,
            max: 0.2
        })
    );
    let ttft = win.ttft.unwrap();
    assert_eq!((ttft.count, ttft.p50), (1500.0, 1.25));
}

#[test]
fn llamacpp_busy_slots_since_start_become_the_windows_batch() {
    let t0 = Instant::now();
    let at = |busy: f64, decodes: f64, tokens: f64, secs: f64| {
        let mut s = empty(ServerKind::LlamaCpp);
        s.busy_slots_per_decode = Some(busy);
        s.decode_steps_total = Some(decodes);
        s.generation_tokens_total = Some(tokens);
        s.generation_seconds_total = Some(secs);
        s
    };
    let mut w = WindowBuilder::new();
    // 1000 steps of one sequence since start; then 200 steps of 4 (a mean since start of 1.5,
    // printed with six digits as llama.cpp does) ...
    w.push(t0, at(1.0, 1000.0, 1000.0, 6.5));
    w.push(t0 + Duration::from_secs(1), at(1.5, 1200.0, 1800.0, 27.3));
    let win = w.finish().unwrap();
    let batch = win.batch_mean.unwrap();
    assert!((batch - 4.0).abs() < 1e-6, "{batch}");
    // ... whose 800 tokens took 26 ms each, per sequence.
    let tpot = win.generation_s_per_token.unwrap();
    assert!((tpot - 0.026).abs() < 1e-9, "{tpot}");
    // An idle window: no step, a batch of 0, no token time.
    w.push(t0 + Duration::from_secs(2), at(1.5, 1200.0, 1800.0, 27.3));
    let idle = w.finish().unwrap();
    assert_eq!(idle.batch_mean, Some(0.0));
    assert_eq!(idle.generation_s_per_token, None);
    // A restart: the counters start again from zero.
    w.push(t0 + Duration::from_secs(3), at(2.0, 50.0, 100.0, 1.0));
    assert!((w.finish().unwrap().batch_mean.unwrap() - 2.0).abs() < 1e-9);
    // Other servers have no such counters.
    assert_eq!(empty_window_batch(), None);
}

fn empty_window_batch() -> Option<f64> {
    let t0 = Instant::now();
    let mut w = WindowBuilder::new();
    w.push(t0, empty(ServerKind::Vllm));
    w.push(t0 + Duration::from_secs(1), empty(ServerKind::Vllm));
    w.finish().unwrap().batch_mean
}
