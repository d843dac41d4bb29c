//! Property tests of every parser of untrusted input in the load generator: arbitrary (and
//! mutated valid) input gives an error or a value, never a panic. Case counts are bounded so
//! the whole file runs in seconds.

use std::path::Path;

use inferscope::loadgen::{
    Plan, client::Target, client::openai::StreamState, client::sse::SseParser,
    engine::request::PhaseCtx, scenario::arrival, scenario::replay, scenario::trace,
};

use inferscope::measure::{merge, summary};
use proptest::prelude::*;
use rand::{SeedableRng as _, rngs::SmallRng};

const VALID: &str = "name: p\ntarget: http://127.0.0.1:8000\nseed: 3\ntimeout: 2s\n\
datasets:\n  d: {prompts: [\"a b\", \"c\"]}\n\
phases:\n  - name: a\n    duration: 2s\n    load: {shape: gamma, rate: 20, burstiness: 0.5}\n\
    max_in_flight: 8\n    max_tokens_per_s: 100\n\
    request: {endpoint: chat, dataset: d, prompt: \"${dataset.prompt} ${random_int(1,9)} ${random_float(0.5,2.5)}\", max_tokens: 16, stream: true}\n\
  - name: b\n    duration: 1s\n    load: {shape: ramp, from: 1, to: 30}\n\
    request: {endpoint: http, path: /x, method: GET}\n";

/// Parses a scenario and, when it validates, prepares requests of every phase as a run would.
fn through_to_prepared(src: &str) {
    let Ok(plan) = Plan::from_yaml(src, "p.yaml", Path::new("/nonexistent")) else {
        return;
    };
    let s = plan.scenario();
    let Ok(target) = Target::of(&s.target, &s.headers) else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(1);
    for (i, p) in s.phases.iter().enumerate() {
        if let Ok(ctx) = PhaseCtx::new(i as u32, p, &plan, &target) {
            for seq in 0..3 {
                let _ = ctx.prepare(&mut rng, seq, Some(seq as usize));
            }
        }
        // A gamma schedule draws its gaps once up front (time O(n)): keep n small here.
        let n = p.load.target_rate(p.duration).unwrap_or(0.0) * p.duration.as_secs_f64();
        if let Some(a) = p.load.arrival().filter(|_| n < 1e6) {
            // The first arrivals of the lazy schedule (never the whole of a long phase).
            let _: Vec<_> = arrival::Schedule::new(&a, p.duration, &mut rng)
                .take(100)
                .collect();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn sse_never_panics(pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16)) {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for piece in &pieces {
            if p.push(piece, &mut out).is_err() {
                break;
            }
        }
        let _ = p.finish();
    }

    #[test]
    fn openai_chunks_never_panic(
        datas in proptest::collection::vec(
            prop_oneof![
                ".{0,40}",
                Just("[DONE]".to_owned()),
                "\\{\"choices\":\\[\\{\"delta\":\\{\"content\":\"[a-z]{0,5}\"\\},\"finish_reason\":(null|\"stop\"|1|\\[\\])\\}\\],\"usage\":(null|\\{\"completion_tokens\":-?[0-9]{1,12}\\})\\}",
                "\\{\"error\":(null|\"x\"|\\{\"message\":[0-9]\\})\\}",
            ],
            0..12,
        ),
        split in 1usize..40,
    ) {
        let body: String = datas.iter().fold(String::new(), |mut b, d| {
            use std::fmt::Write as _;
            let _ = write!(b, "data: {d}\n\n");
            b
        });
        let mut st = StreamState::default();
        for (i, piece) in body.as_bytes().chunks(split).enumerate() {
            if st.feed(piece, i as u64).is_err() {
                break;
            }
        }
        let _ = st.finish();
    }

    #[test]
    fn mutated_scenarios_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), "[-0-9a-z:{}\\[\\],.$ \n\"e]{0,6}", 0usize..4), 1..6)
    ) {
        let mut src = VALID.to_owned();
        for (at, text, cut) in &edits {
            let mut i = at.index(src.len() + 1);
            while !src.is_char_boundary(i) {
                i -= 1;
            }
            let mut end = (i + cut).min(src.len());
            while !src.is_char_boundary(end) {
                end -= 1;
            }
            src.replace_range(i..end, text);
        }
        through_to_prepared(&src);
    }

    #[test]
    fn scenario_numbers_never_panic(
        rate in prop_oneof![any::<f64>().prop_map(|f| format!("{f:e}")), "-?[0-9]{1,25}(\\.[0-9]{0,5})?"],
        dur in prop_oneof![Just("0s".to_owned()), "[0-9]{1,20}(ms|s|m|h|d|y)"],
        n in "-?[0-9]{1,22}",
    ) {
        let src = format!(
            "target: http://127.0.0.1:8000\nphases:\n  - name: a\n    duration: {dur}\n    load: {{shape: poisson, rate: {rate}}}\n    max_in_flight: {n}\n    max_tokens_per_s: {rate}\n    request: {{endpoint: chat, max_tokens: {n}, prompt: \"${{random_float(-{rate},{rate})}} ${{random_int(-{n},{n})}}\"}}\n"
        );
        through_to_prepared(&src);
    }

    #[test]
    fn trace_files_never_panic(
        lines in proptest::collection::vec(prop_oneof![
            any::<f64>().prop_map(|f| f.to_string()),
            "[0-9.e+-]{0,12}",
            "\\{\"timestamp(_ms)?\": ?-?[0-9.e]{0,12}\\}",
            "\\{\"timestamp\": ?-?[0-9.e]{0,8}, \"input_length\": ?-?[0-9]{0,8}, \"output_length\": ?-?[0-9]{0,7}, \"hash_ids\": ?\\[[0-9, -]{0,12}\\]\\}",
            ".{0,12}",
        ], 0..20),
        speed in prop_oneof![Just(1.0), any::<f64>().prop_filter("positive", |s| *s > 0.0 && s.is_finite())],
        block_size in 1u32..2000,
        from_ms in 0u64..5000,
        mooncake in any::<bool>(),
    ) {
        let spec = trace::TraceSpec {
            format: if mooncake { replay::TraceFormat::Mooncake } else { replay::TraceFormat::Timestamps },
            speed,
            window: trace::Window { from: std::time::Duration::from_millis(from_ms), until: None },
            block_size,
        };
        if let Ok(parsed) = trace::parse(&lines.join("\n"), &spec)
            && let Some(replay) = parsed.replay
        {
            // Building the prompts of what was read never panics either.
            for i in 0..replay.len().min(3) {
                let _ = replay.request(i);
            }
        }
    }

}

