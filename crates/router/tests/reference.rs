//! Correctness against an independent implementation: llama.cpp on the same
//! GGUF (fixtures written by scripts/reference/llamacpp_reference.py), for
//! SmolLM2 (llama, Q4_1, byte-level BPE) and Gemma 3 (QK-norm, post-norms,
//! GeGLU, sliding windows, Q4_K_M's mix of Q5_0/Q8_0/Q4_K/Q6_K,
//! SentencePiece with byte fallback and a BOS).

mod common;

use router::gguf::Checkpoint;
use router::model::{Backbone, Precision};
use router::tokenizer::RouterTokenizer;
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
    mean: Vec<f32>,
    last: Vec<f32>,
}
#[derive(Deserialize)]
struct TokCase {
    text: String,
    ids: Vec<u32>,
}
#[derive(Deserialize)]
struct Fixture {
    model_sha256: String,
    cases: Vec<Case>,
    tokenizer: Vec<TokCase>,
}

/// A checkpoint and the fixture llama.cpp wrote for it.
struct Reference {
    file: &'static str,
    bytes: fn() -> Vec<u8>,
    fixture: &'static str,
}

const SMOLLM2: Reference =
    Reference { file: "SmolLM2-135M-Instruct.Q4_1.gguf", bytes: common::smollm2, fixture: include_str!("fixtures/smollm2_llamacpp.json") };
const GEMMA3: Reference =
    Reference { file: common::GEMMA3_FILE, bytes: common::gemma3, fixture: include_str!("fixtures/gemma3_llamacpp.json") };

impl Reference {
    fn fixture(&self) -> Fixture {
        serde_json::from_str(self.fixture).unwrap()
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

/// max |a − b| / max |b|: the error relative to the vector's scale.
fn rel_max(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

fn tokenizer_matches(reference: &Reference) {
    let bytes = (reference.bytes)();
    let ck = Checkpoint::parse(&bytes, reference.file).unwrap();
    let tok = RouterTokenizer::from_gguf(&ck).unwrap();
    let f = reference.fixture();
    for case in f.tokenizer.iter().map(|t| (&t.text, &t.ids)).chain(f.cases.iter().map(|c| (&c.text, &c.ids))) {
        assert_eq!(&tok.encode(case.0).unwrap(), case.1, "ids of {:?}", case.0);
    }
}

#[test]
fn gguf_tokenizer_matches_llama_cpp_ids() {
    tokenizer_matches(&SMOLLM2);
}

#[test]
fn gemma3_sentencepiece_tokenizer_matches_llama_cpp_ids() {
    tokenizer_matches(&GEMMA3);
}

/// Checks every case up to `max_tokens` long.
fn check(reference: &Reference, precision: Precision, cos_min: f32, rel_max_allowed: f32, max_tokens: usize) {
    let bytes = (reference.bytes)();
    let f = reference.fixture();
    assert_eq!(router::gguf::checkpoint_id(&bytes), format!("gguf-{}", &f.model_sha256[..8]), "fixture made from another file");
    let ck = Checkpoint::parse(&bytes, reference.file).unwrap();
    let model = Backbone::load(&ck, precision).unwrap();
    for case in f.cases.iter().filter(|c| c.ids.len() <= max_tokens) {
        let mean = model.mean_hidden_state(&case.ids).unwrap();
        let hidden = model.hidden_states(&case.ids).unwrap();
        let last = &hidden[hidden.len() - model.hparams.hidden..];
        let (cm, cl) = (cosine(&mean, &case.mean), cosine(last, &case.last));
        let (rm, rl) = (rel_max(&mean, &case.mean), rel_max(last, &case.last));
        println!(
            "{} {precision:?} {:>4} tokens: cosine mean {cm:.6} last {cl:.6}; rel. max error mean {rm:.4} last {rl:.4}",
            reference.file,
            case.ids.len()
        );
        assert!(cm >= cos_min && cl >= cos_min, "{:?}: cosine {cm} / {cl} below {cos_min}", case.text);
        assert!(rm <= rel_max_allowed && rl <= rel_max_allowed, "{:?}: relative error {rm} / {rl} above {rel_max_allowed}", case.text);
    }
}

/// The tolerance: cosine similarity ≥ 0.999 and max |ours − llama.cpp| ≤ 5 %
/// of the vector's largest magnitude, for the mean over tokens and for the last
/// token. llama.cpp multiplies Q4_1 weights with activations quantized to
/// Q8_1 and keeps K and V in f16; we do neither in f32 mode, so the two cannot
/// agree to the bit. Measured here: cosine ≥ 0.99925, relative error ≤ 0.030.
const COSINE_MIN: f32 = 0.999;
const RELATIVE_MAX: f32 = 0.05;

#[test]
fn hidden_states_match_llama_cpp_dequantized_f32() {
    check(&SMOLLM2, Precision::DequantizedF32, COSINE_MIN, RELATIVE_MAX, usize::MAX);
}

/// The integer kernels (activations rounded to 8 bits per 32 values with
/// f16 scales, as llama.cpp itself does on this file) at the same
/// tolerance. Measured here: cosine ≥ 0.99924, relative error ≤ 0.035
/// (with f32 scales the 23-token text's last token fell to 0.9981 / 0.130:
/// two 8-bit roundings of slightly different scales drift apart over the
/// layers, though each product is as accurate as candle's).
#[test]
fn hidden_states_match_llama_cpp_integer() {
    check(&SMOLLM2, Precision::IntegerQ8, COSINE_MIN, RELATIVE_MAX, usize::MAX);
}

#[test]
fn hidden_states_match_llama_cpp_quantized() {
    check(&SMOLLM2, Precision::Quantized, COSINE_MIN, RELATIVE_MAX, usize::MAX);
}

/// Gemma 3's fixture is llama.cpp on an F32 copy of the same weights (see
/// the script), so the f32 path faces no rounding but summation order and
/// is held far tighter than SmolLM2's: measured cosine ≥ 0.999999 and
/// relative error ≤ 0.0004 over five texts, one of 1,313 tokens that
/// passes the sliding window.
#[test]
fn gemma3_hidden_states_match_llama_cpp_dequantized_f32() {
    check(&GEMMA3, Precision::DequantizedF32, 0.9999, 0.005, usize::MAX);
}

/// candle's quantized matmul rounds activations to 8 bits, as llama.cpp
/// does on a quantized file. Gemma's states are more sensitive to that than
/// SmolLM2's: our own quantized path against our own f32 path differs by
/// cosine 0.9982–0.9987 on the last token (SmolLM2: 0.9994), and the
/// llama.cpp run on the Q4_K_M file itself sits the same distance away.
/// Measured against the f32 reference: cosine ≥ 0.9978, relative error ≤
/// 0.049; this mode is not the router's default. The 1,313-token case is
/// left to the f32 test (the window logic is shared): candle's quantized
/// matmul takes a minute on it, which CI's budget does not have.
/// The integer kernels on Gemma, against the f32 reference, hold SmolLM2's
/// tolerance (measured: cosine ≥ 0.99923, relative error ≤ 0.028, the
/// 1,313-token case included): closer than candle's quantized matmul below,
/// with the same 8-bit activations.
#[test]
fn gemma3_hidden_states_match_llama_cpp_integer() {
    check(&GEMMA3, Precision::IntegerQ8, COSINE_MIN, RELATIVE_MAX, usize::MAX);
}

#[test]
fn gemma3_hidden_states_match_llama_cpp_quantized() {
    check(&GEMMA3, Precision::Quantized, 0.997, 0.06, 512);
}
