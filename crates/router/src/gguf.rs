//! GGUF checkpoints: a bounds-checked walk over the file before candle reads
//! it, the architecture's hyper-parameters, and the checkpoint id.
//!
//! candle's reader trusts the lengths a file declares (a corrupt string length
//! becomes a huge allocation), so every length and tensor region is checked
//! against the bytes actually present first, and every count that sizes an
//! allocation against a named budget ([`Budget`]): candle holds each
//! metadata array element as a 32-byte `Value`, so a file of one-byte
//! elements could otherwise make it allocate 32 times its own size. A
//! truncated, corrupt, oversized or unsupported file is then an error naming
//! what is wrong, never a panic or an exhausted wasm32 memory.

use std::io::Cursor;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use sha2::{Digest, Sha256};

use crate::arch::Arch;
use crate::error::{Result, RouterError};

/// GGML type ids candle can compute with, and their (block elements, block bytes).
fn ggml_block(type_id: u32) -> Option<(&'static str, u64, u64)> {
    Some(match type_id {
        0 => ("F32", 1, 4),
        1 => ("F16", 1, 2),
        2 => ("Q4_0", 32, 18),
        3 => ("Q4_1", 32, 20),
        6 => ("Q5_0", 32, 22),
        7 => ("Q5_1", 32, 24),
        8 => ("Q8_0", 32, 34),
        10 => ("Q2_K", 256, 84),
        11 => ("Q3_K", 256, 110),
        12 => ("Q4_K", 256, 144),
        13 => ("Q5_K", 256, 176),
        14 => ("Q6_K", 256, 210),
        30 => ("BF16", 1, 2),
        _ => return None,
    })
}

/// The largest counts a checkpoint may declare, checked before anything is
/// allocated. Each is far above what real files need and far below what
/// wasm32's 4 GiB could hold in candle's representation.
pub struct Budget;

impl Budget {
    /// Tensors: real decoders have a few hundred to a few thousand.
    pub const TENSORS: u64 = 1 << 16;
    /// Metadata entries: real files have tens.
    pub const METADATA_ENTRIES: u64 = 1 << 16;
    /// Elements of one metadata array: the largest real vocabularies and
    /// merge lists hold about 300,000 (Gemma 3: 262,144 tokens).
    pub const ARRAY_ELEMENTS: u64 = 1 << 19;
    /// Bytes of one metadata string (chat templates run to tens of KB).
    pub const STRING_BYTES: u64 = 1 << 24;
}

struct Walker<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Walker<'a> {
    fn take(&mut self, n: u64, what: &str) -> std::result::Result<&'a [u8], String> {
        let end = (self.at as u64).checked_add(n).filter(|e| *e <= self.bytes.len() as u64);
        match end {
            Some(end) => {
                let s = &self.bytes[self.at..end as usize];
                self.at = end as usize;
                Ok(s)
            }
            None => Err(format!("truncated: {what} needs {n} bytes at offset {} but the file has {}", self.at, self.bytes.len())),
        }
    }
    fn u32(&mut self, what: &str) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, what: &str) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }
    fn string(&mut self, what: &str) -> std::result::Result<String, String> {
        let n = self.u64(what)?;
        if n > Budget::STRING_BYTES {
            return Err(format!("{what}: a string of {n} bytes is over the budget of {} bytes", Budget::STRING_BYTES));
        }
        let raw = self.take(n, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    }
    fn value(&mut self, type_id: u32, what: &str, depth: u32) -> std::result::Result<(), String> {
        let fixed = match type_id {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            8 => return self.string(what).map(|_| ()),
            9 => {
                if depth > 2 {
                    return Err(format!("{what}: arrays nested too deeply"));
                }
                let elem = self.u32(what)?;
                let n = self.u64(what)?;
                if n > Budget::ARRAY_ELEMENTS {
                    return Err(format!("{what}: an array of {n} elements is over the budget of {} elements", Budget::ARRAY_ELEMENTS));
                }
                // Each element takes at least one byte: a cheap guard against absurd counts.
                if n > (self.bytes.len() - self.at) as u64 {
                    return Err(format!("truncated: {what} declares {n} elements"));
                }
                for _ in 0..n {
                    self.value(elem, what, depth + 1)?;
                }
                return Ok(());
            }
            other => return Err(format!("{what} has unknown value type {other}")),
        };
        self.take(fixed, what).map(|_| ())
    }
}

