//! The learners the quality evaluation trains: L2-regularised logistic
//! regression per candidate, solved in its dual form on a linear kernel, and
//! the two feature maps it runs on (standardised pooled hidden states; TF-IDF
//! of the prompt text).
//!
//! Why the dual: there are at most 176 tasks and 576 (or, for TF-IDF, tens
//! of thousands of) features. By the representer theorem the weights are a
//! combination of the training rows, so each Newton (IRLS) step solves an
//! n × n system with n ≤ 176 training tasks instead of a d × d one, the
//! same fit for both feature maps, and the weights in feature space are
//! recovered afterwards for the deployable head.

use std::collections::HashMap;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// A symmetric kernel over every task, `n × n`, row-major: `k[i × n + j]`
/// is the inner product of tasks i and j's features (plus the constant that
/// carries the bias).
#[derive(Debug, Clone)]
pub struct Kernel {
    pub n: usize,
    pub k: Vec<f64>,
}

impl Kernel {
    pub fn at(&self, i: usize, j: usize) -> f64 {
        self.k[i * self.n + j]
    }

    /// The cosine of tasks i and j's features (the bias's constant taken
    /// out): for the standardised kernels, what a deployed head's
    /// `LoadedHead::similarities` computes.
    pub fn cosine(&self, i: usize, j: usize) -> f64 {
        let norms = (self.at(i, i) - BIAS_FEATURE) * (self.at(j, j) - BIAS_FEATURE);
        if norms > 0.0 {
            (self.at(i, j) - BIAS_FEATURE) / norms.sqrt()
        } else {
            0.0
        }
    }
}

/// Per-feature mean and standard deviation of the training rows.
#[derive(Debug, Clone)]
pub struct Standardiser {
    pub mean: Vec<f64>,
    pub scale: Vec<f64>,
}

impl Standardiser {
    /// One row in standard units: `(x − mean) ÷ scale` per feature.
    pub fn apply(&self, row: &[f32]) -> Vec<f64> {
        row.iter().zip(&self.mean).zip(&self.scale).map(|((&x, m), s)| (x as f64 - m) / s).collect()
    }
}

/// The bias enters as a constant feature of this size, so it is barely
/// regularised next to rows whose squared norm averages 1.
const BIAS_FEATURE: f64 = 1.0;

/// Standardises dense features with the `train` rows' statistics (the test
/// rows never inform them) and returns the kernel `Z Zᵀ / d + 1` over all
/// rows: each row's squared norm averages 1 whatever d is, so one
/// regularisation grid serves every feature map.
pub fn dense_kernel(features: &[Vec<f32>], train: &[usize]) -> (Kernel, Standardiser) {
    let n = features.len();
    let d = features.first().map_or(0, Vec::len);
    let standardiser = standardise(features, train);
    let z: Vec<Vec<f64>> = features.iter().map(|row| standardiser.apply(row)).collect();
    let mut k = vec![0f64; n * n];
    for i in 0..n {
        for j in i..n {
            let dot = z[i].iter().zip(&z[j]).map(|(a, b)| a * b).sum::<f64>() / d.max(1) as f64 + BIAS_FEATURE;
            k[i * n + j] = dot;
            k[j * n + i] = dot;
        }
    }
    (Kernel { n, k }, standardiser)
}

/// Per-feature mean and standard deviation of the `train` rows.
pub fn standardise(features: &[Vec<f32>], train: &[usize]) -> Standardiser {
    let d = features.first().map_or(0, Vec::len);
    let mut mean = vec![0f64; d];
    for &t in train {
        mean.iter_mut().zip(&features[t]).for_each(|(m, &x)| *m += x as f64);
    }
    mean.iter_mut().for_each(|m| *m /= train.len().max(1) as f64);
    let mut var = vec![0f64; d];
    for &t in train {
        var.iter_mut().zip(&features[t]).zip(&mean).for_each(|((v, &x), m)| *v += (x as f64 - m).powi(2));
    }
    let scale: Vec<f64> = var.iter().map(|v| (v / train.len().max(1) as f64).sqrt().max(1e-8)).collect();
    Standardiser { mean, scale }
}

/// Words as TF-IDF counts them: lower-case runs of letters, digits and `_`,
/// two characters or more.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| w.chars().count() >= 2).map(str::to_lowercase)
}

