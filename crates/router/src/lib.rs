//! The router core: a small quantized decoder (GGUF) on candle, its
//! tokenizer, the candidate pool and the `Router.decide` pipeline of the field
//! guide ("Account for the time in a request").
//!
//! The library does no I/O: callers hand it the bytes of a GGUF checkpoint, a
//! tokenizer.json and a pool file, and get decisions with per-stage timings.
//! It compiles natively and for wasm32; the one clock is `web-time`.

//!
//! Without the default `engine` feature only the plain data types remain
//! (conversations, decisions, stage timings): the web page's UI thread uses
//! those and so never compiles or links candle, which lives in the worker.

#[cfg(feature = "engine")]
pub mod arch;
#[cfg(feature = "engine")]
pub mod attention;
pub mod conversation;
pub mod decision;
#[cfg(feature = "engine")]
pub mod dequant;
#[cfg(feature = "engine")]
pub mod error;
#[cfg(feature = "engine")]
pub mod generate;
#[cfg(feature = "engine")]
pub mod gguf;
#[cfg(feature = "engine")]
pub mod handoff;
#[cfg(feature = "engine")]
pub mod head;
#[cfg(feature = "engine")]
pub mod integer;
#[cfg(feature = "engine")]
pub mod kernels;
#[cfg(feature = "engine")]
mod lm_head;
#[cfg(feature = "engine")]
pub mod model;
#[cfg(feature = "engine")]
pub mod parallel;
#[cfg(feature = "engine")]
pub mod pool;
#[cfg(feature = "engine")]
pub mod prefix;
#[cfg(feature = "engine")]
pub mod probe;
#[cfg(feature = "engine")]
pub mod prompts;
#[cfg(feature = "engine")]
pub mod router;
pub mod sampling;
#[cfg(feature = "engine")]
pub mod segment;
#[cfg(feature = "engine")]
pub mod synthetic;
#[cfg(feature = "engine")]
pub mod tokenizer;

pub use conversation::{Conversation, Message, Role, TurnLayout};
pub use decision::{
    normal_cdf, rank, top_index, BandwidthProbe, BuildStage, Confidence, CostTerm, Decision, FeatureMap, FlopModel, GemmProbe,
    HeadEvaluation, LoadTimings, Neighbour, NeighbourOutcome, PooledFeatures, Pooling, Precision, PrefixReuse, Ranked, Scores,
    ScoringChoice, StageTimings, TruncationSide, ENDS_WINDOW,
};
#[cfg(feature = "engine")]
pub use error::{Result, RouterError};
#[cfg(feature = "engine")]
pub use head::{Head, LoadedHead};
#[cfg(feature = "engine")]
pub use pool::Pool;
#[cfg(feature = "engine")]
pub use prefix::{CacheBudget, Namespace, PrefixCache};
#[cfg(feature = "engine")]
pub use router::{PendingDecide, Router, RouterAssets, RouterConfig};

/// Milliseconds since `since` on `web-time`'s clock, the one clock both
/// targets read (every stage timing and the serving test's engine times).
#[cfg(feature = "engine")]
pub fn elapsed_ms(since: web_time::Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
