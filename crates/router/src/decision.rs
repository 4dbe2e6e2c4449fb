//! What the router returns and how long it took: plain data, compiled with or
//! without the engine, so the page can show decisions and reports without
//! linking candle.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Load-time costs, timed apart from any decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadTimings {
    /// GGUF validation, parsing and weight preparation.
    pub weights_ms: f64,
    pub tokenizer_ms: f64,
    /// Encoding every candidate descriptor once (per pool load).
    pub descriptors_ms: f64,
    /// FLOPs of the descriptor prefills ([`FlopModel`]): with
    /// `descriptors_ms`, a free probe of this device's prefill speed.
    #[serde(default)]
    pub descriptor_flops: f64,
    /// The vectors came from a former load's cache (see
    /// `Router::descriptor_cache`): `descriptors_ms` is reading them, and
    /// `descriptor_flops` / `descriptors_encoded_ms` the encoding they saved.
    #[serde(default)]
    pub descriptors_cached: bool,
    /// How long encoding the descriptors took (on the load that did it).
    #[serde(default)]
    pub descriptors_encoded_ms: f64,
}

/// Floating-point operations of one prefill of `T` tokens, as
/// `per_token × T + per_token_squared × T²`: the linear layers grow with T,
/// attention's scores and weighted sum with T² (the causal half, as the
/// backbone computes them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct FlopModel {
    pub per_token: f64,
    pub per_token_squared: f64,
}

impl FlopModel {
    pub fn prefill(&self, tokens: usize) -> f64 {
        let t = tokens as f64;
        self.per_token * t + self.per_token_squared * t * t
    }
}

impl LoadTimings {
    /// The prefill speed the descriptor encoding showed, in GFLOP/s (for
    /// cached vectors, on the load that encoded them).
    pub fn probe_gflops(&self) -> Option<f64> {
        let ms = if self.descriptors_encoded_ms > 0.0 { self.descriptors_encoded_ms } else { self.descriptors_ms };
        (ms > 0.0 && self.descriptor_flops > 0.0).then(|| self.descriptor_flops / ms / 1e6)
    }
}

/// Per-stage wall time of one call, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StageTimings {
    pub mode_ms: f64,
    pub assemble_ms: f64,
    pub tokenize_ms: f64,
    pub truncate_ms: f64,
    pub prefill_ms: f64,
    pub stack_ms: f64,
    pub score_ms: f64,
    pub cost_ms: f64,
    pub rank_ms: f64,
    /// Prefix cache: finding the longest held prefix (inside the prefill
    /// stage's boundary in the field guide's table, timed apart here).
    #[serde(default)]
    pub lookup_ms: f64,
    /// Prefix cache: adding the new tokens' state and evicting to budget.
    #[serde(default)]
    pub insert_ms: f64,
    /// Inside `prefill_ms`: the projections (q, k, v, o, gate, up, down),
    /// activations' quantization included on the integer path.
    #[serde(default)]
    pub projections_ms: f64,
    /// Inside `prefill_ms`: attention (scores, softmax, weighted values).
    /// The rest of the prefill is embedding lookup, norms, RoPE, the K/V
    /// copy, the activation and residual adds.
    #[serde(default)]
    pub attention_ms: f64,
    /// A trained head's confidence: the first two utilities against their
    /// spread, and the cosine to every training task.
    #[serde(default)]
    pub confidence_ms: f64,
    /// The whole call, end to end.
    pub total_ms: f64,
}

impl StageTimings {
    /// The microbenchmark's boundary inside a decide (`encode_and_score`):
    /// the whole call less mode resolution, assembly, cost, ranking and
    /// the confidence after it.
    pub fn encode_and_score_ms(&self) -> f64 {
        self.total_ms - self.mode_ms - self.assemble_ms - self.cost_ms - self.rank_ms - self.confidence_ms
    }
}

/// One ranked candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    pub id: String,
    /// Softmax over candidates of cosine similarity / temperature, or a
    /// trained head's P(resolve).
    pub score: f32,
    pub cosine: f32,
    pub estimated_cost_usd: f64,
    /// `score − cost_weight × cost / (most expensive estimate)`.
    pub utility: f64,
}