/// TF-IDF (sublinear term frequency, smoothed IDF, L2-normalised rows) with
/// the vocabulary and IDF of the `train` texts only (words in at least two of
/// them), and the kernel of cosine similarities `+ 1` over all texts.
pub fn tfidf_kernel(texts: &[&str], train: &[usize]) -> Kernel {
    let counts: Vec<HashMap<String, u32>> = texts
        .iter()
        .map(|text| {
            let mut c = HashMap::new();
            words(text).for_each(|w| *c.entry(w).or_insert(0) += 1);
            c
        })
        .collect();
    let mut df: HashMap<&str, u32> = HashMap::new();
    for &t in train {
        counts[t].keys().for_each(|w| *df.entry(w.as_str()).or_insert(0) += 1);
    }
    let mut vocabulary: Vec<&str> = df.iter().filter(|(_, &n)| n >= 2).map(|(w, _)| *w).collect();
    vocabulary.sort_unstable();
    let column: HashMap<&str, u32> = vocabulary.iter().enumerate().map(|(i, w)| (*w, i as u32)).collect();
    let docs = train.len() as f64;
    let rows: Vec<Vec<(u32, f64)>> = counts
        .iter()
        .map(|c| {
            let mut row: Vec<(u32, f64)> = c
                .iter()
                .filter_map(|(w, &n)| {
                    let &col = column.get(w.as_str())?;
                    let idf = ((1.0 + docs) / (1.0 + df[w.as_str()] as f64)).ln() + 1.0;
                    Some((col, (1.0 + (n as f64).ln()) * idf))
                })
                .collect();
            row.sort_unstable_by_key(|&(c, _)| c);
            let norm = row.iter().map(|(_, v)| v * v).sum::<f64>().sqrt().max(1e-12);
            row.iter_mut().for_each(|(_, v)| *v /= norm);
            row
        })
        .collect();
    let n = texts.len();
    let mut k = vec![0f64; n * n];
    for i in 0..n {
        for j in i..n {
            let dot = sparse_dot(&rows[i], &rows[j]) + BIAS_FEATURE;
            k[i * n + j] = dot;
            k[j * n + i] = dot;
        }
    }
    Kernel { n, k }
}

fn sparse_dot(a: &[(u32, f64)], b: &[(u32, f64)]) -> f64 {
    let (mut i, mut j, mut sum) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                sum += a[i].1 * b[j].1;
                i += 1;
                j += 1;
            }
        }
    }
    sum
}

/// A fitted logistic model: `logit(x) = Σ alpha_i k(train_i, x)`.
#[derive(Debug, Clone)]
pub struct Fit {
    pub train: Vec<usize>,
    pub alpha: Vec<f64>,
}

impl Fit {
    pub fn logit(&self, kernel: &Kernel, task: usize) -> f64 {
        self.train.iter().zip(&self.alpha).map(|(&i, a)| a * kernel.at(i, task)).sum()
    }

    pub fn probability(&self, kernel: &Kernel, task: usize) -> f64 {
        sigmoid(self.logit(kernel, task))
    }
}

pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Fits `P(y) = σ(w·x)` on the `train` tasks minimising the log loss plus
/// `reg / 2 × |w|²`, by Newton's method in the dual: with `f = K α`,
/// `W = diag(p (1 − p))` and `z = f + W⁻¹ (y − p)`, each step solves
/// `(K + reg W⁻¹) α = z` (Cholesky; the matrix is positive definite).
pub fn fit(kernel: &Kernel, train: &[usize], y: impl Fn(usize) -> bool, reg: f64) -> Fit {
    let n = train.len();
    let k: Vec<f64> = train.iter().flat_map(|&i| train.iter().map(move |&j| kernel.at(i, j))).collect();
    let labels: Vec<f64> = train.iter().map(|&t| if y(t) { 1.0 } else { 0.0 }).collect();
    let mut alpha = vec![0f64; n];
    let mut f = vec![0f64; n];
    let mut a = vec![0f64; n * n];
    for _ in 0..50 {
        let p: Vec<f64> = f.iter().map(|&v| sigmoid(v)).collect();
        let w: Vec<f64> = p.iter().map(|p| (p * (1.0 - p)).max(1e-6)).collect();
        let mut z: Vec<f64> = (0..n).map(|i| f[i] + (labels[i] - p[i]) / w[i]).collect();
        a.copy_from_slice(&k);
        (0..n).for_each(|i| a[i * n + i] += reg / w[i]);
        if !cholesky_solve(&mut a, n, &mut z) {
            break;
        }
        let next: Vec<f64> = (0..n).map(|i| (0..n).map(|j| k[i * n + j] * z[j]).sum::<f64>().clamp(-40.0, 40.0)).collect();
        let change = next.iter().zip(&f).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        alpha = z;
        f = next;
        if change < 1e-7 {
            break;
        }
    }
    Fit { train: train.to_vec(), alpha }
}

