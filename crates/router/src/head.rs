//! A trained scoring head: one logistic model per candidate over a pooled
//! final hidden state of the backbone's own prefill (no second encoder),
//! giving P(candidate resolves the task). A mode then ranks by
//! `P(resolve) − λ × cost / (most expensive candidate's cost)`, with the
//! costs and each mode's λ stored in the head.
//!
//! A head also carries what a user needs to doubt it: each candidate's
//! measured uncertainty (how far its P(resolve) moves between fits on other
//! training folds), its training tasks' standardised features (8 bits a
//! value) with what every backend did on them, so a decision can say how
//! like the training tasks it is and show the nearest ones, and the study's
//! figures (what the head and the untrained scoring resolve) for the page
//! to state.
//!
//! A head is a JSON file the caller hands over as bytes; its SHA-256 becomes
//! part of the router's checkpoint id, so a report always names the head its
//! decisions came from. Training lives in `bench::quality` (natively); this
//! module only reads a head, checks it fits the router, and applies it.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crate::decision::CostTerm;
pub use crate::decision::HeadEvaluation;
use crate::decision::{normal_cdf, Confidence, FeatureMap, Neighbour, NeighbourOutcome, Pooling, Ranked, TruncationSide};
use crate::error::{Result, RouterError};

/// Schema of the head file. Bump on any incompatible change.
pub const HEAD_SCHEMA: &str = "workbench.router-head/3";

/// Earlier schemas still read: version 2 is version 3 without a tapped
/// depth (the final hidden state) and without cost models (the mean cost).
const READABLE_SCHEMAS: [&str; 2] = ["workbench.router-head/2", HEAD_SCHEMA];

/// How many training tasks a decision names as its nearest.
pub const NEAREST: usize = 3;

/// One candidate's logistic model, in the raw pooled feature space (any
/// standardisation used in training is folded into the weights).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadCandidate {
    pub id: String,
    pub weights: Vec<f32>,
    pub bias: f32,
    /// The candidate's mean recorded cost per task on the training data
    /// (USD): the cost a mode's λ weighs.
    pub mean_cost_usd: f64,
    /// How far this candidate's P(resolve) moves with the training data:
    /// the root mean square, over the training tasks, of the standard
    /// deviation of their out-of-fold P(resolve) across the study's seeds.
    pub p_sigma: f64,
    /// The candidate's cost on this task predicted from the same features
    /// (what its answer's tokens will cost at its prices, as recorded),
    /// used when the head's `cost_term` is `predicted`.
    #[serde(default)]
    pub cost_model: Option<CostModel>,
}

/// A per-task cost prediction: `ln(cost_usd) ≈ bias + weights · x` (ridge
/// regression on the training tasks' recorded costs, failed runs left
/// out), and the expected cost `exp(…) × smearing` (Duan's smearing
/// factor: the mean of the training residuals' exponentials, so that the
/// prediction is of the mean cost, not the median).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    pub weights: Vec<f32>,
    pub bias: f32,
    pub smearing: f64,
}

impl CostModel {
    pub fn expected_cost(&self, features: &[f32]) -> f64 {
        let log = self.bias as f64 + self.weights.iter().zip(features).map(|(&w, &x)| w as f64 * x as f64).sum::<f64>();
        // A feature far outside the training range must not make a cost
        // astronomically large or vanish: ±20 in log space is beyond any
        // recorded cost ratio.
        log.clamp(-20.0, 20.0).exp() * self.smearing
    }
}

/// One training task: what each backend did on it, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingTask {
    pub id: String,
    /// The start of its prompt.
    pub excerpt: String,
    /// Per candidate, in the head's order.
    pub resolved: Vec<bool>,
    pub cost_usd: Vec<f64>,
}

/// The training tasks as the head saw them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingSet {
    /// The pooled features' standardisation (the training tasks' mean and
    /// standard deviation per dimension).
    pub mean: Vec<f32>,
    pub scale: Vec<f32>,
    /// A task is unlike the training tasks when its nearest one is less
    /// similar than `novelty_percentile` % of the training tasks are to
    /// their own nearest (leave one out): that cosine.
    pub novelty_percentile: f64,
    pub novelty_threshold: f64,
    pub tasks: Vec<TrainingTask>,
    /// Each task's standardised features, row after row, as signed bytes
    /// (`value = byte × feature_scales[row]`), in standard base64.
    pub features_i8: String,
    pub feature_scales: Vec<f32>,
}

