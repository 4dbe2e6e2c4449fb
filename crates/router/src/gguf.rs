//! GGUF checkpoints: the whole file checked by the shared header reader
//! (the `gguf` crate) before candle reads it, the architecture's
//! hyper-parameters, and the checkpoint id.
//!
//! candle's reader trusts the lengths a file declares (a corrupt string length
//! becomes a huge allocation), so every length and tensor region is checked
//! against the bytes actually present first, and every count that sizes an
//! allocation against a named budget ([`Budget`]): candle holds each
//! metadata array element as a 32-byte `Value`, so a file of one-byte
//! elements could otherwise make it allocate 32 times its own size. A
//! truncated, corrupt, oversized or unsupported file is then an error naming
//! what is wrong, never a panic or an exhausted wasm32 memory. The KV
//! calculator reads its headers with the same reader and budgets.

use std::io::Cursor;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use sha2::{Digest, Sha256};

pub use gguf::Budget;

use crate::arch::Arch;
use crate::error::{Result, RouterError};

/// GGML type ids candle can compute with; the reader sizes more (every
/// type llama.cpp writes), and a checkpoint holding another is refused.
const COMPUTABLE: &[u32] = &[0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 30];

/// Checks the whole structure of a GGUF file against its length, and that
/// candle can compute with every tensor's type.
pub fn validate(bytes: &[u8], file: &str) -> Result<()> {
    let header = gguf::read_header(bytes, bytes.len() as u64).map_err(|e| match e {
        gguf::HeaderError::UnknownType { tensor, type_id } => {
            RouterError::UnsupportedQuant { file: file.to_string(), tensor, dtype: format!("ggml type {type_id}") }
        }
        other => RouterError::Gguf { file: file.to_string(), reason: other.to_string() },
    })?;
    match header.tensors.iter().find(|t| !COMPUTABLE.contains(&t.ggml_type.id)) {
        Some(t) => Err(RouterError::UnsupportedQuant {
            file: file.to_string(),
            tensor: t.name.clone(),
            dtype: format!("ggml type {}", t.ggml_type.id),
        }),
        None => Ok(()),
    }
}

/// The llama.cpp spelling of a tensor type, e.g. `Q4_1`, `Q6_K`.
pub fn ggml_name(dtype: GgmlDType) -> &'static str {
    match dtype {
        GgmlDType::F32 => "F32",
        GgmlDType::F16 => "F16",
        GgmlDType::BF16 => "BF16",
        GgmlDType::Q4_0 => "Q4_0",
        GgmlDType::Q4_1 => "Q4_1",
        GgmlDType::Q5_0 => "Q5_0",
        GgmlDType::Q5_1 => "Q5_1",
        GgmlDType::Q8_0 => "Q8_0",
        GgmlDType::Q8_1 => "Q8_1",
        GgmlDType::Q2K => "Q2_K",
        GgmlDType::Q3K => "Q3_K",
        GgmlDType::Q4K => "Q4_K",
        GgmlDType::Q5K => "Q5_K",
        GgmlDType::Q6K => "Q6_K",
        GgmlDType::Q8K => "Q8_K",
    }
}

/// The hyper-parameters a forward pass needs, read from GGUF metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Hparams {
    /// The description the forward pass reads ([`crate::arch`]).
    pub architecture: &'static Arch,
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub rms_eps: f64,
    pub rope_theta: f32,
    pub context_length: usize,
    /// `attention.sliding_window`, for architectures with sliding-window layers.
    pub sliding_window: Option<usize>,
}

impl Hparams {
    /// The prefill's FLOP count: per layer and token, the q/k/v/o and
    /// gate/up/down projections (2 FLOPs per weight); per layer, head and
    /// causal token pair (T²/2 of them), QKᵀ and the weighted sum of V
    /// (2 × 2 × head_dim FLOPs), as `attention::causal` computes them.
    pub fn flop_model(&self) -> crate::FlopModel {
        let (h, q, kv, ffn) =
            (self.hidden as f64, (self.heads * self.head_dim) as f64, (self.kv_heads * self.head_dim) as f64, self.ffn as f64);
        let weights_per_layer = h * q + 2.0 * h * kv + q * h + 3.0 * h * ffn;
        let layers = self.layers as f64;
        crate::FlopModel {
            per_token: 2.0 * weights_per_layer * layers,
            per_token_squared: 2.0 * (self.heads * self.head_dim) as f64 * layers,
        }
    }
}

/// A parsed GGUF checkpoint over the caller's bytes.
pub struct Checkpoint<'a> {
    pub file: String,
    pub bytes: &'a [u8],
    pub content: Content,
    pub hparams: Hparams,
    /// Short content hash of the checkpoint bytes.
    pub id: String,
    /// The file's quantization mix by llama.cpp's name (`general.file_type`,
    /// e.g. `Q4_K_M`), else the most common type among the 2-D tensors.
    pub weight_type: String,
}

/// `gguf-` and the first 8 hex digits of the SHA-256 of `bytes`.
pub fn checkpoint_id(bytes: &[u8]) -> String {
    checkpoint_id_from_sha256(&hex(&Sha256::digest(bytes)))
}

/// The checkpoint id from the file's SHA-256 in hex (64 digits).
fn checkpoint_id_from_sha256(hex: &str) -> String {
    format!("gguf-{}", hex[..8].to_ascii_lowercase())
}

