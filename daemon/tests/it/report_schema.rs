//! The JSON Schemas in docs/schema/ against reports of real runs: `stress --out report.json`
//! and the explained `report.json` of `stress --explain`, both against `inferscope sim`.

use inferscope::export::schema::Format;
use serde_json::Value;

use crate::sim_process::SimProcess;

fn checked_in(f: Format) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/schema")
        .join(f.file_name());
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Validates `report` against the checked-in schema of `f` (not the generated one: the file
/// is what users read).
fn check(f: Format, report: &Value) -> Result<(), Vec<String>> {
    let schema = checked_in(f);
    let v = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = v
        .iter_errors(report)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

#[test]
fn reports_of_real_runs_match_the_schemas() {
    let sim = SimProcess::start(["--corpus-size", "50", "--ttft-ms", "5", "--itl-ms", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stress.json");
    let explained = dir.path().join("explained");
    let run = crate::cli::inferscope()
        .args([
            "stress",
            "--target",
            &sim.url,
            "--rate",
            "10",
            "--duration",
            "3s",
        ])
        .args(["--max-tokens", "8", "--quiet", "--explain", "--report-dir"])
        .arg(&explained)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");

    let stress: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert!(!stress["records"].as_array().unwrap().is_empty());
    if let Err(e) = check(Format::Stress, &stress) {
        panic!("stress report: {e:#?}");
    }
    let text = std::fs::read(explained.join("report.json")).unwrap();
    let explain: Value = serde_json::from_slice(&text).unwrap();
    assert!(
        !explain["timeline"]["windows"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // The scrape recognised the sim's vLLM metric names: its windows say so, and advice speaks
    // vLLM's terms.
    let windows = explain["timeline"]["windows"].as_array().unwrap();
    assert!(
        windows.iter().any(|w| w["server"]["engine"] == "vllm"),
        "{:#?}",
        windows.iter().map(|w| &w["server"]).collect::<Vec<_>>()
    );
    if let Err(e) = check(Format::Explain, &explain) {
        panic!("explained report: {e:#?}");
    }
    // Each schema refuses the other format, and a report with a field of the wrong type.
    assert!(check(Format::Stress, &explain).is_err());
    assert!(check(Format::Explain, &stress).is_err());
    let mut bad = stress.clone();
    bad["phases"][0]["counts"]["finished"] = Value::from("many");
    let errors = check(Format::Stress, &bad).unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("/phases/0/counts/finished")),
        "{errors:?}"
    );
}
