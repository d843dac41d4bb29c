//! `sweep:` expanded: one phase per `ef_search` value.

use crate::loadgen::scenario::Phase;

/// Each phase with `sweep:` becomes one phase per value, named `NAME@ef<N>`.
pub(super) fn expand_sweeps(phases: &mut Vec<Phase>) -> Result<(), (String, String)> {
    if phases.iter().all(|p| p.sweep.is_none()) {
        return Ok(());
    }
    let mut out = Vec::with_capacity(phases.len());
    for p in phases.drain(..) {
        let Some(sweep) = p.sweep.clone() else {
            out.push(p);
            continue;
        };
        if sweep.ef_search.is_empty() || sweep.ef_search.contains(&0) {
            return Err((
                "sweep".into(),
                format!(
                    "phase `{}`: sweep ef_search needs values above 0, e.g. [16, 32, 64, 128, 256]",
                    p.name
                ),
            ));
        }
        if p.request.ef_search.is_some() {
            return Err((
                "sweep".into(),
                format!(
                    "phase `{}`: `ef_search:` and `sweep: {{ef_search}}` both set it: drop one",
                    p.name
                ),
            ));
        }
        for ef in sweep.ef_search {
            let mut step = p.clone();
            step.name = format!("{}@ef{ef}", p.name);
            step.label.get_or_insert_with(|| p.name.clone());
            step.request.ef_search = Some(ef);
            step.sweep = None;
            step.sweep_of = Some(p.name.clone());
            out.push(step);
        }
    }
    *phases = out;
    Ok(())
}
