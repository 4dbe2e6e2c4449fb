//! Typed errors. Every variant names the input it is about, so a shell can put
//! the message next to the right field.

use thiserror::Error;

/// A problem with one named input (a URL parameter, a form field, a CLI flag).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The URL parameter name of the field, e.g. `kv_heads`.
    pub field: &'static str,
    /// What is wrong, in a sentence a user can act on.
    pub message: String,
}

impl FieldError {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self { field, message: message.into() }
    }
}

/// Errors of the calculation itself (the inputs parsed, but the numbers do not
/// fit together or do not fit in 128 bits).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KvError {
    /// One or more fields are invalid; each carries its own message.
    #[error("invalid input: {}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Fields(Vec<FieldError>),
    /// A product exceeded `u128`. We refuse to print a wrong number.
    #[error("overflow: {what} exceeds 2^128 bits; reduce the inputs")]
    Overflow { what: &'static str },
    /// A `config.json` could not be read as a model description.
    #[error("config.json: {0}")]
    Config(String),
    /// A GGUF header could not be read as a model description (or read at all).
    #[error("GGUF: {0}")]
    Gguf(String),
}

impl From<FieldError> for KvError {
    fn from(e: FieldError) -> Self {
        KvError::Fields(vec![e])
    }
}
