//! The simulator's own overhead (ignored by default: run it in release):
//! `cargo test --release -p inferscope --test it sim_bench -- --ignored --nocapture`

#[test]
#[ignore = "benchmark: run in release with --ignored"]
fn zero_cost_sim_streams_at_least_20k_tokens_per_second_on_one_core() {
    let r = inferscope::sim::bench::streamed_tokens_per_sec(64, 500, true).unwrap();
    println!(
        "sim overhead: {} streams, {} tokens in {:.3} s = {:.0} streamed tokens/s (one core: {})",
        r.streams,
        r.tokens,
        r.elapsed.as_secs_f64(),
        r.tokens_per_sec,
        r.one_core
    );
    assert!(
        r.tokens_per_sec >= 20_000.0,
        "{:.0} tokens/s",
        r.tokens_per_sec
    );
}

#[test]
fn bench_counts_every_token() {
    let r = inferscope::sim::bench::streamed_tokens_per_sec(4, 50, false).unwrap();
    assert_eq!(r.tokens, 200);
    assert!(r.tokens_per_sec > 0.0);
}
