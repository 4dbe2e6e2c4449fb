//! Pure KV-cache capacity arithmetic for the workbench.
//!
//! This crate is the calculator's whole brain: the layer-type-aware payload
//! (`B_KV = 2 × L × H_kv × d_head × b × ΣT_i` and its generalisations), paged
//! block rounding, tensor-parallel sharding, prefix sharing, the GPU-budget
//! inversion, the vLLM cross-check, model presets, the Hugging Face
//! `config.json` import, the URL query codec and the SVG plot.
//!
//! It knows nothing of Leptos, web-sys or the filesystem: callers hand it
//! strings and bytes, and it hands back numbers and text. The web page and the
//! `kv-budget` command line are thin shells over it, so both print the very
//! same figures.
//!
//! All arithmetic is integer arithmetic in *bits* on `u128` with checked
//! multiplication: int4 is exactly 4 bits, no float ever enters a byte count,
//! and an overflow is an error rather than a wrong number.

pub mod calc;
pub mod config_import;
pub mod dtype;
pub mod error;
pub mod form;
pub mod model;
pub mod plot;
pub mod presets;
pub mod runs;
pub mod units;
pub mod vllm;

pub use calc::{compute, Report};
pub use dtype::Dtype;
pub use error::{FieldError, KvError};
pub use form::{Form, Field, FIELDS};
pub use model::{LayerKind, LayerRun, ModelShape};
