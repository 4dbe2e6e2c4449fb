//! The committed corpus of malformed checkpoints (`tests/malformed/*.gguf`):
//! each file, and the typed error it must fail with, named in one table.
//! The files are small variations of one tiny synthetic checkpoint, made by
//! [`corpus`]; a test checks the committed bytes are exactly what it makes,
//! so every file's construction is written down here. The fuzzers start from
//! them too (`fuzz/seeds/gguf/`).
//!
//! Rewrite them with `cargo test -p router --test malformed -- --ignored`.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::path::PathBuf;

use candle_core::quantized::GgmlDType;
use router::synthetic::{self, SyntheticSpec};
use router::{Router, RouterAssets, RouterConfig, RouterError};

/// Which variant of [`RouterError`] a file must produce.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Gguf,
    UnsupportedArchitecture,
    UnsupportedQuant,
}

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    kind: Kind,
    /// A part of the message, as the user reads it.
    message: String,
}

fn tiny(architecture: &'static str, weight_type: GgmlDType) -> Vec<u8> {
    synthetic::write(&SyntheticSpec {
        layers: 1,
        hidden: 32,
        heads: 2,
        kv_heads: 1,
        head_dim: 16,
        ffn: 64,
        vocab: 64,
        ..SyntheticSpec::of(architecture, weight_type)
    })
    .expect("synthetic checkpoint")
}

/// Where a length-prefixed string (a metadata key, a tensor's name) begins in `bytes`.
fn string_at(bytes: &[u8], name: &str) -> usize {
    let mut needle = (name.len() as u64).to_le_bytes().to_vec();
    needle.extend(name.as_bytes());
    bytes.windows(needle.len()).position(|w| w == needle).unwrap_or_else(|| panic!("no tensor info for {name}"))
}

/// The data offset field of a 2-D tensor's info.
fn offset_field(bytes: &[u8], name: &str) -> usize {
    string_at(bytes, name) + 8 + name.len() + 4 + 2 * 8 + 4
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn corpus() -> Vec<Case> {
    let good = tiny("qwen3", GgmlDType::Q8_0);
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        b
    };
    // Cuts inside the metadata must leave more than 8 bytes per declared
    // entry, or the count check ("more than the file can hold") answers first.
    let floor = 8 * 13;
    let key = string_at(&good, "qwen3.embedding_length") + 8 + 5;
    let value = string_at(&good, "general.name") + 8 + "general.name".len() + 4 + 8 + 4;
    assert!(key > floor && value > floor, "cuts at {key} and {value}");
    let first_info = string_at(&good, "token_embd.weight");
    let q_offset = offset_field(&good, "blk.0.attn_q.weight");
    let k_offset = offset_field(&good, "blk.0.attn_k.weight");
    vec![
        Case {
            name: "bad-magic",
            bytes: with(&|b| b[..4].copy_from_slice(b"GGML")),
            kind: Kind::Gguf,
            message: "starts with \"GGML\", not the GGUF magic".into(),
        },
        Case {
            name: "unknown-version",
            bytes: with(&|b| b[4..8].copy_from_slice(&4u32.to_le_bytes())),
            kind: Kind::Gguf,
            message: "GGUF version 4 (supported: 2, 3)".into(),
        },
        Case {
            name: "truncated-in-header",
            bytes: good[..12].to_vec(),
            kind: Kind::Gguf,
            message: "truncated: tensor count needs 8 bytes at offset 8 but the file has 12".into(),
        },
        Case {
            name: "truncated-in-metadata-key",
            bytes: good[..key].to_vec(),
            kind: Kind::Gguf,
            message: format!("truncated: metadata key needs 22 bytes at offset {} but the file has {key}", key - 5),
        },
        Case {
            name: "truncated-in-metadata-value",
            bytes: good[..value].to_vec(),
            kind: Kind::Gguf,
            message: format!("truncated: general.name needs 15 bytes at offset {} but the file has {value}", value - 4),
        },
        Case {
            name: "truncated-in-tensor-info",
            bytes: good[..first_info + 8 + 5].to_vec(),
            kind: Kind::Gguf,
            message: "truncated: tensor name needs 17 bytes".into(),
        },
        Case {
            name: "truncated-in-tensor-data",
            bytes: good[..good.len() - 10].to_vec(),
            kind: Kind::Gguf,
            message: "ends past the end of the file".into(),
        },
        Case {
            name: "misaligned-tensor",
            bytes: with(&|b| {
                let v = read_u64(b, q_offset) + 1;
                b[q_offset..q_offset + 8].copy_from_slice(&v.to_le_bytes())
            }),
            kind: Kind::Gguf,
            message: "not a multiple of the alignment 32".into(),
        },
        Case {
            name: "overlapping-tensors",
            bytes: with(&|b| {
                let v = read_u64(b, q_offset);
                b[k_offset..k_offset + 8].copy_from_slice(&v.to_le_bytes())
            }),
            kind: Kind::Gguf,
            message: "overlap".into(),
        },
        // Found by the `gguf` fuzz target: (2^32 − 32) × (2^32 − 1) elements
        // of Q8_0 fit in 64 bits, their bytes (34 per 32) do not; the size
        // once wrapped into a small region that passed the bounds check.
        Case {
            name: "impossibly-large-tensor",
            bytes: with(&|b| {
                let dims = string_at(b, "token_embd.weight") + 8 + "token_embd.weight".len() + 4;
                b[dims..dims + 8].copy_from_slice(&((1u64 << 32) - 32).to_le_bytes());
                b[dims + 8..dims + 16].copy_from_slice(&((1u64 << 32) - 1).to_le_bytes());
            }),
            kind: Kind::Gguf,
            message: "tensor `token_embd.weight` is impossibly large".into(),
        },
        Case {
            name: "unsupported-architecture",
            bytes: tiny("mamba", GgmlDType::Q8_0),
            kind: Kind::UnsupportedArchitecture,
            message: "unsupported architecture `mamba` (supported: llama, qwen3, qwen2, gemma3)".into(),
        },
        Case {
            name: "unsupported-quant-type",
            bytes: tiny("qwen3", GgmlDType::Q8_1),
            kind: Kind::UnsupportedQuant,
            message: "uses unsupported type ggml type 9".into(),
        },
    ]
}

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/malformed")
}

