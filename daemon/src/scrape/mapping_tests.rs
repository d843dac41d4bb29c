// Expected values here are exact binary fractions or sums of them.
#![allow(clippy::float_cmp)]

use super::*;
use crate::scrape::prom_text::parse;

const VLLM_V1: &str = include_str!("../../tests/fixtures/vllm_v1_metrics.txt");
const VLLM_V0: &str = include_str!("../../tests/fixtures/vllm_v0_metrics.txt");
const SGLANG: &str = include_str!("../../tests/fixtures/sglang_metrics.txt");
const TGI: &str = include_str!("../../tests/fixtures/tgi_metrics.txt");
/// Scraped from llama.cpp's `llama-server --metrics` (4 slots, 8 requests at once).
const LLAMACPP: &str = include_str!("../../tests/fixtures/llamacpp_metrics.txt");

fn signals(text: &str) -> Signals {
    extract(&parse(text), &SignalOptions::default())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

#[test]
fn vllm_v1_two_engines_are_combined() {
    let s = signals(VLLM_V1);
    assert_eq!(s.server, ServerKind::Vllm);
    assert_eq!((s.running, s.waiting), (Some(21.0), Some(3.0)));
    // The most loaded engine, not the sum or mean.
    assert_eq!(s.kv_usage, Some(0.8125));
    assert_eq!(s.num_gpu_blocks, Some(2 * 27089));
    assert_eq!(s.preemptions_total, Some(9.0));
    assert_eq!(s.prefix_cache_queries_total, Some(523_441.0 + 498_120.0));
    assert_eq!(s.prefix_cache_hits_total, Some(261_720.0 + 124_530.0));
    assert_eq!(s.prompt_tokens_total, Some(1_021_561.0));
    assert_eq!(s.generation_tokens_total, Some(181_233.0 + 176_002.0));
    assert_eq!(s.prefix_cache_hit_rate, None);
    assert_eq!(s.retracted_reqs, None);
    let ttft = s.ttft.unwrap();
    assert_eq!(ttft.count, 642.0 + 644.0);
    assert!(close(ttft.sum, 60.31 + 52.77));
    assert_eq!(ttft.buckets.len(), 23);
    assert_eq!(ttft.buckets[2], (0.01, 8.0));
    assert_eq!(*ttft.buckets.last().unwrap(), (f64::INFINITY, 1286.0));
    assert_eq!(s.queue_time.unwrap().count, 1288.0);
    let itl = s.itl.unwrap();
    assert!(close(itl.sum, 5631.2 + 5402.9));
}

#[test]
fn vllm_old_names_are_used_when_new_ones_are_absent() {
    let s = signals(VLLM_V0);
    assert_eq!(s.server, ServerKind::Vllm);
    assert_eq!(
        (s.running, s.waiting, s.kv_usage),
        (Some(32.0), Some(17.0), Some(0.97))
    );
    assert_eq!(
        (s.prefix_cache_queries_total, s.prefix_cache_hits_total),
        (Some(5000.0), Some(1250.0))
    );
    assert_eq!(s.itl.unwrap().count, 4050.0);
    assert_eq!(s.ttft.unwrap().count, 100.0);
    assert_eq!((s.queue_time, s.num_gpu_blocks), (None, None));
}

#[test]
fn sglang_names() {
    let s = signals(SGLANG);
    assert_eq!(s.server, ServerKind::Sglang);
    assert_eq!(
        (s.running, s.waiting, s.kv_usage),
        (Some(24.0), Some(5.0), Some(0.28))
    );
    assert_eq!(s.retracted_reqs, Some(2.0));
    assert_eq!(s.prefix_cache_hit_rate, Some(0.007_507_552_643_049_313));
    assert_eq!(
        (s.prompt_tokens_total, s.generation_tokens_total),
        (Some(8_128_902.0), Some(7_557_572.0))
    );
    assert_eq!(s.ttft.unwrap().count, 20110.0);
    assert_eq!(s.queue_time.unwrap().count, 20110.0);
    assert!(s.itl.is_some());
    assert_eq!((s.preemptions_total, s.num_gpu_blocks), (None, None));
}

#[test]
fn tgi_names_and_kv_proxy() {
    let s = signals(TGI);
    assert_eq!(s.server, ServerKind::Tgi);
    assert_eq!((s.running, s.waiting), (Some(28.0), Some(9.0)));
    assert_eq!(
        s.kv_usage, None,
        "no KV gauge without --max-batch-total-tokens"
    );
    assert_eq!(s.ttft, None);
    assert_eq!(
        (s.prompt_tokens_total, s.generation_tokens_total),
        (Some(1_288_110.0), Some(811_022.0))
    );
    assert_eq!(s.queue_time.unwrap().count, 5120.0);
    assert_eq!(s.itl.unwrap().count, 5095.0);
    let opts = SignalOptions {
        tgi_max_batch_total_tokens: Some(102_400),
    };
    assert_eq!(extract(&parse(TGI), &opts).kv_usage, Some(0.5));
}

#[test]
fn llamacpp_slots_and_deferred_requests() {
    let s = signals(LLAMACPP);
    assert_eq!(s.server, ServerKind::LlamaCpp);
    // 4 slots decoding, 4 requests deferred for want of a slot.
    assert_eq!((s.running, s.waiting), (Some(4.0), Some(4.0)));
    assert_eq!(
        (s.prompt_tokens_total, s.generation_tokens_total),
        (Some(182.0), Some(67.0))
    );
    // It exports no KV gauge, queue time or latency histograms.
    assert_eq!(
        (s.kv_usage, s.queue_time, s.ttft, s.itl),
        (None, None, None, None)
    );
    // The batch and the time per token come from counters (see window.rs).
    assert_eq!(
        (
            s.decode_steps_total,
            s.busy_slots_per_decode,
            s.generation_seconds_total
        ),
        (Some(104.0), Some(2.06731), Some(0.494_784))
    );
    // Releases that still export the KV gauge give it.
    let old = format!("{LLAMACPP}llamacpp:kv_cache_usage_ratio 0.75\n");
    assert_eq!(signals(&old).kv_usage, Some(0.75));
}

#[test]
fn unknown_server_has_no_signals() {
    let s = signals("# TYPE node_load1 gauge\nnode_load1 0.5\n");
    assert_eq!(s.server, ServerKind::Unknown);
    assert_eq!((s.running, s.ttft), (None, None));
    assert_eq!(detect_server(&parse("")), ServerKind::Unknown);
}

#[test]
fn non_finite_gauges_are_ignored() {
    let s = signals(
        "vllm:num_requests_running{engine=\"0\"} NaN\nvllm:num_requests_running{engine=\"1\"} 4\n",
    );
    assert_eq!(s.running, Some(4.0));
}

#[test]
fn histograms_with_different_layouts_merge_as_step_functions() {
    let text = "# TYPE vllm:time_to_first_token_seconds histogram\n\
        vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"1.0\"} 4\n\
        vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\"} 10\n\
        vllm:time_to_first_token_seconds_count{engine=\"0\"} 10\n\
        vllm:time_to_first_token_seconds_sum{engine=\"0\"} 12\n\
        vllm:time_to_first_token_seconds_bucket{engine=\"1\",le=\"2.0\"} 1\n\
        vllm:time_to_first_token_seconds_bucket{engine=\"1\",le=\"+Inf\"} 3\n\
        vllm:time_to_first_token_seconds_count{engine=\"1\"} 3\n\
        vllm:time_to_first_token_seconds_sum{engine=\"1\"} 9\n";
    let h = signals(text).ttft.unwrap();
    assert_eq!(
        h.buckets,
        vec![(1.0, 4.0), (2.0, 5.0), (f64::INFINITY, 13.0)]
    );
    assert_eq!((h.count, h.sum), (13.0, 21.0));
}

#[test]
fn untyped_histogram_samples_are_still_a_histogram() {
    let text = "tgi_queue_size 3\n\
        tgi_request_queue_duration_bucket{le=\"0.5\"} 2\n\
        tgi_request_queue_duration_bucket{le=\"+Inf\"} 4\n\
        tgi_request_queue_duration_sum 3.5\ntgi_request_queue_duration_count 4\n";
    let h = signals(text).queue_time.unwrap();
    assert_eq!(h.buckets, vec![(0.5, 2.0), (f64::INFINITY, 4.0)]);
    assert_eq!((h.count, h.sum), (4.0, 3.5));
}