/// A fitted regression of a candidate's log cost:
/// `ln(cost) ≈ offset + Σ alpha_i k(train_i, x)`, and the smearing factor
/// that turns its exponential into an expected cost.
#[derive(Debug, Clone)]
pub struct CostFit {
    pub fit: Fit,
    pub offset: f64,
    pub smearing: f64,
}

impl CostFit {
    /// The expected cost of `task` (USD).
    pub fn expected(&self, kernel: &Kernel, task: usize) -> f64 {
        (self.offset + self.fit.logit(kernel, task)).clamp(-20.0, 20.0).exp() * self.smearing
    }
}

/// Kernel ridge regression of `ln(cost)` on the `train` tasks that have a
/// cost (`cost(t)` is `None` for a failed run): `(K + reg I) α = y − ȳ`,
/// the mean taken out first so that the bias, a feature like any other in
/// the kernel, is not shrunk towards a cost of $1. Fewer than three costed
/// tasks give the constant mean.
pub fn fit_cost(kernel: &Kernel, train: &[usize], cost: impl Fn(usize) -> Option<f64>, reg: f64) -> CostFit {
    let costed: Vec<(usize, f64)> = train.iter().filter_map(|&t| cost(t).filter(|c| *c > 0.0).map(|c| (t, c.ln()))).collect();
    let n = costed.len();
    let offset = costed.iter().map(|(_, y)| y).sum::<f64>() / n.max(1) as f64;
    let constant = |offset: f64| CostFit { fit: Fit { train: Vec::new(), alpha: Vec::new() }, offset, smearing: 1.0 };
    if n < 3 {
        let mean = costed.iter().map(|(_, y)| y.exp()).sum::<f64>() / n.max(1) as f64;
        return constant(if mean > 0.0 { mean.ln() } else { 0.0 });
    }
    let mut a: Vec<f64> = costed.iter().flat_map(|&(i, _)| costed.iter().map(move |&(j, _)| kernel.at(i, j))).collect();
    (0..n).for_each(|i| a[i * n + i] += reg);
    let mut alpha: Vec<f64> = costed.iter().map(|(_, y)| y - offset).collect();
    if !cholesky_solve(&mut a, n, &mut alpha) {
        return constant(offset);
    }
    let fit = Fit { train: costed.iter().map(|(t, _)| *t).collect(), alpha };
    let smearing = costed.iter().map(|&(t, y)| (y - offset - fit.logit(kernel, t)).exp()).sum::<f64>() / n as f64;
    CostFit { fit, offset, smearing }
}

/// Solves `A x = b` in place for a symmetric positive definite `A`
/// (overwritten by its Cholesky factor); `false` if `A` is not.
fn cholesky_solve(a: &mut [f64], n: usize, b: &mut [f64]) -> bool {
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= a[j * n + k] * a[j * n + k];
        }
        if d <= 0.0 || !d.is_finite() {
            return false;
        }
        let d = d.sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= a[i * n + k] * a[j * n + k];
            }
            a[i * n + j] = s / d;
        }
    }
    for i in 0..n {
        let mut s = b[i];
        for k in 0..i {
            s -= a[i * n + k] * b[k];
        }
        b[i] = s / a[i * n + i];
    }
    for i in (0..n).rev() {
        let mut s = b[i];
        for k in i + 1..n {
            s -= a[k * n + i] * b[k];
        }
        b[i] = s / a[i * n + i];
    }
    true
}

/// `items` shuffled by `seed` and dealt into `k` folds of near-equal size:
/// the same seed gives the same folds on every machine (ChaCha8).
pub fn folds(items: &[usize], k: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut shuffled = items.to_vec();
    shuffled.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let mut out = vec![Vec::new(); k.max(1)];
    for (i, t) in shuffled.into_iter().enumerate() {
        out[i % k.max(1)].push(t);
    }
    out.iter_mut().for_each(|f| f.sort_unstable());
    out
}

