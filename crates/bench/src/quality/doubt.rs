//! How far to trust the trained head, measured out of fold: each
//! candidate's calibration (Brier score and a reliability diagram of its
//! P(resolve) against what happened), how far its P(resolve) moves between
//! fits on other training folds (the spread a deployed head carries as
//! `p_sigma`), and what its decisions resolve when they are flagged unsure
//! and when they are not.
//!
//! A decision is flagged for either of two stated reasons (the same rules
//! `router::LoadedHead::confidence` applies to a deployed head): a *close
//! call*, the first two utilities nearer than `√(σ₁² + σ₂²)`; or a task
//! *unlike the training tasks*, its nearest training task less similar
//! (cosine of the standardised features) than [`NOVELTY_PERCENTILE`] % of
//! the training tasks are to their own nearest. In the evaluation both the
//! nearest task and the threshold come from the outer training fold only.
//! The spreads σ are one number per candidate from all seeds' out-of-fold
//! predictions; the report says so.

use serde::{Deserialize, Serialize};

use super::learn::Kernel;
use super::{Dataset, SeedOutcome, Stat, MODES};

/// The percentile of the training tasks' own nearest-neighbour cosines
/// below which a task counts as unlike them.
pub const NOVELTY_PERCENTILE: f64 = 5.0;

/// Bins of the reliability diagram, equal widths over [0, 1].
pub const RELIABILITY_BINS: usize = 10;

/// The cosine from `task` to its nearest among `among` (itself excluded),
/// and which one that is.
pub fn nearest(kernel: &Kernel, task: usize, among: &[usize]) -> (f64, Option<usize>) {
    among
        .iter()
        .filter(|&&j| j != task)
        .map(|&j| (kernel.cosine(task, j), Some(j)))
        .fold((-1.0, None), |best, c| if c.0 > best.0 { c } else { best })
}

/// The novelty threshold of a training set: the [`NOVELTY_PERCENTILE`]th
/// percentile (lower nearest rank) of each training task's cosine to its
/// nearest other training task.
pub fn novelty_threshold(kernel: &Kernel, train: &[usize]) -> f64 {
    let mut own: Vec<f64> = train.iter().map(|&t| nearest(kernel, t, train).0).collect();
    own.sort_by(f64::total_cmp);
    if own.is_empty() {
        return -1.0;
    }
    let rank = ((NOVELTY_PERCENTILE / 100.0) * own.len() as f64).ceil().max(1.0) as usize;
    own[rank.min(own.len()) - 1]
}

/// The candidate `decide` ranks first and the one it ranks second, and
/// the first's utility less the second's (`decide`'s own order on
/// utility, then score, then id).
pub fn first_two(data: &Dataset, p: &[f64], cost: &[f64], lambda: f64) -> (usize, usize, f64) {
    let most = cost.iter().cloned().fold(0.0, f64::max);
    let utility = |i: usize| p[i] - lambda * if most > 0.0 { cost[i] / most } else { 0.0 };
    let first = data.pick(p, cost, lambda);
    let second = (0..p.len())
        .filter(|&i| i != first)
        .min_by(|&a, &b| utility(b).total_cmp(&utility(a)).then(p[b].total_cmp(&p[a])).then(data.models[a].cmp(&data.models[b])))
        .unwrap_or(first);
    (first, second, utility(first) - utility(second))
}

/// Per candidate, the root mean square over tasks of the standard
/// deviation of its out-of-fold P(resolve) across seeds (0 with one seed).
pub fn p_sigmas(outcomes: &[SeedOutcome], models: usize) -> Vec<f64> {
    let tasks = outcomes.first().map_or(0, |o| o.oof.len());
    (0..models)
        .map(|m| {
            let variance: f64 = (0..tasks)
                .map(|t| {
                    let values: Vec<f64> = outcomes.iter().map(|o| o.oof[t][m]).collect();
                    Stat::of(&values).std.powi(2)
                })
                .sum::<f64>()
                / tasks.max(1) as f64;
            variance.sqrt()
        })
        .collect()
}

/// One bin of a reliability diagram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityBin {
    pub lower: f64,
    pub upper: f64,
    /// Predictions in the bin (over all seeds).
    pub count: usize,
    pub mean_p: f64,
    /// The share of them that resolved.
    pub observed: f64,
}

/// One candidate's out-of-fold calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateCalibration {
    pub candidate: String,
    /// Mean of (P − outcome)² over tasks and seeds.
    pub brier: f64,
    /// The candidate's resolve rate, and the Brier score of forecasting it
    /// for every task (the bar a useful P must beat).
    pub base_rate: f64,
    pub brier_base_rate: f64,
    /// How far its P(resolve) moves between folds ([`p_sigmas`]).
    pub p_sigma: f64,
    pub bins: Vec<ReliabilityBin>,
}

