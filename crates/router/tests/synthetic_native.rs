//! Pins the native hidden state of the synthetic qwen3 that the wasm test
//! (`tests/wasm.rs`) must reproduce in the browser. Regenerate the fixture
//! with `UPDATE_FIXTURES=1 cargo test -p router --test synthetic_native`.

use candle_core::quantized::GgmlDType;
use router::gguf::Checkpoint;
use router::model::{Backbone, Precision};
use router::synthetic::{self, SyntheticSpec};

#[test]
fn native_mean_matches_the_pinned_fixture() {
    let spec = SyntheticSpec { vocab: 4096, ..SyntheticSpec::qwen3(GgmlDType::Q8_0) };
    let gguf = synthetic::write(&spec).unwrap();
    let ck = Checkpoint::parse(&gguf, "synthetic.gguf").unwrap();
    let model = Backbone::load(&ck, Precision::DequantizedF32).unwrap();
    let ids: Vec<u32> = (0..16).map(|i| 7 + i * 251).collect();
    let mean = model.mean_hidden_state(&ids).unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/synthetic_mean_head.rs");
    if std::env::var_os("UPDATE_FIXTURES").is_some() {
        let body = mean[..32].iter().map(|v| format!("{v:e}f32")).collect::<Vec<_>>().join(", ");
        std::fs::write(&path, format!("// The first 32 dimensions of the synthetic qwen3's mean hidden state, native build.\n[{body}]\n"))
            .unwrap();
    }
    let text = std::fs::read_to_string(&path).expect("fixture; regenerate with UPDATE_FIXTURES=1");
    let pinned: Vec<f32> = text
        .lines()
        .filter(|l| !l.starts_with("//"))
        .collect::<String>()
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|v| v.trim().trim_end_matches("f32").parse().unwrap())
        .collect();
    assert_eq!(pinned.len(), 32);
    for (i, (a, b)) in mean.iter().zip(&pinned).enumerate() {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "dim {i}: {a} vs pinned {b}");
    }
}

/// A digest the caller already has (the browser's WebCrypto one) names the
/// checkpoint exactly as computing it here would; anything that is not 64
/// hex digits is ignored.
#[test]
fn a_given_sha256_names_the_checkpoint_like_a_computed_one() {
    let gguf = synthetic::write(&SyntheticSpec { vocab: 512, ..SyntheticSpec::qwen3(GgmlDType::Q8_0) }).unwrap();
    let computed = Checkpoint::parse(&gguf, "s.gguf").unwrap().id;
    let digest: String = {
        use sha2::Digest;
        sha2::Sha256::digest(&gguf).iter().map(|b| format!("{b:02X}")).collect()
    };
    assert_eq!(Checkpoint::parse_with_sha256(&gguf, "s.gguf", Some(&digest)).unwrap().id, computed, "upper-case hex too");
    let other = "ab".repeat(32);
    assert_eq!(Checkpoint::parse_with_sha256(&gguf, "s.gguf", Some(&other)).unwrap().id, "gguf-abababab");
    for junk in ["", "not hex", &"zz".repeat(32)] {
        assert_eq!(Checkpoint::parse_with_sha256(&gguf, "s.gguf", Some(junk)).unwrap().id, computed, "{junk:?}");
    }
}
