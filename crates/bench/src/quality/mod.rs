//! Routing quality next to routing latency: CodeRouterBench OOD176 routed
//! through the real `decide`, scored against the recorded outcomes, beside
//! the baselines computed from the same files (oracle, each always-X,
//! random, cheapest) and a trained head evaluated by nested
//! cross-validation (no task is ever scored by a model that saw it, and
//! every setting is chosen inside the training folds).
//!
//! Pure: callers pass the data's text and the features their prefills
//! produced; nothing here reads a file or a clock.

pub mod agreement;
pub mod data;
pub mod doubt;
pub mod learn;
pub mod plot;
pub mod published;
#[cfg(feature = "engine")]
pub mod route;

use serde::{Deserialize, Serialize};

pub use data::{Cell, DataError, Dataset, Subset, Task};
use learn::{Fit, Kernel};
pub use router::CostTerm;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Mean and standard deviation over seeds (std 0 for one value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub mean: f64,
    pub std: f64,
}

impl Stat {
    pub fn of(values: &[f64]) -> Stat {
        let n = values.len().max(1) as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = if values.len() > 1 { values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
        Stat { mean, std: var.sqrt() }
    }

    pub fn exact(v: f64) -> Stat {
        Stat { mean: v, std: 0.0 }
    }
}

/// Totals of one assignment of tasks to models.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub resolved: f64,
    /// Recorded costs (a failed run at $0).
    pub cost_usd: f64,
    /// A failed run at its model's mean cost.
    pub cost_usd_imputed: f64,
}

/// The totals of `choices` (a model per task, in the dataset's order) over `tasks`.
pub fn totals(data: &Dataset, choices: &[usize], tasks: &[usize]) -> Totals {
    let mut out = Totals::default();
    for &t in tasks {
        let m = choices[t];
        let cell = data.cells[t][m];
        out.resolved += cell.resolved as u8 as f64;
        out.cost_usd += cell.cost_usd;
        out.cost_usd_imputed += data.imputed_cost[t][m];
    }
    out
}

/// Per task, the cheapest model (by recorded cost) that resolved it, or,
/// where none did, the cheapest model outright.
pub fn oracle_choices(data: &Dataset) -> Vec<usize> {
    data.cells
        .iter()
        .map(|row| {
            let cheapest = |resolved_only: bool| {
                (0..row.len()).filter(|&m| !resolved_only || row[m].resolved).min_by(|&a, &b| row[a].cost_usd.total_cmp(&row[b].cost_usd))
            };
            cheapest(true).or_else(|| cheapest(false)).unwrap_or(0)
        })
        .collect()
}

/// What kind of policy a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Oracle,
    Baseline,
    /// The router's descriptor-similarity scoring (no training).
    Untrained,
    /// Cross-validated: a model trained on the other folds scores each task.
    Trained,
}

/// One policy on one subset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRow {
    pub subset: Subset,
    pub policy: String,
    pub family: Family,
    pub tasks: usize,
    /// Over seeds (CV folds, random draws); exact for a fixed policy.
    pub resolved: Stat,
    pub cost_usd: Stat,
    pub cost_usd_imputed: Stat,
    /// 95 % bootstrap interval over tasks (2,000 resamples) of the resolved
    /// count and the cost (per-task means over seeds).
    pub resolved_ci95: [f64; 2],
    pub cost_ci95: [f64; 2],
    pub oracle_resolved: f64,
}

impl PolicyRow {
    pub fn rate(&self) -> f64 {
        self.resolved.mean / self.tasks.max(1) as f64
    }

    pub fn per_dollar(&self) -> f64 {
        if self.cost_usd.mean > 0.0 {
            self.resolved.mean / self.cost_usd.mean
        } else {
            f64::INFINITY
        }
    }

    /// `(oracle − resolved) ÷ oracle`.
    pub fn gap_to_oracle(&self) -> f64 {
        if self.oracle_resolved > 0.0 {
            (self.oracle_resolved - self.resolved.mean) / self.oracle_resolved
        } else {
            0.0
        }
    }
}

/// Builds a row from one or more assignments (one per seed).
pub fn policy_row(data: &Dataset, subset: Subset, policy: &str, family: Family, per_seed: &[Vec<usize>]) -> PolicyRow {
    let tasks = data.indices(subset);
    let all: Vec<Totals> = per_seed.iter().map(|c| totals(data, c, &tasks)).collect();
    let oracle = totals(data, &oracle_choices(data), &tasks).resolved;
    // Per task, means over seeds: what the bootstrap resamples.
    let per_task: Vec<(f64, f64)> = tasks
        .iter()
        .map(|&t| {
            let n = per_seed.len().max(1) as f64;
            let resolved = per_seed.iter().map(|c| data.cells[t][c[t]].resolved as u8 as f64).sum::<f64>() / n;
            let cost = per_seed.iter().map(|c| data.cells[t][c[t]].cost_usd).sum::<f64>() / n;
            (resolved, cost)
        })
        .collect();
    let (resolved_ci95, cost_ci95) = bootstrap(&per_task, 2000, 0x5eed);
    PolicyRow {
        subset,
        policy: policy.to_string(),
        family,
        tasks: tasks.len(),
        resolved: Stat::of(&all.iter().map(|t| t.resolved).collect::<Vec<_>>()),
        cost_usd: Stat::of(&all.iter().map(|t| t.cost_usd).collect::<Vec<_>>()),
        cost_usd_imputed: Stat::of(&all.iter().map(|t| t.cost_usd_imputed).collect::<Vec<_>>()),
        resolved_ci95,
        cost_ci95,
        oracle_resolved: oracle,
    }
}

/// Percentile bootstrap (2.5 %, 97.5 %) of the sums of both columns.
fn bootstrap(per_task: &[(f64, f64)], resamples: usize, seed: u64) -> ([f64; 2], [f64; 2]) {
    if per_task.is_empty() {
        return ([0.0; 2], [0.0; 2]);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut a, mut b) = (Vec::with_capacity(resamples), Vec::with_capacity(resamples));
    for _ in 0..resamples {
        let (mut x, mut y) = (0.0, 0.0);
        for _ in 0..per_task.len() {
            let (r, c) = per_task[rng.random_range(0..per_task.len())];
            x += r;
            y += c;
        }
        a.push(x);
        b.push(y);
    }
    let interval = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        [crate::stats::quantile(&v, 0.025), crate::stats::quantile(&v, 0.975)]
    };
    (interval(a), interval(b))
}

/// The baselines from the data alone, for `subset`: oracle, each always-X,
/// random (1,000 seeded draws: mean ± std), cheapest (the model with the
/// lowest mean recorded cost, always).
pub fn baseline_rows(data: &Dataset, subset: Subset) -> Vec<PolicyRow> {
    let n = data.tasks.len();
    let mut rows = vec![policy_row(data, subset, "oracle (cheapest resolving model)", Family::Oracle, &[oracle_choices(data)])];
    for (m, id) in data.models.iter().enumerate() {
        rows.push(policy_row(data, subset, &format!("always {id}"), Family::Baseline, &[vec![m; n]]));
    }
    let draws: Vec<Vec<usize>> = (0..1000u64)
        .map(|seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..n).map(|_| rng.random_range(0..data.models.len())).collect()
        })
        .collect();
    rows.push(policy_row(data, subset, "random (1,000 seeds)", Family::Baseline, &draws));
    let cheapest = cheapest_model(data);
    rows.push(policy_row(data, subset, &format!("cheapest ({})", data.models[cheapest]), Family::Baseline, &[vec![cheapest; n]]));
    rows
}

/// The model with the lowest mean recorded cost over all tasks.
pub fn cheapest_model(data: &Dataset) -> usize {
    let mean = |m: usize| data.cells.iter().map(|row| row[m].cost_usd).sum::<f64>();
    (0..data.models.len()).min_by(|&a, &b| mean(a).total_cmp(&mean(b))).unwrap_or(0)
}

impl Dataset {
    /// The model `decide` would rank first with scores `p`, costs `cost`
    /// and cost weight `lambda` ([`router::top_index`], `decide`'s own order).
    pub fn pick(&self, p: &[f64], cost: &[f64], lambda: f64) -> usize {
        router::top_index(&self.models, p, cost, lambda)
    }
}