fn load(gguf: &[u8], name: &str) -> Result<Router, RouterError> {
    let pool = common::pool_yaml();
    let assets = RouterAssets { gguf, gguf_name: name, gguf_sha256: None, tokenizer_json: None, pool_yaml: &pool, pool_name: "pool.yaml" };
    Router::load(&assets, RouterConfig::default())
}

#[test]
fn each_malformed_file_fails_with_its_named_error() {
    for case in corpus() {
        let file = format!("{}.gguf", case.name);
        let committed =
            std::fs::read(folder().join(&file)).unwrap_or_else(|e| panic!("{file}: {e} (rewrite the corpus, see the module doc)"));
        assert!(committed == case.bytes, "{file} is not what `corpus()` makes (rewrite the corpus, see the module doc)");
        let error = match load(&committed, &file) {
            Ok(_) => panic!("{file} loaded"),
            Err(e) => e,
        };
        let kind = match &error {
            RouterError::Gguf { .. } => Kind::Gguf,
            RouterError::UnsupportedArchitecture { .. } => Kind::UnsupportedArchitecture,
            RouterError::UnsupportedQuant { .. } => Kind::UnsupportedQuant,
            other => panic!("{file}: unexpected error {other:?}"),
        };
        assert_eq!(kind, case.kind, "{file}: {error}");
        let text = error.to_string();
        assert!(text.starts_with(&file), "{file}: the message names the file: {text}");
        assert!(text.contains(&case.message), "{file}: want {:?} in {text:?}", case.message);
    }
}

/// The unmodified tiny checkpoint gets past every structural check (it fails
/// later, for want of a tokenizer): the corpus files fail for their one defect.
#[test]
fn the_unmodified_base_passes_the_structure_checks() {
    let good = tiny("qwen3", GgmlDType::Q8_0);
    router::gguf::validate(&good, "base.gguf").unwrap();
    let error = load(&good, "base.gguf").err().expect("no tokenizer").to_string();
    assert!(error.contains("supply a tokenizer.json"), "{error}");
}

#[test]
#[ignore = "rewrites tests/malformed/ from corpus()"]
fn write_the_corpus() {
    std::fs::create_dir_all(folder()).unwrap();
    for case in corpus() {
        std::fs::write(folder().join(format!("{}.gguf", case.name)), &case.bytes).unwrap();
    }
}