/// The answer of `decide`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `similarity` (descriptor cosine, untrained) or the trained head's
    /// id (`head-…`).
    #[serde(default = "similarity")]
    pub scoring: String,
    pub mode: String,
    pub cost_weight: f64,
    /// Best first.
    pub ranked: Vec<Ranked>,
    /// Tokens of the whole routing text.
    pub tokens_total: usize,
    /// Tokens prefilled (after truncation).
    pub tokens_used: usize,
    pub truncated: bool,
    pub timings: StageTimings,
    /// What a prefix cache gave, when the call used one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<PrefixReuse>,
    /// How far to trust the first place: given when a trained head scores
    /// (the similarity scoring has no measured uncertainty to give).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Confidence>,
    /// Which cost a trained head's λ weighed (each candidate's
    /// `estimated_cost_usd`); none for the similarity scoring, whose cost
    /// is one call's price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_term: Option<CostTerm>,
}

/// How sure a trained head's decision is, and why it may not be.
///
/// Two reasons to doubt, each measured on the head's training data:
/// a *close call*, when the first two utilities differ by less than their
/// uncertainty (the head's P(resolve) for a candidate moves by `sigma`
/// between fits on different training folds, so two utilities closer than
/// `√(σ₁² + σ₂²)` could swap with other training data); and a task
/// *unlike the training tasks*, when even the nearest of them is less
/// similar (cosine of the standardised features the head reads) than the
/// training tasks are to their own nearest neighbours at the head's stated
/// percentile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Confidence {
    /// First place's utility less second place's.
    pub margin: f64,
    /// `√(σ_first² + σ_second²)`: the spread of that difference.
    pub margin_sigma: f64,
    /// P(first place stays ahead of second) under a normal spread:
    /// `Φ(margin ÷ margin_sigma)`.
    pub p_first_ahead: f64,
    pub close_call: bool,
    /// The cosine to the nearest training task, and the threshold below
    /// which a task counts as unlike them.
    pub nearest_similarity: f64,
    pub novelty_threshold: f64,
    pub unlike_training: bool,
    /// The most similar training tasks (their indices in the head's
    /// training set) and their cosines, most similar first: what
    /// `LoadedHead::neighbours` explains on request.
    pub nearest: Vec<(usize, f64)>,
}

impl Confidence {
    /// Either reason to doubt.
    pub fn unsure(&self) -> bool {
        self.close_call || self.unlike_training
    }

    /// `sure on both counts`, or `unsure: ` and the reasons: the one
    /// sentence the page and the widget both show.
    pub fn verdict(&self) -> String {
        if self.unsure() {
            format!("unsure: {}", self.reasons().join("; "))
        } else {
            "sure on both counts".into()
        }
    }

    /// The reasons in words, for a flag's tooltip or a report line.
    pub fn reasons(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.close_call {
            out.push(format!(
                "close call: the first two utilities differ by {:.3}, within their uncertainty ({:.3})",
                self.margin, self.margin_sigma
            ));
        }
        if self.unlike_training {
            out.push(format!(
                "unlike the training tasks: the nearest is at cosine {:.2}, below {:.2}",
                self.nearest_similarity, self.novelty_threshold
            ));
        }
        out
    }
}

/// A training task shown to explain a decision: what the backends did on
/// it, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Neighbour {
    /// The task's id in the dataset (it names the benchmark; shown, never
    /// a feature).
    pub task: String,
    /// The start of its prompt.
    pub excerpt: String,
    pub similarity: f64,
    /// Per candidate, in pool order: resolved, and the recorded cost (USD).
    pub outcomes: Vec<NeighbourOutcome>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeighbourOutcome {
    pub candidate: String,
    pub resolved: bool,
    pub cost_usd: f64,
}

/// What a trained head's study measured (stored in the head file), for a
/// page or report to state beside a decision, or, when no head fits the
/// loaded checkpoint, to say what the untrained scoring is worth.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadEvaluation {
    /// e.g. `CodeRouterBench OOD176`.
    pub dataset: String,
    pub tasks: usize,
    /// e.g. `5-fold cross-validation × 5 seeds`.
    pub protocol: String,
    /// Random picks' mean resolved count.
    pub random_resolved: f64,
    /// The single backend that resolves the most, with its count and cost.
    pub best_single: String,
    pub best_single_resolved: f64,
    pub best_single_cost_usd: f64,
    /// Per mode: the untrained similarity scoring's resolved count, and the
    /// head's cross-validated mean, spread and cost.
    pub similarity_resolved: BTreeMap<String, f64>,
    pub head_resolved: BTreeMap<String, f64>,
    pub head_resolved_std: BTreeMap<String, f64>,
    pub head_cost_usd: BTreeMap<String, f64>,
}

