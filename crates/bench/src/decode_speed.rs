//! Decode speed on the real engine (note 06's D iterations), natively and in
//! the browser from the same code: one sequence's tokens a second at each
//! context, the aggregate at each batch size, where a step's time goes
//! (projections, attention, the LM head, the rest), and the bytes a step
//! reads against this device's measured memory bandwidth, the physical
//! ceiling of a decode step (every weight is read once a step, whatever
//! the batch; each sequence also reads its own keys and values).
//!
//! Timing protocol: each row's sequences are prefilled to exactly the
//! context (untimed; a real task text cut by the tokenizer, as the latency
//! bench's prompts are), then `warmup` decode steps are run and dropped,
//! then `steps` are timed one by one; a row reports their median, and the
//! parts' medians. Every sequence decodes greedily past end-of-turn, so
//! each step has the row's batch.

use serde::{Deserialize, Serialize};

use crate::stats::Summary;

/// What to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodePlan {
    /// Contexts (tokens held before the first timed step) of the
    /// one-sequence rows.
    pub contexts: Vec<usize>,
    /// Batch sizes of the aggregate rows, each sequence at `batch_context`.
    pub batches: Vec<usize>,
    pub batch_context: usize,
    pub warmup: usize,
    pub steps: usize,
}

impl Default for DecodePlan {
    /// Issue 36's: one sequence at 256 and 1,024 tokens, and 1, 4, 8, 16
    /// sequences at 256 (the serving test's prompt cap).
    fn default() -> Self {
        DecodePlan { contexts: vec![256, 1024], batches: vec![1, 4, 8, 16], batch_context: 256, warmup: 4, steps: 32 }
    }
}

impl DecodePlan {
    /// Every (context, batch) row once, the one-sequence rows first.
    pub fn rows(&self) -> Vec<(usize, usize)> {
        let mut rows: Vec<(usize, usize)> = self.contexts.iter().map(|&c| (c, 1)).collect();
        for &b in &self.batches {
            if !rows.contains(&(self.batch_context, b)) {
                rows.push((self.batch_context, b));
            }
        }
        rows
    }

    /// Refuses what cannot run, naming the field.
    pub fn check(&self) -> Result<(), String> {
        if self.contexts.is_empty() && self.batches.is_empty() {
            return Err("contexts and batches: give at least one".into());
        }
        if let Some(c) = self.contexts.iter().chain([&self.batch_context]).find(|&&c| c < 16) {
            return Err(format!("context {c}: at least 16 tokens (the chat template's own)"));
        }
        if let Some(c) = self.contexts.iter().chain([&self.batch_context]).find(|&&c| c > MAX_CONTEXT) {
            return Err(format!("context {c}: at most {MAX_CONTEXT} tokens"));
        }
        if self.batches.contains(&0) {
            return Err("batches: a batch holds at least one sequence".into());
        }
        if let Some(b) = self.batches.iter().find(|&&b| b > MAX_BATCH || b * self.batch_context > MAX_BATCH_TOKENS) {
            return Err(format!(
                "batches: {b} sequences of {} tokens; at most {MAX_BATCH} sequences and {MAX_BATCH_TOKENS} tokens held in all",
                self.batch_context
            ));
        }
        if self.steps == 0 {
            return Err("steps: time at least one step".into());
        }
        Ok(())
    }
}

/// The page's form for a plan: the fields as typed, parsed with the
/// plan's own rules, so a refused field is named and nothing typed is lost.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodePlanForm {
    pub contexts: String,
    pub batches: String,
    pub batch_context: String,
    pub steps: String,
}

impl Default for DecodePlanForm {
    fn default() -> Self {
        let plan = DecodePlan::default();
        let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        DecodePlanForm {
            contexts: list(&plan.contexts),
            batches: list(&plan.batches),
            batch_context: plan.batch_context.to_string(),
            steps: plan.steps.to_string(),
        }
    }
}

impl DecodePlanForm {
    pub fn parse(&self) -> Result<DecodePlan, String> {
        let number = |field: &str, text: &str| -> Result<usize, String> {
            text.trim().parse::<usize>().map_err(|_| format!("{field}: \"{}\" is not a whole number", text.trim()))
        };
        let list = |field: &str, text: &str| -> Result<Vec<usize>, String> {
            text.split(',').map(str::trim).filter(|t| !t.is_empty()).map(|t| number(field, t)).collect()
        };
        let plan = DecodePlan {
            contexts: list("contexts", &self.contexts)?,
            batches: list("batches", &self.batches)?,
            batch_context: number("batch context", &self.batch_context)?,
            steps: number("steps", &self.steps)?,
            ..DecodePlan::default()
        };
        plan.check()?;
        Ok(plan)
    }
}

