//! A vector service the project did not write: Chroma (`chroma run`, real), searched by
//! `stress --explain` (`api: chroma`) while an ingest adds 40,000 vectors under the peak's
//! searches. Its slowest searches slow down inside the server, as the kernel times its
//! exchanges; but Chroma exports no metric of its index's work, and without evidence of an
//! index rebuild a slower tail is not `vector_index`: the peak says so, naming the missing
//! rebuild evidence.
use inferscope_tests::{
    chroma::Chroma,
    explain::{BASELINE, FIRST, Phase, Stress, describe, peak, three_phases},
    root_or_skip,
};

#[test]
fn an_ingest_under_chromas_searches_is_no_vector_index_without_its_evidence() {
    let test = "an_ingest_under_chromas_searches";
    let Some(_machine) = root_or_skip(test) else {
        return;
    };
    let Some(chroma) = Chroma::start(test) else {
        return;
    };
    let (vectors, dimensions) = (5000, 64);
    let yaml = three_phases("chroma", &chroma.url(), "", |_| Phase {
        load: "{shape: constant, rate: 30}".into(),
        request: format!(
            "{{endpoint: vector_search, api: chroma, collection: e2e, top_k: 10, corpus: {{vectors: {vectors}, dimensions: {dimensions}, batch: 500}}}}"
        ),
        more: String::new(),
    });
    // The run seeds the collection, then its baseline runs; the ingest starts with the peak.
    let mut ingest = chroma.ingest("e2e", dimensions, 40_000, vectors, BASELINE);
    let report = Stress::start("chroma", &yaml, None, FIRST, &[]).finish();
    let _ = ingest.kill();
    let _ = ingest.wait();
    let p = peak(&report);
    let summary = describe(p);
    let baseline = report["phases"][0]["latency"]["e2e_ms"]["p99"]
        .as_f64()
        .unwrap_or_default();
    let at_peak = p["latency"]["e2e_ms"]["p99"].as_f64().unwrap_or_default();
    // The ingest slowed the searches' tail (else the test would pass on nothing).
    assert!(
        at_peak >= 3.0 * baseline,
        "E2E p99 {at_peak:.1} ms at the peak against {baseline:.1} ms\n{summary}"
    );
    assert_ne!(p["dominant"], "vector_index", "{summary}");
    let missing = p["missing_decisive"].to_string();
    assert!(missing.contains("index rebuild"), "{missing}\n{summary}");
    // What to do speaks of searches, never of an engine's admission or KV cache.
    let hint = p["hint"].as_str().unwrap_or_default();
    assert!(
        !hint.contains("KV cache") && !hint.contains("admission"),
        "{hint}"
    );
    println!("{summary}");
}