/// Calibration per candidate from every seed's out-of-fold predictions.
pub fn calibration(data: &Dataset, outcomes: &[SeedOutcome]) -> Vec<CandidateCalibration> {
    let sigmas = p_sigmas(outcomes, data.models.len());
    let tasks = data.tasks.len();
    (0..data.models.len())
        .map(|m| {
            let y = |t: usize| data.cells[t][m].resolved as u8 as f64;
            let base_rate = (0..tasks).map(y).sum::<f64>() / tasks.max(1) as f64;
            let pairs: Vec<(f64, f64)> = outcomes.iter().flat_map(|o| (0..tasks).map(move |t| (o.oof[t][m], y(t)))).collect();
            let n = pairs.len().max(1) as f64;
            let brier = pairs.iter().map(|(p, y)| (p - y).powi(2)).sum::<f64>() / n;
            let brier_base_rate = (0..tasks).map(|t| (base_rate - y(t)).powi(2)).sum::<f64>() / tasks.max(1) as f64;
            let bins = (0..RELIABILITY_BINS)
                .map(|b| {
                    let (lower, upper) = (b as f64 / RELIABILITY_BINS as f64, (b + 1) as f64 / RELIABILITY_BINS as f64);
                    let inside: Vec<&(f64, f64)> =
                        pairs.iter().filter(|(p, _)| *p >= lower && (*p < upper || (b + 1 == RELIABILITY_BINS && *p <= upper))).collect();
                    let count = inside.len();
                    let mean = |f: &dyn Fn(&(f64, f64)) -> f64| inside.iter().map(|x| f(x)).sum::<f64>() / count.max(1) as f64;
                    ReliabilityBin { lower, upper, count, mean_p: mean(&|x| x.0), observed: mean(&|x| x.1) }
                })
                .collect();
            CandidateCalibration { candidate: data.models[m].clone(), brier, base_rate, brier_base_rate, p_sigma: sigmas[m], bins }
        })
        .collect()
}

/// Why a decision is flagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    CloseCall,
    UnlikeTraining,
    Either,
}

impl Reason {
    pub const ALL: [Reason; 3] = [Reason::CloseCall, Reason::UnlikeTraining, Reason::Either];

    pub fn label(self) -> &'static str {
        match self {
            Reason::CloseCall => "close call",
            Reason::UnlikeTraining => "unlike the training tasks",
            Reason::Either => "either (unsure)",
        }
    }
}

/// Resolved and cost for decisions flagged and not, in one mode, for one
/// reason; each a mean ± std over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoubtRow {
    pub mode: String,
    pub reason: Reason,
    pub flagged: Stat,
    pub flagged_resolved: Stat,
    pub flagged_cost_usd: Stat,
    pub unflagged: Stat,
    pub unflagged_resolved: Stat,
    pub unflagged_cost_usd: Stat,
}

impl DoubtRow {
    /// Resolved per decision, flagged and not (means over seeds).
    pub fn rates(&self) -> (f64, f64) {
        let rate = |resolved: &Stat, n: &Stat| if n.mean > 0.0 { resolved.mean / n.mean } else { 0.0 };
        (rate(&self.flagged_resolved, &self.flagged), rate(&self.unflagged_resolved, &self.unflagged))
    }
}

/// The flags' evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoubtStudy {
    pub novelty_percentile: f64,
    /// The spread per candidate the close-call rule used.
    pub p_sigma: Vec<(String, f64)>,
    pub rows: Vec<DoubtRow>,
}

/// Whether seed `o`'s decision for task `t` in mode `m` is flagged for `reason`.
fn flagged(o: &SeedOutcome, sigmas: &[f64], m: usize, t: usize, reason: Reason) -> bool {
    let (first, (second, margin)) = (o.by_mode[m][t], o.runner_up[m][t]);
    let close = margin < (sigmas[first].powi(2) + sigmas[second].powi(2)).sqrt();
    let unlike = o.unlike[t];
    match reason {
        Reason::CloseCall => close,
        Reason::UnlikeTraining => unlike,
        Reason::Either => close || unlike,
    }
}

/// Resolved and cost of flagged and unflagged decisions per mode and reason.
pub fn doubt_study(data: &Dataset, outcomes: &[SeedOutcome]) -> DoubtStudy {
    let sigmas = p_sigmas(outcomes, data.models.len());
    let tasks = data.tasks.len();
    let mut rows = Vec::new();
    for (m, (mode, _)) in MODES.iter().enumerate() {
        for reason in Reason::ALL {
            let mut parts = [Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new()];
            for o in outcomes {
                let mut sums = [0.0f64; 6];
                for t in 0..tasks {
                    let cell = data.cells[t][o.by_mode[m][t]];
                    let base = if flagged(o, &sigmas, m, t, reason) { 0 } else { 3 };
                    sums[base] += 1.0;
                    sums[base + 1] += cell.resolved as u8 as f64;
                    sums[base + 2] += cell.cost_usd;
                }
                parts.iter_mut().zip(sums).for_each(|(v, s)| v.push(s));
            }
            let [f, fr, fc, u, ur, uc] = parts.map(|v| Stat::of(&v));
            rows.push(DoubtRow {
                mode: mode.to_string(),
                reason,
                flagged: f,
                flagged_resolved: fr,
                flagged_cost_usd: fc,
                unflagged: u,
                unflagged_resolved: ur,
                unflagged_cost_usd: uc,
            });
        }
    }
    DoubtStudy { novelty_percentile: NOVELTY_PERCENTILE, p_sigma: data.models.iter().cloned().zip(sigmas).collect(), rows }
}

impl DoubtStudy {
    /// Flagged against unflagged decisions, as a Markdown table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "### Decisions flagged unsure (out of fold; nearest training task below the {}th percentile, or a close call)\n\n\
             | mode | reason | flagged | resolved | cost | rate | not flagged | resolved | cost | rate |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            self.novelty_percentile
        );
        for r in &self.rows {
            let (flagged_rate, unflagged_rate) = r.rates();
            out.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} | {} | {:.0} % | {:.1} | {:.1} | {} | {:.0} % |\n",
                r.mode,
                r.reason.label(),
                r.flagged.mean,
                r.flagged_resolved.mean,
                super::money(r.flagged_cost_usd.mean),
                100.0 * flagged_rate,
                r.unflagged.mean,
                r.unflagged_resolved.mean,
                super::money(r.unflagged_cost_usd.mean),
                100.0 * unflagged_rate
            ));
        }
        out
    }
}
