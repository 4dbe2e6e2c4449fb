//! GGUF headers, read without trusting them: the one GGUF parser the
//! workbench has. The router's loader walks a whole checkpoint with it
//! before candle reads the file; the KV calculator reads only a header,
//! from the first bytes of a file of any size.
//!
//! A GGUF file declares lengths (strings, arrays, tensor counts, tensor
//! regions) that a careless reader turns into allocations or reads past its
//! end. Here every length is checked against the bytes present and every
//! count that sizes an allocation against a named [`Budget`] before anything
//! is allocated; a tensor's region is checked against the file's length
//! (which a caller reading only a prefix states), its alignment and its
//! neighbours. A truncated, corrupt or oversized header is an error naming
//! what is wrong, never a panic.
//!
//! It knows nothing of candle, the filesystem or the page: callers hand it
//! bytes and the file's length.

use thiserror::Error;

/// The largest counts a file may declare, checked before anything is
/// allocated. Each is far above what real files need and far below what
/// wasm32's 4 GiB could hold.
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
    /// Elements of an array whose values the reader keeps (per-layer
    /// values); longer arrays (vocabularies) are checked and counted only.
    pub const KEPT_ARRAY_ELEMENTS: u64 = 1 << 12;
}

/// A ggml tensor type: its llama.cpp name and its block (elements and
/// bytes), as `ggml-common.h` lays them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block_elements: u64,
    pub block_bytes: u64,
}

/// Every ggml type this reader can size, by id (`enum ggml_type`).
pub const GGML_TYPES: &[GgmlType] = &[
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 18),
    t(3, "Q4_1", 32, 20),
    t(6, "Q5_0", 32, 22),
    t(7, "Q5_1", 32, 24),
    t(8, "Q8_0", 32, 34),
    t(9, "Q8_1", 32, 36),
    t(10, "Q2_K", 256, 84),
    t(11, "Q3_K", 256, 110),
    t(12, "Q4_K", 256, 144),
    t(13, "Q5_K", 256, 176),
    t(14, "Q6_K", 256, 210),
    t(15, "Q8_K", 256, 292),
    t(16, "IQ2_XXS", 256, 66),
    t(17, "IQ2_XS", 256, 74),
    t(18, "IQ3_XXS", 256, 98),
    t(19, "IQ1_S", 256, 50),
    t(20, "IQ4_NL", 32, 18),
    t(21, "IQ3_S", 256, 110),
    t(22, "IQ2_S", 256, 82),
    t(23, "IQ4_XS", 256, 136),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", 256, 56),
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", 256, 54),
    t(35, "TQ2_0", 256, 66),
    t(39, "MXFP4", 32, 17),
];

const fn t(id: u32, name: &'static str, block_elements: u64, block_bytes: u64) -> GgmlType {
    GgmlType { id, name, block_elements, block_bytes }
}

/// Looks a ggml type up by id.
pub fn ggml_type(id: u32) -> Option<&'static GgmlType> {
    GGML_TYPES.iter().find(|t| t.id == id)
}

/// A metadata value. Arrays longer than [`Budget::KEPT_ARRAY_ELEMENTS`]
/// are walked and checked but keep only their length.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array { element_type: u32, len: u64, items: Option<Vec<Value>> },
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// Any integer type holding a value ≥ 0.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The items of an array short enough to be kept.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array { items: Some(items), .. } => Some(items),
            _ => None,
        }
    }

    /// An array's length, kept or not.
    pub fn array_len(&self) -> Option<u64> {
        match self {
            Value::Array { len, .. } => Some(*len),
            _ => None,
        }
    }
}

/// One tensor's description in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// GGUF's order: the innermost dimension first.
    pub dims: Vec<u64>,
    pub ggml_type: &'static GgmlType,
    /// From the start of the data section.
    pub offset: u64,
    pub elements: u64,
    pub bytes: u64,
}

/// A GGUF header: metadata, tensor descriptions, where the data starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub version: u32,
    /// Keys with trailing NUL bytes removed (as candle and llama.cpp read them).
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// The header's length: the data section starts here.
    pub data_start: u64,
    /// The bytes of the file the header was read from.
    pub file_len: u64,
}