/// Settings of the nested cross-validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CvSettings {
    pub folds: usize,
    pub seeds: Vec<u64>,
    pub inner_folds: usize,
    /// L2 regularisation strengths tried (inner CV picks one).
    pub regs: Vec<f64>,
    /// The λ grid: the cost–quality curve, and where the inner CV picks
    /// each cost-aware mode's λ.
    pub lambdas: Vec<f64>,
}

impl Default for CvSettings {
    fn default() -> Self {
        CvSettings {
            folds: 5,
            seeds: (0..5).collect(),
            inner_folds: 5,
            regs: vec![0.01, 0.1, 1.0, 10.0, 100.0],
            lambdas: vec![0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 100.0],
        }
    }
}

/// The modes a trained head serves, and how the inner CV sets their λ.
pub const MODES: [(&str, &str); 3] = [
    ("quality", "λ = 0: the most likely to resolve, cost-blind"),
    (
        "balanced",
        "the cheapest λ that resolves as many training tasks as the best single model (out of fold), else the λ that resolves most",
    ),
    ("economy", "the λ with the most resolved per dollar on the training tasks"),
];

/// One kernel per feature map the inner CV may choose among (e.g. mean and
/// last-token pooling), built with the training rows' statistics.
pub type KernelSet = Vec<(String, Kernel)>;

/// A model selected and fitted on some training tasks.
#[derive(Debug, Clone)]
pub struct Selected {
    /// Index into the kernel set.
    pub features: usize,
    pub reg: f64,
    pub fits: Vec<Fit>,
    /// Mean recorded cost per model on the training tasks.
    pub mean_cost: Vec<f64>,
    /// Per model: its cost on a task, predicted from the same features.
    pub cost_fits: Vec<learn::CostFit>,
    /// The cost the modes weigh, chosen by the inner CV.
    pub cost_term: CostTerm,
    /// λ per mode, in [`MODES`] order.
    pub lambdas: [f64; 3],
}

impl Selected {
    pub fn probabilities(&self, kernels: &KernelSet, task: usize) -> Vec<f64> {
        self.fits.iter().map(|f| f.probability(&kernels[self.features].1, task)).collect()
    }

    /// Each model's predicted cost on `task`.
    pub fn predicted_costs(&self, kernels: &KernelSet, task: usize) -> Vec<f64> {
        self.cost_fits.iter().map(|f| f.expected(&kernels[self.features].1, task)).collect()
    }

    /// The costs the modes weigh for `task`, by the chosen cost term.
    pub fn costs(&self, kernels: &KernelSet, task: usize) -> Vec<f64> {
        match self.cost_term {
            CostTerm::Mean => self.mean_cost.clone(),
            CostTerm::Predicted => self.predicted_costs(kernels, task),
        }
    }
}

fn fit_all(data: &Dataset, kernel: &Kernel, train: &[usize], reg: f64) -> Vec<Fit> {
    (0..data.models.len()).map(|m| learn::fit(kernel, train, |t| data.cells[t][m].resolved, reg)).collect()
}

/// A recorded cost the cost model may learn from: none for a failed run
/// (recorded at $0 before anything ran; its imputed cost is not the model's).
fn recorded_cost(data: &Dataset, task: usize, model: usize) -> Option<f64> {
    let cell = data.cells[task][model];
    (!cell.failed_run).then_some(cell.cost_usd)
}

fn fit_costs(data: &Dataset, kernel: &Kernel, train: &[usize], reg: f64) -> Vec<learn::CostFit> {
    (0..data.models.len()).map(|m| learn::fit_cost(kernel, train, |t| recorded_cost(data, t, m), reg)).collect()
}

/// The ridge strength of the cost models: the lowest squared error of
/// `ln(cost)` out of fold over `inner`, summed over the models.
fn select_cost_reg(data: &Dataset, kernel: &Kernel, inner: &[Vec<usize>], regs: &[f64]) -> f64 {
    let error = |reg: f64| -> f64 {
        let mut sum = 0.0;
        for (i, val) in inner.iter().enumerate() {
            let fit_on: Vec<usize> = inner.iter().enumerate().filter(|(j, _)| *j != i).flat_map(|(_, f)| f.iter().copied()).collect();
            for (m, fit) in fit_costs(data, kernel, &fit_on, reg).iter().enumerate() {
                for &t in val {
                    if let Some(cost) = recorded_cost(data, t, m).filter(|c| *c > 0.0) {
                        sum += ((fit.offset + fit.fit.logit(kernel, t)) - cost.ln()).powi(2);
                    }
                }
            }
        }
        sum
    };
    regs.iter().map(|&reg| (reg, error(reg))).min_by(|a, b| a.1.total_cmp(&b.1)).map_or(1.0, |(reg, _)| reg)
}

/// Chooses the feature map and regularisation by inner CV on `train` (most
/// resolved at λ = 0, then the lower log loss), the cost models' ridge
/// strength (squared error of log cost), the cost term and each mode's λ
/// on the same out-of-fold predictions, and fits every model on all of
/// `train`.
pub fn select_and_fit(data: &Dataset, kernels: &KernelSet, train: &[usize], settings: &CvSettings, seed: u64) -> Selected {
    let models = data.models.len();
    let inner = learn::folds(train, settings.inner_folds, seed);
    let mean_cost: Vec<f64> =
        (0..models).map(|m| train.iter().map(|&t| data.cells[t][m].cost_usd).sum::<f64>() / train.len().max(1) as f64).collect();
    /// A setting tried by the inner CV: resolved, log loss, feature map,
    /// regularisation, and its out-of-fold probabilities `[task][model]`.
    struct Tried {
        resolved: f64,
        log_loss: f64,
        features: usize,
        reg: f64,
        oof: Vec<Vec<f64>>,
    }
    let mut best: Option<Tried> = None;
    for (f, (_, kernel)) in kernels.iter().enumerate() {
        for &reg in &settings.regs {
            let mut oof = vec![Vec::new(); data.tasks.len()];
            for (i, val) in inner.iter().enumerate() {
                let fit_on: Vec<usize> = inner.iter().enumerate().filter(|(j, _)| *j != i).flat_map(|(_, f)| f.iter().copied()).collect();
                let fits = fit_all(data, kernel, &fit_on, reg);
                for &t in val {
                    oof[t] = fits.iter().map(|fit| fit.probability(kernel, t)).collect();
                }
            }
            let resolved = train.iter().filter(|&&t| data.cells[t][data.pick(&oof[t], &mean_cost, 0.0)].resolved).count() as f64;
            let log_loss: f64 = train
                .iter()
                .flat_map(|&t| (0..models).map(move |m| (t, m)))
                .map(|(t, m)| {
                    let p = oof[t][m].clamp(1e-9, 1.0 - 1e-9);
                    if data.cells[t][m].resolved {
                        -p.ln()
                    } else {
                        -(1.0 - p).ln()
                    }
                })
                .sum();
            let better = match &best {
                None => true,
                Some(b) => resolved > b.resolved || (resolved == b.resolved && log_loss < b.log_loss),
            };
            if better {
                best = Some(Tried { resolved, log_loss, features: f, reg, oof });
            }
        }
    }
    let Tried { features, reg, oof, .. } = best.expect("at least one feature map and one regularisation strength");
    let kernel = &kernels[features].1;

    // The cost models on the chosen features, and their out-of-fold
    // predictions (each inner fold's from the other inner folds).
    let cost_reg = select_cost_reg(data, kernel, &inner, &settings.regs);
    let mut oof_cost = vec![Vec::new(); data.tasks.len()];
    for (i, val) in inner.iter().enumerate() {
        let fit_on: Vec<usize> = inner.iter().enumerate().filter(|(j, _)| *j != i).flat_map(|(_, f)| f.iter().copied()).collect();
        let fits = fit_costs(data, kernel, &fit_on, cost_reg);
        for &t in val {
            oof_cost[t] = fits.iter().map(|fit| fit.expected(kernel, t)).collect();
        }
    }

    // Each mode's λ, on the out-of-fold predictions of the chosen setting,
    // for each cost term.
    let single = (0..models)
        .map(|m| train.iter().fold((0.0, 0.0), |(r, c), &t| (r + data.cells[t][m].resolved as u8 as f64, c + data.cells[t][m].cost_usd)))
        .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)))
        .unwrap_or((0.0, 0.0));
    let lambdas_for = |term: CostTerm| -> ([f64; 3], (bool, f64)) {
        let cost_of = |t: usize| match term {
            CostTerm::Mean => mean_cost.as_slice(),
            CostTerm::Predicted => oof_cost[t].as_slice(),
        };
        let points: Vec<(f64, f64, f64)> = settings
            .lambdas
            .iter()
            .map(|&lambda| {
                let (resolved, cost) = train.iter().fold((0.0, 0.0), |(r, c), &t| {
                    let cell = data.cells[t][data.pick(&oof[t], cost_of(t), lambda)];
                    (r + cell.resolved as u8 as f64, c + cell.cost_usd)
                });
                (lambda, resolved, cost)
            })
            .collect();
        // As good as the best single model, as cheap as possible: what a
        // cost-aware router has to offer over always sending to that model.
        let reaching = points.iter().filter(|p| p.1 >= single.0).min_by(|a, b| a.2.total_cmp(&b.2).then(b.1.total_cmp(&a.1)));
        let most = points.iter().max_by(|a, b| a.1.total_cmp(&b.1).then(b.2.total_cmp(&a.2)));
        let balanced = reaching.or(most);
        let economy = points
            .iter()
            .filter(|p| p.2 > 0.0)
            .max_by(|a, b| (a.1 / a.2).total_cmp(&(b.1 / b.2)).then(a.1.total_cmp(&b.1)))
            .map_or(0.0, |p| p.0);
        // How good the balanced point is: reaching the single model (then
        // the cheaper the better), else resolving more.
        let merit = match (reaching, most) {
            (Some(p), _) => (true, -p.2),
            (None, Some(p)) => (false, p.1),
            (None, None) => (false, 0.0),
        };
        ([0.0, balanced.map_or(0.0, |p| p.0), economy], merit)
    };
    let (mean_lambdas, mean_merit) = lambdas_for(CostTerm::Mean);
    let (predicted_lambdas, predicted_merit) = lambdas_for(CostTerm::Predicted);
    // The prediction has to earn its place: strictly better on the training
    // folds (reaching first, then cheaper or resolving more: the tuples'
    // order).
    let (cost_term, lambdas) =
        if predicted_merit > mean_merit { (CostTerm::Predicted, predicted_lambdas) } else { (CostTerm::Mean, mean_lambdas) };
    let fits = fit_all(data, kernel, train, reg);
    let cost_fits = fit_costs(data, kernel, train, cost_reg);
    Selected { features, reg, fits, mean_cost, cost_fits, cost_term, lambdas }
}

