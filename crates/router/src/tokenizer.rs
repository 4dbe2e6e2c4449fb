//! Tokenizers through the `tokenizers` crate: from a `tokenizer.json`, or
//! built from a GGUF's own metadata so that a GGUF alone is a complete
//! checkpoint.
//!
//! The GGUF path supports `tokenizer.ggml.model = gpt2` (byte-level BPE)
//! with the pre-tokenizer llama.cpp selects by `tokenizer.ggml.pre`. This
//! code runs on both native and wasm32 (candle's own GGUF tokenizer builder
//! is native-only and has no `smollm` pre-tokenizer).

use candle_core::quantized::gguf_file::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

use crate::error::{Result, RouterError};
use crate::gguf::Checkpoint;

/// A tokenizer and where it came from.
pub struct RouterTokenizer {
    pub inner: Tokenizer,
    /// `gguf metadata (smollm)` or the tokenizer.json source name.
    pub source: String,
}

/// llama.cpp's `qwen2` split regex (single digits).
const REGEX_QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// llama.cpp's `llama-bpe` split regex (digits in threes).
const REGEX_LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn tok_err(source: &str, reason: impl Into<String>) -> RouterError {
    RouterError::Tokenizer { source_name: source.to_string(), reason: reason.into() }
}

fn split(regex: &str, source: &str) -> Result<PreTokenizerWrapper> {
    Ok(Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
        .map_err(|e| tok_err(source, e.to_string()))?
        .into())
}

fn strings(v: Option<&Value>, key: &str, source: &str) -> Result<Vec<String>> {
    match v {
        Some(Value::Array(items)) => {
            items.iter().map(|x| x.to_string().cloned().map_err(|_| tok_err(source, format!("`{key}` holds a non-string")))).collect()
        }
        Some(_) => Err(tok_err(source, format!("`{key}` is not an array"))),
        None => Err(tok_err(source, format!("`{key}` is missing"))),
    }
}

impl RouterTokenizer {
    /// Builds the tokenizer a GGUF describes in its metadata.
    pub fn from_gguf(ck: &Checkpoint) -> Result<RouterTokenizer> {
        let source = &ck.file;
        let model = match ck.metadata("tokenizer.ggml.model") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(tok_err(source, "the GGUF has no `tokenizer.ggml.model`: supply a tokenizer.json")),
        };
        if model != "gpt2" {
            return Err(tok_err(
                source,
                format!(
                    "`tokenizer.ggml.model` is `{model}`; only byte-level BPE (`gpt2`) is built from metadata: supply a tokenizer.json"
                ),
            ));
        }
        let tokens = strings(ck.metadata("tokenizer.ggml.tokens"), "tokenizer.ggml.tokens", source)?;
        let merges: Vec<(String, String)> = strings(ck.metadata("tokenizer.ggml.merges"), "tokenizer.ggml.merges", source)?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| tok_err(source, format!("merge `{m}` has no space")))
            })
            .collect::<Result<_>>()?;
        let vocab: tokenizers::models::bpe::Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().map_err(|e| tok_err(source, e.to_string()))?;
        let mut tokenizer = Tokenizer::new(bpe);
        let pre = match ck.metadata("tokenizer.ggml.pre") {
            Some(Value::String(s)) => s.clone(),
            _ => "gpt2".to_string(),
        };
        // The pre-tokenizers llama.cpp uses for these `tokenizer.ggml.pre` values.
        let pre_tokenizer: PreTokenizerWrapper = match pre.as_str() {
            // SmolLM: every digit alone, then GPT-2's byte-level regex.
            "smollm" => Sequence::new(vec![split(r"\p{N}", source)?, ByteLevel::new(false, true, true).into()]).into(),
            "qwen2" => Sequence::new(vec![split(REGEX_QWEN2, source)?, ByteLevel::new(false, false, false).into()]).into(),
            "llama-bpe" | "llama3" | "smaug-bpe" => {
                Sequence::new(vec![split(REGEX_LLAMA3, source)?, ByteLevel::new(false, true, false).into()]).into()
            }
            "gpt2" | "default" => ByteLevel::new(false, true, true).into(),
            other => return Err(tok_err(source, format!("pre-tokenizer `{other}` is not supported: supply a tokenizer.json"))),
        };
        if pre == "qwen2" {
            tokenizer.with_normalizer(Some(NFC)).map_err(|e| tok_err(source, e.to_string()))?;
        }
        tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
        tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
        // Control and user-defined tokens (types 3 and 4) are matched whole in
        // text, as llama.cpp does with special-token parsing on.
        if let Some(Value::Array(types)) = ck.metadata("tokenizer.ggml.token_type") {
            let specials: Vec<AddedToken> = types
                .iter()
                .enumerate()
                .filter(|(_, t)| matches!(t.to_i32(), Ok(3 | 4)) || matches!(t.to_u32(), Ok(3 | 4)))
                .filter_map(|(i, _)| tokens.get(i))
                .map(|t| AddedToken::from(t.clone(), true))
                .collect();
            tokenizer.add_special_tokens(specials).map_err(|e| tok_err(source, e.to_string()))?;
        }
        Ok(RouterTokenizer { inner: tokenizer, source: format!("GGUF metadata ({pre})") })
    }

    /// Reads a `tokenizer.json` (bytes in; `source` names it in errors).
    pub fn from_json(bytes: &[u8], source: &str) -> Result<RouterTokenizer> {
        let inner = Tokenizer::from_bytes(bytes).map_err(|e| tok_err(source, format!("not a valid tokenizer.json: {e}")))?;
        Ok(RouterTokenizer { inner, source: source.to_string() })
    }

    /// Fails unless the tokenizer can only produce ids the model has.
    pub fn check_vocab(&self, model_vocab: usize) -> Result<()> {
        let size = self.inner.get_vocab_size(true);
        if size > model_vocab {
            return Err(tok_err(
                &self.source,
                format!("has {size} tokens but the model's embedding has {model_vocab} rows: it belongs to another model"),
            ));
        }
        Ok(())
    }

    /// Token ids of `text`, special tokens in the text recognised, nothing added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.inner.encode(text, false).map_err(|e| tok_err(&self.source, e.to_string()))?.get_ids().to_vec())
    }

    /// Token ids and, for each, the byte offset where it ends in `text`.
    pub fn encode_with_ends(&self, text: &str) -> Result<(Vec<u32>, Vec<usize>)> {
        let enc = self.inner.encode(text, false).map_err(|e| tok_err(&self.source, e.to_string()))?;
        Ok((enc.get_ids().to_vec(), enc.get_offsets().iter().map(|o| o.1).collect()))
    }
}
