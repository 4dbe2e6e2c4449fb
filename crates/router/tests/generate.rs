//! Generation on the engine: greedy tokens against llama.cpp's on the same
//! weights (fixtures written by scripts/reference/llamacpp_greedy.py), and
//! the engine's own equalities: a batched step equals separate ones, a
//! chunked prefill equals one prefill, a seed reproduces its tokens, and
//! streamed text is the decoded text, split anywhere.

mod common;

use router::generate::{generate, step, Sequence};
use router::gguf::Checkpoint;
use router::model::{Backbone, Precision};
use router::sampling::{FinishReason, SamplingParams};
use router::segment::KvState;
use router::tokenizer::RouterTokenizer;
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
    generated: Vec<u32>,
    margins: Vec<f32>,
}

#[derive(Deserialize)]
struct Fixture {
    model_sha256: String,
    f32_weights: Vec<Case>,
    quantized: Vec<Case>,
}

struct Model {
    backbone: Backbone,
    tokenizer: RouterTokenizer,
}

fn load(bytes: &[u8], file: &str, precision: Precision) -> Model {
    let ck = Checkpoint::parse(bytes, file).unwrap();
    Model { backbone: Backbone::load(&ck, precision).unwrap(), tokenizer: RouterTokenizer::from_gguf(&ck).unwrap() }
}

fn greedy(max_new_tokens: usize) -> SamplingParams {
    SamplingParams { max_new_tokens, ..SamplingParams::default() }
}

/// Our greedy tokens for each case, with the length they agree with
/// llama.cpp's for.
fn agreement(model: &Model, cases: &[Case], label: &str) -> Vec<(usize, usize)> {
    cases
        .iter()
        .map(|case| {
            let (seq, _) = generate(&model.backbone, &model.tokenizer, case.ids.clone(), greedy(case.generated.len()), |_| true).unwrap();
            let ours = seq.generated();
            let same = ours.iter().zip(&case.generated).take_while(|(a, b)| a == b).count();
            println!(
                "{label}: {same} of {} tokens as llama.cpp's{} (smallest top-2 margin in llama.cpp's run {:.4}) for {:?}",
                case.generated.len(),
                if same < case.generated.len() { format!(", first difference at token {same}") } else { String::new() },
                case.margins.iter().cloned().fold(f32::INFINITY, f32::min),
                case.text
            );
            (same, case.generated.len())
        })
        .collect()
}

fn fixture(text: &str, bytes: &[u8]) -> Fixture {
    let f: Fixture = serde_json::from_str(text).unwrap();
    assert_eq!(router::gguf::checkpoint_id(bytes), format!("gguf-{}", &f.model_sha256[..8]), "fixture made from another file");
    assert!(f.f32_weights.iter().all(|c| c.generated.len() >= 32), "every reference continuation has at least 32 tokens");
    f
}

/// The f32 path against llama.cpp on an F32 copy of the same weights:
/// identical tokens, 48 per prompt.
#[test]
fn smollm2_greedy_matches_llama_cpp_on_f32_weights() {
    let bytes = common::smollm2();
    let f = fixture(include_str!("fixtures/smollm2_greedy.json"), &bytes);
    let model = load(&bytes, "SmolLM2-135M-Instruct.Q4_1.gguf", Precision::DequantizedF32);
    for (same, total) in agreement(&model, &f.f32_weights, "SmolLM2 f32") {
        assert_eq!(same, total, "greedy tokens differ from llama.cpp's");
    }
}

#[test]
fn gemma3_greedy_matches_llama_cpp_on_f32_weights() {
    let bytes = common::gemma3();
    let f = fixture(include_str!("fixtures/gemma3_greedy.json"), &bytes);
    let model = load(&bytes, common::GEMMA3_FILE, Precision::DequantizedF32);
    for (same, total) in agreement(&model, &f.f32_weights, "Gemma 3 f32") {
        assert_eq!(same, total, "greedy tokens differ from llama.cpp's");
    }
}

