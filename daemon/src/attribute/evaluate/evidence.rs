//! Evidence a verdict carries beside its rule's: the window's XID errors and its failures by
//! class.

use crate::attribute::baseline::Ctx;
use crate::attribute::verdict::Evidence;
use crate::collect::timeline::XidSource;

/// The window's XID errors, one evidence each: `gpu_xid=79 (XID 79 on GPU 0, nvml)`; the
/// kernel's count alone (no event kept) as one `gpu_xids` line.
pub(super) fn xid_evidence(ctx: &Ctx<'_>) -> Vec<Evidence> {
    let Some(gpu) = ctx.window.gpu.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<Evidence> = gpu
        .xid_events
        .iter()
        .map(|x| {
            let code = x
                .code
                .map_or_else(|| "unknown".to_owned(), |c| c.to_string());
            let on = x.gpu.map_or_else(String::new, |g| format!(" on GPU {g}"));
            let source = match x.source {
                XidSource::Kernel => "kernel tracepoint",
                XidSource::Nvml => "NVML event",
            };
            Evidence {
                signal: "gpu_xid".to_owned(),
                value: x.code.map_or(0.0, |c| c as f64),
                threshold: 0.0,
                baseline: None,
                met: true,
                note: format!("XID {code}{on} during the rise, {source}"),
            }
        })
        .collect();
    if out.is_empty() && gpu.xids > 0 {
        out.push(Evidence {
            signal: "gpu_xids".to_owned(),
            value: gpu.xids as f64,
            threshold: 0.0,
            baseline: None,
            met: true,
            note: "XID errors during the rise".to_owned(),
        });
    }
    out
}

/// The window's failures by class, largest share first: `error_class_timeout=0.9`.
pub(super) fn error_classes(ctx: &Ctx<'_>) -> Vec<Evidence> {
    let Some(load) = ctx.window.load.as_ref() else {
        return Vec::new();
    };
    let failed: u64 = load.error_classes.values().sum();
    let mut classes: Vec<(&crate::measure::ErrorClass, &u64)> = load.error_classes.iter().collect();
    classes.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
    classes
        .into_iter()
        .map(|(class, n)| Evidence {
            signal: format!("error_class_{}", class.name()),
            value: *n as f64 / failed.max(1) as f64,
            threshold: 0.0,
            baseline: None,
            met: true,
            note: "share of failed requests".to_owned(),
        })
        .collect()
}