/// One seed of the outer cross-validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedOutcome {
    pub seed: u64,
    /// `[λ index][task]`: the model picked at each λ of the grid, weighing
    /// each model's mean training cost.
    pub by_lambda: Vec<Vec<usize>>,
    /// The same weighing each model's predicted cost on the task.
    #[serde(default)]
    pub by_lambda_predicted: Vec<Vec<usize>>,
    /// `[mode][task]`, in [`MODES`] order, with the λ and cost term the
    /// inner CV chose.
    pub by_mode: Vec<Vec<usize>>,
    /// Per outer fold: the chosen feature map's name (and cost term),
    /// regularisation and λs.
    pub chosen: Vec<(String, f64, [f64; 3])>,
    /// `[task][model]`: the out-of-fold P(resolve).
    #[serde(default)]
    pub oof: Vec<Vec<f64>>,
    /// `[mode][task]`: the candidate ranked second and the first's utility
    /// less its own.
    #[serde(default)]
    pub runner_up: Vec<Vec<(usize, f64)>>,
    /// Per task: the cosine to its nearest training task, and whether that
    /// is below the training fold's novelty threshold ([`doubt`]).
    #[serde(default)]
    pub nearest: Vec<f64>,
    #[serde(default)]
    pub unlike: Vec<bool>,
    /// `[task][model]`: the out-of-fold predicted cost, and the recorded
    /// one's ratio to it is what [`cost_prediction`] summarises.
    #[serde(default)]
    pub predicted_cost: Vec<Vec<f64>>,
}

/// One seed of `folds`-fold cross-validation: each fold's tasks are scored
/// by a model [`select_and_fit`] chose and fitted on the other folds only.
/// `kernels_for(train)` builds the kernel set from the training tasks'
/// statistics alone.
pub fn cross_validate_seed(data: &Dataset, kernels_for: &dyn Fn(&[usize]) -> KernelSet, settings: &CvSettings, seed: u64) -> SeedOutcome {
    let n = data.tasks.len();
    let all: Vec<usize> = (0..n).collect();
    let outer = learn::folds(&all, settings.folds, seed);
    let mut by_lambda = vec![vec![0; n]; settings.lambdas.len()];
    let mut by_lambda_predicted = vec![vec![0; n]; settings.lambdas.len()];
    let mut by_mode = vec![vec![0; n]; MODES.len()];
    let mut chosen = Vec::new();
    let mut oof = vec![Vec::new(); n];
    let mut predicted_cost = vec![Vec::new(); n];
    let mut runner_up = vec![vec![(0, 0.0); n]; MODES.len()];
    let (mut nearest, mut unlike) = (vec![0.0; n], vec![false; n]);
    for (f, test) in outer.iter().enumerate() {
        let train: Vec<usize> = all.iter().copied().filter(|t| !test.contains(t)).collect();
        let kernels = kernels_for(&train);
        let selected = select_and_fit(data, &kernels, &train, settings, seed.wrapping_mul(1000).wrapping_add(f as u64 + 1));
        let kernel = &kernels[selected.features].1;
        let threshold = doubt::novelty_threshold(kernel, &train);
        for &t in test {
            let p = selected.probabilities(&kernels, t);
            let predicted = selected.predicted_costs(&kernels, t);
            for (l, &lambda) in settings.lambdas.iter().enumerate() {
                by_lambda[l][t] = data.pick(&p, &selected.mean_cost, lambda);
                by_lambda_predicted[l][t] = data.pick(&p, &predicted, lambda);
            }
            let costs = selected.costs(&kernels, t);
            for (m, &lambda) in selected.lambdas.iter().enumerate() {
                let (first, second, margin) = doubt::first_two(data, &p, &costs, lambda);
                by_mode[m][t] = first;
                runner_up[m][t] = (second, margin);
            }
            nearest[t] = doubt::nearest(kernel, t, &train).0;
            unlike[t] = nearest[t] < threshold;
            oof[t] = p;
            predicted_cost[t] = predicted;
        }
        chosen.push((format!("{} · {} cost", kernels[selected.features].0, selected.cost_term.name()), selected.reg, selected.lambdas));
    }
    SeedOutcome { seed, by_lambda, by_lambda_predicted, by_mode, chosen, oof, runner_up, nearest, unlike, predicted_cost }
}

/// How well the cost models predict, out of fold: per model, the median
/// and 90th percentile of `|ln(recorded ÷ predicted)|` over the tasks
/// with a recorded cost, against the same for its mean training cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostPrediction {
    pub model: String,
    pub tasks: usize,
    pub median_log_error: f64,
    pub p90_log_error: f64,
    pub median_log_error_of_mean: f64,
    pub p90_log_error_of_mean: f64,
}

/// [`CostPrediction`] per model over every seed's out-of-fold predictions,
/// against the model's mean cost over the other tasks (leave one out).
pub fn cost_prediction(data: &Dataset, outcomes: &[SeedOutcome]) -> Vec<CostPrediction> {
    let quantile = |mut v: Vec<f64>, q: f64| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    (0..data.models.len())
        .map(|m| {
            let mut predicted = Vec::new();
            let mut of_mean = Vec::new();
            for o in outcomes.iter().filter(|o| o.predicted_cost.len() == data.tasks.len()) {
                // The mean cost a fold trained with, recovered per fold from
                // its training tasks, is approximated by the mean over all
                // other tasks (leave-one-out), which differs from the fold's
                // by at most the spread of one fold's share.
                for t in 0..data.tasks.len() {
                    let Some(recorded) = recorded_cost(data, t, m).filter(|c| *c > 0.0) else { continue };
                    let Some(&p) = o.predicted_cost[t].get(m) else { continue };
                    predicted.push((recorded / p).ln().abs());
                    let others = (0..data.tasks.len()).filter(|&u| u != t).map(|u| data.cells[u][m].cost_usd).sum::<f64>()
                        / (data.tasks.len() - 1).max(1) as f64;
                    of_mean.push((recorded / others).ln().abs());
                }
            }
            CostPrediction {
                model: data.models[m].clone(),
                tasks: predicted.len() / outcomes.len().max(1),
                median_log_error: quantile(predicted.clone(), 0.5),
                p90_log_error: quantile(predicted, 0.9),
                median_log_error_of_mean: quantile(of_mean.clone(), 0.5),
                p90_log_error_of_mean: quantile(of_mean, 0.9),
            }
        })
        .collect()
}