/// The int8 path against llama.cpp on the quantized file, where both round
/// activations to 8 bits but not identically (llama.cpp's Q8_1 for Q4_1
/// weights keeps a sum per block; its K/V and blocking differ): reported,
/// and held to llama.cpp's tokens up to the first near-tie of its own run
/// (a top-2 margin below [`NEAR_TIE`] logits), where rounding that is not
/// llama.cpp's may choose the other token. (A fixed 16 tokens was the
/// rule before; the decode step's attention, summed in another order,
/// moved the first prompt's divergence from token 21 to token 9, where
/// llama.cpp's margin is 0.024, and the third's from 20 to past 48.)
#[test]
fn int8_greedy_against_llama_cpp_on_the_quantized_file() {
    const NEAR_TIE: f32 = 0.1;
    let bytes = common::smollm2();
    let f = fixture(include_str!("fixtures/smollm2_greedy.json"), &bytes);
    let model = load(&bytes, "SmolLM2-135M-Instruct.Q4_1.gguf", Precision::IntegerQ8);
    let results = agreement(&model, &f.quantized, "SmolLM2 int8 vs llama.cpp on Q4_1");
    for ((same, total), case) in results.into_iter().zip(&f.quantized) {
        let first_near_tie = case.margins.iter().position(|&m| m < NEAR_TIE).unwrap_or(total);
        assert!(first_near_tie >= 8, "the fixture's run reaches a near-tie at token {first_near_tie}: too early to test");
        assert!(same >= first_near_tie, "int8 greedy left llama.cpp's tokens after {same}, before its first near-tie at {first_near_tie}");
    }
}

/// Four sequences stepped together (prompts of different lengths, so their
/// decodes sit at different positions) give the tokens each gives alone.
#[test]
fn a_batched_decode_equals_separate_decodes() {
    let bytes = common::smollm2();
    for precision in [Precision::IntegerQ8, Precision::DequantizedF32] {
        let model = load(&bytes, "SmolLM2-135M-Instruct.Q4_1.gguf", precision);
        let prompts: Vec<Vec<u32>> =
            ["Name a colour.", "What is 2 + 2? Answer briefly.", "Say hello in French.", "Write a haiku about the sea."]
                .iter()
                .map(|q| model.tokenizer.encode(&format!("<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n")).unwrap())
                .collect();
        let alone: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| generate(&model.backbone, &model.tokenizer, p.clone(), greedy(20), |_| true).unwrap().0.generated().to_vec())
            .collect();
        let mut seqs: Vec<Sequence> =
            prompts.iter().map(|p| Sequence::new(&model.backbone, p.clone(), KvState::default(), greedy(20)).unwrap()).collect();
        while seqs.iter().any(|s| s.pending() > 0) {
            let mut batch: Vec<(&mut Sequence, usize)> = seqs
                .iter_mut()
                .filter(|s| s.pending() > 0)
                .map(|s| {
                    let n = s.pending();
                    (s, n)
                })
                .collect();
            step(&model.backbone, &model.tokenizer, &mut batch).unwrap();
        }
        for (i, seq) in seqs.iter().enumerate() {
            assert_eq!(seq.generated(), alone[i].as_slice(), "{precision:?}: sequence {i} batched");
        }
    }
}

