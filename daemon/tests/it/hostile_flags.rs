//! Flags that used to panic deep inside a run (exit 101) are usage errors: a zero-length
//! window or interval, an in-flight cap beyond tokio's semaphore, a week-long timeout typo.

fn inferscope(args: &[&str]) -> (Option<i32>, String) {
    let out = crate::cli::run(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_numbers_in_flags_are_one_line_errors_not_panics() {
    let base = [
        "stress",
        "--target",
        "http://127.0.0.1:1",
        "--rate",
        "1",
        "--quiet",
    ];
    let with = |extra: &[&str]| {
        let mut v: Vec<&str> = base.to_vec();
        v.extend(extra);
        inferscope(&v)
    };
    for (extra, code, want) in [
        (
            &["--duration", "1s", "--explain", "--window", "0s"][..],
            2,
            "above zero",
        ),
        (&["--duration", "0s"][..], 2, "above zero"),
        (
            &["--duration", "1s", "--timeout", "1000000y"][..],
            2,
            "longer than the limit of 7 days",
        ),
        (
            &["--duration", "1s", "--max-in-flight", "0"][..],
            2,
            "max_in_flight must be 1..=",
        ),
        (
            &["--duration", "1s", "--max-in-flight", "2305843009213693951"][..],
            2,
            "max_in_flight must be 1..=",
        ),
        (
            &["--duration", "1s", "--connections", "2305843009213693951"][..],
            1,
            "max_in_flight must be 1..=",
        ),
    ] {
        let (got, err) = with(extra);
        assert_eq!(got, Some(code), "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
    }
    let (got, err) = inferscope(&["daemon", "--interval", "0s"]);
    assert_eq!(got, Some(2), "{err}");
    assert!(err.contains("above zero"), "{err}");
    let (got, err) = inferscope(&["runqlat", "--interval", "0s"]);
    assert_eq!(got, Some(2), "{err}");
}

/// `--log-format json`: every line the daemon logs on stderr is one JSON object with a level and
/// a message; a bad `RUST_LOG` is said once and the default filter used.
#[test]
fn json_logs_are_one_object_per_line() {
    if !is_root() {
        crate::peers::missing("json_logs_are_one_object_per_line", "the daemon needs root");
        return;
    }
    let out = crate::cli::inferscope()
        .args([
            "--log-format",
            "json",
            "daemon",
            "--port",
            "1",
            "--duration",
            "1s",
            "--api-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "[[not a filter")
        .output()
        .expect("run the daemon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let mut lines = err.lines();
    assert!(
        lines.next().is_some_and(|l| l.contains("is not a filter")),
        "{err}"
    );
    let events: Vec<serde_json::Value> = lines
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["fields"]["message"].as_str() == Some("capability CAP_BPF: yes")),
        "{err}"
    );
    assert!(events.iter().all(|e| e["level"].is_string()), "{err}");
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