/// The weights of a fit on a dense kernel, in the raw feature space:
/// `logit(x) = bias + weights · x`, undoing the standardisation.
pub fn raw_weights(fit: &Fit, features: &[Vec<f32>], standardiser: &Standardiser) -> (Vec<f32>, f32) {
    let d = standardiser.mean.len();
    let mut w_std = vec![0f64; d];
    let mut bias = 0.0;
    for (&t, a) in fit.train.iter().zip(&fit.alpha) {
        for (j, w) in w_std.iter_mut().enumerate() {
            *w += a * (features[t][j] as f64 - standardiser.mean[j]) / standardiser.scale[j] / d as f64;
        }
        bias += a * BIAS_FEATURE;
    }
    let weights: Vec<f64> = w_std.iter().zip(&standardiser.scale).map(|(w, s)| w / s).collect();
    let bias = bias - weights.iter().zip(&standardiser.mean).map(|(w, m)| w * m).sum::<f64>();
    (weights.iter().map(|&w| w as f32).collect(), bias as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separable_labels_are_learned_and_raw_weights_reproduce_the_dual() {
        // Label: the first feature is positive.
        let features: Vec<Vec<f32>> = (0..40).map(|i| vec![((i * 7) % 13) as f32 - 6.5, ((i * 5) % 11) as f32, 1.5]).collect();
        let y = |t: usize| features[t][0] > 0.0;
        let train: Vec<usize> = (0..30).collect();
        let (kernel, st) = dense_kernel(&features, &train);
        let model = fit(&kernel, &train, y, 0.01);
        let (w, b) = raw_weights(&model, &features, &st);
        for (t, x) in features.iter().enumerate().skip(30) {
            let p = model.probability(&kernel, t);
            // Points at the margin (|x₀| = 0.5) may go either way under
            // regularisation; the rest must be on their side.
            if x[0].abs() > 1.0 {
                assert_eq!(p > 0.5, y(t), "task {t}: p = {p}");
            }
            let raw = b as f64 + w.iter().zip(x).map(|(w, x)| *w as f64 * *x as f64).sum::<f64>();
            assert!((raw - model.logit(&kernel, t)).abs() < 1e-3 * (1.0 + raw.abs()), "{raw} vs {}", model.logit(&kernel, t));
        }
    }

    #[test]
    fn stronger_regularisation_shrinks_towards_the_base_rate() {
        let features: Vec<Vec<f32>> = (0..20).map(|i| vec![i as f32]).collect();
        let train: Vec<usize> = (0..20).collect();
        let (kernel, _) = dense_kernel(&features, &train);
        let y = |t: usize| t >= 10;
        let sharp = fit(&kernel, &train, y, 0.01);
        let flat = fit(&kernel, &train, y, 100.0);
        let spread = |m: &Fit| m.probability(&kernel, 19) - m.probability(&kernel, 0);
        assert!(spread(&sharp) > 0.9 && spread(&flat) < 0.2, "{} {}", spread(&sharp), spread(&flat));
    }

    #[test]
    fn a_cost_model_learns_costs_that_follow_a_feature_and_skips_failed_runs() {
        // Cost grows tenfold along the first feature; the second is noise.
        let features: Vec<Vec<f32>> = (0..60).map(|i| vec![(i % 20) as f32 / 19.0, ((i * 7) % 5) as f32]).collect();
        let cost = |t: usize| 10f64.powf(-3.0 + features[t][0] as f64);
        let train: Vec<usize> = (0..50).collect();
        let (kernel, _) = dense_kernel(&features, &train);
        // A failed run (None) and a zero cost are left out, not learned as cheap.
        let fitted = fit_cost(
            &kernel,
            &train,
            |t| {
                if t == 3 {
                    None
                } else if t == 4 {
                    Some(0.0)
                } else {
                    Some(cost(t))
                }
            },
            0.01,
        );
        assert_eq!(fitted.fit.train.len(), 48);
        for t in 50..60 {
            let ratio = fitted.expected(&kernel, t) / cost(t);
            assert!((0.8..1.25).contains(&ratio), "task {t}: predicted {} for {}", fitted.expected(&kernel, t), cost(t));
        }
        // Heavy regularisation leaves the (smeared) mean of the costs.
        let flat = fit_cost(&kernel, &train, |t| Some(cost(t)), 1e6);
        let mean = train.iter().map(|&t| cost(t)).sum::<f64>() / 50.0;
        assert!((flat.expected(&kernel, 55) / mean - 1.0).abs() < 0.05, "{} vs {mean}", flat.expected(&kernel, 55));
    }

    #[test]
    fn folds_partition_and_depend_on_the_seed() {
        let items: Vec<usize> = (0..176).collect();
        let a = folds(&items, 5, 1);
        let mut all: Vec<usize> = a.concat();
        all.sort_unstable();
        assert_eq!(all, items);
        assert!(a.iter().all(|f| f.len() == 35 || f.len() == 36));
        assert_eq!(a, folds(&items, 5, 1));
        assert_ne!(a, folds(&items, 5, 2));
    }

    #[test]
    fn tfidf_ignores_words_seen_once_in_training() {
        let texts = ["alpha beta", "alpha gamma", "delta zeta", "alpha delta"];
        let k = tfidf_kernel(&texts, &[0, 1, 2]);
        // Only `alpha` occurs in two training texts; `delta` only in one.
        assert!((k.at(2, 3) - BIAS_FEATURE).abs() < 1e-12);
        assert!(k.at(0, 1) > BIAS_FEATURE + 0.99);
    }
}