/// The longest context a row may ask for.
pub const MAX_CONTEXT: usize = 4096;
/// The most sequences a batch row may hold, and the most tokens all of
/// them may hold together: the K/V a row allocates (46 KB a token for
/// SmolLM2 in f32: 16,384 tokens are 755 MB) must fit a browser worker's
/// wasm memory beside the model, or the worker dies instead of refusing.
pub const MAX_BATCH: usize = 32;
pub const MAX_BATCH_TOKENS: usize = 16_384;

/// One row: `batch` sequences decoding together at `context` tokens each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodeRow {
    pub context: usize,
    pub batch: usize,
    /// A whole step (the forward pass, the LM head and the sampling).
    pub step_ms: Summary,
    /// Medians of the step's parts.
    pub projections_ms: f64,
    pub attention_ms: f64,
    pub lm_head_ms: f64,
    /// Tokens a second, all sequences together, from the median step.
    pub tokens_per_s: f64,
    /// Bytes one step reads: the weights once, each sequence's K/V.
    pub bytes_per_step: u64,
}

impl DecodeRow {
    /// Everything in a step but its three parts: norms, RoPE, writing
    /// K/V, sampling, the pool's hand-offs.
    pub fn other_ms(&self) -> f64 {
        (self.step_ms.p50 - self.projections_ms - self.attention_ms - self.lm_head_ms).max(0.0)
    }

    /// Bytes read per token produced.
    pub fn bytes_per_token(&self) -> f64 {
        self.bytes_per_step as f64 / self.batch as f64
    }

    /// The rate at which the median step read its bytes, 10⁹ bytes/s.
    pub fn achieved_gb_per_s(&self) -> f64 {
        self.bytes_per_step as f64 / self.step_ms.p50 / 1e6
    }
}

/// A decode-speed run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodeSpeed {
    pub checkpoint: String,
    /// The precision's label (weights, arithmetic, kernel).
    pub precision: String,
    pub threads: usize,
    pub plan: DecodePlan,
    /// Bytes of the projections and of the LM head, read once a step.
    pub projection_bytes: u64,
    pub lm_head_bytes: u64,
    /// This device's memory bandwidth, measured in the same run.
    pub bandwidth: Option<router::BandwidthProbe>,
    pub rows: Vec<DecodeRow>,
}

impl DecodeSpeed {
    pub fn row(&self, context: usize, batch: usize) -> Option<&DecodeRow> {
        self.rows.iter().find(|r| r.context == context && r.batch == batch)
    }

    /// The aggregate rate at `batch` over one sequence's, both at the
    /// batch context.
    pub fn batch_gain(&self, batch: usize) -> Option<f64> {
        let one = self.row(self.plan.batch_context, 1)?;
        Some(self.row(self.plan.batch_context, batch)?.tokens_per_s / one.tokens_per_s)
    }

    /// The share of the measured bandwidth a row's median step reached.
    pub fn bandwidth_share(&self, row: &DecodeRow) -> Option<f64> {
        self.bandwidth.as_ref().map(|b| row.achieved_gb_per_s() / b.gb_per_s)
    }

