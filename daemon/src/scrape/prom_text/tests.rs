// Expected values here are exact binary fractions or sums of them.
#![allow(clippy::float_cmp)]

use super::*;
use proptest::prelude::*;

const VLLM_V1: &str = include_str!("../../../tests/fixtures/vllm_v1_metrics.txt");
const VLLM_V0: &str = include_str!("../../../tests/fixtures/vllm_v0_metrics.txt");
const SGLANG: &str = include_str!("../../../tests/fixtures/sglang_metrics.txt");
const TGI: &str = include_str!("../../../tests/fixtures/tgi_metrics.txt");

fn kinds(exp: &Exposition) -> Vec<(usize, LineErrorKind)> {
    exp.errors()
        .iter()
        .map(|e| (e.line, e.kind.clone()))
        .collect()
}

#[test]
fn fixtures_parse_cleanly() {
    for (name, text) in [
        ("vllm v1", VLLM_V1),
        ("vllm v0", VLLM_V0),
        ("sglang", SGLANG),
        ("tgi", TGI),
    ] {
        let exp = parse(text);
        assert!(exp.errors().is_empty(), "{name}: {:?}", exp.errors());
        let sample_lines = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count();
        assert_eq!(exp.sample_count(), sample_lines, "{name}");
    }
}

#[test]
fn vllm_families_are_grouped_by_type_name() {
    let exp = parse(VLLM_V1);
    let ttft = exp.family("vllm:time_to_first_token_seconds").unwrap();
    assert_eq!(ttft.kind, MetricKind::Histogram);
    assert_eq!(
        ttft.help.as_deref(),
        Some("Histogram of time to first token in seconds.")
    );
    // 2 engines x (22 finite bounds + +Inf + _count + _sum).
    assert_eq!(ttft.samples.len(), 2 * 25);
    let inf = ttft
        .samples
        .iter()
        .find(|s| s.label("le") == Some("+Inf") && s.label("engine") == Some("1"))
        .unwrap();
    assert_eq!(inf.value, 644.0);
    assert_eq!(
        exp.family("vllm:time_to_first_token_seconds_created")
            .unwrap()
            .kind,
        MetricKind::Gauge
    );
    let pre = exp.family("vllm:num_preemptions_total").unwrap();
    assert_eq!(pre.kind, MetricKind::Counter);
    assert_eq!(
        pre.samples[0].labels[1],
        (
            "model_name".into(),
            "meta-llama/Llama-3.1-8B-Instruct".into()
        )
    );
    assert!(
        exp.family("vllm:time_to_first_token_seconds_bucket")
            .is_none()
    );
    let info = exp.family("vllm:cache_config_info").unwrap();
    assert_eq!(info.samples[0].label("num_gpu_blocks"), Some("27089"));
}

#[test]
fn label_escapes_are_decoded() {
    let exp = parse("m{a=\"q\\\"uote\",b=\"back\\\\slash\",c=\"new\\nline\",d=\"ünï\"} 1\n");
    assert!(exp.errors().is_empty(), "{:?}", exp.errors());
    let s = &exp.family("m").unwrap().samples[0];
    assert_eq!(s.label("a"), Some("q\"uote"));
    assert_eq!(s.label("b"), Some("back\\slash"));
    assert_eq!(s.label("c"), Some("new\nline"));
    assert_eq!(s.label("d"), Some("ünï"));
}

#[test]
fn special_values_timestamps_and_spacing() {
    let text = "# TYPE g gauge\ng NaN\ng{x=\"1\"} +Inf 1700000000000\ng{x=\"2\"} -Inf -5\n\
                g {x=\"3\" , } 2.5e-3\t 42\r\n  g{} 7\n";
    let exp = parse(text);
    assert!(exp.errors().is_empty(), "{:?}", exp.errors());
    let s = &exp.family("g").unwrap().samples;
    assert!(s[0].value.is_nan());
    assert_eq!(
        (s[1].value, s[1].timestamp_ms),
        (f64::INFINITY, Some(1_700_000_000_000))
    );
    assert_eq!(
        (s[2].value, s[2].timestamp_ms),
        (f64::NEG_INFINITY, Some(-5))
    );
    assert_eq!(
        (s[3].value, s[3].timestamp_ms, s[3].label("x")),
        (2.5e-3, Some(42), Some("3"))
    );
    assert_eq!((s[4].value, s[4].labels.len()), (7.0, 0));
}

#[test]
fn summary_counter_and_untyped_families() {
    let text = "# HELP rpc_seconds RPC latency.\n# TYPE rpc_seconds summary\n\
        rpc_seconds{quantile=\"0.5\"} 0.01\nrpc_seconds{quantile=\"0.99\"} 0.2\n\
        rpc_seconds_sum 17.5\nrpc_seconds_count 1000\n\
        # TYPE tgi_request_count counter\ntgi_request_count 12\n\
        # TYPE jobs counter\njobs_total{q=\"a\"} 3\n\
        loose_metric 4\nloose_metric_count 5\n# EOF\n";
    let exp = parse(text);
    assert!(exp.errors().is_empty(), "{:?}", exp.errors());
    let rpc = exp.family("rpc_seconds").unwrap();
    assert_eq!((rpc.kind, rpc.samples.len()), (MetricKind::Summary, 4));
    assert_eq!(
        exp.family("tgi_request_count").unwrap().kind,
        MetricKind::Counter
    );
    let jobs = exp.family("jobs").unwrap();
    assert_eq!(
        (jobs.kind, jobs.samples[0].name.as_str()),
        (MetricKind::Counter, "jobs_total")
    );
    // Untyped samples are their own families, even with a histogram-like suffix.
    assert_eq!(
        exp.family("loose_metric").unwrap().kind,
        MetricKind::Untyped
    );
    assert_eq!(exp.family("loose_metric_count").unwrap().samples.len(), 1);
    assert_eq!(exp.families().len(), 5);
}

