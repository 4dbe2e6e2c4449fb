//! What the router returns and how long it took: plain data, compiled with or
//! without the engine, so the page can show decisions and reports without
//! linking candle.

use serde::{Deserialize, Serialize};

/// Load-time costs, timed apart from any decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadTimings {
    /// GGUF validation, parsing and weight preparation.
    pub weights_ms: f64,
    pub tokenizer_ms: f64,
    /// Encoding every candidate descriptor once (per pool load).
    pub descriptors_ms: f64,
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
    /// The whole call, end to end.
    pub total_ms: f64,
}

/// One ranked candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    pub id: String,
    /// Softmax over candidates of cosine similarity / temperature.
    pub score: f32,
    pub cosine: f32,
    pub estimated_cost_usd: f64,
    /// `score − cost_weight × cost / (most expensive estimate)`.
    pub utility: f64,
}

/// The answer of `decide`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
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
}
