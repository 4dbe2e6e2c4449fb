//! Does a cheaper precision decide as the reference does? The same trained
//! head read over the same tasks' features computed at two precisions
//! (f32 and int8 natively): for each mode, how often the first pick is the
//! same, how often the whole order is, and how far apart the orders are
//! (Kendall's τ), with what each precision's picks resolve and cost. Where
//! the picks differ, the reference's margin between its first two
//! candidates says whether the rounding turned a near tie or a clear call.
//!
//! The head was trained on these very tasks, so the resolved counts here
//! are in-sample: they compare the two precisions with each other, not the
//! head with other routers (the cross-validated study does that).
//!
//! Pure: callers pass the probabilities, costs and features their prefills
//! gave; nothing here loads a model or reads a clock.

use serde::{Deserialize, Serialize};

use super::{totals, Dataset, Subset};
use crate::Summary;

/// What one precision's prefills gave for every task, in the dataset's order.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// How the precision is described in reports (`Provenance::precision`).
    pub precision: &'a str,
    /// P(resolve) per task, per candidate in `candidates` order.
    pub probabilities: &'a [Vec<f32>],
    /// The head's cost per task, per candidate in `candidates` order.
    pub costs: &'a [Vec<f64>],
    /// The pooled features the head read, per task.
    pub features: &'a [Vec<f32>],
    /// The prefilling decide's time per task.
    pub decide_ms: &'a [f64],
}

/// A task whose first pick differs between the two precisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turned {
    pub task: String,
    pub reference_top: String,
    pub candidate_top: String,
    /// The reference's utility gap between its first and second candidate.
    pub reference_margin: f64,
    /// Whether each pick resolved the task (the recorded outcome).
    pub reference_resolved: bool,
    pub candidate_resolved: bool,
}

/// One mode's agreement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModeAgreement {
    pub mode: String,
    /// The head's cost weight in this mode.
    pub cost_weight: f64,
    /// Tasks whose first pick is the same at both precisions.
    pub same_top: usize,
    /// Tasks whose whole ranking is the same.
    pub same_order: usize,
    /// Kendall's τ between the two rankings, mean over tasks (1: identical).
    pub kendall_tau_mean: f64,
    pub reference_resolved: f64,
    pub candidate_resolved: f64,
    pub reference_cost_usd: f64,
    pub candidate_cost_usd: f64,
    pub turned: Vec<Turned>,
}

/// The agreement study's section of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrecisionAgreement {
    /// The head's id (as `decide` reports it) and what it was trained on.
    pub head: String,
    pub head_trained_on: String,
    pub reference: String,
    pub candidate: String,
    pub tasks: usize,
    pub modes: Vec<ModeAgreement>,
    /// |P_candidate − P_reference| over every task and candidate.
    pub probability_gap: Option<Summary>,
    /// Cosine between the two precisions' feature vectors, per task.
    pub feature_cosine: Option<Summary>,
    pub reference_decide: Option<Summary>,
    pub candidate_decide: Option<Summary>,
    /// What the resolved counts are (in-sample) and are not.
    pub note: String,
}

/// What [`compare`] needs besides the two sides: the head's candidates in
/// its order and its modes with their cost weights.
#[derive(Debug, Clone, Copy)]
pub struct HeadView<'a> {
    pub id: &'a str,
    pub trained_on: &'a str,
    pub candidates: &'a [&'a str],
    pub modes: &'a [(String, f64)],
}

/// Why a comparison cannot be made.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AgreementError {
    #[error("{side}: {got} tasks, the dataset has {want}")]
    Tasks { side: String, got: usize, want: usize },
    #[error("{side}, task {task}: {got} probabilities or costs for {want} candidates")]
    Candidates { side: String, task: usize, got: usize, want: usize },
    #[error("the head's candidate {0} is not a model of the dataset")]
    UnknownCandidate(String),
}