/// A point of a cost–quality curve (all tasks).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub lambda: f64,
    pub resolved: Stat,
    pub cost_usd: Stat,
}

/// A router's cost–quality curve over the λ grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    pub policy: String,
    pub points: Vec<CurvePoint>,
}

/// The curve of CV outcomes over the λ grid, on all tasks.
pub fn cv_curve(data: &Dataset, policy: &str, outcomes: &[SeedOutcome], lambdas: &[f64]) -> Curve {
    curve_of(data, policy, lambdas, &outcomes.iter().map(|o| &o.by_lambda).collect::<Vec<_>>())
}

/// [`cv_curve`] with each model's cost predicted per task.
pub fn cv_curve_predicted(data: &Dataset, policy: &str, outcomes: &[SeedOutcome], lambdas: &[f64]) -> Curve {
    curve_of(data, policy, lambdas, &outcomes.iter().map(|o| &o.by_lambda_predicted).collect::<Vec<_>>())
}

/// A curve from each seed's picks `[λ index][task]`.
fn curve_of(data: &Dataset, policy: &str, lambdas: &[f64], per_seed: &[&Vec<Vec<usize>>]) -> Curve {
    let all = data.indices(Subset::All);
    let points = lambdas
        .iter()
        .enumerate()
        .filter(|(l, _)| per_seed.iter().all(|picks| picks.len() > *l))
        .map(|(l, &lambda)| {
            let t: Vec<Totals> = per_seed.iter().map(|picks| totals(data, &picks[l], &all)).collect();
            CurvePoint {
                lambda,
                resolved: Stat::of(&t.iter().map(|x| x.resolved).collect::<Vec<_>>()),
                cost_usd: Stat::of(&t.iter().map(|x| x.cost_usd).collect::<Vec<_>>()),
            }
        })
        .collect();
    Curve { policy: policy.into(), points }
}

/// How often each setting was chosen across outer folds, as a sentence.
pub fn chosen_summary(outcomes: &[SeedOutcome]) -> String {
    let mut features = std::collections::BTreeMap::<String, usize>::new();
    let mut regs = std::collections::BTreeMap::<String, usize>::new();
    let mut balanced = std::collections::BTreeMap::<String, usize>::new();
    let mut total = 0;
    for (name, reg, lambdas) in outcomes.iter().flat_map(|o| &o.chosen) {
        *features.entry(name.clone()).or_default() += 1;
        *regs.entry(format!("{reg}")).or_default() += 1;
        *balanced.entry(format!("{}", lambdas[1])).or_default() += 1;
        total += 1;
    }
    let list = |m: &std::collections::BTreeMap<String, usize>| m.iter().map(|(k, v)| format!("{k} ×{v}")).collect::<Vec<_>>().join(", ");
    format!("over {total} outer folds: features {}; regularisation {}; balanced λ {}", list(&features), list(&regs), list(&balanced))
}

/// One task as the router decided it: the top candidate per mode under
/// the similarity scoring and, when a head was given, under the head; the
/// tokens prefilled and the prefilling decide's time. Native studies and
/// the page's in-browser evaluation record the same shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoutedTask {
    pub id: String,
    pub tokens_used: usize,
    pub decide_ms: f64,
    /// Mode → candidate id.
    pub similarity_top: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub head_top: std::collections::BTreeMap<String, String>,
}

/// Totals of routed tasks' choices under one scoring and mode, over the
/// tasks routed (ids looked up in `data`); tasks it does not know are skipped.
pub fn routed_totals(data: &Dataset, routed: &[RoutedTask], head: bool, mode: &str) -> Totals {
    let mut choices = vec![0; data.tasks.len()];
    let mut tasks = Vec::new();
    for r in routed {
        let tops = if head { &r.head_top } else { &r.similarity_top };
        if let (Some(t), Some(m)) = (data.task_index(&r.id), tops.get(mode).and_then(|id| data.model_index(id))) {
            choices[t] = m;
            tasks.push(t);
        }
    }
    totals(data, &choices, &tasks)
}

/// The trained head a study wrote, by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadRecord {
    /// `head-` and 8 hex digits of the file's SHA-256.
    pub id: String,
    pub file: String,
    pub trained_on: String,
}

/// One `router_max_tokens` × truncation side of the trade-off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TruncationPoint {
    pub max_tokens: usize,
    pub side: router::TruncationSide,
    /// Mean tokens prefilled per task.
    pub tokens_used_mean: f64,
    /// The prefilling decide of every task at this setting.
    pub decide: Option<crate::Summary>,
    /// On all tasks: the similarity scoring's default mode, and the head's
    /// cost-blind and balanced modes (cross-validated).
    pub rows: Vec<PolicyRow>,
}

/// The whole quality evaluation, as a report section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityStudy {
    /// What the data is and where it came from.
    pub dataset: String,
    pub tasks: usize,
    pub failed_runs: usize,
    /// How failed runs count.
    pub failed_run_rule: String,
    pub cv: CvSettings,
    /// Mode name and how its λ is set, for the trained rows.
    pub modes: Vec<(String, String)>,
    /// Baselines, untrained and trained routers, for every subset.
    pub rows: Vec<PolicyRow>,
    /// Cost–quality curves over the λ grid (all tasks).
    pub curves: Vec<Curve>,
    /// Per trained policy, which settings the inner CV chose.
    pub chosen: Vec<(String, String)>,
    /// The prefilling decide of every task at the study's main setting.
    pub decide: Option<crate::Summary>,
    pub router_max_tokens: usize,
    pub truncation_side: router::TruncationSide,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<HeadRecord>,
    #[serde(default)]
    pub truncation: Vec<TruncationPoint>,
    /// How the published SWE-bench 112 table's rules differ from ours.
    pub published_note: String,
    /// Every task at the main setting: similarity decisions from `decide`,
    /// and the deployable head's (which saw every task in training: these
    /// check that another engine reproduces the decisions, not quality).
    #[serde(default)]
    pub per_task: Vec<RoutedTask>,
    /// The head's out-of-fold calibration per candidate ([`doubt`]).
    #[serde(default)]
    pub calibration: Vec<doubt::CandidateCalibration>,
    /// Resolved and cost of the head's decisions flagged unsure and not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doubt: Option<doubt::DoubtStudy>,
    /// How well the head's per-task cost models predict, out of fold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cost_prediction: Vec<CostPrediction>,
}

/// One backbone's study in a line: "does a bigger router buy better
/// routing?" answered from each backbone's own report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackboneRow {
    /// The provenance's description (`gemma3, 18 layers, hidden 640, …`).
    pub backbone: String,
    pub checkpoint_id: String,
    pub head_id: Option<String>,
    pub similarity_quality: Option<f64>,
    pub similarity_balanced: Option<f64>,
    pub head_quality: Option<PolicyRow>,
    pub head_balanced: Option<PolicyRow>,
    /// The most each head curve (mean costs, predicted costs) resolves
    /// within the best single model's cost, with that point's cost.
    pub within_best_single: Vec<(String, Option<(f64, f64)>)>,
    /// The best single model's name, resolved and cost.
    pub best_single: Option<(String, f64, f64)>,
    /// Median prefilling decide per task (ms).
    pub decide_p50_ms: Option<f64>,
    /// What the deployable head reads and weighs.
    pub head_trained_on: Option<String>,
}

impl Curve {
    /// The point resolving most (then the cheaper) at a cost of at most `cost`.
    pub fn best_within(&self, cost: f64) -> Option<&CurvePoint> {
        self.points
            .iter()
            .filter(|p| p.cost_usd.mean <= cost)
            .max_by(|a, b| a.resolved.mean.total_cmp(&b.resolved.mean).then(b.cost_usd.mean.total_cmp(&a.cost_usd.mean)))
    }
}

