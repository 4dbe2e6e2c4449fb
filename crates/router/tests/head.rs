//! Keeping the start when truncating, the pooled features `decide` returns,
//! and a trained scoring head: attached, checked against the router, and
//! applied (on the real bundled checkpoint).

mod common;

use router::head::{quantize_rows, CostModel, Head, HeadCandidate, HeadEvaluation, TrainingSet, TrainingTask, HEAD_SCHEMA};
use router::{Conversation, CostTerm, FeatureMap, Pooling, PrefixCache, Router, RouterConfig, TruncationSide};

const LAST: FeatureMap = FeatureMap { after_layers: None, pooling: Pooling::Last };

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
        after_layers: None,
        cost_term: CostTerm::Mean,
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
                p_sigma: 0.0,
                cost_model: None,
            })
            .collect(),
        trained_on: "a test".into(),
        evaluation: HeadEvaluation::default(),
        training: training_set(r, &[vec![1.0; hidden]], 0.5),
    }
}

/// A training set of these rows of last-token features (the head's
/// pooling), unstandardised (mean 0, scale 1), with a novelty threshold.
fn training_set(r: &Router, rows: &[Vec<f32>], threshold: f64) -> TrainingSet {
    let hidden = r.backbone.hparams.hidden;
    let k = r.pool.candidates.len();
    let (features_i8, feature_scales) = quantize_rows(&rows.iter().map(|row| row.iter().map(|&v| v as f64).collect()).collect::<Vec<_>>());
    TrainingSet {
        mean: vec![0.0; hidden],
        scale: vec![1.0; hidden],
        novelty_percentile: 5.0,
        novelty_threshold: threshold,
        tasks: (0..rows.len())
            .map(|i| TrainingTask {
                id: format!("task-{i}"),
                excerpt: format!("training task {i}"),
                resolved: (0..k).map(|c| c == i % k).collect(),
                cost_usd: (0..k).map(|c| c as f64 / 10.0).collect(),
            })
            .collect(),
        features_i8,
        feature_scales,
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
    assert_ne!(fl.get(LAST), fs.get(LAST));
    assert_ne!(fs.get(LAST), ff.get(LAST));
    // Every map of every depth, each of unit length.
    for f in [&fl, &fs, &ff] {
        assert_eq!(f.maps.len(), full.feature_maps().len());
        for (map, values) in &f.maps {
            let norm: f32 = values.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{}: |x| = {norm}", map.name());
            assert_eq!(values.len(), map.pooling.width(576));
        }
    }
}

#[test]
fn a_head_scores_by_its_probabilities_and_names_itself_in_the_checkpoint_id() {
    let mut r = router(RouterConfig::default());
    let conversation = Conversation::user("Subclassed SkyCoord gives misleading attribute access message");
    let untrained = r.decide(&conversation, Some("quality")).unwrap();
    assert_eq!((untrained.scoring.as_str(), untrained.cost_term), ("similarity", None));

    let favourite = 5;
    let bytes = serde_json::to_vec(&head_for(&r, favourite)).unwrap();
    r.attach_head(&bytes, "head.json").unwrap();
    assert!(r.checkpoint_id().starts_with("gguf-b179c952+head-"), "{}", r.checkpoint_id());
    let (d, features) = r.decide_with_features(&conversation, Some("quality"), None).unwrap();
    assert!(d.scoring.starts_with("head-"));
    assert_eq!(d.ranked[0].id, r.pool.candidates[favourite].id, "cost-blind: the head's favourite wins");
    let p = r.head().unwrap().probabilities(features.get(LAST).unwrap());
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
        (
            Head {
                candidates: good.candidates[1..].to_vec(),
                training: TrainingSet {
                    tasks: good
                        .training
                        .tasks
                        .iter()
                        .map(|t| TrainingTask { resolved: t.resolved[1..].to_vec(), cost_usd: t.cost_usd[1..].to_vec(), ..t.clone() })
                        .collect(),
                    ..good.training.clone()
                },
                ..good.clone()
            },
            "differ from the pool's",
        ),
        (Head { schema: "other/1".into(), ..good.clone() }, "schema `other/1`"),
        (Head { modes: Default::default(), ..good.clone() }, "no λ for the pool's mode"),
        (
            Head { training: TrainingSet { feature_scales: vec![], ..good.training.clone() }, ..good.clone() },
            "training set: 576 feature bytes and 0 row scales for 1 tasks × 576 features",
        ),
        (
            Head { training: TrainingSet { features_i8: "not base64!".into(), ..good.training.clone() }, ..good.clone() },
            "training set: features_i8:",
        ),
        (Head { training: TrainingSet { novelty_threshold: 2.0, ..good.training.clone() }, ..good.clone() }, "threshold 2 in [-1, 1]"),
        (
            Head { training: TrainingSet { scale: vec![0.0; good.hidden], ..good.training.clone() }, ..good.clone() },
            "a scale that is not a positive finite number",
        ),
    ];
    for (head, expected) in cases {
        let err = r.attach_head(&serde_json::to_vec(&head).unwrap(), "head.json").unwrap_err().to_string();
        assert!(err.contains("head.json: scoring head") && err.contains(expected), "{err}");
        assert!(r.head().is_none() && r.checkpoint_id() == "gguf-b179c952");
    }
    // A hidden size no feature vector can have, read both ends: refused, no overflow.
    let huge = Head { hidden: usize::MAX, pooling: Pooling::Ends, ..good.clone() };
    let err = r.attach_head(&serde_json::to_vec(&huge).unwrap(), "head.json").unwrap_err().to_string();
    assert!(err.contains(&format!("for {} features (ends pooling", usize::MAX)), "{err}");
    let err = r.attach_head(b"{ not json", "head.json").unwrap_err().to_string();
    assert!(err.starts_with("head.json: scoring head:"), "{err}");
    // A head of the former schema says which it is, not which field it lacks.
    let err = r.attach_head(br#"{"schema": "workbench.router-head/1", "hidden": 576}"#, "old.json").unwrap_err().to_string();
    assert!(err.contains("schema `workbench.router-head/1`, expected `workbench.router-head/3`"), "{err}");
}

#[test]
fn a_decision_says_how_sure_it_is_and_which_training_tasks_are_nearest() {
    let mut r = router(RouterConfig::default());
    let texts =
        ["Fix the off-by-one error in the pagination helper", "Write a haiku about autumn leaves", "Translate this sentence into French"];
    let rows: Vec<Vec<f32>> = texts
        .iter()
        .map(|t| r.decide_with_features(&Conversation::user(t.to_string()), None, None).unwrap().1.get(LAST).unwrap().to_vec())
        .collect();
    let mut head = head_for(&r, 2);
    head.training = training_set(&r, &rows, 0.999);
    let bytes = serde_json::to_vec(&head).unwrap();
    r.attach_head(&bytes, "head.json").unwrap();

    // A training task's own text: its nearest is itself (8-bit rows: cosine
    // within 1e-3 of 1), and it is not unlike the training tasks.
    let d = r.decide(&Conversation::user(texts[1].to_string()), Some("quality")).unwrap();
    let c = d.confidence.as_ref().expect("a head's decision carries its confidence");
    assert_eq!(c.nearest.len(), 3);
    assert_eq!(c.nearest[0].0, 1);
    assert!(c.nearest_similarity > 0.999 && !c.unlike_training, "{c:?}");
    assert!(c.nearest[0].1 >= c.nearest[1].1 && c.nearest[1].1 >= c.nearest[2].1);
    // The favourite's margin is large and no candidate has a spread: sure.
    assert!(c.margin > 0.5 && c.margin_sigma == 0.0 && !c.close_call && c.p_first_ahead == 1.0 && !c.unsure());
    assert!(d.timings.confidence_ms >= 0.0 && d.timings.confidence_ms <= d.timings.total_ms);

    // Another text is less similar than the threshold: unlike the training tasks.
    let other = r.decide(&Conversation::user("Quarterly revenue grew by 12 percent".to_string()), Some("quality")).unwrap();
    let oc = other.confidence.unwrap();
    assert!(oc.nearest_similarity < 0.999 && oc.unlike_training && oc.unsure(), "{oc:?}");
    assert!(oc.reasons().iter().any(|r| r.starts_with("unlike the training tasks")));

    // Spreads as wide as the margin make the same decision a close call,
    // P(first ahead) = Φ(margin ÷ √(σ₁² + σ₂²)).
    r.detach_head();
    head.candidates.iter_mut().for_each(|c| c.p_sigma = 1.0);
    r.attach_head(&serde_json::to_vec(&head).unwrap(), "head.json").unwrap();
    let wide = r.decide(&Conversation::user(texts[1].to_string()), Some("quality")).unwrap().confidence.unwrap();
    assert!(wide.close_call && (wide.margin_sigma - 2f64.sqrt()).abs() < 1e-12, "{wide:?}");
    let expected = router::normal_cdf(wide.margin / 2f64.sqrt());
    assert!((wide.p_first_ahead - expected).abs() < 1e-12 && wide.p_first_ahead > 0.5 && wide.p_first_ahead < 0.9);

    // The neighbours explain with what each backend did on them.
    let neighbours = r.head().unwrap().neighbours(&c.nearest);
    assert_eq!(neighbours[0].task, "task-1");
    assert_eq!(neighbours[0].outcomes.len(), r.pool.candidates.len());
    assert!(neighbours[0].outcomes[1].resolved && !neighbours[0].outcomes[0].resolved);
    assert_eq!(neighbours[0].outcomes[3].cost_usd, 0.3);
    assert!(r.head().unwrap().neighbours(&[(99, 0.5)]).is_empty());

    // The similarity scoring has no confidence to give.
    r.detach_head();
    assert!(r.decide(&Conversation::user(texts[0].to_string()), None).unwrap().confidence.is_none());
}

#[test]
fn a_head_may_read_a_tapped_depth_and_both_ends_and_a_depth_not_tapped_is_refused() {
    let mut r = router(RouterConfig::default());
    assert_eq!(r.backbone.taps(), &[8, 15, 23], "SmolLM2's 30 layers: a quarter, half and three quarters");
    let conversation = Conversation::user("Subclassed SkyCoord gives misleading attribute access message");
    let (_, features) = r.decide_with_features(&conversation, None, None).unwrap();
    let map = FeatureMap { after_layers: Some(15), pooling: Pooling::Ends };
    let x = features.get(map).unwrap().to_vec();
    assert_eq!(x.len(), 2 * 576);
    // A text shorter than both windows: each end is the whole text's mean.
    let mean15 = features.get(FeatureMap { after_layers: Some(15), pooling: Pooling::Mean }).unwrap();
    for (i, v) in x.iter().enumerate() {
        assert!((v - mean15[i % 576] * std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6, "value {i}");
    }
    assert_ne!(
        features.get(FeatureMap { after_layers: Some(15), pooling: Pooling::Mean }).unwrap(),
        features.get(FeatureMap::FINAL_MEAN).unwrap()
    );

    let mut head = head_for(&r, 1);
    head.pooling = Pooling::Ends;
    head.after_layers = Some(15);
    head.candidates.iter_mut().for_each(|c| c.weights = (0..1152).map(|j| if j == 600 { 2.0 } else { 0.0 }).collect());
    head.training = TrainingSet { mean: vec![0.0; 1152], scale: vec![1.0; 1152], ..training_set(&r, &[vec![1.0; 1152]], 0.5) };
    r.attach_head(&serde_json::to_vec(&head).unwrap(), "ends.json").unwrap();
    let d = r.decide(&conversation, Some("quality")).unwrap();
    let p = r.head().unwrap().probabilities(&x);
    for ranked in &d.ranked {
        let i = r.pool.candidates.iter().position(|c| c.id == ranked.id).unwrap();
        assert_eq!(ranked.score, p[i], "{}: scored from the tapped depth's ends", ranked.id);
    }
    r.detach_head();

    head.after_layers = Some(7);
    let err = r.attach_head(&serde_json::to_vec(&head).unwrap(), "deep.json").unwrap_err().to_string();
    assert!(err.contains("after 7 layers") && err.contains("[8, 15, 23]"), "{err}");
    head.after_layers = Some(15);
    head.pooling = Pooling::Mean;
    let err = r.attach_head(&serde_json::to_vec(&head).unwrap(), "narrow.json").unwrap_err().to_string();
    assert!(err.contains("1152 weights for 576 features (mean pooling of hidden size 576)"), "{err}");
}

#[test]
fn the_taps_of_a_reused_prefix_pool_as_the_whole_prefill_does() {
    let r = router(RouterConfig::default());
    let opening = "Refactor the billing module so that invoices and credit notes share one rounding rule.";
    let longer = Conversation::user(format!("{opening} Then add tests for negative totals."));
    let mut cache = PrefixCache::new(router::CacheBudget::default());
    r.decide_with_cache(&Conversation::user(opening.to_string()), None, &mut cache).unwrap();
    let (reusing, with_cache) = r.decide_with_features(&longer, None, Some(&mut cache)).unwrap();
    assert!(reusing.prefix.unwrap().reused_tokens > 10, "{:?}", reusing.prefix);
    let (_, whole) = r.decide_with_features(&longer, None, None).unwrap();
    for ((map, a), (_, b)) in with_cache.maps.iter().zip(&whole.maps) {
        let cosine: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        assert!(cosine > 0.9999, "{}: cosine {cosine} between the cached and the whole prefill", map.name());
    }
}

#[test]
fn a_predicted_cost_term_weighs_each_candidates_predicted_cost_and_needs_its_models() {
    let mut r = router(RouterConfig::default());
    let conversation = Conversation::user("Write a haiku about autumn leaves");
    let mut head = head_for(&r, 2);
    head.cost_term = CostTerm::Predicted;
    let k = head.candidates.len();
    // A constant prediction (zero weights): exp(bias) × smearing, the
    // reverse of the mean costs' order.
    for (i, c) in head.candidates.iter_mut().enumerate() {
        c.cost_model = Some(CostModel { weights: vec![0.0; 576], bias: ((k - i) as f32).ln(), smearing: 0.5 });
    }
    r.attach_head(&serde_json::to_vec(&head).unwrap(), "costs.json").unwrap();
    let d = r.decide(&conversation, Some("economy")).unwrap();
    assert_eq!(d.cost_term, Some(CostTerm::Predicted), "the decision says which cost its λ weighed");
    for ranked in &d.ranked {
        let i = r.pool.candidates.iter().position(|c| c.id == ranked.id).unwrap();
        assert!((ranked.estimated_cost_usd - (k - i) as f64 * 0.5).abs() < 1e-5, "{}: {}", ranked.id, ranked.estimated_cost_usd);
    }
    // Economy's λ 10: the candidate predicted cheapest (the last) wins,
    // where the mean costs made the first the cheapest.
    assert_eq!(d.ranked[0].id, r.pool.candidates[k - 1].id);
    r.detach_head();

    head.candidates[3].cost_model = None;
    let err = r.attach_head(&serde_json::to_vec(&head).unwrap(), "costs.json").unwrap_err().to_string();
    assert!(err.contains("cost term `predicted` but candidate") && err.contains("has no cost model"), "{err}");
}

#[test]
fn a_head_of_the_former_schema_reads_as_the_final_states_with_mean_costs() {
    let r = router(RouterConfig::default());
    let mut value = serde_json::to_value(head_for(&r, 0)).unwrap();
    let object = value.as_object_mut().unwrap();
    object.insert("schema".into(), "workbench.router-head/2".into());
    object.remove("after_layers");
    object.remove("cost_term");
    for c in object["candidates"].as_array_mut().unwrap() {
        c.as_object_mut().unwrap().remove("cost_model");
    }
    let head = router::LoadedHead::from_json(&serde_json::to_vec(&value).unwrap(), "v2.json").unwrap();
    assert_eq!(head.head.feature_map(), LAST);
    assert_eq!(head.head.cost_term, CostTerm::Mean);
    assert_eq!(head.costs(&[0.0; 576])[1], 1.1);
}
