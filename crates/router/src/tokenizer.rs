//! Tokenizers through the `tokenizers` crate: from a `tokenizer.json`, or
//! built from a GGUF's own metadata so that a GGUF alone is a complete
//! checkpoint.
//!
//! The GGUF path supports `tokenizer.ggml.model = gpt2` (byte-level BPE)
//! with the pre-tokenizer llama.cpp selects by `tokenizer.ggml.pre`, and
//! `llama` (SentencePiece BPE: Gemma, Llama 2), whose file has pieces and
//! scores but no merges. This code runs on both native and wasm32 (candle's
//! own GGUF tokenizer builder is native-only and has no `smollm`
//! pre-tokenizer).

use candle_core::quantized::gguf_file::Value;
use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::normalizers::{Prepend, Replace};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::DecoderWrapper;
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

use crate::conversation::TurnLayout;
use crate::error::{Result, RouterError};
use crate::gguf::Checkpoint;

/// A tokenizer and where it came from.
pub struct RouterTokenizer {
    pub inner: Tokenizer,
    /// `gguf metadata (smollm)` or the tokenizer.json source name.
    pub source: String,
    /// The token the model expects before any text
    /// (`tokenizer.ggml.add_bos_token`; Gemma's `<bos>`): the router keeps
    /// it first when it truncates, and pools over the text's tokens only.
    pub bos: Option<u32>,
    /// How the checkpoint writes conversation turns.
    pub layout: TurnLayout,
    /// The checkpoint's own end-of-text id (`tokenizer.ggml.eos_token_id`
    /// and `eot_token_id`), beside the turn markers found by name
    /// ([`RouterTokenizer::end_of_generation`]).
    pub eos: Vec<u32>,
}