/// Checks the whole structure of a GGUF file against its length.
pub fn validate(bytes: &[u8], file: &str) -> Result<()> {
    let bad = |reason: String| RouterError::Gguf { file: file.to_string(), reason };
    let mut w = Walker { bytes, at: 0 };
    let magic = w.take(4, "magic").map_err(bad)?;
    if magic != b"GGUF" {
        return Err(bad(format!("starts with {:?}, not the GGUF magic", String::from_utf8_lossy(magic))));
    }
    let version = w.u32("version").map_err(bad)?;
    if !(2..=3).contains(&version) {
        return Err(bad(format!("GGUF version {version} (supported: 2, 3)")));
    }
    let n_tensors = w.u64("tensor count").map_err(bad)?;
    let n_kv = w.u64("metadata count").map_err(bad)?;
    if n_tensors > bytes.len() as u64 / 8 || n_kv > bytes.len() as u64 / 8 {
        return Err(bad(format!("declares {n_tensors} tensors and {n_kv} metadata entries, more than the file can hold")));
    }
    if n_tensors > Budget::TENSORS || n_kv > Budget::METADATA_ENTRIES {
        return Err(bad(format!(
            "declares {n_tensors} tensors and {n_kv} metadata entries, over the budget of {} and {}",
            Budget::TENSORS,
            Budget::METADATA_ENTRIES
        )));
    }
    let mut alignment = 32u64;
    for _ in 0..n_kv {
        let key = w.string("metadata key").map_err(bad)?;
        let type_id = w.u32(&key).map_err(bad)?;
        let start = w.at;
        w.value(type_id, &key, 0).map_err(bad)?;
        // candle drops trailing NUL bytes from keys; so must the walk, or a
        // `general.alignment\0` would slip past it (found by the fuzzer too).
        if key.trim_end_matches('\0') == "general.alignment" {
            // Read as candle reads it (any of six integer types; a negative
            // or other value means the default), so the two agree on where
            // the data starts and candle never divides by a zero alignment
            // (found by the `gguf_tokenizer` fuzz target, with a u8 zero).
            let raw = &bytes[start..w.at];
            let value: Option<i64> = match type_id {
                0 => Some(i64::from(raw[0])),
                1 => Some(i64::from(raw[0] as i8)),
                2 => Some(i64::from(u16::from_le_bytes([raw[0], raw[1]]))),
                3 => Some(i64::from(i16::from_le_bytes([raw[0], raw[1]]))),
                4 => Some(i64::from(u32::from_le_bytes(raw[..4].try_into().expect("4 bytes")))),
                5 => Some(i64::from(i32::from_le_bytes(raw[..4].try_into().expect("4 bytes")))),
                _ => None,
            };
            alignment = match value {
                Some(v) if v >= 0 => {
                    if v == 0 || !(v as u64).is_power_of_two() {
                        return Err(bad(format!("general.alignment {v} is not a power of two")));
                    }
                    v as u64
                }
                _ => 32,
            };
        }
    }
    let mut regions = Vec::new();
    for _ in 0..n_tensors {
        let name = w.string("tensor name").map_err(bad)?;
        let n_dims = w.u32(&name).map_err(bad)?;
        if n_dims == 0 || n_dims > 4 {
            return Err(bad(format!("tensor `{name}` has {n_dims} dimensions")));
        }
        let mut elements: u64 = 1;
        for _ in 0..n_dims {
            let d = w.u64(&name).map_err(bad)?;
            elements = elements.checked_mul(d).ok_or_else(|| bad(format!("tensor `{name}` is impossibly large")))?;
        }
        let type_id = w.u32(&name).map_err(bad)?;
        let offset = w.u64(&name).map_err(bad)?;
        let Some((type_name, block, block_bytes)) = ggml_block(type_id) else {
            return Err(RouterError::UnsupportedQuant { file: file.to_string(), tensor: name, dtype: format!("ggml type {type_id}") });
        };
        if !elements.is_multiple_of(block) {
            return Err(bad(format!("tensor `{name}` has {elements} elements, not a multiple of the {type_name} block of {block}")));
        }
        // Checked: a crafted shape can make the byte size overflow 64 bits
        // (found by the `gguf` fuzz target), which would wrap into a small
        // region that passes the bounds check below.
        let Some(size) = (elements / block).checked_mul(block_bytes) else {
            return Err(bad(format!("tensor `{name}` is impossibly large")));
        };
        regions.push((name, offset, size));
    }
    let data_start = (w.at as u64).div_ceil(alignment) * alignment;
    for (name, offset, size) in &regions {
        if offset % alignment != 0 {
            return Err(bad(format!("tensor `{name}` starts at data offset {offset}, not a multiple of the alignment {alignment}")));
        }
        let end = data_start.checked_add(*offset).and_then(|s| s.checked_add(*size));
        if end.is_none_or(|e| e > bytes.len() as u64) {
            return Err(bad(format!("truncated: tensor `{name}` ends past the end of the file ({} bytes)", bytes.len())));
        }
    }
    // Two tensors never share bytes: sorted by offset, each ends before the next starts.
    regions.sort_by_key(|r| r.1);
    for pair in regions.windows(2) {
        let ((a, a_offset, a_size), (b, b_offset, _)) = (&pair[0], &pair[1]);
        if a_offset + a_size > *b_offset {
            return Err(bad(format!("tensors `{a}` and `{b}` overlap (data offsets {a_offset} + {a_size} bytes and {b_offset})")));
        }
    }
    Ok(())
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
