//! Bad checkpoints, pools and tokenizers: a clear error naming the file and
//! what is wrong, never a panic.

mod common;

use candle_core::quantized::GgmlDType;
use router::synthetic::{self, SyntheticSpec};
use router::{Router, RouterAssets, RouterConfig};

fn load(gguf: &[u8], tokenizer: Option<&[u8]>, pool: &[u8]) -> String {
    let assets = RouterAssets {
        gguf,
        gguf_name: "model.gguf",
        gguf_sha256: None,
        tokenizer_json: tokenizer.map(|t| (t, "tokenizer.json")),
        pool_yaml: pool,
        pool_name: "pool.yaml",
    };
    match Router::load(&assets, RouterConfig::default()) {
        Ok(_) => "loaded".into(),
        Err(e) => e.to_string(),
    }
}

fn small() -> Vec<u8> {
    synthetic::write(&SyntheticSpec { vocab: 2048, ..SyntheticSpec::qwen3(GgmlDType::Q8_0) }).unwrap()
}

#[test]
fn truncated_or_corrupt_ggufs() {
    let pool = common::pool_yaml();
    let good = small();
    for cut in [0, 3, 10, 100, 2_000, good.len() / 2, good.len() - 1] {
        let e = load(&good[..cut], None, &pool);
        assert!(e.starts_with("model.gguf: not a valid GGUF checkpoint"), "cut at {cut}: {e}");
    }
    let mut wrong_magic = good.clone();
    wrong_magic[..4].copy_from_slice(b"GGML");
    assert!(load(&wrong_magic, None, &pool).contains("not the GGUF magic"));
    // A key length of 2^62: candle alone would try to allocate it.
    let mut huge = good.clone();
    huge[24..32].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let e = load(&huge, None, &pool);
    assert!(e.contains("metadata key: a string of 4611686018427387904 bytes is over the budget"), "{e}");
    let mut counts = good;
    counts[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(load(&counts, None, &pool).contains("more than the file can hold"));
}

/// A GGUF header with one metadata entry, `key`, of the given type and raw
/// value bytes, and no tensors.
fn one_entry(key: &str, type_id: u32, value: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes()); // tensors
    b.extend(1u64.to_le_bytes()); // metadata entries
    b.extend((key.len() as u64).to_le_bytes());
    b.extend(key.as_bytes());
    b.extend(type_id.to_le_bytes());
    b.extend(value);
    b
}

#[test]
fn counts_over_the_allocation_budget_fail_before_anything_is_allocated() {
    use router::gguf::{validate, Budget};
    // A metadata array of 10^6 one-byte elements, all present (1 MB):
    // candle would hold it as 32 MB of values; refused by count.
    let mut array = 0u32.to_le_bytes().to_vec(); // element type u8
    array.extend(1_000_000u64.to_le_bytes());
    array.extend(vec![7u8; 1_000_000]);
    let gguf = one_entry("tokenizer.ggml.token_type", 9, &array);
    let e = validate(&gguf, "big.gguf").unwrap_err().to_string();
    assert_eq!(
        e,
        format!("big.gguf: not a valid GGUF checkpoint: tokenizer.ggml.token_type: an array of 1000000 elements is over the budget of {} elements", Budget::ARRAY_ELEMENTS)
    );
    // Gemma 3's 262,144-entry vocabulary is within it.
    let mut vocab = 0u32.to_le_bytes().to_vec();
    vocab.extend(262_144u64.to_le_bytes());
    vocab.extend(vec![1u8; 262_144]);
    validate(&one_entry("tokenizer.ggml.token_type", 9, &vocab), "vocab.gguf").unwrap();
    // A 1 KB file claiming 10^12 elements in a tensor fails on its region.
    let mut tiny = b"GGUF".to_vec();
    tiny.extend(3u32.to_le_bytes());
    tiny.extend(1u64.to_le_bytes());
    tiny.extend(0u64.to_le_bytes());
    tiny.extend(1u64.to_le_bytes());
    tiny.extend(b"w");
    tiny.extend(2u32.to_le_bytes());
    tiny.extend(1_000_000u64.to_le_bytes());
    tiny.extend(1_000_000u64.to_le_bytes());
    tiny.extend(0u32.to_le_bytes()); // F32
    tiny.extend(0u64.to_le_bytes());
    tiny.resize(1024, 0);
    let e = validate(&tiny, "tiny.gguf").unwrap_err().to_string();
    assert!(e.contains("tensor `w` ends past the end of the file (1024 bytes)"), "{e}");
    // A string longer than its budget, and more tensors than the budget.
    let mut string = 8u32.to_le_bytes().to_vec(); // array of strings
    string.extend(1u64.to_le_bytes());
    string.extend((Budget::STRING_BYTES + 1).to_le_bytes());
    let e = validate(&one_entry("tokenizer.chat_template", 9, &string), "s.gguf").unwrap_err().to_string();
    assert!(e.contains(&format!("over the budget of {} bytes", Budget::STRING_BYTES)), "{e}");
    let mut many = b"GGUF".to_vec();
    many.extend(3u32.to_le_bytes());
    many.extend((Budget::TENSORS + 1).to_le_bytes());
    many.extend(0u64.to_le_bytes());
    many.resize(1 << 20, 0);
    let e = validate(&many, "many.gguf").unwrap_err().to_string();
    assert!(e.contains("over the budget of 65536 and 65536"), "{e}");
}

