//! A trained scoring head: one logistic model per candidate over a pooled
//! final hidden state of the backbone's own prefill (no second encoder),
//! giving P(candidate resolves the task). A mode then ranks by
//! `P(resolve) − λ × cost / (most expensive candidate's cost)`, with the
//! costs and each mode's λ stored in the head.
//!
//! A head is a JSON file the caller hands over as bytes; its SHA-256 becomes
//! part of the router's checkpoint id, so a report always names the head its
//! decisions came from. Training lives in `bench::quality` (natively); this
//! module only reads a head, checks it fits the router, and applies it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::decision::{Pooling, TruncationSide};
use crate::error::{Result, RouterError};

/// Schema of the head file. Bump on any incompatible change.
pub const HEAD_SCHEMA: &str = "workbench.router-head/1";

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
    /// The `router_max_tokens` and truncation side of the training features.
    pub router_max_tokens: usize,
    pub truncation: TruncationSide,
    /// λ per mode name.
    pub modes: BTreeMap<String, f64>,
    pub candidates: Vec<HeadCandidate>,
    /// What it was trained on and how its settings were chosen, for reports.
    pub trained_on: String,
}

/// A head read from bytes, with the digest that names it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedHead {
    pub head: Head,
    /// `head-` and the first 8 hex digits of the file's SHA-256.
    pub id: String,
}

impl LoadedHead {
    /// Parses a head file; `file` names it in errors.
    pub fn from_json(bytes: &[u8], file: &str) -> Result<LoadedHead> {
        let bad = |reason: String| RouterError::Head { file: file.to_string(), reason };
        let head: Head = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if head.schema != HEAD_SCHEMA {
            return Err(bad(format!("schema `{}`, expected `{HEAD_SCHEMA}`", head.schema)));
        }
        if head.candidates.is_empty() {
            return Err(bad("no candidates".into()));
        }
        for c in &head.candidates {
            if c.weights.len() != head.hidden {
                return Err(bad(format!("candidate `{}` has {} weights for hidden size {}", c.id, c.weights.len(), head.hidden)));
            }
            if !c.bias.is_finite() || c.weights.iter().any(|w| !w.is_finite()) || !(c.mean_cost_usd.is_finite() && c.mean_cost_usd >= 0.0) {
                return Err(bad(format!("candidate `{}` has a weight, bias or cost that is not a finite number", c.id)));
            }
        }
        if let Some((mode, _)) = head.modes.iter().find(|(_, l)| !(l.is_finite() && **l >= 0.0)) {
            return Err(bad(format!("mode `{mode}`: λ must be a finite number ≥ 0")));
        }
        let id = format!("head-{}", &crate::gguf::hex(&Sha256::digest(bytes))[..8]);
        Ok(LoadedHead { head, id })
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
}
