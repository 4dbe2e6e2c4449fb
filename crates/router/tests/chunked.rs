//! Chunked prefill (the serving test's scheduling knob) against one whole
//! prefill, on the bundled SmolLM2 checkpoint and real OOD176 prompts: a
//! prompt prefilled in chunks of C tokens, each chunk continuing from the
//! K/V state the earlier ones wrote, gives the same final hidden states
//! within `HIDDEN_TOLERANCE` and the same ranking, with scores within
//! `SCORE_TOLERANCE`, for C = 1 (on a short prompt), 100 (an uneven last
//! chunk) and 256 (the serving study's chunk), against one prefill of the
//! whole prompt (which is what `decide` runs).

#![cfg(not(target_arch = "wasm32"))]

mod common;

use router::{Conversation, Message, Role, RouterConfig};

/// Hidden states may differ by float summation order only: attention sums
/// over the K/V pieces one chunk at a time. Relative to the largest
/// magnitude in the row block (final hidden states reach the hundreds).
const HIDDEN_TOLERANCE: f32 = 1e-4;
/// Scores are softmaxed cosines at temperature 0.05, so a cosine's
/// rounding is magnified twentyfold.
const SCORE_TOLERANCE: f32 = 1e-4;

fn prompts() -> Vec<String> {
    let path = common::workspace().join("data/coderouterbench/ood176_tasks.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["prompt"].as_str().unwrap().to_string()).collect()
}

#[test]
fn chunked_prefill_equals_one_prefill() {
    let router = common::smollm2_router(RouterConfig::default());
    let prompts = prompts();
    // The first task is past router_max_tokens (the 1,024-token case); a
    // short one checks that a chunk larger than the prompt is one prefill.
    let long = prompts.iter().find(|p| p.len() > 20_000).unwrap();
    let short = prompts.iter().min_by_key(|p| p.len()).unwrap();
    for prompt in [long, short] {
        let conversation = Conversation { messages: vec![Message { role: Role::User, content: prompt.clone() }] };
        let mut reference = router.begin_decide(&conversation, Some("quality")).unwrap();
        router.prefill_chunk(&mut reference, usize::MAX).unwrap();
        assert_eq!(reference.chunks(), 1);
        let reference_hidden = reference.hidden_states();
        let tokens = reference.tokens_kept();
        let whole = router.finish_decide(reference).unwrap();
        if prompt == long {
            assert_eq!(tokens, 1024, "the long prompt is cut to router_max_tokens");
        }
        for chunk in [1usize, 100, 256] {
            if chunk == 1 && tokens > 64 {
                // One token at a time over 1,024 tokens is slow in a debug
                // build; C = 1 runs on the short prompt only.
                continue;
            }
            let mut job = router.begin_decide(&conversation, Some("quality")).unwrap();
            while job.remaining() > 0 {
                let done = router.prefill_chunk(&mut job, chunk).unwrap();
                assert!(done >= 1 && done <= chunk, "a chunk of {chunk} prefilled {done} tokens");
            }
            assert_eq!(job.chunks(), tokens.div_ceil(chunk), "C = {chunk}");
            let hidden = job.hidden_states();
            assert_eq!(hidden.len(), reference_hidden.len());
            let scale = reference_hidden.iter().fold(1f32, |m, x| m.max(x.abs()));
            let worst = hidden.iter().zip(&reference_hidden).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(worst <= HIDDEN_TOLERANCE * scale, "C = {chunk}: hidden states differ by {worst} (scale {scale})");

            let decision = router.finish_decide(job).unwrap();
            assert_same_ranking(&decision, &whole, &format!("C = {chunk}"));
            assert_eq!(decision.tokens_used, whole.tokens_used);
            assert!(decision.timings.prefill_ms > 0.0 && decision.timings.total_ms >= decision.timings.prefill_ms);
        }
    }
}

#[test]
fn a_finished_job_prefills_the_rest_in_one_go() {
    let router = common::smollm2_router(RouterConfig { max_tokens: 96, ..RouterConfig::default() });
    let conversation = Conversation { messages: vec![Message { role: Role::User, content: prompts()[0].clone() }] };
    let mut job = router.begin_decide(&conversation, None).unwrap();
    assert_eq!(router.prefill_chunk(&mut job, 32).unwrap(), 32);
    assert_eq!(job.remaining(), 64);
    let decision = router.finish_decide(job).unwrap();
    assert_eq!(decision.tokens_used, 96);
    assert_same_ranking(&decision, &router.decide(&conversation, None).unwrap(), "32 then the rest");
    // An unknown mode is refused before any work.
    assert!(router.begin_decide(&conversation, Some("fastest")).unwrap_err().to_string().contains("unknown mode"));
}

/// The same candidates in the same order, scores within `SCORE_TOLERANCE`.
fn assert_same_ranking(decision: &router::Decision, whole: &router::Decision, case: &str) {
    let ids = |d: &router::Decision| d.ranked.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(decision), ids(whole), "{case}: the ranking changed");
    for (a, b) in decision.ranked.iter().zip(&whole.ranked) {
        assert!((a.score - b.score).abs() <= SCORE_TOLERANCE, "{case}: {} scores {} vs {}", a.id, a.score, b.score);
    }
}
