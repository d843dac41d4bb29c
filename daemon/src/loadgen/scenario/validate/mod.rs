//! Loading a scenario: YAML parsing with `FILE:LINE:COLUMN` errors, cross-field checks,
//! datasets and trace files, and the custom field parsers the schema uses.
//!
//! `parse` reads the file; `resolve` (here) runs the checks of each phase (`phase`, and the
//! kinds' own: `pipeline`, `vector`, `llm`), expands sweeps (`sweep`) and loads datasets and
//! traces; `de` holds the field parsers.

mod de;
mod llm;
mod parse;
mod phase;
mod pipeline;
mod sweep;
mod vector;

pub(crate) use de::{de_opt_json_template, de_opt_ratio, de_opt_template, de_ratio, de_slos};

use std::{collections::BTreeMap, sync::Arc};

use rand::{SeedableRng, rngs::SmallRng};

use crate::loadgen::{
    scenario::check::Check,
    scenario::dataset::Dataset,
    scenario::files::Files,
    scenario::limits,
    scenario::{Scenario, ScenarioError, line_of},
};
use phase::check_phase;
use sweep::expand_sweeps;

/// What resolving a scenario produced besides the scenario itself.
pub(super) struct Resolved {
    /// The datasets, loaded.
    pub datasets: BTreeMap<String, Arc<Dataset>>,
    /// Per phase, its compiled `request.check`.
    pub checks: Vec<Option<Arc<Check>>>,
}

impl Scenario {
    /// Cross-field checks, sweeps, datasets, trace files and task checks, once.
    pub(super) fn resolve(&mut self, files: Files<'_>) -> Result<Resolved, ScenarioError> {
        let origin = self.origin.clone();
        let err = |needle: &str, msg: String| ScenarioError {
            file: origin.file.clone(),
            line: line_of(&origin.text, needle),
            msg,
        };
        if self.phases.is_empty() {
            return Err(err(
                "phases",
                "`phases` is empty: add at least one phase".into(),
            ));
        }
        // Every range, once, before anything reads a duration or a user count.
        limits::check(self).map_err(|(needle, msg)| err(&needle, msg))?;

        let mut rng = SmallRng::seed_from_u64(self.seed.unwrap_or(0));
        let mut datasets = BTreeMap::new();
        for (name, spec) in &self.datasets {
            let ds = Dataset::load(spec, files, &mut rng)
                .map_err(|e| err(&format!("{name}:"), format!("dataset `{name}`: {e}")))?;
            datasets.insert(name.clone(), Arc::new(ds));
        }
        expand_sweeps(&mut self.phases).map_err(|(needle, msg)| err(&needle, msg))?;
        let mut seen = std::collections::BTreeSet::new();
        let mut checks = Vec::with_capacity(self.phases.len());
        for p in &mut self.phases {
            if !seen.insert(p.name.clone()) {
                return Err(err(
                    &format!("name: {}", p.name),
                    format!("phase name `{}` is used twice", p.name),
                ));
            }
            check_phase(p, &datasets, files, &err)?;
            checks.push(Check::of_phase(p).map_err(|msg| err(&format!("name: {}", p.name), msg))?);
        }
        Ok(Resolved { datasets, checks })
    }
}

#[cfg(test)]
mod tests;