impl HeadEvaluation {
    /// What the untrained scoring is worth in `mode`, in one sentence.
    pub fn untrained_sentence(&self, backbone: &str, mode: &str) -> String {
        match (self.similarity_resolved.get(mode), self.head_resolved.get(mode)) {
            (Some(similarity), Some(head)) => format!(
                "On {backbone}, the untrained similarity scoring resolved {similarity:.0} of {} {} tasks in {mode} mode \
                 ({} random picks' {:.1}); the trained head resolves {head:.1} ± {:.1} ({}).",
                self.tasks,
                self.dataset,
                if *similarity < self.random_resolved { "fewer than" } else { "against" },
                self.random_resolved,
                self.head_resolved_std.get(mode).copied().unwrap_or(0.0),
                self.protocol
            ),
            _ => format!("The untrained similarity scoring has no measurement in {mode} mode."),
        }
    }

    /// What the trained head is worth in `mode`, against the best single
    /// backend, in one sentence that says plainly where it falls short.
    pub fn trained_sentence(&self, mode: &str) -> String {
        let (Some(&resolved), Some(&cost)) = (self.head_resolved.get(mode), self.head_cost_usd.get(mode)) else {
            return format!("The trained head has no measurement in {mode} mode.");
        };
        let std = self.head_resolved_std.get(mode).copied().unwrap_or(0.0);
        let (best, best_resolved, best_cost) = (&self.best_single, self.best_single_resolved, self.best_single_cost_usd);
        let against = if resolved + std < best_resolved {
            format!("fewer than always {best} ({best_resolved:.0} at ${best_cost:.2})")
        } else if cost <= best_cost / 2.0 {
            format!("as many as always {best} ({best_resolved:.0}) at under half its ${best_cost:.2}")
        } else if cost <= best_cost {
            format!("as many as always {best} ({best_resolved:.0}) at less than its ${best_cost:.2}, though not under half")
        } else {
            format!("as many as always {best} ({best_resolved:.0}) but at {:.1}× its ${best_cost:.2}", cost / best_cost.max(1e-9))
        };
        format!(
            "In {mode} mode the trained head resolved {resolved:.1} ± {std:.1} of {} {} tasks at ${cost:.2} ({}): {against}; random picks resolve {:.1}.",
            self.tasks, self.dataset, self.protocol, self.random_resolved
        )
    }
}

/// Which scoring a decide uses: the loaded checkpoint's trained head (when
/// it has one), or the untrained descriptor similarity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoringChoice {
    #[default]
    Trained,
    Similarity,
}

impl ScoringChoice {
    pub fn is_trained(&self) -> bool {
        *self == ScoringChoice::Trained
    }

    /// As the page's link spells it (`scoring=similarity`; the trained
    /// head is the default and is left out).
    pub fn name(self) -> &'static str {
        match self {
            ScoringChoice::Trained => "trained",
            ScoringChoice::Similarity => "similarity",
        }
    }

    pub fn from_name(name: &str) -> Option<ScoringChoice> {
        match name {
            "trained" => Some(ScoringChoice::Trained),
            "similarity" => Some(ScoringChoice::Similarity),
            _ => None,
        }
    }
}

/// The standard normal distribution function, by `libm`'s `erfc`.
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * libm::erfc(-z / std::f64::consts::SQRT_2)
}

/// Ranks candidates (in pool order: `ids`, `scores`, `cosines`, `costs`)
/// by `utility = score − cost_weight × cost / (most expensive cost)`, best
/// first; ties go to the higher score, then the smaller id. `decide` ranks
/// with this, and so does any replay of a decision from stored scores
/// ([`top_index`] when only the first is wanted).
pub fn rank(ids: &[&str], scores: &[f32], cosines: &[f32], costs: &[f64], cost_weight: f64) -> Vec<Ranked> {
    let most = costs.iter().cloned().fold(0.0, f64::max);
    let mut ranked: Vec<Ranked> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| Ranked {
            id: id.to_string(),
            score: scores[i],
            cosine: cosines.get(i).copied().unwrap_or(0.0),
            estimated_cost_usd: costs[i],
            utility: utility(scores[i] as f64, costs[i], most, cost_weight),
        })
        .collect();
    ranked.sort_by(|a, b| first((a.utility, a.score as f64, &a.id), (b.utility, b.score as f64, &b.id)));
    ranked
}