/// Found by the `gguf_tokenizer` fuzz target: `general.alignment` as a u8
/// zero passed the walk (which read only u32 alignments) and candle divided
/// by it. Every integer type candle reads is checked now.
#[test]
fn an_alignment_of_any_integer_type_must_be_a_power_of_two() {
    use router::gguf::validate;
    for (type_id, value) in [
        (0u32, vec![0u8]),
        (1, vec![0]),
        (2, 0u16.to_le_bytes().to_vec()),
        (3, 24i16.to_le_bytes().to_vec()),
        (5, 0i32.to_le_bytes().to_vec()),
    ] {
        let e = validate(&one_entry("general.alignment", type_id, &value), "a.gguf").unwrap_err().to_string();
        assert!(e.contains("general.alignment") && e.contains("is not a power of two"), "type {type_id}: {e}");
    }
    // candle drops trailing NULs from keys: so does the walk.
    let e = validate(&one_entry("general.alignment\0\0\0", 0, &[0]), "a.gguf").unwrap_err().to_string();
    assert!(e.contains("is not a power of two"), "{e}");
    // Negative signed values and other types mean the default, as in candle.
    validate(&one_entry("general.alignment", 1, &[0xff]), "a.gguf").unwrap();
    validate(&one_entry("general.alignment", 6, &1.0f32.to_le_bytes()), "a.gguf").unwrap();
    validate(&one_entry("general.alignment", 2, &64u16.to_le_bytes()), "a.gguf").unwrap();
}

#[test]
fn unsupported_architecture_and_quant_type() {
    let pool = common::pool_yaml();
    let gpt2 = synthetic::write(&SyntheticSpec { architecture: "gpt2", vocab: 2048, ..SyntheticSpec::qwen3(GgmlDType::Q8_0) }).unwrap();
    assert_eq!(load(&gpt2, None, &pool), "model.gguf: unsupported architecture `gpt2` (supported: llama, qwen3, qwen2, gemma3)");
    let q8_1 = synthetic::write(&SyntheticSpec { vocab: 2048, ..SyntheticSpec::qwen3(GgmlDType::Q8_1) }).unwrap();
    let e = load(&q8_1, None, &pool);
    assert!(e.contains("tensor `token_embd.weight` uses unsupported type ggml type 9"), "{e}");
}

#[test]
fn tokenizer_problems() {
    let pool = common::pool_yaml();
    // No tokenizer in the GGUF metadata and none given.
    let e = load(&small(), None, &pool);
    assert!(e.contains("tokenizer") && e.contains("supply a tokenizer.json"), "{e}");
    // Qwen3's tokenizer (151,669 tokens) against SmolLM2's 49,152-row embedding.
    let e = load(&common::smollm2(), Some(&common::asset("qwen3-tokenizer.json")), &pool);
    assert!(e.contains("tokenizer.json: tokenizer: has 151669 tokens but the model's embedding has 49152 rows"), "{e}");
    let e = load(&small(), Some(b"{not json"), &pool);
    assert!(e.starts_with("tokenizer.json: tokenizer: not a valid tokenizer.json"), "{e}");
}

#[test]
fn malformed_pools() {
    let gguf = common::smollm2();
    let cases: [(&str, &str); 6] = [
        ("name: x\ndefault_mode: a\nmodes: {a: {cost_weight: 0}}\ncandidates: []\n", "has no candidates"),
        ("name: x\n  bad: [indent\n", "pool.yaml: pool:"),
        ("name: x\ndefault_mode: b\nmodes: {a: {cost_weight: 0}}\ncandidates: [{id: m, descriptor: d, price_per_1m_input: 1, price_per_1m_output: 1, expected_output_tokens: 1, context_window: 1}]\n", "default_mode `b` is not one of the modes (a)"),
        ("name: x\ndefault_mode: a\nmodes: {a: {cost_weight: -1}}\ncandidates: [{id: m, descriptor: d, price_per_1m_input: 1, price_per_1m_output: 1, expected_output_tokens: 1, context_window: 1}]\n", "cost_weight is -1"),
        ("name: x\ndefault_mode: a\nmodes: {a: {cost_weight: 0}}\ncandidates: [{id: m, descriptor: d, price_per_1m_input: 1, price_per_1m_output: 1, expected_output_tokens: 1, context_window: 1, colour: red}]\n", "unknown field `colour`"),
        ("name: x\ndefault_mode: a\nmodes: {a: {cost_weight: 0}}\ncandidates: [{id: m, descriptor: d, price_per_1m_input: 1, price_per_1m_output: 1, expected_output_tokens: 1, context_window: 1}, {id: m, descriptor: e, price_per_1m_input: 1, price_per_1m_output: 1, expected_output_tokens: 1, context_window: 1}]\n", "the id appears twice"),
    ];
    for (yaml, want) in cases {
        let e = load(&gguf, None, yaml.as_bytes());
        assert!(e.contains(want), "want {want:?}, got {e}");
    }
}
