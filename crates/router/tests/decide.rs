//! The decide pipeline on the real bundled checkpoint and the default pool.

mod common;

use router::{Conversation, Router, RouterAssets, RouterConfig};

fn router(config: RouterConfig) -> Router {
    common::smollm2_router(config)
}

#[test]
fn decide_ranks_every_candidate_with_costs_and_stage_timings() {
    let r = router(RouterConfig::default());
    assert_eq!(r.checkpoint_id(), "gguf-b179c952");
    assert_eq!(r.weight_type, "Q4_1");
    let conv = Conversation::user("TimeSeries: misleading exception when required column check fails. Fix the bug in astropy.");
    let d = r.decide(&conv, None).unwrap();
    assert_eq!(d.mode, "balanced");
    assert_eq!(d.ranked.len(), 8);
    assert!(d.ranked.windows(2).all(|w| w[0].utility >= w[1].utility), "ranked by utility");
    let sum: f32 = d.ranked.iter().map(|x| x.score).sum();
    assert!((sum - 1.0).abs() < 1e-4, "scores are a distribution: {sum}");
    assert!(d.ranked.iter().all(|x| x.estimated_cost_usd > 0.0));
    let t = d.timings;
    assert!(t.prefill_ms > 0.0 && t.total_ms >= t.prefill_ms);
    // encode_and_score gives the same scores: one code path.
    let s = r.encode_and_score(&conv.routing_text(r.tokenizer.layout)).unwrap();
    for x in &d.ranked {
        let i = r.pool.candidates.iter().position(|c| c.id == x.id).unwrap();
        assert_eq!(s.scores[i].to_bits(), x.score.to_bits());
    }
    // Economy weighs cost: its top pick is no more expensive than quality's.
    let q = r.decide(&conv, Some("quality")).unwrap();
    let e = r.decide(&conv, Some("economy")).unwrap();
    assert!(e.ranked[0].estimated_cost_usd <= q.ranked[0].estimated_cost_usd);
    // Deterministic to the bit.
    let again = r.decide(&conv, None).unwrap();
    assert_eq!(format!("{:?}", again.ranked), format!("{:?}", d.ranked));
}

#[test]
fn truncation_cuts_from_the_left_at_router_max_tokens() {
    let r = router(RouterConfig { max_tokens: 32, ..RouterConfig::default() });
    let long = "word ".repeat(200);
    let d = r.decide(&Conversation::user(format!("START {long} END")), None).unwrap();
    assert!(d.truncated);
    assert_eq!(d.tokens_used, 32);
    assert!(d.tokens_total > 200);
}

#[test]
fn bad_requests_are_errors_not_panics() {
    let r = router(RouterConfig::default());
    let err = r.decide(&Conversation::user("x"), Some("turbo")).unwrap_err().to_string();
    assert!(err.contains("unknown mode `turbo`") && err.contains("balanced"), "{err}");
    let err = r.decide(&Conversation::user("   "), None).unwrap_err().to_string();
    assert!(err.contains("empty"), "{err}");
}

#[test]
fn bench_prompts_have_exactly_the_requested_token_count() {
    let r = router(RouterConfig::default());
    let corpus = std::fs::read_to_string(common::workspace().join("data/coderouterbench/ood176_sample.jsonl")).unwrap();
    let texts: Vec<String> =
        corpus.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["prompt"].as_str().unwrap().to_string()).collect();
    for n in [15, 256, 1024] {
        let p = router::prompts::exact_prompt(&r.tokenizer, &texts, n).unwrap();
        assert_eq!(p.tokens, n);
        assert_eq!(r.tokenizer.encode(&p.conversation.routing_text(r.tokenizer.layout)).unwrap().len(), n);
        assert!(p.characters > 0);
    }
}