impl Header {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// Why a header could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HeaderError {
    /// The bytes given are a prefix of a longer file and the header runs
    /// past them: read at least `needed` bytes from the start and try again.
    #[error("the header runs past the first {have} bytes; at least {needed} are needed")]
    NeedMore { have: u64, needed: u64 },
    /// A tensor's type is not one [`GGML_TYPES`] knows, so its region
    /// cannot be sized.
    #[error("tensor `{tensor}` has ggml type {type_id}, which this reader cannot size")]
    UnknownType { tensor: String, type_id: u32 },
    /// Anything else: what is wrong, in words.
    #[error("{0}")]
    Malformed(String),
}

struct Walker<'a> {
    bytes: &'a [u8],
    file_len: u64,
    at: usize,
}

impl<'a> Walker<'a> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], HeaderError> {
        let end = (self.at as u64).checked_add(n);
        match end {
            Some(end) if end <= self.bytes.len() as u64 => {
                let s = &self.bytes[self.at..end as usize];
                self.at = end as usize;
                Ok(s)
            }
            // Inside the file but past the prefix: the caller reads more.
            Some(end) if end <= self.file_len => Err(HeaderError::NeedMore { have: self.bytes.len() as u64, needed: end }),
            _ => Err(HeaderError::Malformed(format!(
                "truncated: {what} needs {n} bytes at offset {} but the file has {}",
                self.at, self.file_len
            ))),
        }
    }

    fn u32(&mut self, what: &str) -> Result<u32, HeaderError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, HeaderError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    fn str(&mut self, what: &str) -> Result<&'a str, HeaderError> {
        let n = self.u64(what)?;
        if n > Budget::STRING_BYTES {
            return Err(HeaderError::Malformed(format!(
                "{what}: a string of {n} bytes is over the budget of {} bytes",
                Budget::STRING_BYTES
            )));
        }
        let raw = self.take(n, what)?;
        std::str::from_utf8(raw).map_err(|_| HeaderError::Malformed(format!("{what} is not UTF-8")))
    }

    /// Reads one value; `keep` says whether its contents are wanted.
    fn value(&mut self, type_id: u32, what: &str, depth: u32, keep: bool) -> Result<Value, HeaderError> {
        let mut fixed = |n: u64| -> Result<&'a [u8], HeaderError> { self.take(n, what) };
        Ok(match type_id {
            0 => Value::U8(fixed(1)?[0]),
            1 => Value::I8(fixed(1)?[0] as i8),
            2 => {
                let b = fixed(2)?;
                Value::U16(u16::from_le_bytes([b[0], b[1]]))
            }
            3 => {
                let b = fixed(2)?;
                Value::I16(i16::from_le_bytes([b[0], b[1]]))
            }
            4 => {
                let b = fixed(4)?;
                Value::U32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            5 => {
                let b = fixed(4)?;
                Value::I32(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            6 => {
                let b = fixed(4)?;
                Value::F32(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            7 => Value::Bool(fixed(1)?[0] != 0),
            8 => {
                let s = self.str(what)?;
                Value::String(if keep { s.to_string() } else { String::new() })
            }
            9 => {
                if depth > 2 {
                    return Err(HeaderError::Malformed(format!("{what}: arrays nested too deeply")));
                }
                let element_type = self.u32(what)?;
                let len = self.u64(what)?;
                if len > Budget::ARRAY_ELEMENTS {
                    return Err(HeaderError::Malformed(format!(
                        "{what}: an array of {len} elements is over the budget of {} elements",
                        Budget::ARRAY_ELEMENTS
                    )));
                }
                // Each element takes at least one byte: a cheap guard against absurd counts.
                if len > self.file_len.saturating_sub(self.at as u64) {
                    return Err(HeaderError::Malformed(format!("truncated: {what} declares {len} elements")));
                }
                let kept = keep && len <= Budget::KEPT_ARRAY_ELEMENTS;
                let mut items = Vec::with_capacity(if kept { len as usize } else { 0 });
                for _ in 0..len {
                    let v = self.value(element_type, what, depth + 1, kept)?;
                    if kept {
                        items.push(v);
                    }
                }
                Value::Array { element_type, len, items: kept.then_some(items) }
            }
            10 => {
                let b = fixed(8)?;
                Value::U64(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            }
            11 => {
                let b = fixed(8)?;
                Value::I64(i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            }
            12 => {
                let b = fixed(8)?;
                Value::F64(f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            }
            other => return Err(HeaderError::Malformed(format!("{what} has unknown value type {other}"))),
        })
    }
}

/// Reads the header of a GGUF file of `file_len` bytes from `bytes`, its
/// first bytes (the whole file, or a prefix). Every tensor's region is
/// checked against `file_len`, so a header read from a prefix is checked
/// as fully as a whole file, without its data.
pub fn read_header(bytes: &[u8], file_len: u64) -> Result<Header, HeaderError> {
    let bad = HeaderError::Malformed;
    if (bytes.len() as u64) > file_len {
        return Err(bad(format!("{} bytes given for a file of {file_len}", bytes.len())));
    }
    let mut w = Walker { bytes, file_len, at: 0 };
    let magic = w.take(4, "magic")?;
    if magic != b"GGUF" {
        return Err(bad(format!("starts with {:?}, not the GGUF magic", String::from_utf8_lossy(magic))));
    }
    let version = w.u32("version")?;
    if !(2..=3).contains(&version) {
        return Err(bad(format!("GGUF version {version} (supported: 2, 3)")));
    }
    let n_tensors = w.u64("tensor count")?;
    let n_kv = w.u64("metadata count")?;
    if n_tensors > file_len / 8 || n_kv > file_len / 8 {
        return Err(bad(format!("declares {n_tensors} tensors and {n_kv} metadata entries, more than the file can hold")));
    }
    if n_tensors > Budget::TENSORS || n_kv > Budget::METADATA_ENTRIES {
        return Err(bad(format!(
            "declares {n_tensors} tensors and {n_kv} metadata entries, over the budget of {} and {}",
            Budget::TENSORS,
            Budget::METADATA_ENTRIES
        )));
    }
    let mut metadata = Vec::with_capacity(n_kv as usize);
    let mut alignment = 32u64;
    for _ in 0..n_kv {
        // candle and llama.cpp drop trailing NUL bytes from keys; so must
        // this reader, or a `general.alignment\0` would slip past it.
        let key = w.str("metadata key")?.trim_end_matches('\0').to_string();
        let type_id = w.u32(&key)?;
        let value = w.value(type_id, &key, 0, true)?;
        if key == "general.alignment" {
            // Read as candle reads it (any of six integer types; a negative
            // or other value means the default), so the two agree on where
            // the data starts and no reader divides by a zero alignment.
            let as_int = match value {
                Value::U8(_) | Value::I8(_) | Value::U16(_) | Value::I16(_) | Value::U32(_) | Value::I32(_) => Some(match value {
                    Value::I8(v) => i64::from(v),
                    Value::I16(v) => i64::from(v),
                    Value::I32(v) => i64::from(v),
                    _ => value.as_u64().map_or(-1, |v| v as i64),
                }),
                _ => None,
            };
            alignment = match as_int {
                Some(v) if v >= 0 => {
                    if v == 0 || !(v as u64).is_power_of_two() {
                        return Err(bad(format!("general.alignment {v} is not a power of two")));
                    }
                    v as u64
                }
                _ => 32,
            };
        }
        metadata.push((key, value));
    }
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    for _ in 0..n_tensors {
        let name = w.str("tensor name")?.to_string();
        let n_dims = w.u32(&name)?;
        if n_dims == 0 || n_dims > 4 {
            return Err(bad(format!("tensor `{name}` has {n_dims} dimensions")));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut elements: u64 = 1;
        for _ in 0..n_dims {
            let d = w.u64(&name)?;
            elements = elements.checked_mul(d).ok_or_else(|| bad(format!("tensor `{name}` is impossibly large")))?;
            dims.push(d);
        }
        let type_id = w.u32(&name)?;
        let offset = w.u64(&name)?;
        let Some(ggml_type) = ggml_type(type_id) else {
            return Err(HeaderError::UnknownType { tensor: name, type_id });
        };
        if !elements.is_multiple_of(ggml_type.block_elements) {
            return Err(bad(format!(
                "tensor `{name}` has {elements} elements, not a multiple of the {} block of {}",
                ggml_type.name, ggml_type.block_elements
            )));
        }
        // Checked: a crafted shape can make the byte size overflow 64 bits,
        // which would wrap into a small region that passes the bounds check.
        let Some(bytes) = (elements / ggml_type.block_elements).checked_mul(ggml_type.block_bytes) else {
            return Err(bad(format!("tensor `{name}` is impossibly large")));
        };
        tensors.push(TensorInfo { name, dims, ggml_type, offset, elements, bytes });
    }
    let data_start = (w.at as u64).div_ceil(alignment) * alignment;
    for t in &tensors {
        if t.offset % alignment != 0 {
            return Err(bad(format!(
                "tensor `{}` starts at data offset {}, not a multiple of the alignment {alignment}",
                t.name, t.offset
            )));
        }
        let end = data_start.checked_add(t.offset).and_then(|s| s.checked_add(t.bytes));
        if end.is_none_or(|e| e > file_len) {
            return Err(bad(format!("truncated: tensor `{}` ends past the end of the file ({file_len} bytes)", t.name)));
        }
    }
    // Two tensors never share bytes: sorted by offset, each ends before the next starts.
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.offset + a.bytes > b.offset {
            return Err(bad(format!(
                "tensors `{}` and `{}` overlap (data offsets {} + {} bytes and {})",
                a.name, b.name, a.offset, a.bytes, b.offset
            )));
        }
    }
    Ok(Header { version, metadata, tensors, alignment, data_start, file_len })
}

/// Reading a header from a file too large to hold, a slice at a time,
/// without doing the reading: the caller reads the first [`want`] bytes
/// (synchronously, or awaiting a browser `Blob`), offers them, and reads
/// again while [`offer`] asks for more. Each read is what the header says it
/// needs, at least doubling, up to a limit.
///
/// [`want`]: PrefixReader::want
/// [`offer`]: PrefixReader::offer
pub struct PrefixReader {
    file_len: u64,
    limit: u64,
    next: u64,
}

/// Why a [`PrefixReader`] stopped.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PrefixError {
    #[error("{0}")]
    Header(HeaderError),
    #[error("the header is larger than {limit} bytes (read {read}); refused rather than read further")]
    TooLarge { read: u64, limit: u64 },
}

impl PrefixReader {
    /// Starts at `first` bytes for a file of `file_len`, reading no more than `limit`.
    pub fn new(file_len: u64, first: u64, limit: u64) -> PrefixReader {
        PrefixReader { file_len, limit, next: first.min(file_len).min(limit).max(1) }
    }

    /// How many bytes from the start to read next.
    pub fn want(&self) -> u64 {
        self.next
    }

    /// Offers the file's first bytes: the header, or `None` to read
    /// [`PrefixReader::want`] bytes and offer again.
    pub fn offer(&mut self, bytes: &[u8]) -> Result<Option<Header>, PrefixError> {
        match read_header(bytes, self.file_len) {
            Ok(header) => Ok(Some(header)),
            Err(HeaderError::NeedMore { needed, .. }) => {
                let read = bytes.len() as u64;
                // Fewer bytes than asked for: the file is shorter than its
                // stated length (it changed, or a reader stopped early), and
                // asking again would loop.
                if read < self.next {
                    return Err(PrefixError::Header(HeaderError::Malformed(format!(
                        "truncated: asked for the first {} bytes and got {read}; the header needs {needed}",
                        self.next
                    ))));
                }
                let next = needed.max(read.saturating_mul(2)).min(self.file_len);
                if next > self.limit {
                    return Err(PrefixError::TooLarge { read, limit: self.limit });
                }
                self.next = next;
                Ok(None)
            }
            Err(e) => Err(PrefixError::Header(e)),
        }
    }
}

/// [`PrefixReader`] driven by a synchronous `read_prefix(n)` (the file's
/// first `n` bytes): the header and the bytes read.
pub fn read_header_from<E: std::fmt::Display>(
    file_len: u64,
    first: u64,
    limit: u64,
    mut read_prefix: impl FnMut(u64) -> Result<Vec<u8>, E>,
) -> Result<(Header, u64), String> {
    let mut reader = PrefixReader::new(file_len, first, limit);
    loop {
        let bytes = read_prefix(reader.want()).map_err(|e| e.to_string())?;
        if let Some(header) = reader.offer(&bytes).map_err(|e| e.to_string())? {
            return Ok((header, bytes.len() as u64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small header: one string, one u32, one per-layer array, one tensor.
    fn file() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&3u64.to_le_bytes());
        let key = |b: &mut Vec<u8>, k: &str, t: u32| {
            b.extend_from_slice(&(k.len() as u64).to_le_bytes());
            b.extend_from_slice(k.as_bytes());
            b.extend_from_slice(&t.to_le_bytes());
        };
        key(&mut b, "general.architecture", 8);
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(b"llama");
        key(&mut b, "llama.block_count", 4);
        b.extend_from_slice(&2u32.to_le_bytes());
        key(&mut b, "llama.attention.head_count_kv", 9);
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&2u64.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&4u32.to_le_bytes());
        let name = "token_embd.weight";
        b.extend_from_slice(&(name.len() as u64).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&32u64.to_le_bytes());
        b.extend_from_slice(&4u64.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes()); // Q8_0: 4 blocks of 34 bytes
        b.extend_from_slice(&0u64.to_le_bytes());
        while b.len() % 32 != 0 {
            b.push(0);
        }
        b.extend(std::iter::repeat_n(7u8, 4 * 34));
        b
    }

    #[test]
    fn reads_metadata_tensors_and_the_data_start() {
        let f = file();
        let h = read_header(&f, f.len() as u64).unwrap();
        assert_eq!(h.get("general.architecture").and_then(Value::as_str), Some("llama"));
        assert_eq!(h.get("llama.block_count").and_then(Value::as_u64), Some(2));
        let kv: Vec<u64> = h.get("llama.attention.head_count_kv").unwrap().as_array().unwrap().iter().filter_map(Value::as_u64).collect();
        assert_eq!(kv, vec![2, 4]);
        assert_eq!(h.tensors[0].ggml_type.name, "Q8_0");
        assert_eq!((h.tensors[0].elements, h.tensors[0].bytes), (128, 136));
        assert_eq!(h.data_start + 136, f.len() as u64);
    }

    #[test]
    fn a_prefix_reads_the_header_without_the_data_and_asks_for_more_when_short() {
        let f = file();
        let header_only = &f[..f.len() - 4 * 34];
        let h = read_header(header_only, f.len() as u64).unwrap();
        assert_eq!(h.tensors.len(), 1);
        // Cut inside the metadata: not an error about the file, a request.
        assert_eq!(read_header(&f[..30], f.len() as u64), Err(HeaderError::NeedMore { have: 30, needed: 32 }));
        // The same cut as the whole file is a truncation, named.
        let e = read_header(&f[..30], 30).unwrap_err().to_string();
        assert_eq!(e, "truncated: metadata key needs 8 bytes at offset 24 but the file has 30");
        // Slice by slice, from 8 bytes.
        let (h, read) = read_header_from(f.len() as u64, 8, 1 << 20, |n| Ok::<_, String>(f[..n as usize].to_vec())).unwrap();
        assert_eq!(h.tensors.len(), 1);
        // 8, 16, 32, 64, 128, then 256 bytes: the header (224 bytes) without
        // most of the data (the file is 360).
        assert_eq!((read, f.len()), (256, 360));
        let e = read_header_from(f.len() as u64, 8, 16, |n| Ok::<_, String>(f[..n as usize].to_vec())).unwrap_err();
        assert!(e.starts_with("the header is larger than 16 bytes"), "{e}");
        // A reader that gives less than it was asked for is not asked forever.
        let e = read_header_from(f.len() as u64, 8, 1 << 20, |n| Ok::<_, String>(f[..(n as usize).min(20)].to_vec())).unwrap_err();
        assert!(e.starts_with("truncated: asked for the first 32 bytes and got 20"), "{e}");
    }

    #[test]
    fn a_region_past_the_stated_file_length_is_refused() {
        let f = file();
        let e = read_header(&f[..f.len() - 4 * 34], f.len() as u64 - 1).unwrap_err().to_string();
        assert!(e.contains("ends past the end of the file"), "{e}");
    }
}
