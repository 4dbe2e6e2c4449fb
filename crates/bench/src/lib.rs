//! The decision-latency bench of the field guide ("Rerun decision timing"):
//! per prompt length, the first call (cold) is kept apart, then warm-ups,
//! then timed iterations summarised as p50, p95, min and max.
//!
//! The report schema is shared by the native `bench-decide` and the browser
//! bench, so the two are compared on the same artefacts. The protocol and the
//! statistics take a router and prompts; they do no I/O and read no clock
//! but `web-time`'s.

pub mod report;
pub mod run;
pub mod stats;

pub use report::{Environment, LengthResult, Provenance, Report, SCHEMA};
pub use run::{run, Progress, Protocol};
pub use stats::Summary;