#[test]
fn stepped_truncation_keeps_the_window_start_so_the_prefix_stays_cached() {
    use router::{CacheBudget, PrefixCache};
    // Distinct words: a repeated one would let a shifted window match the
    // held tokens by coincidence.
    let words: Vec<String> = (0..60).map(|i| format!("part{i}")).collect();
    let base = Conversation::user(format!("START {} END", words.join(" ")));
    let grown = |k: usize| {
        let mut c = base.clone();
        for i in 0..k {
            c.messages.push(router::Message { role: router::Role::User, content: format!("and case {}", char::from(b'a' + i as u8)) });
        }
        c
    };
    // Plain left truncation: each new turn moves the window, nothing is reused.
    let left = router(RouterConfig { max_tokens: 64, ..RouterConfig::default() });
    let mut cache = PrefixCache::new(CacheBudget::default());
    left.decide_with_cache(&grown(0), None, &mut cache).unwrap();
    let d = left.decide_with_cache(&grown(1), None, &mut cache).unwrap();
    assert_eq!((d.tokens_used, d.prefix.unwrap().reused_tokens), (64, 0));
    // A 32-token grid: the window is 33–64 tokens and starts where it did
    // while the text grows within a step, so the next turn is a hit.
    let stepped = router(RouterConfig { max_tokens: 64, truncation_step: 32, ..RouterConfig::default() });
    let mut cache = PrefixCache::new(CacheBudget::default());
    let mut hits = 0;
    let mut previous = stepped.decide_with_cache(&grown(0), None, &mut cache).unwrap();
    for k in 1..6 {
        let d = stepped.decide_with_cache(&grown(k), None, &mut cache).unwrap();
        assert!(d.truncated && d.tokens_used > 32 && d.tokens_used <= 64, "{} tokens", d.tokens_used);
        let reuse = d.prefix.unwrap();
        if reuse.reused_tokens == previous.tokens_used {
            hits += 1;
            assert_eq!(d.tokens_used, previous.tokens_used + reuse.prefilled_tokens);
        }
        // The cached decide ranks as a full one under the same policy.
        let full = stepped.decide(&grown(k), None).unwrap();
        assert_eq!(full.ranked.iter().map(|r| &r.id).collect::<Vec<_>>(), d.ranked.iter().map(|r| &r.id).collect::<Vec<_>>());
        previous = d;
    }
    assert!(hits >= 3, "{hits} of 5 turns reused the previous window");
    // A grid as coarse as the window would keep nothing: refused at load.
    let gguf = common::smollm2();
    let pool = common::pool_yaml();
    let assets =
        RouterAssets { gguf: &gguf, gguf_name: "m.gguf", gguf_sha256: None, tokenizer_json: None, pool_yaml: &pool, pool_name: "p.yaml" };
    let err =
        Router::load(&assets, RouterConfig { max_tokens: 64, truncation_step: 64, ..RouterConfig::default() }).err().unwrap().to_string();
    assert!(err.contains("truncation step 64 must be at least 1 and less than the 64 text tokens"), "{err}");
    // Changed after load, the same rule holds (the truncation study's way in).
    let mut r = Router::load(&assets, RouterConfig { max_tokens: 64, ..RouterConfig::default() }).unwrap();
    for bad in [0, 64] {
        let err = r.set_truncation_step(bad).unwrap_err().to_string();
        assert!(err.contains(&format!("truncation step {bad} must be at least 1")), "{err}");
    }
    assert_eq!(r.config().truncation_step, 1);
    r.set_truncation_step(16).unwrap();
    assert_eq!(r.config().truncation_step, 16);
}