    /// The rows side by side, as the CLI prints them and the page shows them.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![
            format!("{} · {} · {} thread(s)", self.checkpoint, self.precision, self.threads),
            format!(
                "weights read once a step: {} of projections + {} of LM head; memory bandwidth {}",
                mb(self.projection_bytes),
                mb(self.lm_head_bytes),
                self.bandwidth.as_ref().map_or("not measured".into(), |b| format!(
                    "{:.1} GB/s ({} MiB on {} thread(s), best of {})",
                    b.gb_per_s,
                    b.bytes >> 20,
                    b.threads,
                    b.repeats
                )),
            ),
            format!(
                "{:>7}  {:>3}  {:>9}  {:>9}  {:>11}  {:>9}  {:>7}  {:>6}  {:>10}  {:>8}  {:>10}  {:>9}",
                "context",
                "B",
                "step p50",
                "step p95",
                "projections",
                "attention",
                "LM head",
                "other",
                "tokens/s",
                "× B = 1",
                "MB/token",
                "bandwidth"
            ),
        ];
        for row in &self.rows {
            let gain = (row.context == self.plan.batch_context).then(|| self.batch_gain(row.batch)).flatten();
            lines.push(format!(
                "{:>7}  {:>3}  {:>9.1}  {:>9.1}  {:>11.1}  {:>9.1}  {:>7.1}  {:>6.1}  {:>10.1}  {:>8}  {:>10.1}  {:>9}",
                row.context,
                row.batch,
                row.step_ms.p50,
                row.step_ms.p95,
                row.projections_ms,
                row.attention_ms,
                row.lm_head_ms,
                row.other_ms(),
                row.tokens_per_s,
                gain.map_or("–".into(), |g| format!("{g:.2}×")),
                row.bytes_per_token() / 1e6,
                self.bandwidth_share(row).map_or("–".into(), |s| format!("{:.0} %", 100.0 * s)),
            ));
        }
        lines
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// Runs `plan` on `router`, each row's sequences prefilled from `texts`
/// cut to exactly the row's context; `progress` hears each row as it ends.
/// (The worker runs the same rows one at a time through [`measure_row`],
/// yielding between them.)
#[cfg(feature = "engine")]
pub fn run(
    router: &router::Router,
    texts: &[String],
    plan: &DecodePlan,
    bandwidth: Option<router::BandwidthProbe>,
    mut progress: impl FnMut(&DecodeRow),
) -> router::Result<DecodeSpeed> {
    plan.check().map_err(router::RouterError::Request)?;
    let mut rows = Vec::new();
    for (context, batch) in plan.rows() {
        let row = measure_row(router, texts, plan, context, batch)?;
        progress(&row);
        rows.push(row);
    }
    Ok(DecodeSpeed::of(router, plan, bandwidth, rows))
}

#[cfg(feature = "engine")]
impl DecodeSpeed {
    /// A run of `plan` on `router` from its measured rows.
    pub fn of(router: &router::Router, plan: &DecodePlan, bandwidth: Option<router::BandwidthProbe>, rows: Vec<DecodeRow>) -> DecodeSpeed {
        let weights = router.backbone.weight_bytes();
        DecodeSpeed {
            checkpoint: router.checkpoint_id().to_string(),
            precision: router.backbone.precision.label(&router.weight_type),
            threads: router::parallel::threads(),
            plan: plan.clone(),
            projection_bytes: weights.projections,
            lm_head_bytes: weights.lm_head,
            bandwidth,
            rows,
        }
    }
}

