//! Why a vector phase could not be set up (seeding, dimension, a test query): typed, each
//! saying what to do, so that a run stops before it starts with one line.

use crate::loadgen::client::TargetError;

/// A vector phase's setup that failed: the phase and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("phase `{phase}`: {failure}")]
pub struct SetupError {
    /// The phase.
    pub phase: String,
    /// What went wrong.
    pub failure: Failure,
}

/// One exchange with the vector service that got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// No answer: the connection, reading it, or the setup timeout (`why`, one line).
    #[error("{what}: {why}")]
    NoAnswer {
        /// The request, e.g. `GET /collections/docs`.
        what: String,
        /// Why, one line.
        why: String,
    },
    /// An answer outside 2xx where one was required.
    #[error("{what}: HTTP {status}: {body}")]
    Status {
        /// The request.
        what: String,
        /// Its status.
        status: u16,
        /// The start of the answer, on one line.
        body: String,
    },
    /// A path that does not make a URI with the target.
    #[error(transparent)]
    Target(#[from] TargetError),
}

/// What went wrong in a vector phase's setup.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// `dimensions:` and the corpus's disagree.
    #[error("`dimensions: {given}` differs from the corpus's {corpus}: drop one of them")]
    CorpusDimensions {
        /// `dimensions:`.
        given: usize,
        /// The corpus's.
        corpus: usize,
    },
    /// The corpus could not be generated (its thread failed).
    #[error("generating the corpus failed: {0}")]
    Corpus(String),
    /// Creating or filling the collection failed.
    #[error("seeding the collection failed: {0}")]
    Seeding(Seeding),
    /// The service holds vectors of another dimension than the phase sends.
    #[error(
        "it sends {want}-dimension vectors but {at} holds {have}-dimension ones: set `dimensions: {have}` (flags: --dimensions {have})"
    )]
    Dimensions {
        /// What the phase sends.
        want: usize,
        /// What the index holds.
        have: usize,
        /// Which index said so.
        at: String,
    },
    /// Nothing says the dimension: neither the phase nor the service.
    #[error(
        "give `dimensions:` (flags: --dimensions N): the {api} API does not say its index's dimension"
    )]
    UnknownDimensions {
        /// The API's name.
        api: &'static str,
    },
    /// The collection the phase searches does not exist.
    #[error(
        "{api} has no collection `{collection}`: add `corpus:` to create and seed it, or set `collection:`"
    )]
    NoCollection {
        /// The API's name.
        api: &'static str,
        /// The collection.
        collection: String,
    },
    /// Chroma's answer about the collection does not read (`why`).
    #[error("{what}: {why}")]
    CollectionInfo {
        /// The request.
        what: String,
        /// What is wrong with the answer.
        why: String,
    },
    /// Chroma refused the phase's `ef_search`.
    #[error("setting Chroma's ef_search to {ef}: HTTP {status}: {body}")]
    EfSearch {
        /// The value asked for.
        ef: u32,
        /// The answer's status.
        status: u16,
        /// The start of the answer.
        body: String,
    },
    /// An exchange while finding the collection got no usable answer.
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    /// The test query got no answer.
    #[error("a test query failed: {0}")]
    TestQuery(ExchangeError),
    /// The server refused the test query (4xx).
    #[error("the server refused a test query: HTTP {status}: {body}{}", json_hint(*.json))]
    Refused {
        /// The answer's status.
        status: u16,
        /// The start of the answer.
        body: String,
        /// Whether the phase uses the generic JSON adapter (the hint names its fields).
        json: bool,
    },
    /// The answer to the test query does not read as the API's.
    #[error("the answer to a test query does not read as {api}: {why}{}", json_hint(*.json))]
    Unreadable {
        /// The API's name.
        api: &'static str,
        /// What the adapter could not read.
        why: String,
        /// Whether the phase uses the generic JSON adapter.
        json: bool,
    },
}

/// Why seeding a collection failed.
#[derive(Debug, thiserror::Error)]
pub enum Seeding {
    /// An exchange got no usable answer.
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    /// Chroma created the collection but did not say its id.
    #[error("Chroma's answer to creating a collection has no `id`")]
    NoId,
    /// `json.insert.method` is not an HTTP method.
    #[error("bad insert method {0:?}")]
    Method(String),
    /// The sim's corpus is fixed.
    #[error("the sim serves its own fixed corpus: drop `corpus:` (recall comes from `exact_path`)")]
    Sim,
}

fn json_hint(json: bool) -> &'static str {
    if json {
        " (fix `json.body`, `json.ids` or `json.scores` to fit the server's API)"
    } else {
        ""
    }
}