/// Bytes as lowercase hex (digests in ids and messages).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl<'a> Checkpoint<'a> {
    /// Validates and parses `bytes`; `file` names the source in errors.
    pub fn parse(bytes: &'a [u8], file: &str) -> Result<Checkpoint<'a>> {
        Checkpoint::parse_with_sha256(bytes, file, None)
    }

    /// As [`Checkpoint::parse`], with the file's SHA-256 (hex) when the
    /// caller already has it: in the browser WebCrypto hashes 98 MB in
    /// 0.2 s where the portable `sha2` in wasm takes 5 s, and the checkpoint
    /// id is a prefix of that digest. Anything but 64 hex digits is ignored
    /// and the digest computed here.
    pub fn parse_with_sha256(bytes: &'a [u8], file: &str, sha256_hex: Option<&str>) -> Result<Checkpoint<'a>> {
        validate(bytes, file)?;
        let content =
            Content::read(&mut Cursor::new(bytes)).map_err(|e| RouterError::Gguf { file: file.to_string(), reason: e.to_string() })?;
        let hparams = read_hparams(&content, file)?;
        let mut counts: Vec<(&'static str, usize)> = Vec::new();
        for info in content.tensor_infos.values() {
            if info.shape.rank() == 2 {
                let name = ggml_name(info.ggml_dtype);
                match counts.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, c)) => *c += 1,
                    None => counts.push((name, 1)),
                }
            }
        }
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        // A mixed file (`Q4_K_M` holds Q5_0, Q8_0, Q4_K and Q6_K tensors)
        // is named by its `general.file_type`; otherwise by its commonest type.
        let file_type = content.metadata.get("general.file_type").and_then(|v| v.to_u32().ok()).and_then(file_type_name);
        let weight_type = file_type.or(counts.first().map(|c| c.0)).unwrap_or("unknown").to_string();
        Ok(Checkpoint {
            file: file.to_string(),
            bytes,
            content,
            hparams,
            id: match sha256_hex {
                Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => checkpoint_id_from_sha256(hex),
                _ => checkpoint_id(bytes),
            },
            weight_type,
        })
    }

    /// Reads one tensor, or says which one is missing.
    pub fn tensor(&self, name: &str) -> Result<QTensor> {
        if !self.content.tensor_infos.contains_key(name) {
            return Err(RouterError::Tensor { file: self.file.clone(), tensor: name.to_string(), reason: "missing".into() });
        }
        self.content.tensor(&mut Cursor::new(self.bytes), name, &Device::Cpu).map_err(|e| RouterError::Tensor {
            file: self.file.clone(),
            tensor: name.to_string(),
            reason: e.to_string(),
        })
    }

    pub fn metadata(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    /// Checks a tensor's shape, in the PyTorch order candle reports
    /// (`[rows, cols]`; GGUF itself stores the innermost dimension first).
    pub fn expect_shape(&self, name: &str, want: &[usize]) -> Result<()> {
        let info = self.content.tensor_infos.get(name).ok_or_else(|| RouterError::Tensor {
            file: self.file.clone(),
            tensor: name.into(),
            reason: "missing".into(),
        })?;
        if info.shape.dims() != want {
            return Err(RouterError::Tensor {
                file: self.file.clone(),
                tensor: name.into(),
                reason: format!("shape {:?}, expected {:?}", info.shape.dims(), want),
            });
        }
        Ok(())
    }
}

/// llama.cpp's names of `general.file_type` values (`enum llama_ftype`).
fn file_type_name(file_type: u32) -> Option<&'static str> {
    Some(match file_type {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        32 => "BF16",
        _ => return None,
    })
}

fn read_hparams(content: &Content, file: &str) -> Result<Hparams> {
    let meta_err =
        |key: &str, reason: &str| RouterError::Metadata { file: file.to_string(), key: key.to_string(), reason: reason.to_string() };
    let arch_name = match content.metadata.get("general.architecture") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(meta_err("general.architecture", "is not a string")),
        None => return Err(meta_err("general.architecture", "is missing")),
    };
    let Some(architecture) = crate::arch::find(&arch_name) else {
        return Err(RouterError::UnsupportedArchitecture { file: file.to_string(), arch: arch_name, supported: crate::arch::supported() });
    };
    let int = |suffix: &str| -> Result<usize> {
        let key = format!("{arch_name}.{suffix}");
        match content.metadata.get(&key) {
            Some(v) => {
                v.to_u64().map(|v| v as usize).or_else(|_| v.to_u32().map(|v| v as usize)).map_err(|_| meta_err(&key, "is not an integer"))
            }
            None => Err(meta_err(&key, "is missing")),
        }
    };
    let float = |suffix: &str, default: f64| -> Result<f64> {
        let key = format!("{arch_name}.{suffix}");
        match content.metadata.get(&key) {
            Some(v) => v.to_f32().map(|v| v as f64).map_err(|_| meta_err(&key, "is not a float")),
            None => Ok(default),
        }
    };
    let layers = int("block_count")?;
    let hidden = int("embedding_length")?;
    let heads = int("attention.head_count")?;
    let kv_heads = int("attention.head_count_kv").unwrap_or(heads);
    if layers == 0 || hidden == 0 || heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
        return Err(meta_err(
            &format!("{arch_name}.attention.head_count"),
            &format!("{heads} heads / {kv_heads} KV heads over {layers} layers is not a valid shape"),
        ));
    }
    let head_dim = int("attention.key_length").unwrap_or(hidden / heads);
    let vocab = match content.metadata.get("tokenizer.ggml.tokens") {
        Some(Value::Array(a)) => a.len(),
        _ => int("vocab_size")?,
    };
    Ok(Hparams {
        architecture,
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim,
        ffn: int("feed_forward_length")?,
        vocab,
        rms_eps: float("attention.layer_norm_rms_epsilon", 1e-6)?,
        rope_theta: float("rope.freq_base", 10_000.0)? as f32,
        context_length: int("context_length").unwrap_or(8192),
        sliding_window: int("attention.sliding_window").ok().filter(|&w| w > 0),
    })
}