/// The index of the candidate [`rank`] puts first, without building the
/// ranking: for replays over many tasks and cost weights.
pub fn top_index<S: AsRef<str>>(ids: &[S], scores: &[f64], costs: &[f64], cost_weight: f64) -> usize {
    let most = costs.iter().cloned().fold(0.0, f64::max);
    let key = |i: usize| (utility(scores[i], costs[i], most, cost_weight), scores[i], ids[i].as_ref());
    (0..ids.len()).min_by(|&a, &b| first(key(a), key(b))).unwrap_or(0)
}

fn utility(score: f64, cost: f64, most: f64, cost_weight: f64) -> f64 {
    score - cost_weight * if most > 0.0 { cost / most } else { 0.0 }
}

/// `decide`'s order on (utility, score, id): `Less` when `a` goes first.
fn first(a: (f64, f64, &str), b: (f64, f64, &str)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(b.2))
}

fn similarity() -> String {
    "similarity".into()
}

/// Prefix reuse in one call: `tokens_used = reused_tokens + prefilled_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PrefixReuse {
    /// Tokens whose state came from the cache.
    pub reused_tokens: usize,
    /// Tokens prefilled in this call (the suffix).
    pub prefilled_tokens: usize,
    /// Tokens and bytes the cache held after the call.
    pub cache_tokens: usize,
    pub cache_bytes: u64,
    /// Leaves the cache had evicted, in all, after the call.
    pub evictions_total: u64,
}

/// The scores `encode_and_score` returns, in pool order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    pub scores: Vec<f32>,
    pub cosines: Vec<f32>,
    pub tokens_total: usize,
    pub tokens_used: usize,
    pub truncated: bool,
    pub timings: StageTimings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<PrefixReuse>,
}

/// How weights are computed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// candle's quantized matmul on the stored blocks (activations in f32).
    Quantized,
    /// Weights dequantized to f32 once at load; f32 GEMM.
    DequantizedF32,
    /// The stored blocks repacked once at load, activations quantized to 8
    /// bits per 32 values, integer dot products (`crate::integer`).
    /// Formats the integer kernels do not take (Q8_0) run in f32.
    IntegerQ8,
}

impl Precision {
    /// What the page, the widget and the command-line tools compute in
    /// unless asked otherwise: the integer kernels (0.6–0.85× f32's decide
    /// time on an AVX2 machine), whose decisions through the trained head were measured against
    /// f32's on all 176 study tasks (`bench-decide --precision-agreement`,
    /// `reports/precision-agreement.cpu.json`). `RouterConfig::default()`
    /// keeps f32, the reference arithmetic: no rounding of activations,
    /// the same values on every target to 1e-5 (both precisions keep the
    /// llama.cpp fixtures' tolerance, `tests/reference.rs`).
    pub const SERVED: Precision = Precision::IntegerQ8;

    /// Its name in files and namespaces, as serde writes it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Quantized => "quantized",
            Precision::DequantizedF32 => "dequantized_f32",
            Precision::IntegerQ8 => "integer_q8",
        }
    }

    /// Its short name in command-line flags and the page's link (`precision=`).
    pub fn flag(self) -> &'static str {
        match self {
            Precision::Quantized => "quantized",
            Precision::DequantizedF32 => "f32",
            Precision::IntegerQ8 => "int8",
        }
    }

    /// The precision a flag names; `None` for anything else.
    pub fn from_flag(flag: &str) -> Option<Precision> {
        [Precision::IntegerQ8, Precision::DequantizedF32, Precision::Quantized].into_iter().find(|p| p.flag() == flag.trim())
    }
}

/// What the memory-bandwidth probe measured: a buffer larger than any
/// cache summed on every thread, the rate at which this device streams
/// bytes from memory: a decode step's ceiling, since it reads every
/// weight once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BandwidthProbe {
    pub bytes: u64,
    pub threads: usize,
    pub repeats: usize,
    pub best_ms: f64,
    pub median_ms: f64,
    /// From the best repeat, in 10⁹ bytes a second.
    pub gb_per_s: f64,
}