/// A prompt fed in chunks of 5 tokens, then decoded, gives the tokens of
/// one whole prefill.
#[test]
fn a_chunked_prefill_then_decode_equals_one_prefill() {
    let bytes = common::smollm2();
    let model = load(&bytes, "SmolLM2-135M-Instruct.Q4_1.gguf", Precision::IntegerQ8);
    let prompt = model
        .tokenizer
        .encode("<|im_start|>user\nExplain why the sky is blue, briefly and simply.<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    let whole = generate(&model.backbone, &model.tokenizer, prompt.clone(), greedy(24), |_| true).unwrap().0;
    let mut seq = Sequence::new(&model.backbone, prompt, KvState::default(), greedy(24)).unwrap();
    let mut chunks = 0;
    while seq.pending() > 0 {
        let n = seq.pending().min(5);
        chunks += usize::from(seq.in_prefill());
        step(&model.backbone, &model.tokenizer, &mut [(&mut seq, n)]).unwrap();
    }
    assert!(chunks >= 4, "the prompt went in {chunks} chunks");
    assert_eq!(seq.generated(), whole.generated());
    assert_eq!(seq.text(), whole.text());
}

/// Sampling: the same seed gives the same tokens; other seeds other tokens.
#[test]
fn seeded_sampling_reproduces() {
    let bytes = common::smollm2();
    let model = load(&bytes, "SmolLM2-135M-Instruct.Q4_1.gguf", Precision::IntegerQ8);
    let prompt = model.tokenizer.encode("<|im_start|>user\nTell me a short story.<|im_end|>\n<|im_start|>assistant\n").unwrap();
    let run = |seed| {
        let params = SamplingParams { temperature: 0.9, top_k: 40, top_p: 0.95, seed, max_new_tokens: 24, stop: vec![], ignore_eos: false };
        generate(&model.backbone, &model.tokenizer, prompt.clone(), params, |_| true).unwrap().0.generated().to_vec()
    };
    let first = run(11);
    assert_eq!(first, run(11));
    assert!([12, 13, 14].iter().any(|&s| run(s) != first), "three other seeds all gave the same tokens");
}

/// The streamed pieces, joined, are the decoded text, for output that
/// splits characters across tokens (byte-level BPE's multi-byte
/// characters); a stop text ends it and is not shown.
#[test]
fn streamed_text_is_the_decoded_text_and_stops_cut_it() {
    let bytes = common::smollm2();
    let model = load(&bytes, "SmolLM2-135M-Instruct.Q4_1.gguf", Precision::IntegerQ8);
    let prompt = model
        .tokenizer
        .encode("<|im_start|>user\nWrite three Japanese words with their meanings, and an emoji.<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    let mut pieces = Vec::new();
    let (seq, timings) = generate(&model.backbone, &model.tokenizer, prompt.clone(), greedy(60), |e| {
        pieces.push(e.text.clone());
        true
    })
    .unwrap();
    let decoded = model.tokenizer.decode(seq.generated()).unwrap();
    assert_eq!(pieces.concat(), decoded);
    assert!(decoded.chars().any(|c| c.len_utf8() > 1), "no multi-byte character in {decoded:?}");
    assert_eq!(timings.gaps_ms.len() + 1, seq.generated().len());

    // Stop at a text that appears in the middle of that answer.
    let words: Vec<&str> = decoded.split_whitespace().collect();
    let stop = words[words.len() / 2].to_string();
    let params = SamplingParams { stop: vec![stop.clone()], ..greedy(60) };
    let (stopped, _) = generate(&model.backbone, &model.tokenizer, prompt, params, |_| true).unwrap();
    assert_eq!(stopped.finish(), Some(&FinishReason::Stop { text: stop.clone() }));
    assert_eq!(stopped.text(), &decoded[..decoded.find(&stop).unwrap()]);
}

/// Bad parameters are refused naming the field; a prompt past the context too.
#[test]
fn bad_parameters_are_refused_by_field() {
    let bytes = common::smollm2();
    let model = load(&bytes, "SmolLM2-135M-Instruct.Q4_1.gguf", Precision::IntegerQ8);
    let err = |params: SamplingParams, prompt: Vec<u32>| Sequence::new(&model.backbone, prompt, KvState::default(), params).unwrap_err();
    assert_eq!(err(SamplingParams { temperature: -1.0, ..greedy(8) }, vec![1, 2]).field.name(), "temperature");
    assert_eq!(err(SamplingParams { top_p: 0.0, ..greedy(8) }, vec![1, 2]).field.name(), "top_p");
    assert_eq!(err(greedy(0), vec![1, 2]).field.name(), "max_new_tokens");
    let context = model.backbone.max_positions();
    assert_eq!(err(greedy(8), vec![1; context]).field.name(), "prompt");
    assert_eq!(err(greedy(8), vec![1; context - 4]).field.name(), "max_new_tokens");
}

/// P/D separation's hand-off: a sequence prefilled on one instance, its
/// K/V taken out as bytes after its first token and written into the
/// pages of a second instance (another load of the same file), decodes
/// the same greedy tokens as a sequence that stayed. The bytes are the
/// calculator's payload for the prompt: `Σ_layers 2 × H_kv × d_head × 4 ×
/// retained(T)`, so past Gemma 3's 512-token window its 15 sliding layers
/// send 512 tokens each and its 3 global layers all of them.
#[test]
fn a_handed_off_sequence_decodes_as_if_it_had_stayed() {
    use router::handoff::{hand_off, receive};
    let long = (0..90).map(|i| format!("step {i} routes to model {}", i % 8)).collect::<Vec<_>>().join("; ");
    let cases = [
        (
            common::smollm2(),
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n".to_string(),
        ),
        (common::gemma3(), common::GEMMA3_FILE, format!("<start_of_turn>user\n{long}<end_of_turn>\n<start_of_turn>model\n")),
    ];
    for (bytes, file, text) in &cases {
        for precision in [Precision::IntegerQ8, Precision::DequantizedF32] {
            let prefill = load(bytes, file, precision);
            let decode = load(bytes, file, precision);
            let prompt = prefill.tokenizer.encode(text).unwrap();
            let stayed = generate(&prefill.backbone, &prefill.tokenizer, prompt.clone(), greedy(16), |_| true).unwrap().0;

            let mut seq = Sequence::new(&prefill.backbone, prompt.clone(), KvState::default(), greedy(16)).unwrap();
            let n = seq.pending();
            step(&prefill.backbone, &prefill.tokenizer, &mut [(&mut seq, n)]).unwrap();
            assert_eq!(seq.generated().len(), 1);
            let (shell, parcel) = hand_off(&prefill.backbone, seq).unwrap();
            assert_eq!(shell.held(), 0, "the sender's pages are freed");
            let h = &prefill.backbone.hparams;
            let t = prompt.len();
            let per_token_layer = 2 * h.kv_heads * h.head_dim * 4;
            let expected = match h.sliding_window {
                // Gemma 3: every sixth layer global, the rest a window.
                Some(window) => (h.layers / 6 * t + (h.layers - h.layers / 6) * t.min(window)) * per_token_layer,
                None => h.layers * t * per_token_layer,
            };
            assert_eq!(parcel.held, t);
            assert_eq!(parcel.bytes.len(), expected, "{file}: the bytes moved are the calculator's payload for {t} tokens");
            if h.sliding_window.is_some() {
                assert!(t > 600, "the prompt ({t} tokens) passes the window");
            }

            let mut moved = receive(&decode.backbone, shell, &parcel).unwrap();
            assert_eq!(moved.held(), t);
            while moved.pending() > 0 {
                step(&decode.backbone, &decode.tokenizer, &mut [(&mut moved, 1)]).unwrap();
            }
            assert_eq!(moved.generated(), stayed.generated(), "{file} {precision:?}: decoded after the hand-off");
            assert_eq!(moved.text(), stayed.text());

            // A parcel cut short is refused with both lengths, not read past.
            let (shell, mut short) = hand_off(&decode.backbone, moved).unwrap();
            short.bytes.truncate(short.bytes.len() - 4);
            let err = receive(&decode.backbone, shell, &short).unwrap_err().to_string();
            assert!(err.contains("bytes for"), "{err}");
        }
    }
}
