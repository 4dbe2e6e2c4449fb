//! The router on Gemma 3 270M (the on-request checkpoint, fetched by
//! `scripts/fetch-assets.sh --gemma`): what a checkpoint with a BOS, its own
//! turn layout and sliding-window layers changes in `decide`. Its forward
//! pass and tokenizer against llama.cpp are in `tests/reference.rs`.

#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::sync::Arc;

use router::segment::{KvState, SegmentView};
use router::{CacheBudget, Conversation, PrefixCache, Router, RouterAssets, RouterConfig, TurnLayout};

fn router(config: RouterConfig) -> Router {
    load(config).unwrap()
}

fn load(config: RouterConfig) -> router::Result<Router> {
    let gguf = common::gemma3();
    let pool = common::pool_yaml();
    let assets = RouterAssets {
        gguf: &gguf,
        gguf_name: common::GEMMA3_FILE,
        gguf_sha256: None,
        tokenizer_json: None,
        pool_yaml: &pool,
        pool_name: "pool.coderouterbench.yaml",
    };
    Router::load(&assets, config)
}

#[test]
fn gemma3_decides_with_its_own_id_layout_bos_and_truncation() {
    let r = router(RouterConfig { max_tokens: 64, ..RouterConfig::default() });
    assert_eq!(r.checkpoint_id(), "gguf-a5fd3b62");
    assert_eq!(r.weight_type, "Q4_K_M");
    assert_eq!(r.backbone.hparams.architecture.name, "gemma3");
    assert_eq!((r.tokenizer.bos, r.tokenizer.layout), (Some(2), TurnLayout::Gemma));
    // The turn markers are single control tokens, after the BOS.
    let ids = r.tokenizer.encode(&Conversation::user("hi").routing_text(r.tokenizer.layout)).unwrap();
    assert_eq!(&ids[..4], &[2, 105, 2364, 107], "<bos><start_of_turn>user\\n");

    let short = r.decide(&Conversation::user("Fix the failing test in astropy's TimeSeries."), None).unwrap();
    assert!(!short.truncated && short.tokens_used == short.tokens_total);
    let long = Conversation::user(format!("START {} END", "word ".repeat(200)));
    let d = r.decide(&long, None).unwrap();
    assert!(d.truncated && d.tokens_total > 200);
    assert_eq!(d.tokens_used, 64, "BOS + the last 63 tokens");
    let scores = r.encode_and_score(&long.routing_text(r.tokenizer.layout)).unwrap();
    assert_eq!(scores.tokens_used, 64);
    // A ceiling with no room for text after the BOS is refused at load
    // (the candidate descriptors are encoded then), naming the setting.
    let err = load(RouterConfig { max_tokens: 1, ..RouterConfig::default() }).err().unwrap().to_string();
    assert!(err.contains("router_max_tokens = 1 leaves no room for text after the BOS"), "{err}");
}

#[test]
fn gemma3_prefix_reuse_matches_a_full_prefill_past_the_sliding_window() {
    let r = router(RouterConfig::default());
    // Continuing from held K/V across the 512-token window: two prefills
    // give the state one prefill gives.
    let text = (0..90).map(|i| format!("step {i} routes to model {}", i % 8)).collect::<Vec<_>>().join("; ");
    let ids = r.tokenizer.encode(&text).unwrap();
    assert!(ids.len() > 700, "{} tokens", ids.len());
    let whole = r.backbone.hidden_states(&ids).unwrap();
    let mut prefix = KvState::default();
    prefix.push(SegmentView::whole(Arc::new(r.backbone.prefill(&KvState::default(), &ids[..600]).unwrap())));
    let rest = r.backbone.prefill(&prefix, &ids[600..]).unwrap();
    let width = r.backbone.hparams.hidden;
    let tail = &whole[600 * width..];
    let continued = rest.hidden(0..ids.len() - 600);
    let worst = continued.iter().zip(tail).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let scale = tail.iter().fold(0f32, |m, x| m.max(x.abs()));
    // Summation order differs (attention adds the pieces one by one), and
    // Gemma's states are large: measured 1.1e-4 of the largest magnitude.
    assert!(worst <= 5e-4 * scale, "continued vs whole: max |Δ| {worst} of {scale}");

    // decide_with_cache: a follow-up turn reuses the first turn's tokens and ranks as decide does.
    let mut cache = PrefixCache::new(CacheBudget::default());
    let first = Conversation::user(text.clone());
    r.decide_with_cache(&first, None, &mut cache).unwrap();
    let mut next = first.clone();
    next.messages.push(router::Message { role: router::Role::Assistant, content: "Model 3.".into() });
    let cached = r.decide_with_cache(&next, None, &mut cache).unwrap();
    let full = r.decide(&next, None).unwrap();
    let reuse = cached.prefix.unwrap();
    assert!(reuse.reused_tokens > 700 && reuse.prefilled_tokens < 20, "{reuse:?}");
    assert_eq!(cached.ranked.iter().map(|x| &x.id).collect::<Vec<_>>(), full.ranked.iter().map(|x| &x.id).collect::<Vec<_>>());
    for (a, b) in cached.ranked.iter().zip(&full.ranked) {
        assert!((a.score - b.score).abs() <= 1e-5, "{}: {} vs {}", a.id, a.score, b.score);
    }
}
