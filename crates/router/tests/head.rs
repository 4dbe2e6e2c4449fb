//! Keeping the start when truncating, the pooled features `decide` returns,
//! and a trained scoring head: attached, checked against the router, and
//! applied (on the real bundled checkpoint).

mod common;

use router::head::{Head, HeadCandidate, HEAD_SCHEMA};
use router::{Conversation, Pooling, Router, RouterConfig, TruncationSide};

fn router(config: RouterConfig) -> Router {
    common::smollm2_router(config)
}

/// A head whose candidate `favourite` has a large bias and every other a
/// small one, weights zero except one feature.
fn head_for(r: &Router, favourite: usize) -> Head {
    let hidden = r.backbone.hparams.hidden;
    Head {
        schema: HEAD_SCHEMA.into(),
        backbone_checkpoint_id: r.backbone_checkpoint_id().to_string(),
        hidden,
        pooling: Pooling::Last,
        router_max_tokens: r.config().max_tokens,
        truncation: r.config().truncation,
        modes: r
            .pool
            .modes
            .keys()
            .map(|m| {
                let lambda = match m.as_str() {
                    "quality" => 0.0,
                    "economy" => 10.0,
                    _ => 1.0,
                };
                (m.clone(), lambda)
            })
            .collect(),
        candidates: r
            .pool
            .candidates
            .iter()
            .enumerate()
            .map(|(i, c)| HeadCandidate {
                id: c.id.clone(),
                weights: (0..hidden).map(|j| if j == 0 { 0.5 } else { 0.0 }).collect(),
                bias: if i == favourite { 3.0 } else { -1.0 },
                mean_cost_usd: 0.1 + i as f64,
            })
            .collect(),
        trained_on: "a test".into(),
    }
}

#[test]
fn keeping_the_start_keeps_the_first_tokens_and_left_the_last() {
    let text = format!("START of the task statement. {} END", "filler words ".repeat(200));
    let conversation = Conversation::user(text);
    let left = router(RouterConfig { max_tokens: 48, ..RouterConfig::default() });
    let start = router(RouterConfig { max_tokens: 48, truncation: TruncationSide::KeepStart, ..RouterConfig::default() });
    let full = router(RouterConfig::default());
    let (dl, fl) = left.decide_with_features(&conversation, None, None).unwrap();
    let (ds, fs) = start.decide_with_features(&conversation, None, None).unwrap();
    let (_, ff) = full.decide_with_features(&conversation, None, None).unwrap();
    assert_eq!((dl.tokens_used, ds.tokens_used), (48, 48));
    assert!(dl.truncated && ds.truncated);
    // A causal model's first tokens do not see what follows: the kept start
    // has the same last-token state as position 48 of the whole text would,
    // which differs from the left cut's.
    assert_ne!(fl.last, fs.last);
    assert_ne!(fs.last, ff.last);
    for f in [&fl, &fs, &ff] {
        let norm: f32 = f.mean.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4 && (f.last.iter().map(|x| x * x).sum::<f32>().sqrt() - 1.0).abs() < 1e-4);
    }
}

#[test]
fn a_head_scores_by_its_probabilities_and_names_itself_in_the_checkpoint_id() {
    let mut r = router(RouterConfig::default());
    let conversation = Conversation::user("Subclassed SkyCoord gives misleading attribute access message");
    let untrained = r.decide(&conversation, Some("quality")).unwrap();
    assert_eq!(untrained.scoring, "similarity");

    let favourite = 5;
    let bytes = serde_json::to_vec(&head_for(&r, favourite)).unwrap();
    r.attach_head(&bytes, "head.json").unwrap();
    assert!(r.checkpoint_id().starts_with("gguf-b179c952+head-"), "{}", r.checkpoint_id());
    let (d, features) = r.decide_with_features(&conversation, Some("quality"), None).unwrap();
    assert!(d.scoring.starts_with("head-"));
    assert_eq!(d.ranked[0].id, r.pool.candidates[favourite].id, "cost-blind: the head's favourite wins");
    let p = r.head().unwrap().probabilities(&features.last);
    let top = d.ranked.iter().find(|x| x.id == r.pool.candidates[favourite].id).unwrap();
    assert_eq!(top.score, p[favourite]);
    // The head's own λ for economy (10, not the pool's 2): cost dominates,
    // so the cheapest candidate (0, $0.10) overtakes the favourite.
    let economy = r.decide(&conversation, Some("economy")).unwrap();
    assert_eq!(economy.cost_weight, 10.0);
    assert_eq!(economy.ranked[0].id, r.pool.candidates[0].id);
    assert_eq!(economy.ranked[0].estimated_cost_usd, 0.1);

    r.detach_head();
    assert_eq!(r.checkpoint_id(), "gguf-b179c952");
}

#[test]
fn a_head_that_does_not_fit_is_refused_with_the_reason() {
    let mut r = router(RouterConfig::default());
    let good = head_for(&r, 0);
    let cases: Vec<(Head, &str)> = vec![
        (Head { hidden: 7, ..good.clone() }, "hidden size"),
        (Head { backbone_checkpoint_id: "gguf-00000000".into(), ..good.clone() }, "trained on checkpoint gguf-00000000"),
        (Head { router_max_tokens: 256, ..good.clone() }, "truncated to 256 tokens"),
        (Head { candidates: good.candidates[1..].to_vec(), ..good.clone() }, "differ from the pool's"),
        (Head { schema: "other/1".into(), ..good.clone() }, "schema `other/1`"),
        (Head { modes: Default::default(), ..good.clone() }, "no λ for the pool's mode"),
    ];
    for (head, expected) in cases {
        let err = r.attach_head(&serde_json::to_vec(&head).unwrap(), "head.json").unwrap_err().to_string();
        assert!(err.contains("head.json: scoring head") && err.contains(expected), "{err}");
        assert!(r.head().is_none() && r.checkpoint_id() == "gguf-b179c952");
    }
    let err = r.attach_head(b"{ not json", "head.json").unwrap_err().to_string();
    assert!(err.starts_with("head.json: scoring head:"), "{err}");
}