/// What `probe::gemm_probe` measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmProbe {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub repeats: usize,
    pub best_ms: f64,
    pub median_ms: f64,
    /// From the best repeat: the attainable rate.
    pub gflops: f64,
    /// The kernel timed (`f32…` or the integer kernel's name); empty in
    /// probes written before there was a choice.
    #[serde(default)]
    pub kernel: String,
}

/// Which tokens survive when a routing text is longer than
/// `router_max_tokens` (a leading BOS always stays first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncationSide {
    /// Cut from the left: keep the latest tokens (the field guide's rule;
    /// the default).
    #[default]
    Left,
    /// Keep the start: the first tokens, where a task's statement usually is.
    KeepStart,
}

impl TruncationSide {
    pub fn name(self) -> &'static str {
        match self {
            TruncationSide::Left => "left",
            TruncationSide::KeepStart => "keep_start",
        }
    }
}

/// How a text's hidden states (at one depth) become one feature vector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// Mean over the text's tokens (the BOS left out), L2-normalised: the
    /// vector the similarity scoring compares.
    #[default]
    Mean,
    /// The last token's state, L2-normalised: in a causal model the only
    /// position that has read the whole text.
    Last,
    /// Both ends of the text side by side: the mean over its first
    /// [`ENDS_WINDOW`] tokens (where a task is usually
    /// stated) and over its last ones (which have read all of it), each
    /// L2-normalised; twice the hidden width.
    Ends,
}

impl Pooling {
    pub const ALL: [Pooling; 3] = [Pooling::Mean, Pooling::Last, Pooling::Ends];

    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Last => "last",
            Pooling::Ends => "ends",
        }
    }

    /// Values in the feature vector for a backbone of width `hidden`.
    pub fn width(self, hidden: usize) -> usize {
        match self {
            Pooling::Mean | Pooling::Last => hidden,
            // Saturating: a head file's hidden size is untrusted input.
            Pooling::Ends => hidden.saturating_mul(2),
        }
    }
}

/// Which cost a mode's λ weighs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostTerm {
    /// Each candidate's mean recorded cost per task on the training data.
    #[default]
    Mean,
    /// Each candidate's `CostModel` (`head`) prediction for this task.
    Predicted,
}

impl CostTerm {
    pub fn name(self) -> &'static str {
        match self {
            CostTerm::Mean => "mean",
            CostTerm::Predicted => "predicted",
        }
    }
}

/// Tokens each end of the text [`Pooling::Ends`] averages.
pub const ENDS_WINDOW: usize = 32;

/// One feature map a head may read: a depth of the backbone and a pooling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FeatureMap {
    /// The residual stream after this many layers, read through the output
    /// norm (one of the backbone's taps); `None`: the final hidden state.
    pub after_layers: Option<usize>,
    pub pooling: Pooling,
}

impl FeatureMap {
    /// The final hidden states' mean: what the similarity scoring compares.
    pub const FINAL_MEAN: FeatureMap = FeatureMap { after_layers: None, pooling: Pooling::Mean };

    /// In words, for a backbone of `layers` layers: "the last token after
    /// 9 of 18 layers".
    pub fn describe(self, layers: usize) -> String {
        let pooling = match self.pooling {
            Pooling::Mean => "the mean over the text".to_string(),
            Pooling::Last => "the last token".to_string(),
            Pooling::Ends => format!("both ends of the text (its first and last {ENDS_WINDOW} tokens)"),
        };
        match self.after_layers {
            None => format!("{pooling} of the final hidden state"),
            Some(after) => format!("{pooling} after {after} of {layers} layers"),
        }
    }

    /// `mean@final`, `last@15`: how reports and heads name it.
    pub fn name(self) -> String {
        match self.after_layers {
            None => format!("{}@final", self.pooling.name()),
            Some(layers) => format!("{}@{layers}", self.pooling.name()),
        }
    }
}

/// Pooled features of one prefill, each feature map from the same hidden
/// states.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PooledFeatures {
    pub maps: Vec<(FeatureMap, Vec<f32>)>,
}

