//! The qwen3 architecture on a synthetic checkpoint (random weights written
//! by `router::synthetic`) with the real Qwen3 tokenizer.json, and every
//! supported quantization type.

mod common;

use candle_core::quantized::GgmlDType;
use router::gguf::Checkpoint;
use std::sync::Arc;

use router::model::{Backbone, Precision};
use router::segment::{KvState, SegmentView};
use router::synthetic::{self, SyntheticSpec};
use router::tokenizer::RouterTokenizer;
use router::{Conversation, Router, RouterAssets, RouterConfig};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
}
#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

fn qwen3_tokenizer() -> Vec<u8> {
    common::asset("qwen3-tokenizer.json")
}

#[test]
fn qwen3_tokenizer_json_matches_the_javascript_reference() {
    let tok = RouterTokenizer::from_json(&qwen3_tokenizer(), "qwen3-tokenizer.json").unwrap();
    let f: Fixture = serde_json::from_str(include_str!("fixtures/qwen3_tokenizer.json")).unwrap();
    for c in &f.cases {
        assert_eq!(tok.encode(&c.text).unwrap(), c.ids, "ids of {:?}", c.text);
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    dot / (a.iter().map(|x| x * x).sum::<f32>().sqrt() * b.iter().map(|x| x * x).sum::<f32>().sqrt())
}

/// A router on a synthetic qwen3 of `dtype` weights, with the real Qwen3
/// tokenizer and the bundled pool.
fn synthetic_router(dtype: GgmlDType, config: RouterConfig) -> Router {
    let gguf = synthetic::write(&SyntheticSpec::qwen3(dtype)).unwrap();
    let (tok, pool) = (qwen3_tokenizer(), common::pool_yaml());
    let assets = RouterAssets {
        gguf: &gguf,
        gguf_name: "synthetic-qwen3.gguf",
        gguf_sha256: None,
        tokenizer_json: Some((&tok, "qwen3-tokenizer.json")),
        pool_yaml: &pool,
        pool_name: "pool.coderouterbench.yaml",
    };
    Router::load(&assets, config).unwrap()
}

#[test]
fn synthetic_qwen3_routes_deterministically_with_the_real_tokenizer() {
    let router = synthetic_router(GgmlDType::Q8_0, RouterConfig::default());
    assert_eq!(router.backbone.hparams.architecture.name, "qwen3");
    let conv =
        Conversation::user("TimeSeries: misleading exception when required column check fails.").with_system("Route this coding task.");
    let a = router.decide(&conv, Some("quality")).unwrap();
    let b = router.decide(&conv, Some("quality")).unwrap();
    let scores = |d: &router::Decision| d.ranked.iter().map(|r| (r.id.clone(), r.score.to_bits(), r.utility.to_bits())).collect::<Vec<_>>();
    assert_eq!(scores(&a), scores(&b), "bit-identical twice");
    assert_eq!(a.ranked.len(), 8);
    assert!(a.tokens_used > 10 && !a.truncated);
}

/// int8 is the served precision, but a file whose projections the integer
/// kernels cannot read runs them in f32: the label every report and the
/// page's model facts show says so, rather than naming a kernel that is
/// not running.
#[test]
fn int8_on_a_file_the_integer_kernels_cannot_read_is_labelled_as_running_f32() {
    let label = |dtype| {
        let router = synthetic_router(dtype, RouterConfig { precision: Precision::SERVED, ..RouterConfig::default() });
        let (integer, all) = router.backbone.integer_projections();
        (router.precision_label(), integer, all)
    };
    let (q8, integer, all) = label(GgmlDType::Q8_0);
    assert_eq!(integer, 0);
    assert!(q8.contains("dequantized to f32") && q8.contains("int8 asked for, but the integer kernels take none"), "{q8}");
    assert!(!q8.contains("integer dot"), "{q8}");
    let (q4, integer, all_q4) = label(GgmlDType::Q4_0);
    assert_eq!((integer, all_q4), (all, all), "every projection of a Q4_0 file runs on the integer kernels");
    assert!(q4.contains("integer dot") && !q4.contains("stay f32"), "{q4}");
}

#[test]
fn continuing_from_a_held_prefix_equals_one_prefill() {
    let gguf = synthetic::write(&SyntheticSpec::qwen3(GgmlDType::F32)).unwrap();
    let ck = Checkpoint::parse(&gguf, "synthetic").unwrap();
    let model = Backbone::load(&ck, Precision::DequantizedF32).unwrap();
    let ids: Vec<u32> = (0..24).map(|i| 1000 + i * 37).collect();
    let width = model.hparams.hidden;
    let whole = model.hidden_states(&ids).unwrap();
    let mut state = KvState::default();
    state.push(SegmentView::whole(Arc::new(model.prefill(&KvState::default(), &ids[..10]).unwrap())));
    assert_eq!(state.tokens(), 10);
    let rest = model.prefill(&state, &ids[10..]).unwrap();
    assert_eq!(rest.tokens(), 14);
    for i in 0..14 {
        let c = cosine(rest.hidden(i..i + 1), &whole[(10 + i) * width..(11 + i) * width]);
        assert!(c > 0.99999, "token {}: cosine {c}", 10 + i);
    }
}

#[test]
fn every_supported_quant_type_runs_and_agrees() {
    let ids: Vec<u32> = (0..12).map(|i| 500 + i * 911).collect();
    let reference = {
        let gguf = synthetic::write(&SyntheticSpec::qwen3(GgmlDType::F32)).unwrap();
        let ck = Checkpoint::parse(&gguf, "f32").unwrap();
        rows(Backbone::load(&ck, Precision::DequantizedF32).unwrap(), &ids)
    };
    for (dtype, min_cos_vs_f32) in [
        (GgmlDType::F16, 0.999),
        (GgmlDType::Q8_0, 0.995),
        (GgmlDType::Q4_0, 0.9),
        (GgmlDType::Q4_1, 0.9),
        (GgmlDType::Q4K, 0.9),
        (GgmlDType::Q6K, 0.98),
    ] {
        let gguf = synthetic::write(&SyntheticSpec::qwen3(dtype)).unwrap();
        let ck = Checkpoint::parse(&gguf, "synthetic").unwrap();
        let quantized = rows(Backbone::load(&ck, Precision::Quantized).unwrap(), &ids);
        let dequantized = rows(Backbone::load(&ck, Precision::DequantizedF32).unwrap(), &ids);
        for t in 0..ids.len() {
            let same_weights = cosine(&quantized[t], &dequantized[t]);
            let vs_f32 = cosine(&quantized[t], &reference[t]);
            assert!(same_weights > 0.995, "{dtype:?} token {t}: quantized vs dequantized kernels, cosine {same_weights}");
            assert!(vs_f32 > min_cos_vs_f32, "{dtype:?} token {t}: against the f32 weights, cosine {vs_f32}");
        }
    }
}

/// The final hidden states of `ids`, one row per token.
fn rows(model: Backbone, ids: &[u32]) -> Vec<Vec<f32>> {
    model.hidden_states(ids).unwrap().chunks_exact(model.hparams.hidden).map(<[f32]>::to_vec).collect()
}