proptest! {
    // Few cases: a random header may declare a wide, precise range, and decoding allocates
    // its full counts array (tens of MB) before it fails.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn hdr_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..96), text in ".{0,40}") {
        use base64::Engine as _;
        let _ = summary::decode_hist(&base64::engine::general_purpose::STANDARD.encode(&bytes));
        let _ = summary::decode_hist(&text);
        // A valid histogram with one byte changed.
        let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        h.record(1234).unwrap();
        let mut raw = base64::engine::general_purpose::STANDARD
            .decode(summary::encode_hist(&h))
            .unwrap();
        if !raw.is_empty() && !bytes.is_empty() {
            let i = usize::from(bytes[0]) % raw.len();
            raw[i] = bytes[bytes.len() - 1];
        }
        let _ = summary::decode_hist(&base64::engine::general_purpose::STANDARD.encode(&raw));
    }

    #[test]
    fn merge_input_never_panics(text in prop_oneof![
        ".{0,80}",
        "\\{\"schema\":\"inferscope.stress.report\",\"version\":(1|2|-1|1e9)(,\"phases\":\\[[^\\]]{0,20}\\])?\\}",
    ]) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        std::fs::write(&p, &text).unwrap();
        if let Ok(r) = merge::read(&p) {
            let _ = merge::merge(&[("a".into(), r.clone()), ("b".into(), r)], merge::Allow::default());
        }
    }
}
