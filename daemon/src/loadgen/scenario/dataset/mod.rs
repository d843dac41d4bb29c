//! Prompt datasets: JSONL files, ShareGPT-style JSON, or synthetic token lengths (with shared
//! prefixes: `shared_prefix.rs`).
//!
//! `spec` is what a scenario writes, `parse` reads a file's rows, `load` makes the dataset a
//! run picks from, `row` is one prompt.

mod load;
mod parse;
mod row;
mod spec;

pub use load::{Dataset, MAX_PROMPT_BYTES};
pub use parse::DatasetError;
pub use row::{Row, Turn};
pub use spec::{
    DEFAULT_SYNTHETIC_COUNT, DatasetSpec, Format, Length, MAX_SYNTHETIC_COUNT, Synthetic,
};

#[cfg(test)]
mod tests;