/// The integer kernels against the f32 path on the end-to-end test's
/// conversations, in every mode: the same top candidate, scores (a softmax
/// at temperature 0.05) within 0.01, and any two candidates the paths order
/// differently within 0.01 of each other in utility on the f32 path (a
/// near tie the activations' 8-bit rounding may turn). Measured: two swaps of
/// neighbours (conversation 2 in quality mode, 6th and 7th of 8;
/// conversation 1 in economy mode, 3rd and 4th), scores at most 0.0070 apart.
#[test]
fn integer_kernels_rank_the_e2e_conversations_like_f32() {
    let fixture = std::fs::read_to_string(common::workspace().join("tests/e2e/fixtures/same-answers.json")).unwrap();
    let conversations: Vec<Conversation> = serde_json::from_str(&fixture).unwrap();
    let f32_router = router(RouterConfig { precision: router::Precision::DequantizedF32, ..RouterConfig::default() });
    let int_router = router(RouterConfig { precision: router::Precision::IntegerQ8, ..RouterConfig::default() });
    let (mut worst, mut swaps) = (0f32, 0);
    for mode in ["quality", "balanced", "economy"] {
        for (i, conversation) in conversations.iter().enumerate() {
            let want = f32_router.decide(conversation, Some(mode)).unwrap();
            let ours = int_router.decide(conversation, Some(mode)).unwrap();
            let where_ = format!("conversation {} in {mode}", i + 1);
            assert_eq!(ours.ranked[0].id, want.ranked[0].id, "{where_}: top candidate");
            let place = |d: &router::Decision, id: &str| d.ranked.iter().position(|r| r.id == id).unwrap();
            for (a, wa) in want.ranked.iter().enumerate() {
                let oa = &ours.ranked[place(&ours, &wa.id)];
                worst = worst.max((oa.score - wa.score).abs());
                for wb in &want.ranked[a + 1..] {
                    if place(&ours, &wa.id) > place(&ours, &wb.id) {
                        swaps += 1;
                        println!(
                            "{where_}: {} ({}) and {} ({}) swapped, {:.4} apart",
                            wa.id,
                            a + 1,
                            wb.id,
                            place(&want, &wb.id) + 1,
                            wa.utility - wb.utility
                        );
                        let gap = wa.utility - wb.utility;
                        assert!(gap <= 0.01, "{where_}: {} and {} swapped, {gap} apart in utility", wa.id, wb.id);
                    }
                }
            }
        }
    }
    println!("int8 against f32: scores at most {worst:.4} apart, {swaps} pair(s) ordered differently");
    assert!(worst <= 0.01, "scores differ by up to {worst}");
}

/// A second load takes the descriptor vectors the first one cached, and
/// decides exactly as a load that encoded them; a cache written for other
/// settings, or damaged, is not used (the vectors are encoded again).
#[test]
fn descriptor_vectors_come_back_from_the_cache_only_for_the_same_settings() {
    let (gguf, pool) = (common::smollm2(), common::pool_yaml());
    let assets = RouterAssets {
        gguf: &gguf,
        gguf_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256: None,
        tokenizer_json: None,
        pool_yaml: &pool,
        pool_name: "pool.yaml",
    };
    let config = RouterConfig { max_tokens: 256, ..RouterConfig::default() };
    let load = |config: RouterConfig, cache: Option<&[u8]>| Router::load_with_cache(&assets, config, &mut |_, _, _| {}, cache).unwrap();
    let first = load(config, None);
    assert!(!first.load_timings.descriptors_cached && first.load_timings.descriptors_encoded_ms > 0.0);
    let cache = first.descriptor_cache();
    let second = load(config, Some(&cache));
    assert!(second.load_timings.descriptors_cached, "the same settings reuse the vectors");
    assert_eq!(second.load_timings.probe_gflops(), first.load_timings.probe_gflops(), "the probe is the encoding's");
    let conversation = Conversation::user("Fix the flaky retry test in the HTTP client.");
    let scores = |r: &Router| r.decide(&conversation, None).unwrap().ranked.iter().map(|x| x.score.to_bits()).collect::<Vec<_>>();
    assert_eq!(scores(&second), scores(&first));
    // Another router_max_tokens, another precision, or damaged bytes (cut
    // short, or with a byte after the values): encoded again.
    let other = RouterConfig { max_tokens: 128, ..config };
    assert!(!load(other, Some(&cache)).load_timings.descriptors_cached);
    let precision =
        if config.precision == router::Precision::IntegerQ8 { router::Precision::DequantizedF32 } else { router::Precision::IntegerQ8 };
    assert!(!load(RouterConfig { precision, ..config }, Some(&cache)).load_timings.descriptors_cached);
    let longer = [cache.as_slice(), &[0]].concat();
    for damaged in [&cache[..cache.len() - 1], &cache[..10], b"RDV1".as_slice(), &longer] {
        assert!(!load(config, Some(damaged)).load_timings.descriptors_cached);
    }
}
