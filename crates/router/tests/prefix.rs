//! Prefix reuse through the real `decide`: a decision that continues from a
//! cached prefix ranks the candidates exactly as a full prefill does, with
//! scores within 1e-5, over many generated multi-turn conversations (some
//! sharing a system prompt, some past `router_max_tokens`, some under cache
//! pressure). Synthetic qwen3 and qwen2 checkpoints (random weights, the
//! real Qwen3 tokenizer.json) keep each case fast. Native only: proptest is
//! a native dev-dependency, and the browser runs the same engine code.

#![cfg(not(target_arch = "wasm32"))]

mod common;

use candle_core::quantized::GgmlDType;
use proptest::prelude::*;
use router::synthetic::{self, SyntheticSpec};
use router::{CacheBudget, Conversation, Message, PrefixCache, Role, Router, RouterAssets, RouterConfig};

/// Scores may differ by float rounding only: a reused prefix's state was
/// computed in another call, so sums run in another order.
const SCORE_TOLERANCE: f32 = 1e-5;

fn router(architecture: &'static str, max_tokens: usize) -> Router {
    let gguf = synthetic::write(&SyntheticSpec::of(architecture, GgmlDType::Q8_0)).unwrap();
    let tokenizer = common::asset("qwen3-tokenizer.json");
    let pool = common::pool_yaml();
    let assets = RouterAssets {
        gguf: &gguf,
        gguf_name: "synthetic.gguf",
        gguf_sha256: None,
        tokenizer_json: Some((&tokenizer, "qwen3-tokenizer.json")),
        pool_yaml: &pool,
        pool_name: "pool.coderouterbench.yaml",
    };
    Router::load(&assets, RouterConfig { max_tokens, ..RouterConfig::default() }).unwrap()
}

const SYSTEM: [&str; 2] = ["You route coding tasks to the best backend.", "Pick a model for this request; cost matters."];
const WORDS: [&str; 12] = ["fix", "the", "failing", "test", "in", "astropy", "refactor", "parser", "why", "does", "segfault", "Rust"];

/// A conversation: a system prompt (one of two, so conversations share
/// prefixes) and 1–4 alternating user/assistant turns of random words.
fn conversation() -> impl Strategy<Value = Conversation> {
    (0..SYSTEM.len(), prop::collection::vec(prop::collection::vec(0..WORDS.len(), 1..12), 1..5)).prop_map(|(system, turns)| {
        let mut messages = vec![Message { role: Role::System, content: SYSTEM[system].into() }];
        for (i, words) in turns.iter().enumerate() {
            let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
            messages.push(Message { role, content: words.iter().map(|&w| WORDS[w]).collect::<Vec<_>>().join(" ") });
        }
        Conversation { messages }
    })
}

/// Decides every turn-prefix of every conversation with one shared cache,
/// and checks each against a full prefill.
fn check(router: &Router, conversations: &[Conversation], cache: &mut PrefixCache) -> Result<(), TestCaseError> {
    for conversation in conversations {
        let mut previous_tokens = 0;
        for turns in 2..=conversation.messages.len() {
            let partial = Conversation { messages: conversation.messages[..turns].to_vec() };
            let full = router.decide(&partial, None).unwrap();
            let cached = router.decide_with_cache(&partial, None, cache).unwrap();
            let ids = |d: &router::Decision| d.ranked.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
            prop_assert_eq!(ids(&cached), ids(&full), "ranking after {} turns", turns);
            for (a, b) in cached.ranked.iter().zip(&full.ranked) {
                prop_assert!((a.score - b.score).abs() <= SCORE_TOLERANCE, "{}: score {} vs {}", a.id, a.score, b.score);
            }
            let reuse = cached.prefix.expect("a cached decide reports its reuse");
            prop_assert_eq!(reuse.reused_tokens + reuse.prefilled_tokens, full.tokens_used);
            prop_assert!(cache.tokens_held() <= cache.budget().max_tokens);
            // Within the window and with room to hold it, the previous turn's
            // tokens are all reused.
            if !full.truncated && cache.budget().max_tokens >= 4096 {
                prop_assert!(reuse.reused_tokens >= previous_tokens, "reused {} of the {} held", reuse.reused_tokens, previous_tokens);
            }
            previous_tokens = full.tokens_used;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn cached_decisions_equal_full_prefills(
        conversations in prop::collection::vec(conversation(), 1..4),
        architecture in prop::sample::select(vec!["qwen3", "qwen2"]),
        max_tokens in prop::sample::select(vec![24usize, 1024]),
        budget_tokens in prop::sample::select(vec![40usize, 100_000]),
    ) {
        let router = router(architecture, max_tokens);
        let mut cache = PrefixCache::new(CacheBudget { max_tokens: budget_tokens, max_bytes: u64::MAX });
        check(&router, &conversations, &mut cache)?;
    }
}

#[test]
fn an_exact_repeat_is_answered_from_the_cache_alone() {
    let router = router("qwen3", 1024);
    let mut cache = PrefixCache::new(CacheBudget::default());
    let conversation = Conversation::user("fix the failing test in astropy").with_system(SYSTEM[0]);
    let first = router.decide_with_cache(&conversation, None, &mut cache).unwrap();
    let again = router.decide_with_cache(&conversation, None, &mut cache).unwrap();
    let reuse = again.prefix.unwrap();
    assert_eq!((reuse.reused_tokens, reuse.prefilled_tokens), (first.tokens_used, 0));
    assert_eq!(first.ranked, again.ranked, "the same state, the same bits");
}

#[test]
fn precision_names_are_serde_names() {
    for precision in [router::Precision::Quantized, router::Precision::DequantizedF32] {
        assert_eq!(serde_json::to_value(precision).unwrap(), precision.name());
    }
    assert_eq!(router("qwen3", 1024).namespace().precision, router::Precision::DequantizedF32);
}

#[test]
fn a_qwen2_checkpoint_is_one_description() {
    // The description asks for biases, so the synthetic file carries them
    // and the backbone loads and uses them.
    let router = router("qwen2", 1024);
    assert_eq!(router.backbone.hparams.architecture.name, "qwen2");
    let d = router.decide(&Conversation::user("refactor the parser"), None).unwrap();
    assert_eq!(d.ranked.len(), 8);
    // Without its biases the file is refused, naming the tensor.
    let spec = SyntheticSpec::of("qwen3", GgmlDType::Q8_0);
    let mut gguf = synthetic::write(&spec).unwrap();
    // A qwen3 file relabelled as qwen2 (its architecture and metadata
    // keys) lacks qwen2's biases.
    while let Some(at) = gguf.windows(5).position(|w| w == b"qwen3") {
        gguf[at..at + 5].copy_from_slice(b"qwen2");
    }
    let ck = router::gguf::Checkpoint::parse(&gguf, "relabelled.gguf");
    let err = ck.and_then(|ck| router::model::Backbone::load(&ck, router::Precision::DequantizedF32).map(|_| ())).unwrap_err().to_string();
    assert!(err.contains("attn_q.bias") && err.contains("missing"), "{err}");
}
