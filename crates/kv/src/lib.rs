//! Pure KV-cache capacity arithmetic for the workbench.
//!
//! This crate is the calculator's whole brain: the layer-type-aware payload
//! (`B_KV = 2 × L × H_kv × d_head × b × ΣT_i` and its generalisations), paged
//! block rounding, tensor-parallel sharding, prefix sharing, the GPU-budget
//! inversion, capacity from a length distribution, the vLLM cross-check, model presets, the Hugging Face
//! `config.json` import, a model read from its GGUF header, the URL query codec and the SVG plot.
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
pub mod distribution;
pub mod dtype;
pub mod error;
pub mod form;
pub mod gguf_import;
pub mod model;
pub mod plot;
pub mod presets;
pub mod reconcile;
pub mod runs;
pub mod units;
pub mod vllm;

pub use calc::{compute, Inputs, Report};
pub use dtype::Dtype;
pub use error::{FieldError, KvError};
pub use form::{Field, Form, FIELDS};
pub use model::{LayerKind, LayerRun, ModelShape};

/// The outcome of reading a form: figures, or what is wrong with it.
#[derive(Debug, Clone, PartialEq)]
pub enum Evaluation {
    /// Every field is valid and the figures are computed.
    Ready { inputs: Box<Inputs>, report: Box<Report> },
    /// One message per invalid field (the fields are kept as typed).
    Invalid(Vec<FieldError>),
    /// The inputs are valid but the result does not fit in 128 bits.
    Failed(String),
}

/// Validates a form and computes its figures: the one pipeline the page and
/// the command line share.
pub fn evaluate(form: &Form) -> Evaluation {
    match form.validate() {
        Err(errors) => Evaluation::Invalid(errors),
        Ok(inputs) => match compute(&inputs) {
            Ok(report) => Evaluation::Ready { inputs: Box::new(inputs), report: Box::new(report) },
            Err(KvError::Fields(errors)) => Evaluation::Invalid(errors),
            Err(other) => Evaluation::Failed(other.to_string()),
        },
    }
}
