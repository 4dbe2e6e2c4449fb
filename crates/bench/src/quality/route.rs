//! Routing tasks through the real `decide` (engine builds only): the
//! decisions per mode, the pooled features of the same prefill, and the
//! decide latency per task. The native study and the browser worker route
//! with the same function.

use router::head::LoadedHead;
use router::{Conversation, FeatureMap, PooledFeatures, PrefixCache, Router, RouterError};

use super::RoutedTask;

/// One task routed, with what the quality study needs beyond the decisions.
#[derive(Debug, Clone)]
pub struct TaskOutcome {
    pub routed: RoutedTask,
    pub features: PooledFeatures,
    /// Similarity scores and estimated costs in pool order (for λ curves).
    pub scores: Vec<f64>,
    pub costs: Vec<f64>,
}

/// Routes one prompt as one user turn in every pool mode, with the
/// similarity scoring and then, if given, the trained head. The first call
/// prefills the kept tokens (its time is the task's decide latency); every
/// later call finds the whole text in a prefix cache, so one prefill serves
/// all, and each decision is still `decide`'s own. The router is left
/// without a head.
pub fn route_task(router: &mut Router, head: Option<&LoadedHead>, id: &str, prompt: &str) -> Result<TaskOutcome, RouterError> {
    router.detach_head();
    let modes: Vec<String> = router.pool.modes.keys().cloned().collect();
    let conversation = Conversation::user(prompt.to_string());
    let mut cache = PrefixCache::new(router::CacheBudget::default());
    let mut routed = RoutedTask { id: id.to_string(), ..RoutedTask::default() };
    let mut first = None;
    for mode in &modes {
        let (decision, features) = router.decide_with_features(&conversation, Some(mode), Some(&mut cache))?;
        routed.similarity_top.insert(mode.clone(), decision.ranked[0].id.clone());
        if first.is_none() {
            first = Some((decision, features));
        }
    }
    let (decision, features) = first.ok_or_else(|| RouterError::Request("the pool has no modes".into()))?;
    routed.tokens_used = decision.tokens_used;
    routed.decide_ms = decision.timings.total_ms;
    let index = |id: &str| router.pool.candidates.iter().position(|c| c.id == id).unwrap_or(0);
    let mut scores = vec![0.0; decision.ranked.len()];
    let mut costs = vec![0.0; decision.ranked.len()];
    for r in &decision.ranked {
        scores[index(&r.id)] = r.score as f64;
        costs[index(&r.id)] = r.estimated_cost_usd;
    }
    if let Some(head) = head {
        router.attach_loaded_head(head.clone(), "head")?;
        let outcome: Result<(), RouterError> = modes.iter().try_for_each(|mode| {
            let decision = router.decide_with_cache(&conversation, Some(mode), &mut cache)?;
            routed.head_top.insert(mode.clone(), decision.ranked[0].id.clone());
            Ok(())
        });
        router.detach_head();
        outcome?;
    }
    Ok(TaskOutcome { routed, features, scores, costs })
}

/// What routing many tasks produced, per task in the given order.
#[derive(Debug, Clone, Default)]
pub struct Routed {
    /// The pool's mode names.
    pub modes: Vec<String>,
    /// Decisions, tokens and decide time per task.
    pub tasks: Vec<RoutedTask>,
    /// Similarity scores and estimated costs in pool order (λ curves).
    pub scores: Vec<Vec<f64>>,
    pub costs: Vec<Vec<f64>>,
    pub features: Vec<PooledFeatures>,
}

impl Routed {
    /// Every feature map's rows, one per task, as the CV reads them.
    pub fn feature_rows(&self) -> FeatureRows {
        feature_rows(&self.features)
    }

    /// The prefilling decide of every task.
    pub fn decide(&self) -> Option<crate::Summary> {
        crate::Summary::of(&self.tasks.iter().map(|t| t.decide_ms).collect::<Vec<_>>())
    }

    /// Mean tokens prefilled per task.
    pub fn tokens_used_mean(&self) -> f64 {
        self.tasks.iter().map(|t| t.tokens_used).sum::<usize>() as f64 / self.tasks.len().max(1) as f64
    }
}

/// Per feature map (in the order the router pooled them), one row per task.
pub type FeatureRows = Vec<(FeatureMap, Vec<Vec<f32>>)>;