/// Tokens that end a turn or a text in the chat vocabularies this engine
/// runs, found by name as llama.cpp finds its end-of-generation set.
const END_OF_GENERATION_NAMES: &[&str] = &["<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "<|end_of_text|>"];

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const TOKEN_NORMAL: i64 = 1;
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

/// SentencePiece's word-boundary mark, which stands for a space.
const SPACE_MARK: &str = "\u{2581}";

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

/// Each token's type, as integers (`None` when the file has no types).
fn token_types(ck: &Checkpoint, count: usize) -> Result<Option<Vec<i64>>> {
    let source = &ck.file;
    match ck.metadata("tokenizer.ggml.token_type") {
        None => Ok(None),
        Some(Value::Array(types)) if types.len() == count => types
            .iter()
            .map(|t| {
                t.to_i32()
                    .map(i64::from)
                    .or_else(|_| t.to_u32().map(i64::from))
                    .map_err(|_| tok_err(source, "`tokenizer.ggml.token_type` holds a non-integer"))
            })
            .collect::<Result<Vec<i64>>>()
            .map(Some),
        Some(Value::Array(types)) => {
            Err(tok_err(source, format!("`tokenizer.ggml.token_type` has {} entries for {count} tokens", types.len())))
        }
        Some(_) => Err(tok_err(source, "`tokenizer.ggml.token_type` is not an array")),
    }
}

/// A boolean metadata key, `None` when absent.
fn flag(ck: &Checkpoint, key: &str) -> Option<bool> {
    match ck.metadata(key) {
        Some(Value::Bool(b)) => Some(*b),
        _ => None,
    }
}

/// The longest SentencePiece piece that is rebuilt as a merge of two
/// others. The longest normal piece in Gemma 3's 262,144 is 48 bytes; this
/// leaves five times that.
pub const MAX_MERGED_PIECE_BYTES: usize = 256;

/// SentencePiece BPE's merges, rebuilt from the pieces and their scores:
/// every way of writing a normal piece as two pieces is a merge, ranked by
/// the piece's score, highest first. That is the rule llama.cpp's SPM
/// tokenizer applies directly (merge the adjacent pair whose concatenation
/// is the best-scoring piece, leftmost on ties) and the one Hugging Face's
/// converter writes down for Gemma; scores of normal pieces are distinct in
/// the files seen, so the ranking is total.
///
/// Each cut of a piece hashes both halves, so a piece costs time quadratic
/// in its length; pieces longer than [`MAX_MERGED_PIECE_BYTES`] get no
/// merges (they can then never be produced, only matched whole if special),
/// so a crafted vocabulary of huge pieces costs linear time, not hours.
fn merges_from_scores(tokens: &[String], scores: &[f32], types: Option<&[i64]>) -> Vec<(String, String)> {
    let normal = |i: usize| types.is_none_or(|t| t[i] == TOKEN_NORMAL);
    let index: HashMap<&str, usize> = tokens.iter().enumerate().filter(|&(i, _)| normal(i)).map(|(i, t)| (t.as_str(), i)).collect();
    let mut merges: Vec<(f32, usize, usize, usize)> = Vec::new();
    for (i, piece) in tokens.iter().enumerate().filter(|&(i, t)| normal(i) && t.len() <= MAX_MERGED_PIECE_BYTES) {
        for (cut, _) in piece.char_indices().skip(1) {
            if let (Some(&left), Some(&right)) = (index.get(&piece[..cut]), index.get(&piece[cut..])) {
                merges.push((scores[i], i, left, right));
            }
        }
    }
    // Best score first; the ids make the order of equal scores fixed.
    merges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    merges.into_iter().map(|(_, _, left, right)| (tokens[left].clone(), tokens[right].clone())).collect()
}

impl RouterTokenizer {
    /// Builds the tokenizer a GGUF describes in its metadata.
    pub fn from_gguf(ck: &Checkpoint) -> Result<RouterTokenizer> {
        let source = &ck.file;
        let model = match ck.metadata("tokenizer.ggml.model") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(tok_err(source, "the GGUF has no `tokenizer.ggml.model`: supply a tokenizer.json")),
        };
        let tokens = strings(ck.metadata("tokenizer.ggml.tokens"), "tokenizer.ggml.tokens", source)?;
        let types = token_types(ck, tokens.len())?;
        let mut built = match model.as_str() {
            "gpt2" => RouterTokenizer::byte_level_bpe(ck, &tokens)?,
            "llama" => RouterTokenizer::sentencepiece_bpe(ck, &tokens, types.as_deref())?,
            other => {
                return Err(tok_err(
                    source,
                    format!(
                        "`tokenizer.ggml.model` is `{other}`; byte-level BPE (`gpt2`) and SentencePiece BPE (`llama`) are built from metadata: supply a tokenizer.json"
                    ),
                ))
            }
        };
        // Control and user-defined tokens are matched whole in text, as
        // llama.cpp does with special-token parsing on.
        if let Some(types) = &types {
            let specials: Vec<AddedToken> = types
                .iter()
                .zip(&tokens)
                .filter(|(t, _)| matches!(**t, TOKEN_CONTROL | TOKEN_USER_DEFINED))
                .map(|(_, token)| AddedToken::from(token.clone(), true))
                .collect();
            built.inner.add_special_tokens(specials).map_err(|e| tok_err(source, e.to_string()))?;
        }
        // The chat template when the file has one; otherwise the turn
        // markers its vocabulary has (the Gemma 3 270M file has no template).
        built.layout = match ck.metadata("tokenizer.chat_template") {
            Some(Value::String(template)) => TurnLayout::from_chat_template(Some(template)),
            _ if tokens.iter().any(|t| t == "<start_of_turn>") => TurnLayout::Gemma,
            _ => TurnLayout::ChatMl,
        };
        for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
            if let Some(Ok(id)) = ck.metadata(key).map(|v| v.to_u32()) {
                if (id as usize) < tokens.len() && !built.eos.contains(&id) {
                    built.eos.push(id);
                }
            }
        }
        if flag(ck, "tokenizer.ggml.add_bos_token") == Some(true) {
            let id = match ck.metadata("tokenizer.ggml.bos_token_id").map(|v| v.to_u32()) {
                Some(Ok(id)) if (id as usize) < tokens.len() => id,
                _ => return Err(tok_err(source, "`tokenizer.ggml.add_bos_token` is set but `tokenizer.ggml.bos_token_id` is not a token")),
            };
            built.bos = Some(id);
        }
        Ok(built)
    }

    /// SentencePiece BPE over the whole text (no pre-tokenizer, as llama.cpp
    /// runs it): spaces become `▁`, characters outside the vocabulary fall
    /// back to `<0xXX>` byte tokens.
    fn sentencepiece_bpe(ck: &Checkpoint, tokens: &[String], types: Option<&[i64]>) -> Result<RouterTokenizer> {
        let source = &ck.file;
        let scores: Vec<f32> = match ck.metadata("tokenizer.ggml.scores") {
            Some(Value::Array(items)) if items.len() == tokens.len() => items
                .iter()
                .map(|v| v.to_f32().map_err(|_| tok_err(source, "`tokenizer.ggml.scores` holds a non-float")))
                .collect::<Result<_>>()?,
            Some(_) => return Err(tok_err(source, "`tokenizer.ggml.scores` is not an array with one score per token")),
            None => return Err(tok_err(source, "`tokenizer.ggml.scores` is missing: SentencePiece BPE ranks merges by them")),
        };
        let merges = merges_from_scores(tokens, &scores, types);
        let vocab: tokenizers::models::bpe::Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let mut bpe = BPE::builder().vocab_and_merges(vocab, merges).byte_fallback(true);
        if let Some(Ok(unk)) = ck.metadata("tokenizer.ggml.unknown_token_id").map(|v| v.to_u32()) {
            if let Some(name) = tokens.get(unk as usize) {
                bpe = bpe.unk_token(name.clone());
            }
        }
        let bpe = bpe.build().map_err(|e| tok_err(source, e.to_string()))?;
        let mut tokenizer = Tokenizer::new(bpe);
        let replace = Replace::new(" ", SPACE_MARK).map_err(|e| tok_err(source, e.to_string()))?;
        if flag(ck, "tokenizer.ggml.add_space_prefix").unwrap_or(true) {
            // llama.cpp prefixes a space to the first text fragment and to
            // every fragment after a special token, which is what a
            // normalizer does per segment between added tokens. No fixture
            // checks it: Gemma sets the flag off.
            let normalizer = tokenizers::normalizers::Sequence::new(vec![Prepend::new(SPACE_MARK.into()).into(), replace.into()]);
            tokenizer.with_normalizer(Some(normalizer)).map_err(|e| tok_err(source, e.to_string()))?;
        } else {
            tokenizer.with_normalizer(Some(replace)).map_err(|e| tok_err(source, e.to_string()))?;
        }
        let unmark = Replace::new(SPACE_MARK, " ").map_err(|e| tok_err(source, e.to_string()))?;
        let decoder: DecoderWrapper = DecoderSequence::new(vec![unmark.into(), ByteFallback::new().into(), Fuse::new().into()]).into();
        tokenizer.with_decoder(Some(decoder));
        Ok(RouterTokenizer {
            inner: tokenizer,
            source: "GGUF metadata (SentencePiece)".into(),
            bos: None,
            layout: TurnLayout::ChatMl,
            eos: Vec::new(),
        })
    }

    /// Byte-level BPE with the file's merges and llama.cpp's pre-tokenizer
    /// for its `tokenizer.ggml.pre`.
    fn byte_level_bpe(ck: &Checkpoint, tokens: &[String]) -> Result<RouterTokenizer> {
        let source = &ck.file;
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
        Ok(RouterTokenizer {
            inner: tokenizer,
            source: format!("GGUF metadata ({pre})"),
            bos: None,
            layout: TurnLayout::ChatMl,
            eos: Vec::new(),
        })
    }

    /// Reads a `tokenizer.json` (bytes in; `source` names it in errors).
    pub fn from_json(bytes: &[u8], source: &str) -> Result<RouterTokenizer> {
        let inner = Tokenizer::from_bytes(bytes).map_err(|e| tok_err(source, format!("not a valid tokenizer.json: {e}")))?;
        Ok(RouterTokenizer { inner, source: source.to_string(), bos: None, layout: TurnLayout::ChatMl, eos: Vec::new() })
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

    /// The token ids the model reads for `text`: the tokenizer's BOS when
    /// the model expects one, then the text's tokens (special tokens in the
    /// text recognised).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self.inner.encode(text, false).map_err(|e| tok_err(&self.source, e.to_string()))?;
        Ok(self.bos.iter().copied().chain(encoding.get_ids().iter().copied()).collect())
    }

    /// How many leading ids of [`RouterTokenizer::encode`] are not the text's
    /// (0 or 1): truncation keeps them and pooling leaves them out.
    pub fn leading(&self) -> usize {
        usize::from(self.bos.is_some())
    }

    /// The ids that end a generation: the checkpoint's end-of-text tokens
    /// and every turn or text end marker its vocabulary has.
    pub fn end_of_generation(&self) -> Vec<u32> {
        let mut ids = self.eos.clone();
        for id in END_OF_GENERATION_NAMES.iter().filter_map(|name| self.inner.token_to_id(name)) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }

    /// The text of `ids`, special tokens left out (as a chat shows it).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(|e| tok_err(&self.source, e.to_string()))
    }

    /// The text's own token ids (no BOS) and, for each, the byte offset where it ends in `text`.
    pub fn encode_with_ends(&self, text: &str) -> Result<(Vec<u32>, Vec<usize>)> {
        let enc = self.inner.encode(text, false).map_err(|e| tok_err(&self.source, e.to_string()))?;
        Ok((enc.get_ids().to_vec(), enc.get_offsets().iter().map(|o| o.1).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_follow_the_scores_and_skip_huge_pieces() {
        // A 1 MiB piece made of two pieces: quadratic work (10^6 cuts, each
        // hashing up to a megabyte) if it were considered; skipped, instantly.
        let huge = "a".repeat(1 << 20);
        let tokens: Vec<String> =
            ["a", "b", "ab", "ba", "aba"].iter().map(|s| s.to_string()).chain([huge.clone(), format!("{huge}b")]).collect();
        let scores = [-1.0, -1.0, -0.5, -0.7, -0.2, -0.1, -0.05];
        let merges = merges_from_scores(&tokens, &scores, None);
        let pairs: Vec<(&str, &str)> = merges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        // "aba" (best score) = "ab"+"a" or "a"+"ba"; then "ab"; then "ba".
        assert_eq!(pairs, vec![("a", "ba"), ("ab", "a"), ("a", "b"), ("b", "a")]);
    }
}
