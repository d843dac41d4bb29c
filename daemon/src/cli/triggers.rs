//! A `stress` run's trigger rules: a scenario's `triggers:` and `--triggers FILE`'s, read and
//! checked before anything starts; `inferscope::explain` hooks them onto the pipeline.

use std::path::Path;

use anyhow::bail;
use inferscope::{
    dial::Reach,
    loadgen::Scenario,
    triggers::{self, Rule},
};

/// The scenario's rules and the file's, checked: unique names, webhooks within `reach`.
pub fn rules(scenario: &Scenario, file: Option<&Path>, reach: Reach) -> anyhow::Result<Vec<Rule>> {
    let mut rules = triggers::of_scenario(scenario)?;
    if let Some(path) = file {
        for r in triggers::load_file(path)? {
            if rules.iter().any(|o| o.name == r.name) {
                bail!(
                    "trigger `{}` is defined in the scenario and in {}: rename one",
                    r.name,
                    path.display()
                );
            }
            rules.push(r);
        }
    }
    triggers::check_remote(&rules, reach)?;
    Ok(rules)
}

/// Checks the rules of a `stress` run before it starts (the scenario's and `--triggers
/// file`'s): they need `--explain`.
pub fn check_stress(
    scenario: &Scenario,
    file: Option<&Path>,
    explain: bool,
    reach: Reach,
) -> anyhow::Result<()> {
    let rules = rules(scenario, file, reach)?;
    if !rules.is_empty() && !explain {
        bail!(
            "trigger rules are judged on the explained windows: add --explain (or remove `triggers:` / --triggers)"
        );
    }
    Ok(())
}