fn feature_rows(features: &[PooledFeatures]) -> FeatureRows {
    let maps: Vec<FeatureMap> = features.first().map(|f| f.maps.iter().map(|(m, _)| *m).collect()).unwrap_or_default();
    maps.into_iter().map(|map| (map, features.iter().map(|f| f.get(map).map(<[f32]>::to_vec).unwrap_or_default()).collect())).collect()
}

/// Routes every task with the similarity scoring ([`route_task`]).
pub fn route_all(router: &mut Router, tasks: &[&super::Task], progress: &mut dyn FnMut(usize, usize)) -> Result<Routed, RouterError> {
    let modes: Vec<String> = router.pool.modes.keys().cloned().collect();
    let mut out = Routed { modes: modes.clone(), ..Routed::default() };
    for (i, task) in tasks.iter().enumerate() {
        progress(i, tasks.len());
        let outcome = route_task(router, None, &task.id, &task.prompt)?;
        out.scores.push(outcome.scores);
        out.costs.push(outcome.costs);
        out.features.push(outcome.features);
        out.tasks.push(outcome.routed);
    }
    progress(tasks.len(), tasks.len());
    Ok(out)
}

/// The top candidate per mode a head gives for stored features, ranked by
/// [`router::rank`], the function `decide` ranks with: what `decide` with
/// the head attached returns for the same prefill.
pub fn head_tops(head: &LoadedHead, features: &PooledFeatures, modes: &[String]) -> std::collections::BTreeMap<String, String> {
    let ids: Vec<&str> = head.head.candidates.iter().map(|c| c.id.as_str()).collect();
    let x = features.get(head.head.feature_map()).unwrap_or_default();
    let (p, costs) = (head.probabilities(x), head.costs(x));
    modes
        .iter()
        .map(|m| {
            let lambda = head.head.modes.get(m).copied().unwrap_or(0.0);
            (m.clone(), router::rank(&ids, &p, &[], &costs, lambda)[0].id.clone())
        })
        .collect()
}

/// The kernel set of the backbone's features over `train`: one kernel per
/// feature map in `rows` (`only`: those maps alone), each standardised with
/// the training rows' statistics.
pub fn hidden_kernels(rows: &FeatureRows, only: Option<&[FeatureMap]>, train: &[usize]) -> super::KernelSet {
    rows.iter()
        .filter(|(map, _)| only.is_none_or(|only| only.contains(map)))
        .map(|(map, rows)| (map.name(), super::learn::dense_kernel(rows, train).0))
        .collect()
}

/// The start of a prompt, whitespace collapsed, for a neighbour's line.
fn excerpt(prompt: &str) -> String {
    const CHARS: usize = 160;
    let collapsed = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    match collapsed.char_indices().nth(CHARS) {
        Some((cut, _)) => format!("{}…", &collapsed[..cut]),
        None => collapsed,
    }
}

/// What the study measured, stored in the head for the page to state:
/// `similarity` is the untrained scoring's choices per mode, `head_cv` the
/// head's cross-validation.
pub fn evaluation(
    data: &super::Dataset,
    similarity: &std::collections::BTreeMap<String, Vec<usize>>,
    head_cv: &[super::SeedOutcome],
    settings: &super::CvSettings,
) -> router::head::HeadEvaluation {
    let all = data.indices(super::Subset::All);
    let baselines = super::baseline_rows(data, super::Subset::All);
    let random = baselines.iter().find(|r| r.policy.starts_with("random")).map_or(0.0, |r| r.resolved.mean);
    let (best, best_totals) = (0..data.models.len())
        .map(|m| (m, super::totals(data, &vec![m; data.tasks.len()], &all)))
        .max_by(|a, b| a.1.resolved.total_cmp(&b.1.resolved).then(b.1.cost_usd.total_cmp(&a.1.cost_usd)))
        .unwrap_or((0, super::Totals::default()));
    let mut evaluation = router::head::HeadEvaluation {
        dataset: "CodeRouterBench OOD176".into(),
        tasks: data.tasks.len(),
        protocol: format!("{}-fold cross-validation × {} seeds", settings.folds, settings.seeds.len()),
        random_resolved: random,
        best_single: data.models[best].clone(),
        best_single_resolved: best_totals.resolved,
        best_single_cost_usd: best_totals.cost_usd,
        ..Default::default()
    };
    for (mode, choices) in similarity {
        evaluation.similarity_resolved.insert(mode.clone(), super::totals(data, choices, &all).resolved);
    }
    for (m, (mode, _)) in super::MODES.iter().enumerate() {
        let per_seed: Vec<super::Totals> = head_cv.iter().map(|o| super::totals(data, &o.by_mode[m], &all)).collect();
        let resolved = super::Stat::of(&per_seed.iter().map(|t| t.resolved).collect::<Vec<_>>());
        let cost = super::Stat::of(&per_seed.iter().map(|t| t.cost_usd).collect::<Vec<_>>());
        evaluation.head_resolved.insert(mode.to_string(), resolved.mean);
        evaluation.head_resolved_std.insert(mode.to_string(), resolved.std);
        evaluation.head_cost_usd.insert(mode.to_string(), cost.mean);
    }
    evaluation
}