/// A trained head as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Head {
    pub schema: String,
    /// The checkpoint (GGUF) whose hidden states it was trained on.
    pub backbone_checkpoint_id: String,
    pub hidden: usize,
    pub pooling: Pooling,
    /// The depth it reads: the residual stream after this many layers (one
    /// of the backbone's taps); absent, the final hidden state.
    #[serde(default)]
    pub after_layers: Option<usize>,
    /// The cost each mode's λ weighs.
    #[serde(default)]
    pub cost_term: CostTerm,
    /// The `router_max_tokens` and truncation side of the training features.
    pub router_max_tokens: usize,
    pub truncation: TruncationSide,
    /// λ per mode name.
    pub modes: BTreeMap<String, f64>,
    pub candidates: Vec<HeadCandidate>,
    /// What it was trained on and how its settings were chosen, for reports.
    pub trained_on: String,
    pub evaluation: HeadEvaluation,
    pub training: TrainingSet,
}

impl Head {
    /// The feature map it reads.
    pub fn feature_map(&self) -> FeatureMap {
        FeatureMap { after_layers: self.after_layers, pooling: self.pooling }
    }

    /// Values in its feature vector.
    pub fn width(&self) -> usize {
        self.pooling.width(self.hidden)
    }
}

/// A head read from bytes, with the digest that names it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedHead {
    pub head: Head,
    /// `head-` and the first 8 hex digits of the file's SHA-256.
    pub id: String,
    /// The file's whole SHA-256 (what a site's manifest pins).
    pub sha256: String,
    /// The training tasks' standardised features, each row scaled to unit
    /// length (`[tasks × hidden]`): a dot product is a cosine.
    unit_rows: Vec<f32>,
}

fn finite(values: &[f32]) -> bool {
    values.iter().all(|v| v.is_finite())
}

impl LoadedHead {
    /// Parses a head file; `file` names it in errors.
    pub fn from_json(bytes: &[u8], file: &str) -> Result<LoadedHead> {
        let bad = |reason: String| RouterError::Head { file: file.to_string(), reason };
        // The schema first, so a file of another version says so rather
        // than naming the first field it lacks.
        #[derive(Deserialize)]
        struct Schema {
            schema: String,
        }
        let schema: Schema = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if !READABLE_SCHEMAS.contains(&schema.schema.as_str()) {
            return Err(bad(format!("schema `{}`, expected `{HEAD_SCHEMA}` (or the older `{}`)", schema.schema, READABLE_SCHEMAS[0])));
        }
        let head: Head = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if head.candidates.is_empty() {
            return Err(bad("no candidates".into()));
        }
        if head.hidden == 0 {
            return Err(bad("hidden size 0".into()));
        }
        let width = head.width();
        for c in &head.candidates {
            if c.weights.len() != width {
                return Err(bad(format!(
                    "candidate `{}` has {} weights for {} features ({} pooling of hidden size {})",
                    c.id,
                    c.weights.len(),
                    width,
                    head.pooling.name(),
                    head.hidden
                )));
            }
            if let Some(model) = &c.cost_model {
                if model.weights.len() != width {
                    return Err(bad(format!("candidate `{}`'s cost model has {} weights for {width} features", c.id, model.weights.len())));
                }
                if !(finite(&model.weights) && model.bias.is_finite() && model.smearing.is_finite() && model.smearing > 0.0) {
                    return Err(bad(format!(
                        "candidate `{}`'s cost model has a weight, bias or smearing that is not a finite number (smearing > 0)",
                        c.id
                    )));
                }
            } else if head.cost_term == CostTerm::Predicted {
                return Err(bad(format!("cost term `predicted` but candidate `{}` has no cost model", c.id)));
            }
            let numbers_ok = c.bias.is_finite()
                && finite(&c.weights)
                && c.mean_cost_usd.is_finite()
                && c.mean_cost_usd >= 0.0
                && c.p_sigma.is_finite()
                && c.p_sigma >= 0.0;
            if !numbers_ok {
                return Err(bad(format!("candidate `{}` has a weight, bias, cost or spread that is not a finite number ≥ 0", c.id)));
            }
        }
        if let Some((mode, _)) = head.modes.iter().find(|(_, l)| !(l.is_finite() && **l >= 0.0)) {
            return Err(bad(format!("mode `{mode}`: λ must be a finite number ≥ 0")));
        }
        let unit_rows = unit_rows(&head).map_err(|reason| bad(format!("training set: {reason}")))?;
        let sha256 = crate::gguf::hex(&Sha256::digest(bytes));
        let id = format!("head-{}", &sha256[..8]);
        Ok(LoadedHead { head, id, sha256, unit_rows })
    }