pub const IN_SAMPLE_NOTE: &str = "The head was trained on these tasks: resolved counts and costs are in-sample and compare \
     the two precisions with each other, not the router with others (the cross-validated quality study does that).";

fn check(side: &Side, tasks: usize, candidates: usize) -> Result<(), AgreementError> {
    for got in [side.probabilities.len(), side.costs.len(), side.features.len()] {
        if got != tasks {
            return Err(AgreementError::Tasks { side: side.precision.into(), got, want: tasks });
        }
    }
    for (task, (p, c)) in side.probabilities.iter().zip(side.costs).enumerate() {
        if p.len() != candidates || c.len() != candidates {
            let got = if p.len() != candidates { p.len() } else { c.len() };
            return Err(AgreementError::Candidates { side: side.precision.into(), task, got, want: candidates });
        }
    }
    Ok(())
}

/// Kendall's τ-a between two orders of the same items (each a list of
/// item indices, best first).
pub fn kendall_tau(a: &[usize], b: &[usize]) -> f64 {
    let n = a.len();
    if n < 2 {
        return 1.0;
    }
    let mut place = vec![0usize; n];
    for (rank, &item) in b.iter().enumerate() {
        place[item] = rank;
    }
    let mut concordant = 0i64;
    for i in 0..n {
        for j in i + 1..n {
            concordant += if place[a[i]] < place[a[j]] { 1 } else { -1 };
        }
    }
    concordant as f64 / (n * (n - 1) / 2) as f64
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b)).max(f64::MIN_POSITIVE)
}

/// Compares the candidate precision with the reference over the dataset.
pub fn compare(data: &Dataset, head: HeadView, reference: Side, candidate: Side) -> Result<PrecisionAgreement, AgreementError> {
    let (tasks, n) = (data.tasks.len(), head.candidates.len());
    check(&reference, tasks, n)?;
    check(&candidate, tasks, n)?;
    // The head's candidate order mapped to the dataset's model order.
    let model_of: Vec<usize> = head
        .candidates
        .iter()
        .map(|id| data.model_index(id).ok_or_else(|| AgreementError::UnknownCandidate(id.to_string())))
        .collect::<Result<_, _>>()?;
    let order = |side: &Side, t: usize, weight: f64| -> Vec<(usize, f64)> {
        let p = &side.probabilities[t];
        router::rank(head.candidates, p, &[], &side.costs[t], weight)
            .iter()
            .map(|r| (head.candidates.iter().position(|c| *c == r.id).expect("rank returns the ids it is given"), r.utility))
            .collect()
    };
    let all = data.indices(Subset::All);
    let modes = head
        .modes
        .iter()
        .map(|(mode, weight)| {
            let mut agreement = ModeAgreement {
                mode: mode.clone(),
                cost_weight: *weight,
                same_top: 0,
                same_order: 0,
                kendall_tau_mean: 0.0,
                reference_resolved: 0.0,
                candidate_resolved: 0.0,
                reference_cost_usd: 0.0,
                candidate_cost_usd: 0.0,
                turned: Vec::new(),
            };
            let (mut picks_reference, mut picks_candidate) = (Vec::with_capacity(tasks), Vec::with_capacity(tasks));
            let mut tau_sum = 0.0;
            for t in 0..tasks {
                let (a, b) = (order(&reference, t, *weight), order(&candidate, t, *weight));
                let (ia, ib): (Vec<usize>, Vec<usize>) = (a.iter().map(|x| x.0).collect(), b.iter().map(|x| x.0).collect());
                tau_sum += kendall_tau(&ia, &ib);
                agreement.same_order += usize::from(ia == ib);
                agreement.same_top += usize::from(ia[0] == ib[0]);
                if ia[0] != ib[0] {
                    agreement.turned.push(Turned {
                        task: data.tasks[t].id.clone(),
                        reference_top: head.candidates[ia[0]].to_string(),
                        candidate_top: head.candidates[ib[0]].to_string(),
                        reference_margin: a[0].1 - a.get(1).map_or(a[0].1, |x| x.1),
                        reference_resolved: data.cells[t][model_of[ia[0]]].resolved,
                        candidate_resolved: data.cells[t][model_of[ib[0]]].resolved,
                    });
                }
                picks_reference.push(model_of[ia[0]]);
                picks_candidate.push(model_of[ib[0]]);
            }
            agreement.kendall_tau_mean = tau_sum / tasks.max(1) as f64;
            let (r, c) = (totals(data, &picks_reference, &all), totals(data, &picks_candidate, &all));
            agreement.reference_resolved = r.resolved;
            agreement.candidate_resolved = c.resolved;
            agreement.reference_cost_usd = r.cost_usd;
            agreement.candidate_cost_usd = c.cost_usd;
            agreement
        })
        .collect();
    let gaps: Vec<f64> = reference
        .probabilities
        .iter()
        .zip(candidate.probabilities)
        .flat_map(|(a, b)| a.iter().zip(b).map(|(&x, &y)| (x as f64 - y as f64).abs()))
        .collect();
    let cosines: Vec<f64> = reference.features.iter().zip(candidate.features).map(|(a, b)| cosine(a, b)).collect();
    Ok(PrecisionAgreement {
        head: head.id.into(),
        head_trained_on: head.trained_on.into(),
        reference: reference.precision.into(),
        candidate: candidate.precision.into(),
        tasks,
        modes,
        probability_gap: Summary::of(&gaps),
        feature_cosine: Summary::of(&cosines),
        reference_decide: Summary::of(reference.decide_ms),
        candidate_decide: Summary::of(candidate.decide_ms),
        note: IN_SAMPLE_NOTE.into(),
    })
}

