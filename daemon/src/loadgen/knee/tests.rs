//! The planner's grow-and-bisect on synthetic servers, and a scenario's `search:` block.

use std::time::Duration;

use super::planner::Planner;
use super::search::step_plan;
use super::*;
use crate::loadgen::scenario::{Load, plan::Plan};

/// Runs the planner against a server whose SLO breaks above `knee`.
fn run(knob: Knob, start: f64, ceiling: f64, knee: f64) -> (Vec<f64>, Planner, SearchStop) {
    let mut p = Planner::new(knob, start, ceiling, 0.05);
    let mut tried = Vec::new();
    loop {
        match p.next() {
            Ok(load) => {
                assert!(!tried.contains(&load), "{load} tried twice: {tried:?}");
                tried.push(load);
                p.record(load, load <= knee);
            }
            Err(stop) => return (tried, p, stop),
        }
        assert!(tried.len() < 40, "{tried:?}");
    }
}

#[test]
fn converges_within_the_tolerance_of_the_knee() {
    for knee in [0.7, 3.0, 37.3, 41.0, 199.0] {
        let (tried, p, stop) = run(Knob::Rate, 1.0, 1000.0, knee);
        assert_eq!(stop, SearchStop::Converged, "{knee}: {tried:?}");
        let (Some(pass), Some(fail)) = p.bracket() else {
            panic!("{knee}: {tried:?}")
        };
        assert!(pass <= knee && knee < fail, "{knee}: {pass} {fail}");
        assert!(fail <= pass * 1.05, "{knee}: {pass} {fail}");
        assert!(tried.len() <= 16, "{knee}: {} steps", tried.len());
    }
}

#[test]
fn users_bisect_to_one() {
    let (tried, p, stop) = run(Knob::Users, 1.0, 512.0, 23.0);
    assert_eq!(stop, SearchStop::Converged, "{tried:?}");
    assert_eq!(p.bracket(), (Some(23.0), Some(24.0)));
    assert!(tried.iter().all(|u| u.fract() == 0.0), "{tried:?}");
}

#[test]
fn a_scenario_search_block_sets_the_search_and_flags_override_it() {
    let yaml = "target: http://127.0.0.1:9\nsearch: {slo: ['ttft_p95 < 1s'], max: 64, step: 3s, tolerance: 10%}\nphases:\n  - name: a\n    duration: 1s\n    load: {shape: concurrency, users: 2}\n    slo: ['error_rate < 1%']\n";
    let plan = Plan::from_yaml(yaml, "s.yaml", std::path::Path::new(".")).unwrap();
    let sc = plan.scenario();
    let spec = SearchSpec::for_scenario(sc, Overrides::default()).unwrap();
    assert_eq!(spec.knob, Knob::Users);
    assert_eq!((spec.start, spec.ceiling), (2.0, 64.0));
    assert_eq!(spec.step, Duration::from_secs(3));
    assert!((spec.tolerance - 0.1).abs() < 1e-9);
    let slos: Vec<&str> = spec.slos.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(slos, ["ttft_p95 < 1s", "error_rate < 1%"]);
    let flags = Overrides {
        max: Some(8.0),
        step: Some(Duration::from_secs(1)),
        ..Overrides::default()
    };
    let spec = SearchSpec::for_scenario(sc, flags).unwrap();
    assert_eq!((spec.ceiling, spec.step), (8.0, Duration::from_secs(1)));
    let step = step_plan(&plan, step_phase(sc, &spec, 5.0, 2)).unwrap();
    let step = step.scenario();
    assert!(matches!(
        step.phases[0].load,
        Load::Concurrency { users: 5 }
    ));
    assert_eq!(step.phases[0].name, "step-3");
    assert!(step.search.is_none());

    let none = sc.phases[0].clone();
    let mut bare = sc.clone();
    bare.search = None;
    bare.phases = vec![phase_without_slo(none)];
    let e = SearchSpec::for_scenario(&bare, Overrides::default()).unwrap_err();
    assert!(e.contains("needs an SLO"), "{e}");
}

fn phase_without_slo(mut p: crate::loadgen::scenario::Phase) -> crate::loadgen::scenario::Phase {
    p.slo.clear();
    p
}

#[test]
fn ceiling_and_nothing_passing_end_the_search() {
    let (_, p, stop) = run(Knob::Rate, 1.0, 50.0, 1e9);
    assert_eq!(stop, SearchStop::CeilingPassed);
    assert_eq!(p.bracket(), (Some(50.0), None));
    let (tried, p, stop) = run(Knob::Rate, 8.0, 50.0, 0.0);
    assert_eq!(stop, SearchStop::NothingPassed, "{tried:?}");
    assert_eq!(p.bracket().0, None);
    assert!(tried.len() <= 8, "{tried:?}");
}
