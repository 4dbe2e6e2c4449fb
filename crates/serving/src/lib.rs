//! The serving core of the field guide's note 06: requests under open-loop
//! arrivals, one engine, a bounded queue, client timeouts and chunked
//! prefill, with every request kept in the statistics.
//!
//! Pure: no web-sys, no filesystem, no clock of its own, no model. The
//! scheduler is a state machine ([`Server`]) the caller steps with the
//! current time and an [`Engine`] to run work on, so the native CLI (which
//! sleeps between arrivals), the browser worker (which awaits a timer and
//! lets a Cancel in between steps), an HTTP server next, and the tests
//! (with a clock they advance themselves) drive the same code. `bench`
//! keeps the experiments built on it (the study, its tables and figures)
//! and the engine over a `Router`.
//!
//! The concurrency model is the note's single engine: one request's work at
//! a time. Arrivals that come while the engine computes wait in the queue
//! and are admitted when the engine next looks (a single-threaded server
//! notices them between work units, as this one does: between requests, or
//! between chunks with chunked prefill). Time is wall-clock time from the
//! run's start; nothing is simulated but the clients' arrival times.

pub mod batching;
pub mod disaggregation;
pub mod generation;
mod record;
mod server;
mod settings;
mod summary;
mod trace;

pub use record::*;
pub use server::*;
pub use settings::*;
pub use summary::*;
pub use trace::*;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;