    /// Checks the head fits a backbone of `hidden` width and a pool whose
    /// candidates are `ids` (same ids, same order) and modes `modes`.
    pub fn check_fits(&self, file: &str, hidden: usize, ids: &[&str], modes: &[&str]) -> Result<()> {
        let bad = |reason: String| RouterError::Head { file: file.to_string(), reason };
        if self.head.hidden != hidden {
            return Err(bad(format!("trained on hidden size {}, the backbone has {hidden}", self.head.hidden)));
        }
        let head_ids: Vec<&str> = self.head.candidates.iter().map(|c| c.id.as_str()).collect();
        if head_ids != ids {
            return Err(bad(format!("candidates [{}] differ from the pool's [{}]", head_ids.join(", "), ids.join(", "))));
        }
        if let Some(missing) = modes.iter().find(|m| !self.head.modes.contains_key(**m)) {
            return Err(bad(format!("no λ for the pool's mode `{missing}`")));
        }
        Ok(())
    }

    /// The cost per candidate a mode's λ weighs for `features`, in pool order.
    pub fn costs(&self, features: &[f32]) -> Vec<f64> {
        self.head
            .candidates
            .iter()
            .map(|c| match (self.head.cost_term, &c.cost_model) {
                (CostTerm::Predicted, Some(model)) => model.expected_cost(features),
                _ => c.mean_cost_usd,
            })
            .collect()
    }

    /// P(resolve) per candidate, in pool order.
    pub fn probabilities(&self, features: &[f32]) -> Vec<f32> {
        self.head
            .candidates
            .iter()
            .map(|c| {
                let logit = c.bias as f64 + c.weights.iter().zip(features).map(|(&w, &x)| w as f64 * x as f64).sum::<f64>();
                (1.0 / (1.0 + (-logit).exp())) as f32
            })
            .collect()
    }

    /// The cosine of `features` (the pooling the head reads) to every
    /// training task, in the training set's order.
    pub fn similarities(&self, features: &[f32]) -> Vec<f64> {
        let t = &self.head.training;
        let z: Vec<f64> = features.iter().zip(&t.mean).zip(&t.scale).map(|((&x, &m), &s)| (x as f64 - m as f64) / s as f64).collect();
        let norm = z.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm == 0.0 || !norm.is_finite() {
            return vec![0.0; t.tasks.len()];
        }
        self.unit_rows
            .chunks_exact(self.head.width())
            .map(|row| row.iter().zip(&z).map(|(&r, v)| r as f64 * v).sum::<f64>() / norm)
            .collect()
    }

    /// How sure the ranking `ranked` (this head's, for `features`) is: the
    /// first two utilities against their spread, and the nearest training
    /// tasks against the novelty threshold.
    pub fn confidence(&self, features: &[f32], ranked: &[Ranked]) -> Confidence {
        let sigma = |id: &str| self.head.candidates.iter().find(|c| c.id == id).map_or(0.0, |c| c.p_sigma);
        let (margin, margin_sigma) = match ranked {
            [first, second, ..] => (first.utility - second.utility, (sigma(&first.id).powi(2) + sigma(&second.id).powi(2)).sqrt()),
            _ => (f64::INFINITY, 0.0),
        };
        let p_first_ahead = if margin_sigma > 0.0 { normal_cdf(margin / margin_sigma) } else { 1.0 };
        let similarities = self.similarities(features);
        let mut nearest: Vec<(usize, f64)> = similarities.into_iter().enumerate().collect();
        nearest.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        nearest.truncate(NEAREST);
        let nearest_similarity = nearest.first().map_or(0.0, |n| n.1);
        let threshold = self.head.training.novelty_threshold;
        Confidence {
            margin,
            margin_sigma,
            p_first_ahead,
            close_call: margin < margin_sigma,
            nearest_similarity,
            novelty_threshold: threshold,
            unlike_training: nearest_similarity < threshold,
            nearest,
        }
    }

