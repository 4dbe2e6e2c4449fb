//! The decision-latency bench of the field guide ("Rerun decision timing"):
//! per prompt length, the first call (cold) is kept apart, then warm-ups,
//! then timed iterations summarised as p50, p95, min and max.
//!
//! The report schema is shared by the native `bench-decide` and the browser
//! bench, so the two are compared on the same artefacts. So are the protocol
//! ([`Session`]), the task prompts, the share-link codec, the router page's
//! URL state and the figures the page draws. The crate does no I/O and reads
//! no clock but `web-time`'s: callers pass text and bytes.

pub mod client_run;
pub mod decode_speed;
pub mod decode_study;
pub mod estimate;
pub mod figures;
pub mod fmt;
#[cfg(feature = "engine")]
pub mod generation;
pub mod guide;
pub mod page;
pub mod prefix;
pub mod protocol;
pub mod quality;
pub mod report;
pub mod roofline;
#[cfg(feature = "engine")]
pub mod run;
pub mod serve;
pub mod share;
pub mod stats;
pub mod svg;
pub mod tasks;
#[cfg(test)]
mod testing;
pub mod truncation;

pub use protocol::Protocol;
pub use report::{Environment, LengthResult, Provenance, Report, SCHEMA, SCHEMAS_READ};
#[cfg(feature = "engine")]
pub use run::{run, Phase, Progress, Session, StepDone};
pub use stats::Summary;
