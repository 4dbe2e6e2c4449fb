//! The quality study's learner (dual Newton on a kernel, written here)
//! against a reference fit by a kept library: scikit-learn's L-BFGS on the
//! same objective, computed once by `scripts/reference/logistic_reference.py`
//! and stored as a fixture. Same weights, bias and probabilities, at three
//! strengths of regularisation.

use bench::quality::learn::{dense_kernel, fit, raw_weights};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    source: String,
    features: Vec<Vec<f32>>,
    labels: Vec<bool>,
    fits: Vec<ReferenceFit>,
}

#[derive(Deserialize)]
struct ReferenceFit {
    reg: f64,
    weights: Vec<f64>,
    bias: f64,
    probabilities: Vec<f64>,
}

#[test]
fn the_dual_newton_fit_matches_scikit_learn() {
    let reference: Reference = serde_json::from_str(include_str!("fixtures/logistic_reference.json")).unwrap();
    let train: Vec<usize> = (0..reference.features.len()).collect();
    let (kernel, standardiser) = dense_kernel(&reference.features, &train);
    assert!(reference.fits.len() == 3 && reference.labels.iter().any(|&y| y) && !reference.labels.iter().all(|&y| y));
    for want in &reference.fits {
        let model = fit(&kernel, &train, |t| reference.labels[t], want.reg);
        let (weights, bias) = raw_weights(&model, &reference.features, &standardiser);
        let context = format!("reg {} against {}", want.reg, reference.source);
        // The raw weights pass through f32 (the head file's type).
        for (j, (got, want)) in weights.iter().zip(&want.weights).enumerate() {
            assert!((*got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()), "weight {j}: {got} vs {want}, {context}");
        }
        assert!((bias as f64 - want.bias).abs() <= 1e-5 * (1.0 + want.bias.abs()), "bias: {bias} vs {}, {context}", want.bias);
        for (t, want) in want.probabilities.iter().enumerate() {
            let got = model.probability(&kernel, t);
            assert!((got - want).abs() <= 1e-7, "task {t}: probability {got} vs {want}, {context}");
        }
    }
}