impl PrecisionAgreement {
    /// The per-mode table, as `bench-decide --precision-agreement` prints it.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{} against {} through head {} on {} tasks\n{:<10} {:>9} {:>11} {:>7} {:>21} {:>23}\n",
            self.candidate,
            self.reference,
            self.head,
            self.tasks,
            "mode",
            "same top",
            "same order",
            "τ mean",
            "resolved (ref / new)",
            "cost $ (ref / new)"
        );
        for m in &self.modes {
            out += &format!(
                "{:<10} {:>5}/{:<3} {:>7}/{:<3} {:>7.3} {:>10.0} / {:<8.0} {:>11.2} / {:<9.2}\n",
                m.mode,
                m.same_top,
                self.tasks,
                m.same_order,
                self.tasks,
                m.kendall_tau_mean,
                m.reference_resolved,
                m.candidate_resolved,
                m.reference_cost_usd,
                m.candidate_cost_usd
            );
        }
        if let Some(g) = self.probability_gap {
            out += &format!("|ΔP(resolve)| over tasks × candidates: mean {:.4}, p95 {:.4}, max {:.4}\n", g.mean, g.p95, g.max);
        }
        if let Some(c) = self.feature_cosine {
            out += &format!("feature cosine per task: min {:.5}, mean {:.5}\n", c.min, c.mean);
        }
        for m in &self.modes {
            for t in &m.turned {
                out += &format!(
                    "  {}: {} → {} (reference margin {:.4}; resolved {} → {})\n",
                    m.mode, t.reference_top, t.candidate_top, t.reference_margin, t.reference_resolved, t.candidate_resolved
                );
            }
        }
        out + &self.note
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Dataset {
        let tasks = (0..3)
            .map(|i| format!("{{\"task_id\":\"t{i}\",\"source_split\":\"old112\",\"bench\":\"b\",\"prompt\":\"task {i}\"}}"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut results = String::from("task_id,source_split,model,resolved,in_tok,out_tok,cost_usd\n");
        for i in 0..3 {
            results += &format!("t{i},old112,a,1,10,10,1.0\nt{i},old112,b,{},10,10,0.5\n", i % 2);
        }
        Dataset::parse(&tasks, "tasks", &results, "results", &["a", "b"]).expect("a valid little dataset")
    }

    #[test]
    fn kendall_tau_is_one_for_the_same_order_and_minus_one_reversed() {
        assert_eq!(kendall_tau(&[0, 1, 2, 3], &[0, 1, 2, 3]), 1.0);
        assert_eq!(kendall_tau(&[0, 1, 2, 3], &[3, 2, 1, 0]), -1.0);
        // One adjacent swap of four items turns one pair of six.
        assert!((kendall_tau(&[0, 1, 2, 3], &[1, 0, 2, 3]) - 4.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn the_same_sides_agree_everywhere_and_a_flipped_task_is_counted_with_its_outcome() {
        let data = data();
        let modes = vec![("quality".to_string(), 0.0)];
        let head = HeadView { id: "head-x", trained_on: "t", candidates: &["a", "b"], modes: &modes };
        let p = vec![vec![0.9f32, 0.2], vec![0.8, 0.3], vec![0.7, 0.6]];
        let costs = vec![vec![1.0, 0.5]; 3];
        let features = vec![vec![1.0f32, 2.0]; 3];
        let ms = [10.0, 11.0, 12.0];
        let side =
            |p: &'static str, probabilities| Side { precision: p, probabilities, costs: &costs, features: &features, decide_ms: &ms };
        let same = compare(&data, head, side("f32", &p), side("int8", &p)).unwrap();
        assert_eq!((same.modes[0].same_top, same.modes[0].same_order, same.modes[0].kendall_tau_mean), (3, 3, 1.0));
        assert!(same.modes[0].turned.is_empty());
        assert_eq!(same.probability_gap.unwrap().max, 0.0);

        // The third task's close call turns: b first at the candidate precision.
        let mut q = p.clone();
        q[2] = vec![0.6, 0.7];
        let turned = compare(&data, head, side("f32", &p), side("int8", &q)).unwrap();
        let m = &turned.modes[0];
        assert_eq!((m.same_top, m.same_order), (2, 2));
        assert!((m.kendall_tau_mean - (1.0 + 1.0 - 1.0) / 3.0).abs() < 1e-12);
        assert_eq!(m.turned.len(), 1);
        let t = &m.turned[0];
        assert_eq!((t.task.as_str(), t.reference_top.as_str(), t.candidate_top.as_str()), ("t2", "a", "b"));
        assert!((t.reference_margin - 0.1).abs() < 1e-6, "{}", t.reference_margin);
        // Task t2: a resolved it, b did not (2 % 2 == 0).
        assert_eq!((t.reference_resolved, t.candidate_resolved), (true, false));
        assert_eq!((m.reference_resolved, m.candidate_resolved), (3.0, 2.0));
        assert!((turned.probability_gap.unwrap().max - 0.1).abs() < 1e-6);
    }

    #[test]
    fn sides_of_the_wrong_shape_are_refused_naming_the_side() {
        let data = data();
        let modes = vec![("quality".to_string(), 0.0)];
        let head = HeadView { id: "h", trained_on: "t", candidates: &["a", "b"], modes: &modes };
        let p = vec![vec![0.9f32, 0.2]; 2];
        let costs = vec![vec![1.0, 0.5]; 2];
        let features = vec![vec![1.0f32]; 2];
        let side = Side { precision: "int8", probabilities: &p, costs: &costs, features: &features, decide_ms: &[] };
        assert_eq!(compare(&data, head, side, side).unwrap_err(), AgreementError::Tasks { side: "int8".into(), got: 2, want: 3 });
        let unknown = HeadView { candidates: &["a", "z"], ..head };
        let (p3, c3, f3) = (vec![vec![0.5f32, 0.5]; 3], vec![vec![1.0, 1.0]; 3], vec![vec![1.0f32]; 3]);
        let side3 = Side { precision: "f32", probabilities: &p3, costs: &c3, features: &f3, decide_ms: &[] };
        assert_eq!(compare(&data, unknown, side3, side3).unwrap_err(), AgreementError::UnknownCandidate("z".into()));
    }
}