impl PooledFeatures {
    /// The features of `map`, if they were pooled.
    pub fn get(&self, map: FeatureMap) -> Option<&[f32]> {
        self.maps.iter().find(|(m, _)| *m == map).map(|(_, v)| v.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_index_is_ranks_first_including_ties() {
        let ids = ["b", "a", "c"];
        // a and b tie on utility and score: the smaller id goes first.
        let scores = [0.5f32, 0.5, 0.2];
        let costs = [1.0, 1.0, 0.0];
        for weight in [0.0, 0.3, 1.0, 10.0] {
            let ranked = rank(&ids, &scores, &[], &costs, weight);
            let wide: Vec<f64> = scores.iter().map(|&s| s as f64).collect();
            assert_eq!(ids[top_index(&ids, &wide, &costs, weight)], ranked[0].id, "λ = {weight}");
        }
        assert_eq!(rank(&ids, &scores, &[], &costs, 0.0)[0].id, "a");
        assert_eq!(rank(&ids, &scores, &[], &costs, 1.0)[0].id, "c");
    }

    fn evaluation(head_resolved: f64, head_cost: f64) -> HeadEvaluation {
        let mode = |v: f64| [("balanced".to_string(), v)].into_iter().collect();
        HeadEvaluation {
            dataset: "OOD176".into(),
            tasks: 176,
            protocol: "5-fold CV".into(),
            random_resolved: 72.8,
            best_single: "gpt-5.4".into(),
            best_single_resolved: 113.0,
            best_single_cost_usd: 18.27,
            similarity_resolved: mode(58.0),
            head_resolved: mode(head_resolved),
            head_resolved_std: mode(3.5),
            head_cost_usd: mode(head_cost),
        }
    }

    #[test]
    fn the_studys_sentences_say_plainly_where_the_head_falls_short() {
        let said = |resolved, cost| evaluation(resolved, cost).trained_sentence("balanced");
        assert!(said(114.6, 59.68).ends_with("as many as always gpt-5.4 (113) but at 3.3× its $18.27; random picks resolve 72.8."));
        assert!(said(114.6, 9.0).contains("as many as always gpt-5.4 (113) at under half its $18.27"));
        assert!(said(114.6, 12.0).contains("at less than its $18.27, though not under half"));
        assert!(said(100.0, 9.0).contains("fewer than always gpt-5.4 (113 at $18.27)"));
        assert_eq!(evaluation(1.0, 1.0).trained_sentence("economy"), "The trained head has no measurement in economy mode.");
        let untrained = evaluation(114.6, 59.68).untrained_sentence("SmolLM2", "balanced");
        assert!(untrained.starts_with(
            "On SmolLM2, the untrained similarity scoring resolved 58 of 176 OOD176 tasks in balanced mode (fewer than random picks' 72.8)"
        ));
    }

    #[test]
    fn confidence_names_its_reasons_and_the_normal_cdf_is_right() {
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-15);
        assert!((normal_cdf(1.0) - 0.841_344_746).abs() < 1e-9);
        assert!((normal_cdf(-1.959_963_985) - 0.025).abs() < 1e-9);
        let sure = Confidence {
            margin: 0.3,
            margin_sigma: 0.1,
            p_first_ahead: normal_cdf(3.0),
            close_call: false,
            nearest_similarity: 0.6,
            novelty_threshold: 0.4,
            unlike_training: false,
            nearest: vec![(4, 0.6)],
        };
        assert!(!sure.unsure() && sure.reasons().is_empty());
        assert_eq!(sure.verdict(), "sure on both counts");
        let doubtful = Confidence { margin: 0.05, close_call: true, nearest_similarity: 0.3, unlike_training: true, ..sure };
        assert!(doubtful.unsure() && doubtful.verdict().starts_with("unsure: close call: "));
        assert_eq!(
            doubtful.reasons(),
            [
                "close call: the first two utilities differ by 0.050, within their uncertainty (0.100)",
                "unlike the training tasks: the nearest is at cosine 0.30, below 0.40"
            ]
        );
    }
}

/// The steps of building a router, in order, as `Router::load_with_progress`
/// reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BuildStage {
    /// Parsing the GGUF and preparing the weights.
    Weights,
    /// Building the tokenizer (from the GGUF's metadata, or a given file).
    Tokenizer,
    /// Encoding the candidates' descriptors, once per candidate.
    Descriptors,
}
