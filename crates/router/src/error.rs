//! Typed errors. Each variant carries what a user needs to fix the input:
//! which file, which tensor or key, what was expected.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum RouterError {
    /// The bytes are not a well-formed GGUF file.
    #[error("{file}: not a valid GGUF checkpoint: {reason}")]
    Gguf { file: String, reason: String },
    /// A GGUF for an architecture this backbone does not implement.
    #[error("{file}: unsupported architecture `{arch}` (supported: {supported})")]
    UnsupportedArchitecture { file: String, arch: String, supported: String },
    /// A tensor stored in a quantization type we cannot compute with.
    #[error(
        "{file}: tensor `{tensor}` uses unsupported type {dtype} (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K–Q6_K)"
    )]
    UnsupportedQuant { file: String, tensor: String, dtype: String },
    /// A tensor the architecture needs is absent or has the wrong shape.
    #[error("{file}: tensor `{tensor}`: {reason}")]
    Tensor { file: String, tensor: String, reason: String },
    /// A metadata key the architecture needs is absent or malformed.
    #[error("{file}: metadata `{key}`: {reason}")]
    Metadata { file: String, key: String, reason: String },
    /// The tokenizer could not be built or does not fit the model.
    #[error("{source_name}: tokenizer: {reason}")]
    Tokenizer { source_name: String, reason: String },
    /// The pool file is malformed.
    #[error("{file}: pool: {reason}")]
    Pool { file: String, reason: String },
    /// The trained head file is malformed or does not fit the router.
    #[error("{file}: scoring head: {reason}")]
    Head { file: String, reason: String },
    /// A request the router cannot serve (unknown mode, empty conversation).
    #[error("request: {0}")]
    Request(String),
    /// An error inside candle while computing.
    #[error("compute: {0}")]
    Compute(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, RouterError>;