impl QualityStudy {
    /// The always-X baseline resolving most on all tasks (then the cheaper).
    pub fn best_single(&self) -> Option<&PolicyRow> {
        self.rows
            .iter()
            .filter(|r| r.subset == Subset::All && r.family == Family::Baseline && r.policy.starts_with("always "))
            .max_by(|a, b| a.resolved.mean.total_cmp(&b.resolved.mean).then(b.cost_usd.mean.total_cmp(&a.cost_usd.mean)))
    }

    /// This study's [`BackboneRow`]; `backbone` and `checkpoint_id` from its report.
    pub fn backbone_row(&self, backbone: &str, checkpoint_id: &str) -> BackboneRow {
        let row = |policy: &str| self.rows.iter().find(|r| r.subset == Subset::All && r.policy == policy).cloned();
        let best = self.best_single();
        let within_best_single = self
            .curves
            .iter()
            .filter(|c| c.policy.starts_with("router, trained head"))
            .map(|c| {
                let point = best.and_then(|best| c.best_within(best.cost_usd.mean)).map(|p| (p.resolved.mean, p.cost_usd.mean));
                (c.policy.trim_start_matches("router, trained head (CV)").trim_start_matches(", ").to_string(), point)
            })
            .collect();
        BackboneRow {
            backbone: backbone.to_string(),
            checkpoint_id: checkpoint_id.to_string(),
            head_id: self.head.as_ref().map(|h| h.id.clone()),
            similarity_quality: row("router, similarity scoring, quality").map(|r| r.resolved.mean),
            similarity_balanced: row("router, similarity scoring, balanced").map(|r| r.resolved.mean),
            head_quality: row("router, trained head (CV), quality"),
            head_balanced: row("router, trained head (CV), balanced"),
            within_best_single,
            best_single: best.map(|b| (b.policy.trim_start_matches("always ").to_string(), b.resolved.mean, b.cost_usd.mean)),
            decide_p50_ms: self.decide.map(|d| d.p50),
            head_trained_on: self.head.as_ref().map(|h| h.trained_on.clone()),
        }
    }
}

