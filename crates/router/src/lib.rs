//! The router core: a small quantized decoder (GGUF) on candle, its
//! tokenizer, the candidate pool and the `Router.decide` pipeline of the field
//! guide ("Account for the time in a request").
//!
//! The library does no I/O: callers hand it the bytes of a GGUF checkpoint, a
//! tokenizer.json and a pool file, and get decisions with per-stage timings.
//! It compiles natively and for wasm32; the one clock is `web-time`.

pub mod conversation;
pub mod error;
pub mod gguf;
pub mod model;
pub mod pool;
pub mod prompts;
pub mod router;
pub mod synthetic;
pub mod tokenizer;

pub use conversation::{Conversation, Message, Role};
pub use error::{Result, RouterError};
pub use model::Precision;
pub use pool::Pool;
pub use router::{Decision, LoadTimings, Ranked, Router, RouterAssets, RouterConfig, Scores, StageTimings};