    /// The training tasks a confidence names, with what every backend did
    /// on them (an index outside the set is skipped).
    pub fn neighbours(&self, nearest: &[(usize, f64)]) -> Vec<Neighbour> {
        nearest
            .iter()
            .filter_map(|&(i, similarity)| {
                let task = self.head.training.tasks.get(i)?;
                Some(Neighbour {
                    task: task.id.clone(),
                    excerpt: task.excerpt.clone(),
                    similarity,
                    outcomes: self
                        .head
                        .candidates
                        .iter()
                        .zip(task.resolved.iter().zip(&task.cost_usd))
                        .map(|(c, (&resolved, &cost_usd))| NeighbourOutcome { candidate: c.id.clone(), resolved, cost_usd })
                        .collect(),
                })
            })
            .collect()
    }
}

/// Decodes and checks the training set, and scales its rows to unit length.
fn unit_rows(head: &Head) -> std::result::Result<Vec<f32>, String> {
    let t = &head.training;
    let (n, d, k) = (t.tasks.len(), head.width(), head.candidates.len());
    if t.mean.len() != d || t.scale.len() != d {
        return Err(format!("{} means and {} scales for {d} features", t.mean.len(), t.scale.len()));
    }
    if !finite(&t.mean) || t.scale.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return Err("a mean that is not finite or a scale that is not a positive finite number".into());
    }
    if !(t.novelty_percentile > 0.0 && t.novelty_percentile < 100.0 && (-1.0..=1.0).contains(&t.novelty_threshold)) {
        return Err(format!(
            "novelty percentile {} must lie in (0, 100) and its threshold {} in [-1, 1]",
            t.novelty_percentile, t.novelty_threshold
        ));
    }
    if let Some(task) = t.tasks.iter().find(|task| task.resolved.len() != k || task.cost_usd.len() != k) {
        return Err(format!(
            "task `{}` has {} outcomes and {} costs for {k} candidates",
            task.id,
            task.resolved.len(),
            task.cost_usd.len()
        ));
    }
    if t.tasks.iter().any(|task| task.cost_usd.iter().any(|c| !(c.is_finite() && *c >= 0.0))) {
        return Err("a cost that is not a finite number ≥ 0".into());
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(&t.features_i8).map_err(|e| format!("features_i8: {e}"))?;
    if bytes.len() != n * d || t.feature_scales.len() != n {
        return Err(format!("{} feature bytes and {} row scales for {n} tasks × {d} features", bytes.len(), t.feature_scales.len()));
    }
    if !finite(&t.feature_scales) {
        return Err("a row scale that is not finite".into());
    }
    let mut rows: Vec<f32> = bytes.iter().map(|&b| b as i8 as f32).collect();
    for row in rows.chunks_exact_mut(d.max(1)) {
        // The row's scale cancels in a cosine: only its direction is kept.
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 0.0 {
            row.iter_mut().for_each(|v| *v /= norm);
        }
    }
    Ok(rows)
}

/// Quantizes standardised rows the way [`TrainingSet::features_i8`] stores
/// them: each row to signed bytes on its own scale (largest magnitude →
/// 127). Returns the base64 text and the row scales.
pub fn quantize_rows(rows: &[Vec<f64>]) -> (String, Vec<f32>) {
    let mut bytes = Vec::with_capacity(rows.iter().map(Vec::len).sum());
    let mut scales = Vec::with_capacity(rows.len());
    for row in rows {
        let largest = row.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let scale = if largest > 0.0 { largest / 127.0 } else { 1.0 };
        bytes.extend(row.iter().map(|v| (v / scale).round().clamp(-127.0, 127.0) as i8 as u8));
        scales.push(scale as f32);
    }
    (base64::engine::general_purpose::STANDARD.encode(bytes), scales)
}