impl BackboneRow {
    /// "111.8 at $16.93" per head curve, "none" where no point is within.
    pub fn within_label(&self) -> String {
        self.within_best_single
            .iter()
            .map(|(curve, point)| {
                let costs = if curve.is_empty() { "mean costs" } else { "per-task costs" };
                match point {
                    Some((resolved, cost)) => format!("{resolved:.1} at {} ({costs})", money(*cost)),
                    None => format!("none ({costs})"),
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The per-backbone table, in Markdown.
pub fn backbone_table(rows: &[BackboneRow]) -> String {
    let mut out = String::from(
        "| backbone | similarity, quality / balanced | head (CV), quality | head (CV), balanced | head's λ curve within the best single's cost | decide p50 |\n|---|---:|---:|---:|---|---:|\n",
    );
    let opt = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.0}"));
    let policy =
        |r: &Option<PolicyRow>| r.as_ref().map_or("—".to_string(), |r| format!("{} at {}", count(&r.resolved), money(r.cost_usd.mean)));
    for r in rows {
        out.push_str(&format!(
            "| {} | {} / {} | {} | {} | {} | {} |\n",
            r.backbone,
            opt(r.similarity_quality),
            opt(r.similarity_balanced),
            policy(&r.head_quality),
            policy(&r.head_balanced),
            r.within_label(),
            r.decide_p50_ms.map_or("—".to_string(), crate::fmt::format_ms)
        ));
    }
    out
}

/// The failed-run rule, as reports state it.
pub const FAILED_RUN_RULE: &str = "a run with zero input tokens, zero output tokens and zero cost (all on SWE-bench) is a failed run: \
unresolved, at its recorded $0 in `cost`; `cost (imputed)` charges it the model's mean cost over the split's runs that did run";

/// Dollars as the tables print them: `$18.27`.
pub fn money(v: f64) -> String {
    format!("${v:.2}")
}

/// A count over seeds as the tables print it: `122.4 ± 2.9`, or `113` when exact.
pub fn count(s: &Stat) -> String {
    if s.std > 0.0 {
        format!("{:.1} ± {:.1}", s.mean, s.std)
    } else {
        format!("{:.0}", s.mean)
    }
}

/// One table row per policy (Markdown).
pub fn rows_table(rows: &[PolicyRow]) -> String {
    let mut out = String::from(
        "| policy | resolved | 95 % CI | rate | cost | cost (imputed) | resolved per $ | gap to oracle |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let cost =
            if r.cost_usd.std > 0.0 { format!("{} ± {:.2}", money(r.cost_usd.mean), r.cost_usd.std) } else { money(r.cost_usd.mean) };
        out.push_str(&format!(
            "| {} | {}/{} | {:.0}–{:.0} | {:.1} % | {} | {} | {} | {:.1} % |\n",
            r.policy,
            count(&r.resolved),
            r.tasks,
            r.resolved_ci95[0],
            r.resolved_ci95[1],
            100.0 * r.rate(),
            cost,
            money(r.cost_usd_imputed.mean),
            if r.per_dollar().is_finite() { format!("{:.2}", r.per_dollar()) } else { "∞".into() },
            100.0 * r.gap_to_oracle()
        ));
    }
    out
}

impl QualityStudy {
    /// The head's calibration per candidate, as a Markdown table.
    pub fn calibration_table(&self) -> String {
        let mut out = String::from(
            "### Calibration of the head's P(resolve), out of fold (all seeds)\n\n| candidate | resolve rate | Brier | Brier of the rate | spread σ |\n|---|---:|---:|---:|---:|\n",
        );
        for c in &self.calibration {
            out.push_str(&format!(
                "| {} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
                c.candidate, c.base_rate, c.brier, c.brier_base_rate, c.p_sigma
            ));
        }
        out
    }

    /// Plain sentences on what the study shows (all tasks), computed from
    /// its rows and curves: whether the backbone's features beat TF-IDF,
    /// whether any router reaches the best single model at its cost, and how
    /// the untrained scoring compares with random.
    pub fn verdicts(&self) -> Vec<String> {
        let row = |policy: &str| self.rows.iter().find(|r| r.subset == Subset::All && r.policy == policy);
        let pm = |r: &PolicyRow| count(&r.resolved);
        let mut out = Vec::new();
        if let (Some(head), Some(text)) = (row("router, trained head (CV), quality"), row("TF-IDF + logistic regression (CV), quality")) {
            let numbers = format!(
                "the head resolves {} of {} at {}, TF-IDF {} at {}",
                pm(head),
                head.tasks,
                money(head.cost_usd.mean),
                pm(text),
                money(text.cost_usd.mean)
            );
            out.push(if head.resolved.mean > text.resolved.mean {
                format!("Cost-blind, the backbone's features beat TF-IDF of the prompt text: {numbers}.")
            } else {
                format!("Cost-blind, the backbone's features do not beat TF-IDF of the prompt text: {numbers}.")
            });
        }
        let best = self.best_single();
        if let Some(best) = best {
            for curve in &self.curves {
                let within = curve.best_within(best.cost_usd.mean);
                out.push(match within {
                    Some(p) if p.resolved.mean >= best.resolved.mean => format!(
                        "Cost-aware, {} reaches {} ({:.0} at {}): {:.1} at {} (λ = {}).",
                        curve.policy,
                        best.policy,
                        best.resolved.mean,
                        money(best.cost_usd.mean),
                        p.resolved.mean,
                        money(p.cost_usd.mean),
                        p.lambda
                    ),
                    Some(p) => format!(
                        "Cost-aware, {} does not reach {} ({:.0} at {}): within that cost its λ curve resolves at most {:.1} (λ = {}, {}).",
                        curve.policy,
                        best.policy,
                        best.resolved.mean,
                        money(best.cost_usd.mean),
                        p.resolved.mean,
                        p.lambda,
                        money(p.cost_usd.mean)
                    ),
                    None => format!(
                        "Cost-aware, every point of {}'s λ curve costs more than {} ({}).",
                        curve.policy,
                        best.policy,
                        money(best.cost_usd.mean)
                    ),
                });
            }
            out.extend(self.cost_prediction_verdict(best));
            out.extend(self.truncation_choice_verdict());
        }
        let random = self.rows.iter().find(|r| r.subset == Subset::All && r.policy.starts_with("random"));
        if let (Some(similarity), Some(random)) = (row("router, similarity scoring, quality"), random) {
            // Above random by more than two of its standard deviations is a
            // signal; anything less is not one.
            let verdict = if similarity.resolved.mean > random.resolved.mean + 2.0 * random.resolved.std {
                "descriptor similarity carries some signal on this backbone, but a trained head is the scoring to use"
            } else {
                "descriptor similarity is not routing"
            };
            out.push(format!(
                "The untrained similarity scoring resolves {:.0} cost-blind, against random's {:.1} ± {:.1}: {verdict}.",
                similarity.resolved.mean, random.resolved.mean, random.resolved.std
            ));
        }
        out
    }

    /// Whether predicting each task's cost moves the head's cost–quality
    /// curve: the cheapest point of each curve that resolves as many as
    /// `best` (the best single model), and the most either resolves within
    /// its cost.
    fn cost_prediction_verdict(&self, best: &PolicyRow) -> Option<String> {
        let curve = |policy: &str| self.curves.iter().find(|c| c.policy == policy);
        let (mean, predicted) = (curve("router, trained head (CV)")?, curve("router, trained head (CV), per-task cost")?);
        let cheapest_reaching = |c: &Curve| {
            c.points
                .iter()
                .filter(|p| p.resolved.mean >= best.resolved.mean)
                .min_by(|a, b| a.cost_usd.mean.total_cmp(&b.cost_usd.mean))
                .map_or_else(|| "none".to_string(), |p| format!("{} (λ = {})", money(p.cost_usd.mean), p.lambda))
        };
        let most_within = |c: &Curve| c.best_within(best.cost_usd.mean).map_or(f64::NAN, |p| p.resolved.mean);
        let (m, p) = (most_within(mean), most_within(predicted));
        let moved = if p.is_nan() || m.is_nan() || (p - m).abs() < 1.0 {
            "does not move the curve by a task"
        } else if p > m {
            "moves the curve up"
        } else {
            "moves the curve down"
        };
        Some(format!(
            "Per-task cost prediction {moved}: within {}'s {} the head resolves at most {:.1} weighing mean costs, {:.1} weighing predicted ones; the cheapest point resolving {:.0}: {} with mean costs, {} with predicted ones.",
            best.policy,
            money(best.cost_usd.mean),
            m,
            p,
            best.resolved.mean,
            cheapest_reaching(mean),
            cheapest_reaching(predicted)
        ))
    }

    /// Whether the truncation sweep's best cell survives being chosen
    /// inside the training folds: the head with the truncation chosen by
    /// its inner CV, against the best cell read off the sweep.
    fn truncation_choice_verdict(&self) -> Option<String> {
        let chosen = self
            .rows
            .iter()
            .find(|r| r.subset == Subset::All && r.policy == "router, trained head (CV, truncation chosen inside), quality")?;
        let best_cell = self
            .truncation
            .iter()
            .flat_map(|p| p.rows.iter().filter(|r| r.policy == "head (CV), quality").map(move |r| (p, r)))
            .max_by(|a, b| a.1.resolved.mean.total_cmp(&b.1.resolved.mean).then(b.1.cost_usd.mean.total_cmp(&a.1.cost_usd.mean)))?;
        let (point, cell) = best_cell;
        Some(format!(
            "With the truncation chosen inside the training folds too, the head resolves {} of {} cost-blind at {}; the sweep's best cell, read off after the fact, shows {} at {} ({} tokens, {}).",
            count(&chosen.resolved),
            chosen.tasks,
            money(chosen.cost_usd.mean),
            count(&cell.resolved),
            money(cell.cost_usd.mean),
            point.max_tokens,
            point.side.name()
        ))
    }

    /// The cost models' out-of-fold error against each model's mean cost.
    pub fn cost_prediction_table(&self) -> String {
        let mut out = String::from(
            "### Per-task cost prediction, out of fold (all seeds)\n\nThe error is the absolute log ratio of recorded to predicted cost (0.69 is a factor of 2), against predicting each candidate's mean cost.\n\n| candidate | tasks with a cost | median error | p90 error | median error, mean cost | p90 error, mean cost |\n|---|---:|---:|---:|---:|---:|\n",
        );
        for c in &self.cost_prediction {
            out.push_str(&format!(
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                c.model, c.tasks, c.median_log_error, c.p90_log_error, c.median_log_error_of_mean, c.p90_log_error_of_mean
            ));
        }
        out
    }

    /// Every subset's table, the chosen settings and the truncation table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        for subset in Subset::ALL {
            let rows: Vec<PolicyRow> = self.rows.iter().filter(|r| r.subset == subset).cloned().collect();
            if rows.is_empty() || rows[0].tasks == 0 {
                continue;
            }
            out.push_str(&format!("### {}\n\n{}\n", subset.label(), rows_table(&rows)));
        }
        for (policy, chosen) in &self.chosen {
            out.push_str(&format!("{policy}: {chosen}\n"));
        }
        if !self.calibration.is_empty() {
            out.push_str(&format!("\n{}", self.calibration_table()));
        }
        if !self.cost_prediction.is_empty() {
            out.push_str(&format!("\n{}", self.cost_prediction_table()));
        }
        if let Some(doubt) = &self.doubt {
            out.push_str(&format!("\n{}", doubt.table()));
        }
        if !self.truncation.is_empty() {
            out.push_str(
                "\n### Truncation trade-off (all tasks)\n\n| router_max_tokens | kept | tokens (mean) | decide p50 | decide p95 | policy | resolved | cost |\n|---:|---|---:|---:|---:|---|---:|---:|\n",
            );
            for p in &self.truncation {
                for r in &p.rows {
                    out.push_str(&format!(
                        "| {} | {} | {:.0} | {} | {} | {} | {}/{} | {} |\n",
                        p.max_tokens,
                        p.side.name(),
                        p.tokens_used_mean,
                        p.decide.map_or("—".into(), |s| crate::fmt::format_ms(s.p50)),
                        p.decide.map_or("—".into(), |s| crate::fmt::format_ms(s.p95)),
                        r.policy,
                        count(&r.resolved),
                        r.tasks,
                        money(r.cost_usd.mean)
                    ));
                }
            }
        }
        out
    }
}

/// Where `swebench112_comparison_table.md`'s rules differ from this
/// evaluation's, stated beside its SWE-bench 112 rows.
pub const PUBLISHED_NOTE: &str = "The published SWE-bench 112 table (swebench112_comparison_table.md) is a different measurement of the same 112 tasks: \
its oracle is 'any of 8 resolves' (85/112) at $116.49, a cost rule it does not state and that is far above the cheapest resolving model's \
(this evaluation's oracle); its Always-MiniMax costs $0.00 (every MiniMax run recorded at zero), where the result file records cost for the MiniMax \
runs that did run; its routers' rows (ACRouter, RouteLLM, TF-IDF + LogReg/MLP, LLM 0-shot) come from its own runs and are not recomputed here.";

#[cfg(test)]
mod tests {
    use super::*;

    const MODELS: [&str; 3] = ["big", "mid", "small"];

    /// `n` tasks; task t is resolved by `big` always, by `mid` when t is
    /// even, by `small` when t % 3 == 0; costs 10, 2, 1 (a failed `small`
    /// run at t % 5 == 4).
    fn synthetic(n: usize) -> (String, String) {
        let mut tasks = String::new();
        let mut csv = String::from("task_id,source_split,model,resolved,in_tok,out_tok,cost_usd\n");
        for t in 0..n {
            let split = if t < n / 2 { "old112" } else { "new64" };
            tasks.push_str(&format!(
                "{{\"task_id\": \"t{t}\", \"source_split\": \"{split}\", \"bench\": \"b\", \"prompt\": \"task {t}\"}}\n"
            ));
            for (m, model) in MODELS.iter().enumerate() {
                let failed = m == 2 && t % 5 == 4;
                let resolved = !failed && (m == 0 || (m == 1 && t % 2 == 0) || (m == 2 && t % 3 == 0));
                let cost = if failed { 0.0 } else { [10.0, 2.0, 1.0][m] };
                let tokens = if failed { 0 } else { 100 };
                csv.push_str(&format!("t{t},{split},{model},{},{tokens},{tokens},{cost}\n", resolved as u8));
            }
        }
        (tasks, csv)
    }

    fn data(n: usize) -> Dataset {
        let (tasks, csv) = synthetic(n);
        Dataset::parse(&tasks, "tasks.jsonl", &csv, "results.csv", &MODELS).unwrap()
    }

    #[test]
    fn failed_runs_are_found_and_their_cost_imputed_from_the_split() {
        let d = data(30);
        assert_eq!(d.failed_runs(), 6);
        // t4 is old112: small's mean over the old112 runs that ran is $1.
        assert_eq!(d.cells[4][2], Cell { resolved: false, cost_usd: 0.0, failed_run: true });
        assert_eq!(d.imputed_cost[4][2], 1.0);
        assert_eq!(d.indices(Subset::Swebench112).len(), 15);
    }

    #[test]
    fn malformed_data_is_named_with_file_and_line() {
        let (tasks, csv) = synthetic(4);
        let bad = |csv: &str| Dataset::parse(&tasks, "tasks.jsonl", csv, "results.csv", &MODELS).unwrap_err().to_string();
        assert!(bad(&csv.replace("t0,old112,mid,1", "t0,old112,mid,yes")).contains("results.csv, line 3: `resolved` is `yes`"));
        assert!(bad(&csv.replace("t3,new64,small,1,100,100,1", "t3,new64,small,1,100,100,-1")).contains("`cost_usd` is `-1`"));
        let missing: String = csv.lines().filter(|l| !l.starts_with("t2,new64,big")).map(|l| format!("{l}\n")).collect();
        assert!(bad(&missing).contains("no row for task `t2` × `big`"));
        let twice = format!("{csv}t0,old112,big,1,5,5,3\n");
        assert!(bad(&twice).contains("a second row for task `t0` × `big`"));
        assert!(bad(&csv.replace("cost_usd", "price")).contains("no `cost_usd` column"));
        let err = Dataset::parse("{\"task_id\": 3}\n", "tasks.jsonl", &csv, "results.csv", &MODELS).unwrap_err().to_string();
        assert!(err.starts_with("tasks.jsonl, line 1:"), "{err}");
    }

    #[test]
    fn the_oracle_takes_the_cheapest_resolving_model_and_bounds_every_baseline() {
        let d = data(30);
        let oracle = oracle_choices(&d);
        assert_eq!(oracle[0], 2, "t0: small resolves and is cheapest");
        assert_eq!(oracle[2], 1, "t2: mid");
        assert_eq!(oracle[1], 0, "t1: only big");
        let rows = baseline_rows(&d, Subset::All);
        assert_eq!(rows[0].resolved.mean, 30.0);
        assert!(rows.iter().all(|r| r.resolved.mean <= 30.0 && r.gap_to_oracle() >= 0.0));
        let always_big = rows.iter().find(|r| r.policy == "always big").unwrap();
        assert_eq!((always_big.resolved.mean, always_big.cost_usd.mean), (30.0, 300.0));
        // Random's mean sits near the expected value (1 + 1/2 + ~4/15 per task).
        let random = rows.iter().find(|r| r.policy.starts_with("random")).unwrap();
        let expected: f64 = (0..30).map(|t| d.cells[t].iter().filter(|c| c.resolved).count() as f64 / 3.0).sum();
        assert!((random.resolved.mean - expected).abs() < 0.5, "{} vs {expected}", random.resolved.mean);
        assert!(random.resolved.std > 0.0);
        assert_eq!(rows.last().unwrap().policy, "cheapest (small)");
    }

    #[test]
    fn a_head_learns_what_its_features_carry_and_nothing_more() {
        let d = data(60);
        let informative: Vec<Vec<f32>> = (0..60).map(|t| vec![(t % 2 == 0) as u8 as f32, (t % 3 == 0) as u8 as f32]).collect();
        let constant: Vec<Vec<f32>> = (0..60).map(|_| vec![1.0, 1.0]).collect();
        let settings = CvSettings { seeds: vec![0, 1], ..CvSettings::default() };
        let run = |features: &Vec<Vec<f32>>| {
            let outcomes: Vec<SeedOutcome> = settings
                .seeds
                .iter()
                .map(|&s| {
                    cross_validate_seed(&d, &|train: &[usize]| vec![("x".into(), learn::dense_kernel(features, train).0)], &settings, s)
                })
                .collect();
            policy_row(&d, Subset::All, "head", Family::Trained, &outcomes.iter().map(|o| o.by_mode[1].clone()).collect::<Vec<_>>())
        };
        // Balanced: as many resolved as the best single model (big, 60), as
        // cheaply as possible. Informative features can send even tasks to
        // `mid` (always resolved there); constant ones cannot move anything.
        let smart = run(&informative);
        let blind = run(&constant);
        assert_eq!(blind.resolved.mean, 60.0);
        assert_eq!(blind.cost_usd.mean, 600.0);
        assert!(
            smart.resolved.mean >= 57.0 && smart.cost_usd.mean < 0.85 * blind.cost_usd.mean,
            "{:?} {:?}",
            smart.resolved,
            smart.cost_usd
        );
        // Every task is scored exactly once per seed: totals count 60 tasks.
        assert_eq!(smart.tasks, 60);
    }

    #[test]
    fn the_heads_doubt_is_measured_out_of_fold_and_can_tell_sure_from_unsure() {
        let d = data(60);
        // Tasks 0–54 carry what resolves them; each of the last five sits
        // far out on a coordinate of its own, so it is unlike every other
        // task whichever fold trains.
        let features: Vec<Vec<f32>> = (0..60)
            .map(|t| {
                let mut row = vec![(t % 2 == 0) as u8 as f32, (t % 3 == 0) as u8 as f32, 0.0, 0.0, 0.0, 0.0, 0.0];
                if t >= 55 {
                    row[2 + t - 55] = 50.0;
                }
                row
            })
            .collect();
        let settings = CvSettings { seeds: vec![0, 1, 2], ..CvSettings::default() };
        let outcomes: Vec<SeedOutcome> = settings
            .seeds
            .iter()
            .map(|&s| cross_validate_seed(&d, &|train: &[usize]| vec![("x".into(), learn::dense_kernel(&features, train).0)], &settings, s))
            .collect();
        for o in &outcomes {
            assert_eq!((o.oof.len(), o.nearest.len(), o.unlike.len()), (60, 60, 60));
            assert!(o.oof.iter().all(|p| p.len() == 3 && p.iter().all(|v| (0.0..=1.0).contains(v))));
            // The first two of each mode are two candidates, the first the pick.
            for m in 0..MODES.len() {
                for t in 0..60 {
                    let (second, margin) = o.runner_up[m][t];
                    assert!(second != o.by_mode[m][t] && margin >= 0.0);
                }
            }
            assert!(o.unlike[55..].iter().all(|&u| u), "the outliers are unlike the training tasks: {:?}", &o.nearest[50..]);
            assert!(o.unlike[..55].iter().filter(|&&u| u).count() <= 10, "{:?}", o.unlike);
        }

        let calibration = doubt::calibration(&d, &outcomes);
        let big = &calibration[0];
        // `big` resolves every task: its base rate is 1 and forecasting it is perfect.
        assert_eq!((big.base_rate, big.brier_base_rate), (1.0, 0.0));
        assert!(big.brier < 0.05, "{big:?}");
        // `mid` (t even) is learnable from the first feature: far better than its rate.
        assert!(calibration[1].brier < 0.5 * calibration[1].brier_base_rate, "{:?}", calibration[1]);
        for c in &calibration {
            assert_eq!(c.bins.iter().map(|b| b.count).sum::<usize>(), 60 * 3, "every prediction in one bin");
            assert!(c.p_sigma >= 0.0 && c.p_sigma < 0.5);
        }

        let study = doubt::doubt_study(&d, &outcomes);
        assert_eq!(study.rows.len(), 9);
        for r in &study.rows {
            assert_eq!(r.flagged.mean + r.unflagged.mean, 60.0, "{r:?}");
            assert!(r.flagged_resolved.mean <= r.flagged.mean && r.unflagged_resolved.mean <= r.unflagged.mean);
        }
        let unlike = study.rows.iter().find(|r| r.mode == "quality" && r.reason == doubt::Reason::UnlikeTraining).unwrap();
        assert!(unlike.flagged.mean >= 5.0, "{unlike:?}");
        let either = study.rows.iter().find(|r| r.mode == "quality" && r.reason == doubt::Reason::Either).unwrap();
        assert!(either.flagged.mean >= unlike.flagged.mean);
        assert!(study.table().contains("| quality | unlike the training tasks |"));
    }

    #[test]
    fn the_first_two_follow_decides_order_and_the_threshold_is_a_low_percentile() {
        let d = data(6);
        // Equal utilities: the higher score first, then the smaller id.
        assert_eq!(doubt::first_two(&d, &[0.5, 0.7, 0.2], &[1.0, 1.0, 1.0], 0.0), (1, 0, 0.7 - 0.5));
        let (first, second, margin) = doubt::first_two(&d, &[0.9, 0.8, 0.8], &[10.0, 1.0, 1.0], 1.0);
        // Utilities −0.1, 0.7, 0.7: mid and small tie on score too, so by id: mid, small.
        assert_eq!((first, second), (1, 2));
        assert!(margin.abs() < 1e-12);
        // Four points on a line: nearest cosines 1, 1, 1, 1 for the three
        // alike, and the opposite one −1: the 5th percentile is the lowest.
        let features = [[1.0f32, 0.0], [2.0, 0.0], [3.0, 0.0], [-1.0, 0.0]];
        let kernel = learn::Kernel { n: 4, k: (0..16).map(|i| features[i / 4][0] as f64 * features[i % 4][0] as f64 + 1.0).collect() };
        assert!((doubt::nearest(&kernel, 0, &[0, 1, 2, 3]).0 - 1.0).abs() < 1e-12);
        assert_eq!(doubt::nearest(&kernel, 3, &[0, 1, 2, 3]).0, -1.0);
        assert_eq!(doubt::novelty_threshold(&kernel, &[0, 1, 2, 3]), -1.0);
        assert!((doubt::novelty_threshold(&kernel, &[0, 1, 2]) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn verdicts_say_who_wins_from_the_rows_and_curves() {
        let d = data(30);
        let n = d.tasks.len();
        let mut rows = baseline_rows(&d, Subset::All);
        // A "head" always choosing mid, "TF-IDF" always big, similarity small.
        rows.push(policy_row(&d, Subset::All, "router, trained head (CV), quality", Family::Trained, &[vec![1; n]]));
        rows.push(policy_row(&d, Subset::All, "TF-IDF + logistic regression (CV), quality", Family::Trained, &[vec![0; n]]));
        rows.push(policy_row(&d, Subset::All, "router, similarity scoring, quality", Family::Untrained, &[vec![2; n]]));
        let point =
            |lambda: f64, resolved: f64, cost: f64| CurvePoint { lambda, resolved: Stat::exact(resolved), cost_usd: Stat::exact(cost) };
        let curves = vec![
            Curve { policy: "cheap router".into(), points: vec![point(0.0, 30.0, 300.0), point(1.0, 30.0, 200.0)] },
            Curve { policy: "weak router".into(), points: vec![point(0.0, 30.0, 400.0), point(1.0, 20.0, 100.0)] },
        ];
        let study = QualityStudy {
            dataset: String::new(),
            tasks: n,
            failed_runs: d.failed_runs(),
            failed_run_rule: FAILED_RUN_RULE.into(),
            cv: CvSettings::default(),
            modes: Vec::new(),
            rows,
            curves,
            chosen: Vec::new(),
            decide: None,
            router_max_tokens: 1024,
            truncation_side: router::TruncationSide::Left,
            head: None,
            truncation: Vec::new(),
            published_note: String::new(),
            per_task: Vec::new(),
            calibration: Vec::new(),
            doubt: None,
            cost_prediction: Vec::new(),
        };
        // The policies' names reach the page's figures from imported reports.
        let mut hostile = study.clone();
        hostile.curves[0].policy = crate::svg::HOSTILE.into();
        hostile.rows[0].policy = crate::svg::HOSTILE.into();
        crate::svg::assert_inert(&hostile.cost_quality_svg(), crate::svg::HOSTILE);
        crate::svg::texts_and_values(&hostile.truncation_svg());
        hostile.calibration = vec![doubt::CandidateCalibration {
            candidate: crate::svg::HOSTILE.into(),
            brier: 0.2,
            base_rate: 0.5,
            brier_base_rate: 0.25,
            p_sigma: 0.05,
            bins: vec![doubt::ReliabilityBin { lower: 0.4, upper: 0.5, count: 3, mean_p: 0.45, observed: 0.33 }],
        }];
        crate::svg::assert_inert(&hostile.reliability_svg(), crate::svg::HOSTILE);
        let v = study.verdicts();
        assert!(v[0].starts_with("Cost-blind, the backbone's features do not beat TF-IDF"), "{v:?}");
        // The best single model is big (30 resolved at $300).
        assert!(v[1].starts_with("Cost-aware, cheap router reaches always big (30 at $300.00): 30.0 at $200.00"), "{v:?}");
        assert!(v[2].contains("weak router does not reach always big") && v[2].contains("at most 20.0 (λ = 1, $100.00)"), "{v:?}");
        assert!(v[3].starts_with("The untrained similarity scoring resolves 8 cost-blind"), "{v:?}");

        // The head's two curves: predicting each task's cost reaches the
        // best single model's 30 at $250 where the mean costs never do.
        let mut with_costs = study.clone();
        with_costs.curves = vec![
            Curve { policy: "router, trained head (CV)".into(), points: vec![point(0.0, 29.0, 350.0), point(1.0, 25.0, 150.0)] },
            Curve {
                policy: "router, trained head (CV), per-task cost".into(),
                points: vec![point(0.0, 30.0, 350.0), point(1.0, 30.0, 250.0)],
            },
        ];
        let v = with_costs.verdicts();
        let moved = v.iter().find(|l| l.starts_with("Per-task cost prediction")).expect("a line on the cost prediction");
        assert_eq!(
            moved,
            "Per-task cost prediction moves the curve up: within always big's $300.00 the head resolves at most 25.0 weighing mean costs, 30.0 weighing predicted ones; the cheapest point resolving 30: none with mean costs, $250.00 (λ = 1) with predicted ones."
        );
        // The sweep's best cell against the same choice made inside the folds.
        let mut inside = with_costs.clone();
        inside.rows.push(policy_row(
            &d,
            Subset::All,
            "router, trained head (CV, truncation chosen inside), quality",
            Family::Trained,
            &[vec![1; n]],
        ));
        let cell =
            |resolved: f64| PolicyRow { policy: "head (CV), quality".into(), resolved: Stat::exact(resolved), ..inside.rows[0].clone() };
        inside.truncation = [(64, 20.0), (512, 29.0)]
            .into_iter()
            .map(|(max_tokens, resolved)| TruncationPoint {
                max_tokens,
                side: router::TruncationSide::KeepStart,
                tokens_used_mean: 0.0,
                decide: None,
                rows: vec![cell(resolved)],
            })
            .collect();
        let line =
            inside.verdicts().into_iter().find(|l| l.starts_with("With the truncation chosen inside")).expect("a line on the choice");
        assert!(
            line.contains("resolves 15 of 30 cost-blind") && line.contains("shows 29 at") && line.contains("(512 tokens, keep_start)"),
            "{line}"
        );

        // The same figures in the per-backbone comparison.
        let row = with_costs.backbone_row("llama, 30 layers", "gguf-1");
        assert_eq!(row.best_single, Some(("big".to_string(), 30.0, 300.0)));
        assert_eq!(row.head_quality.as_ref().map(|r| r.resolved.mean), Some(15.0), "the head always picks mid");
        assert_eq!(row.within_label(), "25.0 at $150.00 (mean costs); 30.0 at $250.00 (per-task costs)");
        assert!(
            backbone_table(std::slice::from_ref(&row))
                .contains("| llama, 30 layers | 8 / — | 15 at $60.00 | — | 25.0 at $150.00 (mean costs)"),
            "{}",
            backbone_table(std::slice::from_ref(&row))
        );
    }

    #[test]
    fn routed_totals_look_tasks_up_by_id() {
        let d = data(6);
        let routed = vec![
            RoutedTask { id: "t0".into(), similarity_top: [("q".to_string(), "small".to_string())].into(), ..RoutedTask::default() },
            RoutedTask { id: "t1".into(), similarity_top: [("q".to_string(), "small".to_string())].into(), ..RoutedTask::default() },
            RoutedTask { id: "unknown".into(), similarity_top: [("q".to_string(), "big".to_string())].into(), ..RoutedTask::default() },
        ];
        let t = routed_totals(&d, &routed, false, "q");
        assert_eq!((t.resolved, t.cost_usd), (1.0, 2.0));
        assert_eq!(routed_totals(&d, &routed, true, "q"), Totals::default());
    }
}
