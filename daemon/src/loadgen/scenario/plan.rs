//! A run's plan: the scenario with the command line's flags over it, validated once and
//! resolved (sweeps expanded, datasets loaded, trace files read, task checks compiled).
//!
//! A [`Plan`] is built only by [`Plan::compile`] (and the constructors that read a file or
//! posted text and call it) and is read-only afterwards: the engine, the knee search, the
//! control API and OTLP take `&Plan`, so nothing runs a scenario that was not checked as it
//! runs. The knee search's steps are plans derived with [`Plan::with_phases`], checked again.

use std::{collections::BTreeMap, path::Path, sync::Arc};

use tokio::sync::OnceCell;

use crate::loadgen::{
    scenario::check::Check,
    scenario::dataset::Dataset,
    scenario::files::Files,
    scenario::model::Discovery,
    scenario::overrides::{OverrideError, Overrides},
    scenario::{Phase, Scenario, ScenarioError, limits},
};

/// A scenario ready to run (see the module's documentation).
#[derive(Debug, Clone)]
pub struct Plan {
    scenario: Scenario,
    datasets: BTreeMap<String, Arc<Dataset>>,
    /// Per phase, its compiled `request.check`.
    checks: Vec<Option<Arc<Check>>>,
    /// The model discovery of the first run of this plan (or of the plan it was derived from):
    /// asked once, whatever the number of runs (the knee search's steps).
    models: Arc<OnceCell<Discovery>>,
}

/// Why there is no plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A flag cannot go over the scenario.
    #[error(transparent)]
    Override(#[from] OverrideError),
    /// The scenario (with the flags applied) is not valid.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
}

impl Plan {
    /// Applies `overrides` to `scenario` (flag over file), then validates and resolves it,
    /// reading datasets and traces under the policy `files`.
    pub fn compile(
        mut scenario: Scenario,
        files: &Files<'_>,
        overrides: &Overrides,
    ) -> Result<Self, PlanError> {
        let file = scenario.origin.file.clone();
        overrides.apply(&mut scenario, &file)?;
        let resolved = scenario.resolve(*files)?;
        Ok(Self {
            scenario,
            datasets: resolved.datasets,
            checks: resolved.checks,
            models: Arc::default(),
        })
    }

    /// Reads a scenario file and compiles it with `overrides`. A flag of the file-less single
    /// phase is refused before the file is read: no edit of the file makes it apply.
    pub fn from_file(path: &Path, overrides: &Overrides) -> Result<Self, PlanError> {
        overrides.refuse_phase_flags(&path.display().to_string())?;
        let scenario = Scenario::read(path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::compile(scenario, &Files::Relative(base), overrides)
    }

    /// Parses YAML text and compiles it without flags; `file` names it in errors, `base`
    /// resolves relative paths.
    pub fn from_yaml(src: &str, file: &str, base: &Path) -> Result<Self, PlanError> {
        let scenario = Scenario::parse_yaml(src, file)?;
        Self::compile(scenario, &Files::Relative(base), &Overrides::default())
    }

    /// Parses YAML text posted by someone else (the control API): datasets and traces only
    /// from below `data_dir` (none at all without one), each read capped at
    /// [`crate::loadgen::scenario::files::MAX_POSTED_FILE_BYTES`].
    pub fn from_posted_yaml(
        src: &str,
        file: &str,
        data_dir: Option<&Path>,
    ) -> Result<Self, PlanError> {
        let scenario = Scenario::parse_yaml(src, file)?;
        Self::compile(scenario, &Files::Confined(data_dir), &Overrides::default())
    }

    /// The scenario as it runs (flags applied, sweeps expanded, traces read).
    #[must_use]
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// The loaded datasets, by name.
    #[must_use]
    pub fn datasets(&self) -> &BTreeMap<String, Arc<Dataset>> {
        &self.datasets
    }

    /// Phase `index`'s compiled task check, if it has one.
    #[must_use]
    pub fn check(&self, index: usize) -> Option<Arc<Check>> {
        self.checks.get(index).cloned().flatten()
    }

    /// The model discovery shared by this plan and every plan derived from it.
    pub(crate) fn models(&self) -> &OnceCell<Discovery> {
        &self.models
    }

    /// This plan with `phases` in place of its own and no `search:` (a knee search's step,
    /// or its explaining pair), checked again: unique names, datasets the plan loaded, every
    /// range. The phases are taken as resolved (made from this plan's own).
    pub fn with_phases(&self, phases: Vec<Phase>) -> Result<Self, PlanError> {
        let mut scenario = self.scenario.clone();
        scenario.phases = phases;
        scenario.search = None;
        let err = |msg: String| ScenarioError {
            file: scenario.origin.file.clone(),
            line: None,
            msg,
        };
        let mut names = std::collections::BTreeSet::new();
        for p in &scenario.phases {
            if !names.insert(&p.name) {
                return Err(err(format!("phase name `{}` is used twice", p.name)).into());
            }
            if let Some(d) = &p.request.dataset
                && !self.datasets.contains_key(d)
            {
                return Err(err(format!("phase `{}`: no dataset `{d}`", p.name)).into());
            }
        }
        if scenario.phases.is_empty() {
            return Err(err("no phases".into()).into());
        }
        limits::check(&scenario).map_err(|(_, msg)| err(msg))?;
        let checks = scenario
            .phases
            .iter()
            .map(Check::of_phase)
            .collect::<Result<_, _>>()
            .map_err(err)?;
        Ok(Self {
            scenario,
            datasets: self.datasets.clone(),
            checks,
            models: Arc::clone(&self.models),
        })
    }
}
