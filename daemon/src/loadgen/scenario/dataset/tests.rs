//! JSONL, `ShareGPT`, synthetic and inline datasets loaded; sizes capped; shared prefixes drawn.

use super::*;
use crate::loadgen::scenario::files::Files;
use rand::{SeedableRng, rngs::SmallRng};

#[test]
fn jsonl_sharegpt_and_synthetic() {
    let dir = std::env::temp_dir().join(format!("lg-ds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.jsonl"),
        "{\"prompt\":\"hi\",\"lang\":\"en\"}\n\n{\"prompt\":\"yo\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.json"),
        r#"[{"conversations":[{"from":"human","value":"q1"},{"from":"gpt","value":"a b c"}]},{"x":1}]"#,
    )
    .unwrap();
    std::fs::write(dir.join("bad.jsonl"), "{\"prompt\":\"ok\"}\n{\"text\":3}\n").unwrap();
    let mut rng = SmallRng::seed_from_u64(3);
    let spec = |p: &str| DatasetSpec {
        path: Some(p.into()),
        format: None,
        field: None,
        synthetic: None,
        prompts: None,
    };
    let a = Dataset::load(&spec("a.jsonl"), Files::Relative(&dir), &mut rng).unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a.rows[0].field("lang"), "en");
    let b = Dataset::load(&spec("b.json"), Files::Relative(&dir), &mut rng).unwrap();
    assert_eq!(b.rows.len(), 1);
    assert_eq!(
        (b.rows[0].prompt.as_str(), b.rows[0].output_tokens),
        ("q1", Some(3))
    );
    assert_eq!(
        b.rows[0].turns,
        vec![Turn {
            user: "q1".into(),
            reply: Some("a b c".into())
        }]
    );
    let e = Dataset::load(&spec("bad.jsonl"), Files::Relative(&dir), &mut rng)
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("bad.jsonl:2: no string field `text` (set `field:` to the prompt's key)"),
        "{e}"
    );
    let syn = DatasetSpec {
        path: None,
        format: None,
        field: None,
        synthetic: Some(Synthetic {
            input_tokens: Length {
                mean: 50.0,
                stddev: 0.0,
            },
            output_tokens: Length {
                mean: 20.0,
                stddev: 5.0,
            },
            count: Some(10),
            shared_prefix: None,
        }),
        prompts: None,
    };
    let s = Dataset::load(&syn, Files::Relative(&dir), &mut rng).unwrap();
    assert_eq!(s.len(), 10);
    assert!(
        s.rows
            .iter()
            .all(|r| r.prompt.split(' ').count() == 50 && r.output_tokens.unwrap() >= 1)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn synthetic_sizes_and_prompt_lengths_are_capped() {
    let mut rng = SmallRng::seed_from_u64(1);
    let syn = |count: usize, mean: f64, stddev: f64| DatasetSpec {
        path: None,
        format: None,
        field: None,
        synthetic: Some(Synthetic {
            input_tokens: Length { mean, stddev },
            output_tokens: Length {
                mean: 10.0,
                stddev: 0.0,
            },
            count: Some(count),
            shared_prefix: None,
        }),
        prompts: None,
    };
    for (spec, says) in [
        (syn(10_000_000, 1.0, 0.0), "above 1000000"),
        (syn(1000, 1e9, 0.0), "input_tokens.mean"),
        (syn(1_000_000, 4000.0, 0.0), "lower `count`"),
        (syn(1000, 100.0, f64::INFINITY), "finite"),
    ] {
        let e = Dataset::load(&spec, Files::Confined(None), &mut rng).unwrap_err();
        assert!(e.to_string().contains(says), "{e}");
    }
    let long = DatasetSpec {
        prompts: Some(vec!["ok".into(), "x".repeat(MAX_PROMPT_BYTES + 1)]),
        ..syn(1, 1.0, 0.0)
    };
    let long = DatasetSpec {
        synthetic: None,
        ..long
    };
    let e = Dataset::load(&long, Files::Confined(None), &mut rng).unwrap_err();
    assert!(e.to_string().contains("prompt 2 is"), "{e}");
}

#[test]
fn shared_prefixes_carry_their_shares_before_a_suffix_of_each_request() {
    let yaml = "input_tokens: {mean: 12}\noutput_tokens: {mean: 5}\nshared_prefix: {prefixes: 3, tokens: 40, fraction: 0.25}\n";
    let spec = DatasetSpec {
        path: None,
        format: None,
        field: None,
        synthetic: Some(serde_norway::from_str(yaml).unwrap()),
        prompts: None,
    };
    let mut rng = SmallRng::seed_from_u64(4);
    let d = Dataset::load(&spec, Files::Confined(None), &mut rng).unwrap();
    let n = 8000;
    let rows: Vec<Row> = (0..n).map(|_| d.pick(&mut rng)).collect();
    let mut by_prefix = std::collections::BTreeMap::<String, usize>::new();
    for r in &rows {
        let words: Vec<&str> = r.prompt.split(' ').collect();
        assert_eq!(r.output_tokens, Some(5));
        let key = if words.len() == 52 {
            words[..40].join(" ")
        } else {
            assert_eq!(words.len(), 12, "{}", r.prompt);
            String::new()
        };
        *by_prefix.entry(key).or_default() += 1;
    }
    // Three prefixes of a quarter each, a quarter without one.
    assert_eq!(by_prefix.len(), 4, "{by_prefix:?}");
    for (prefix, count) in &by_prefix {
        let share = *count as f64 / f64::from(n);
        assert!((share - 0.25).abs() < 0.025, "{prefix:?}: {share}");
    }
    // Every request's prompt is its own.
    let distinct: std::collections::BTreeSet<&String> = rows.iter().map(|r| &r.prompt).collect();
    assert_eq!(distinct.len(), rows.len());
    // `count` means stored prompts: it has no place here.
    let mut with_count = spec.clone();
    with_count.synthetic.as_mut().unwrap().count = Some(10);
    let e = Dataset::load(&with_count, Files::Confined(None), &mut rng).unwrap_err();
    assert!(e.to_string().contains("drop `count`"), "{e}");
    let mut too_many = spec;
    too_many
        .synthetic
        .as_mut()
        .unwrap()
        .shared_prefix
        .as_mut()
        .unwrap()
        .fraction = Some(0.5);
    let e = Dataset::load(&too_many, Files::Confined(None), &mut rng).unwrap_err();
    assert!(e.to_string().contains("add up to 1.500"), "{e}");
}

#[test]
fn inline_prompts_need_no_file() {
    let spec = DatasetSpec {
        path: None,
        format: None,
        field: None,
        synthetic: None,
        prompts: Some(vec!["one".into(), "two".into()]),
    };
    let mut rng = SmallRng::seed_from_u64(1);
    let d = Dataset::load(&spec, Files::Confined(None), &mut rng).unwrap();
    assert_eq!(d.len(), 2);
    let both = DatasetSpec {
        path: Some("x.jsonl".into()),
        ..spec
    };
    let e = Dataset::load(&both, Files::Confined(None), &mut rng).unwrap_err();
    assert!(e.to_string().contains("exactly one of"), "{e}");
}
