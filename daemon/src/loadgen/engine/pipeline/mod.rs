//! Running a client-orchestrated pipeline task (`request.pipeline`): its steps one after the
//! other, each against its own service, each under its deadline, a failed step replaced by its
//! fallback or ending the task.
//!
//! The task is one [`RequestRecord`]: from its intended start (the arrival's scheduled time,
//! so coordinated omission is handled for the task as for a single request) to its last step's
//! end, with the final chat's tokens, status and connection. Each step leaves a
//! [`StepRecord`] in it; the tally aggregates them per phase (`measure::pipeline`).
//!
//! What flows between steps: `embed` gives the query's vector; `search` the documents (each
//! hit's text from the step's `texts` path, or a passage made up from its id); `rerank` orders
//! and cuts them; `chat` sends them in its prompt (`${docs}`), offering the `tools` step's
//! functions; `tools` calls each function the answer asks for (posting its arguments) and sends
//! the conversation on with the results, up to `max_depth` rounds.
//!
//! `compile` and `step` build a phase's pipeline once; `run` drives a task through it,
//! `exchange` is what each step sends and reads, `state` what the steps hand on, `text` the
//! chat's prompt and made-up passages.
//!
//! [`RequestRecord`]: crate::measure::RequestRecord
//! [`StepRecord`]: crate::measure::record::StepRecord

mod compile;
mod exchange;
mod run;
mod state;
mod step;
mod text;

pub use compile::{Pipeline, Rendered, TaskInput};
pub use run::run;
pub use step::{ChatCall, Detail, Step};