/// One row of `plan`: `batch` sequences prefilled (untimed) to exactly
/// `context` tokens of `texts`, then the plan's warm-up and timed steps.
#[cfg(feature = "engine")]
pub fn measure_row(
    router: &router::Router,
    texts: &[String],
    plan: &DecodePlan,
    context: usize,
    batch: usize,
) -> router::Result<DecodeRow> {
    use router::generate::{step, Sequence};
    use router::sampling::SamplingParams;
    use router::segment::KvState;
    use router::RouterError;

    let prompt = router::prompts::exact_prompt(&router.tokenizer, texts, context)?;
    let ids = router.tokenizer.encode(&prompt.conversation.routing_text(router.tokenizer.layout))?;
    let params = SamplingParams { max_new_tokens: plan.warmup + plan.steps + 2, ignore_eos: true, ..SamplingParams::default() };
    let mut sequences = (0..batch)
        .map(|_| Sequence::new(&router.backbone, ids.clone(), KvState::default(), params.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RouterError::Request(e.to_string()))?;
    for sequence in sequences.iter_mut() {
        let n = sequence.pending();
        step(&router.backbone, &router.tokenizer, &mut [(sequence, n)])?;
    }
    let (mut totals, mut projections, mut attention, mut head) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..plan.warmup + plan.steps {
        let mut fed: Vec<_> = sequences.iter_mut().map(|s| (s, 1)).collect();
        let started = web_time::Instant::now();
        let report = step(&router.backbone, &router.tokenizer, &mut fed)?;
        let total = router::elapsed_ms(started);
        if i >= plan.warmup {
            totals.push(total);
            projections.push(report.projections_ms);
            attention.push(report.attention_ms);
            head.push(report.lm_head_ms);
        }
    }
    let median = |v: &[f64]| Summary::of(v).map_or(0.0, |s| s.p50);
    let step_ms = Summary::of(&totals).ok_or_else(|| RouterError::Request("steps: time at least one step".into()))?;
    // The K/V the timed steps read, at the context of their middle step.
    let held = context + plan.warmup + plan.steps / 2;
    let kv = crate::generation::payload_kv_bytes(&crate::generation::kv_shape(&router.backbone.hparams), held);
    Ok(DecodeRow {
        context,
        batch,
        tokens_per_s: batch as f64 * 1000.0 / step_ms.p50,
        step_ms,
        projections_ms: median(&projections),
        attention_ms: median(&attention),
        lm_head_ms: median(&head),
        bytes_per_step: router.backbone.weight_bytes().total() + batch as u64 * kv,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(p50: f64) -> Summary {
        Summary { n: 3, p50, p95: p50, min: p50, max: p50, mean: p50 }
    }

    #[test]
    fn the_plan_lists_each_row_once_and_refuses_what_cannot_run() {
        let plan = DecodePlan::default();
        assert_eq!(plan.rows(), vec![(256, 1), (1024, 1), (256, 4), (256, 8), (256, 16)]);
        assert!(plan.check().is_ok());
        let bad = DecodePlan { batches: vec![1, 0], ..DecodePlan::default() };
        assert!(bad.check().unwrap_err().starts_with("batches"));
        let bad = DecodePlan { steps: 0, ..DecodePlan::default() };
        assert!(bad.check().unwrap_err().starts_with("steps"));
        let bad = DecodePlan { contexts: vec![8], ..DecodePlan::default() };
        assert!(bad.check().unwrap_err().starts_with("context 8"));
        let bad = DecodePlan { contexts: vec![5000], ..DecodePlan::default() };
        assert!(bad.check().unwrap_err().starts_with("context 5000: at most 4096"));
        let bad = DecodePlan { batches: vec![33], ..DecodePlan::default() };
        assert!(bad.check().unwrap_err().starts_with("batches: 33 sequences"));
        let bad = DecodePlan { batches: vec![32], batch_context: 1024, ..DecodePlan::default() };
        assert!(bad.check().unwrap_err().starts_with("batches: 32 sequences of 1024 tokens"));
        assert!(DecodePlan { batches: vec![32], batch_context: 512, ..DecodePlan::default() }.check().is_ok());
    }

    #[test]
    fn the_form_reads_the_default_plan_and_names_a_bad_field() {
        assert_eq!(DecodePlanForm::default().parse().unwrap(), DecodePlan::default());
        let form = DecodePlanForm { batches: "1, x".into(), ..DecodePlanForm::default() };
        assert_eq!(form.parse().unwrap_err(), "batches: \"x\" is not a whole number");
        let form = DecodePlanForm { contexts: "".into(), batches: "".into(), ..DecodePlanForm::default() };
        assert!(form.parse().unwrap_err().starts_with("contexts and batches"));
        let form = DecodePlanForm { steps: "0".into(), ..DecodePlanForm::default() };
        assert!(form.parse().unwrap_err().starts_with("steps"));
    }

    #[test]
    fn gains_and_bandwidth_shares_come_from_the_medians() {
        let row = |batch, p50| DecodeRow {
            context: 256,
            batch,
            step_ms: summary(p50),
            projections_ms: p50 / 2.0,
            attention_ms: 1.0,
            lm_head_ms: 2.0,
            tokens_per_s: batch as f64 * 1000.0 / p50,
            bytes_per_step: 100_000_000 + batch as u64 * 10_000_000,
        };
        let speed = DecodeSpeed {
            checkpoint: "c".into(),
            precision: "p".into(),
            threads: 2,
            plan: DecodePlan { contexts: vec![256], batches: vec![1, 8], ..DecodePlan::default() },
            projection_bytes: 70_000_000,
            lm_head_bytes: 30_000_000,
            bandwidth: Some(router::BandwidthProbe {
                bytes: 1 << 26,
                threads: 2,
                repeats: 3,
                best_ms: 3.0,
                median_ms: 3.0,
                gb_per_s: 22.0,
            }),
            rows: vec![row(1, 10.0), row(8, 20.0)],
        };
        assert_eq!(speed.batch_gain(8), Some(4.0));
        // 110 MB in 10 ms: 11 GB/s of 22.
        assert!((speed.bandwidth_share(&speed.rows[0]).unwrap() - 0.5).abs() < 1e-12);
        assert!((speed.rows[1].bytes_per_token() - 22_500_000.0).abs() < 1e-6);
        assert!((speed.rows[0].other_ms() - 2.0).abs() < 1e-12);
        let lines = speed.lines();
        assert!(lines[3].contains("1.00×") && lines[4].contains("4.00×") && lines[3].contains("50 %"), "{lines:#?}");
    }
}
