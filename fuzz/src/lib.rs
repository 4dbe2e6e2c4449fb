//! Shared by the fuzz targets and `make-seeds`: structured inputs that the
//! fuzzer mutates field by field, and how each becomes the bytes a parser
//! reads.

use arbitrary::Arbitrary;
use candle_core::quantized::gguf_file::{self, Value};

/// The pool file the page and the CLIs load by default.
pub const POOL_YAML: &[u8] = include_bytes!("../../configs/pool.coderouterbench.yaml");

/// The pre-tokenizer names a byte-level BPE may ask for (the last one unknown).
pub const PRE: [&str; 7] = ["gpt2", "smollm", "qwen2", "llama-bpe", "llama3", "default", "unknown-pre"];

/// A tokenizer described in GGUF metadata, field by field.
#[derive(Debug, Clone, Arbitrary)]
pub struct TokenizerSpec {
    /// `tokenizer.ggml.model`: `llama` (SentencePiece) or `gpt2` (byte-level BPE).
    pub sentencepiece: bool,
    pub pre: u8,
    pub tokens: Vec<String>,
    pub scores: Vec<f32>,
    pub types: Vec<i32>,
    pub merges: Vec<String>,
    pub add_bos: Option<bool>,
    pub bos: u32,
    pub add_space_prefix: Option<bool>,
    pub chat_template: Option<String>,
    /// What is encoded with the tokenizer once built.
    pub text: String,
}

impl TokenizerSpec {
    /// A GGUF with this tokenizer, a minimal llama header and no tensors.
    pub fn gguf(&self) -> Vec<u8> {
        let mut meta: Vec<(String, Value)> = vec![
            ("general.architecture".into(), Value::String("llama".into())),
            ("llama.block_count".into(), Value::U32(1)),
            ("llama.embedding_length".into(), Value::U32(8)),
            ("llama.attention.head_count".into(), Value::U32(1)),
            ("llama.context_length".into(), Value::U32(64)),
            ("tokenizer.ggml.model".into(), Value::String(if self.sentencepiece { "llama" } else { "gpt2" }.into())),
            ("tokenizer.ggml.tokens".into(), Value::Array(self.tokens.iter().cloned().map(Value::String).collect())),
            ("tokenizer.ggml.pre".into(), Value::String(PRE[self.pre as usize % PRE.len()].into())),
            ("tokenizer.ggml.bos_token_id".into(), Value::U32(self.bos)),
        ];
        if !self.scores.is_empty() {
            meta.push(("tokenizer.ggml.scores".into(), Value::Array(self.scores.iter().copied().map(Value::F32).collect())));
        }
        if !self.types.is_empty() {
            meta.push(("tokenizer.ggml.token_type".into(), Value::Array(self.types.iter().copied().map(Value::I32).collect())));
        }
        if !self.merges.is_empty() {
            meta.push(("tokenizer.ggml.merges".into(), Value::Array(self.merges.iter().cloned().map(Value::String).collect())));
        }
        if let Some(b) = self.add_bos {
            meta.push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(b)));
        }
        if let Some(b) = self.add_space_prefix {
            meta.push(("tokenizer.ggml.add_space_prefix".into(), Value::Bool(b)));
        }
        if let Some(t) = &self.chat_template {
            meta.push(("tokenizer.chat_template".into(), Value::String(t.clone())));
        }
        let refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut out = std::io::Cursor::new(Vec::new());
        gguf_file::write(&mut out, &refs, &[]).expect("writing to memory");
        out.into_inner()
    }
}
