//! What the OTLP tests export: windows with evidence from every source, sampled requests with
//! stages, labels, a collector configuration and resource attributes.

use std::time::{Duration, SystemTime};

use inferscope::collect::catalog::Labels;
use inferscope::collect::timeline::{
    GpuSignals, LoadSignals, NetSignals, Quantiles, RunqSignals, ServerSignals, Window,
};
use inferscope::export::otlp::{
    OtlpConfig, OtlpOptions, PipelineTask, Protocol, SampledRequest, Stage, StepCount,
};

pub fn q(p50: f64) -> Quantiles {
    Quantiles {
        p50,
        p95: p50 * 2.0,
        p99: p50 * 3.0,
        max: p50 * 4.0,
    }
}

/// A window with evidence from every source, so every catalogued signal has a value.
pub fn window(i: u64) -> Window {
    Window {
        start_unix_ms: 1_700_000_000_000 + i * 1000,
        len_ms: 1000,
        phase: Some("peak".into()),
        load: Some(LoadSignals {
            requests: 10 + i,
            errors: 1,
            target_rps: Some(20.0),
            achieved_rps: 19.5,
            in_flight_max: 8,
            ttft_ms: Some(q(100.0)),
            itl_ms: Some(q(20.0)),
            e2e_ms: Some(q(900.0)),
            send_lag_ms: Some(q(0.5)),
            output_tokens_per_s: 300.0,
            ..LoadSignals::default()
        }),
        server: Some(ServerSignals {
            running: Some(8.0),
            waiting: Some(3.0),
            kv_usage: Some(0.93),
            preemptions_per_s: Some(0.5),
            prefix_hit_rate: Some(0.4),
            queue_time_p95_ms: Some(50.0),
            ttft_p95_ms: Some(180.0),
            prompt_tokens_per_s: Some(900.0),
            ..ServerSignals::default()
        }),
        runq: Some(RunqSignals {
            samples: 100,
            p50_us: 20.0,
            p99_us: 2500.0,
            mean_us: 60.0,
            total_ms: 250.0,
            loadgen_p99_us: Some(40.0),
            loadgen_total_ms: Some(2.0),
            busiest_thread_ms: Some(980.0),
            ..RunqSignals::default()
        }),
        net: Some(NetSignals {
            connects: 2,
            connect_p99_ms: Some(0.3),
            srtt_mean_us: Some(150.0),
            srtt_max_us: Some(400.0),
            retrans: 1,
            exchanges: 12,
            server_ttfb_p50_ms: Some(5.0),
            server_first_token_p50_ms: Some(90.0),
            transit_p50_ms: Some(0.2),
            closes: 3,
            lifetime_p50_ms: Some(120.0),
            called_exchanges: 6,
            called_first_token_p50_ms: Some(40.0),
            ..NetSignals::default()
        }),
        gpu: Some(GpuSignals {
            allocs: 4,
            frees: 3,
            oom: 0,
            live_bytes: 8 << 30,
            sync_ms: 12.0,
            launches: 500,
            h2d_bytes: 1 << 20,
            d2h_bytes: 2 << 20,
            mapped_bytes: 4 << 30,
            mem_used_frac: Some(0.97),
            xids: 0,
            // One GPU as NVML sampled it: every per-GPU gauge has a point (`gpu` attribute).
            devices: vec![inferscope::collect::timeline::GpuDevice {
                index: 0,
                samples: 1,
                memory_used_bytes: Some(78 << 30),
                memory_reserved_bytes: Some(1 << 29),
                memory_total_bytes: Some(80 << 30),
                sm_util_percent: Some(97.0),
                mem_bw_util_percent: Some(55.0),
                power_w: Some(690.0),
                power_limit_w: Some(700.0),
                energy_j: Some(690.0),
                sm_clock_mhz: Some(1410.0),
                throttle_share: Some(1.0),
                pcie_tx_bytes_per_s: Some(2e6),
                pcie_rx_bytes_per_s: Some(8e6),
                ..Default::default()
            }],
            xid_events: Vec::new(),
        }),
        requests: Vec::new(),
    }
}

pub fn request(i: u32) -> SampledRequest {
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + u64::from(i));
    let ms = |m: u64| start + Duration::from_millis(m);
    SampledRequest {
        start,
        end: ms(900),
        ttft: Some(Duration::from_millis(120)),
        tpot: Some(Duration::from_millis(20)),
        input_tokens: Some(512),
        output_tokens: Some(40),
        error: None,
        stages: vec![
            Stage {
                name: "queue".into(),
                start,
                end: ms(30),
            },
            Stage {
                name: "server_first_byte".into(),
                start: ms(30),
                end: ms(110),
            },
            Stage {
                name: "gpu_sync".into(),
                start: ms(40),
                end: ms(100),
            },
            Stage {
                name: "runq_delay".into(),
                start: ms(30),
                end: ms(33),
            },
        ],
        verdict: Some("kv_cache".into()),
        attributes: vec![("inferscope.request.id".into(), format!("req-{i}"))],
        itl: Vec::new(),
        ids: None,
        gen_ai: None,
        // A pipeline task: four tool calls, its search step's fallback stood in.
        pipeline: Some(PipelineTask {
            tool_depth: Some(4),
            steps: vec![
                StepCount {
                    step: "search",
                    calls: 1,
                    fallback: true,
                },
                StepCount {
                    step: "tools",
                    calls: 5,
                    fallback: false,
                },
            ],
        }),
    }
}

pub fn labels() -> Labels {
    Labels {
        scenario: Some("burst".into()),
        phase: None,
        endpoint: Some("chat".into()),
        load_level: Some("c32".into()),
        server: None,
    }
}

pub fn config(endpoint: &str, protocol: Protocol) -> OtlpConfig {
    let opts = OtlpOptions {
        endpoint: Some(endpoint.to_owned()),
        protocol: Some(protocol),
        headers: vec![("x-tenant".into(), "team-a".into())],
        timeout: Some(Duration::from_secs(2)),
        // Longer than the test: metrics leave only at shutdown, in one cumulative export.
        metric_interval: Some(Duration::from_mins(10)),
        ..OtlpOptions::default()
    };
    OtlpConfig::resolve(&opts, &|_| None).unwrap()
}

pub fn resource() -> Vec<(String, String)> {
    vec![
        ("host.name".into(), "node-1".into()),
        ("k8s.node.name".into(), "node-1".into()),
        ("k8s.pod.name".into(), "inferscope-abcde".into()),
    ]
}