#[test]
fn bad_lines_are_reported_and_good_lines_kept() {
    let text = "good 1\n1bad 2\nm{a=\"b\" 3\nm{a=\"x\\ty\"} 1\nm{a=\"1\",a=\"2\"} 1\nnovalue\n\
        v abc\nts 1 1.5\ntrail 1 2 3\n# TYPE t flux\n# TYPE good gauge\n# TYPE h histogram\n\
        h_bucket{x=\"1\"} 2\nh_bucket{le=\"+Inf\"} 2\n# TYPE s summary\ns 1\nm{=\"v\"} 1\nm{a=b} 1\n\
        m{a=\"b\"}junk 1\nalso_good{k=\"v\"} 2\n";
    let exp = parse(text);
    assert_eq!(
        kinds(&exp),
        vec![
            (2, LineErrorKind::InvalidMetricName("1bad".into())),
            (
                3,
                LineErrorKind::BadLabelSyntax {
                    expected: "',' or '}'",
                    found: "3".into()
                }
            ),
            (4, LineErrorKind::InvalidEscape('t')),
            (5, LineErrorKind::DuplicateLabel("a".into())),
            (6, LineErrorKind::MissingValue),
            (7, LineErrorKind::InvalidValue("abc".into())),
            (8, LineErrorKind::InvalidTimestamp("1.5".into())),
            (9, LineErrorKind::TrailingText("3".into())),
            (10, LineErrorKind::UnknownType("flux".into())),
            (11, LineErrorKind::LateType("good".into())),
            (13, LineErrorKind::BadBucketBound),
            (16, LineErrorKind::BadQuantile),
            (17, LineErrorKind::InvalidLabelName(String::new())),
            (
                18,
                LineErrorKind::BadLabelSyntax {
                    expected: "'\"'",
                    found: "b} 1".into()
                }
            ),
            (19, LineErrorKind::InvalidValue("junk".into())),
        ],
        "{:#?}",
        exp.errors()
    );
    assert_eq!(exp.family("good").unwrap().samples[0].value, 1.0);
    assert_eq!(exp.family("h").unwrap().samples.len(), 1);
    assert_eq!(exp.family("also_good").unwrap().samples[0].value, 2.0);
    assert_eq!(
        exp.errors()[0].to_string(),
        "line 2: invalid metric name \"1bad\""
    );
}

#[test]
fn long_bad_text_is_clipped_in_errors() {
    let long = "x".repeat(1000);
    let exp = parse(&format!("m {long}\n"));
    let msg = exp.errors()[0].to_string();
    assert!(msg.len() < 80, "{msg}");
}

/// Every prefix of a real exposition parses without panicking, and only the
/// cut (last) line can be bad.
#[test]
fn truncated_vllm_exposition() {
    // Every byte position of an excerpt holding each kind of line (gauges,
    // counters with `_created`, a histogram, the info gauge), plus a stride
    // through the whole file; all positions of all 37 KB would be quadratic.
    let lines: Vec<&str> = VLLM_V1.lines().collect();
    let excerpt = [
        &lines[14..45],
        &lines[90..100],
        &lines[139..147],
        &lines[354..],
    ]
    .concat()
    .join("\n");
    let cuts = (0..=excerpt.len()).map(|i| (excerpt.as_str(), i));
    let strided = (0..=VLLM_V1.len()).step_by(97).map(|i| (VLLM_V1, i));
    for (text, cut) in cuts.chain(strided).filter(|(t, i)| t.is_char_boundary(*i)) {
        let text = &text[..cut];
        let exp = parse(text);
        let last_line = text.split('\n').count();
        assert!(exp.errors().len() <= 1, "cut at {cut}: {:?}", exp.errors());
        if let Some(e) = exp.errors().first() {
            assert_eq!(e.line, last_line, "cut at {cut}");
        }
    }
}

fn check_invariants(text: &str) {
    let exp = parse(text);
    let lines = text.split('\n').count();
    assert!(exp.sample_count() + exp.errors().len() <= lines);
    let mut last = 0;
    for e in exp.errors() {
        assert!(e.line > last && e.line <= lines, "{e}");
        last = e.line;
        let _ = e.to_string();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        check_invariants(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn exposition_alphabet_never_panics(text in "[a-z_:{}=\",\\\\ \\t\\n#0-9.+eEINFaT-]{0,300}") {
        check_invariants(&text);
    }

}

proptest! {
    // Each case parses the whole 37 KB fixture; fewer cases keep debug runs short.
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mutated_fixture_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..20),
    ) {
        let mut bytes = VLLM_V1.as_bytes().to_vec();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        check_invariants(&String::from_utf8_lossy(&bytes));
    }
}