/// Trains the deployable head on every task (settings chosen by 5-fold CV
/// over all of them, as in each outer fold of the evaluation), with the
/// weights folded back into the raw pooled feature space. It carries each
/// candidate's spread `p_sigmas` (from the evaluation's seeds), the
/// training tasks' standardised features and outcomes (for the novelty
/// flag and the neighbours a decision shows) and `evaluation`.
pub fn train_head(
    router: &Router,
    data: &super::Dataset,
    features: &[PooledFeatures],
    settings: &super::CvSettings,
    trained_on: &str,
    p_sigmas: &[f64],
    evaluation: router::head::HeadEvaluation,
) -> router::Head {
    let rows = feature_rows(features);
    let all: Vec<usize> = (0..data.tasks.len()).collect();
    let kernels = hidden_kernels(&rows, None, &all);
    let selected = super::select_and_fit(data, &kernels, &all, settings, 7);
    let (map, chosen) = (rows[selected.features].0, &rows[selected.features].1);
    let standardiser = super::learn::standardise(chosen, &all);
    let candidates = selected
        .fits
        .iter()
        .zip(&selected.cost_fits)
        .enumerate()
        .map(|(m, (fit, cost))| {
            let (weights, bias) = super::learn::raw_weights(fit, chosen, &standardiser);
            let (cost_weights, cost_bias) = super::learn::raw_weights(&cost.fit, chosen, &standardiser);
            router::head::HeadCandidate {
                id: data.models[m].clone(),
                weights,
                bias,
                mean_cost_usd: selected.mean_cost[m],
                p_sigma: p_sigmas.get(m).copied().unwrap_or(0.0),
                cost_model: Some(router::head::CostModel {
                    weights: cost_weights,
                    bias: (cost_bias as f64 + cost.offset) as f32,
                    smearing: cost.smearing,
                }),
            }
        })
        .collect();
    let standardised: Vec<Vec<f64>> = chosen.iter().map(|row| standardiser.apply(row)).collect();
    let (features_i8, feature_scales) = router::head::quantize_rows(&standardised);
    let training = router::head::TrainingSet {
        mean: standardiser.mean.iter().map(|&v| v as f32).collect(),
        scale: standardiser.scale.iter().map(|&v| v as f32).collect(),
        novelty_percentile: super::doubt::NOVELTY_PERCENTILE,
        novelty_threshold: super::doubt::novelty_threshold(&kernels[selected.features].1, &all),
        tasks: data
            .tasks
            .iter()
            .zip(&data.cells)
            .map(|(task, cells)| router::head::TrainingTask {
                id: task.id.clone(),
                excerpt: excerpt(&task.prompt),
                resolved: cells.iter().map(|c| c.resolved).collect(),
                cost_usd: cells.iter().map(|c| c.cost_usd).collect(),
            })
            .collect(),
        features_i8,
        feature_scales,
    };
    router::Head {
        schema: router::head::HEAD_SCHEMA.into(),
        backbone_checkpoint_id: router.backbone_checkpoint_id().to_string(),
        hidden: router.backbone.hparams.hidden,
        pooling: map.pooling,
        after_layers: map.after_layers,
        cost_term: selected.cost_term,
        router_max_tokens: router.config().max_tokens,
        truncation: router.config().truncation,
        modes: super::MODES.iter().zip(selected.lambdas).map(|((name, _), l)| (name.to_string(), l)).collect(),
        candidates,
        trained_on: format!(
            "{trained_on}; reads {} ({}), L2 regularisation {}, weighs {} (chosen by 5-fold CV over all tasks)",
            map.describe(router.backbone.hparams.layers),
            map.name(),
            selected.reg,
            match selected.cost_term {
                router::CostTerm::Mean => "each backend's mean cost",
                router::CostTerm::Predicted => "each backend's cost predicted for the task",
            }
        ),
        evaluation,
        training,
    }
}
