//! Running a task: its steps one after the other, each under its deadline, a failed step's
//! fallback standing in or the failure ending the task, each step's record kept.

use std::time::Instant;

use hyper::header::{HeaderName, HeaderValue};

use super::compile::{Pipeline, TaskInput};
use super::state::{Io, State};
use crate::loadgen::client::{HttpClient, us_since};
use crate::measure::record::{ErrorClass, RequestRecord, StepKind, StepOutcome, StepRecord};

/// Runs a task's steps into `rec` (its intended start already set); the final answer's text
/// when the task did not fail. No overall timeout here: the engine puts the scenario's
/// `timeout` around the whole task.
pub async fn run(
    pipeline: &Pipeline,
    client: &HttpClient,
    headers: &[(HeaderName, HeaderValue)],
    task: TaskInput,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Option<String> {
    let io = Io {
        client,
        headers,
        t0,
        trace: rec.trace.map(|t| t.trace_id()),
    };
    rec.actual_us = us_since(t0);
    let mut st = State {
        query: task.query.clone(),
        ..State::default()
    };
    let has_tools = pipeline.steps.iter().any(|s| s.kind == StepKind::Tools);
    if has_tools {
        rec.tool_depth = Some(0);
    }
    for step in &pipeline.steps {
        let start_us = us_since(t0);
        let mut calls = 0u32;
        let fut = step.run(&io, &task, &mut st, rec, &mut calls);
        let result = match step.deadline {
            Some(d) => tokio::time::timeout(d, fut).await.unwrap_or_else(|_| {
                Err((
                    ErrorClass::Timeout,
                    format!("step deadline {} passed", humantime::format_duration(d)),
                ))
            }),
            None => fut.await,
        };
        let end_us = us_since(t0);
        if has_tools {
            rec.tool_depth = Some(st.depth);
        }
        let mut srec = StepRecord {
            kind: step.kind,
            start_us,
            end_us,
            outcome: StepOutcome::Ok,
            calls,
            error: None,
            error_message: None,
            ttft_us: None,
        };
        match result {
            Ok(true) => {
                if matches!(step.kind, StepKind::Chat | StepKind::Tools) {
                    srec.ttft_us = st.ttft_us;
                }
            }
            Ok(false) => srec.outcome = StepOutcome::Skipped,
            Err((class, msg)) => {
                srec.error = Some(class);
                srec.error_message = Some(msg.clone());
                if let Some(fb) = &step.fallback {
                    srec.outcome = StepOutcome::Fallback;
                    st.stand_in(step.kind, fb);
                } else {
                    srec.outcome = StepOutcome::Failed;
                    rec.steps.push(srec);
                    rec.end_us = us_since(t0);
                    rec.fail(
                        class,
                        format!("pipeline step `{}`: {msg}", step.kind.name()),
                    );
                    return None;
                }
            }
        }
        rec.steps.push(srec);
    }
    rec.end_us = us_since(t0);
    Some(st.answer.unwrap_or_default())
}
