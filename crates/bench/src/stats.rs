//! Quantiles and extremes of latency samples.

use serde::{Deserialize, Serialize};

/// Summary of a set of samples in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p95: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

/// The `q`-quantile with linear interpolation between closest ranks (the
/// definition numpy uses by default), so small samples give stable values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = pos.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        }
    }
}

impl Summary {
    /// Summarises samples; `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        Some(Summary {
            n: s.len(),
            p50: quantile(&s, 0.5),
            p95: quantile(&s, 0.95),
            min: s[0],
            max: s[s.len() - 1],
            mean: s.iter().sum::<f64>() / s.len() as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.p50, s.min, s.max, s.mean), (3.0, 1.0, 5.0, 3.0));
        assert!((s.p95 - 4.8).abs() < 1e-12);
        let samples: Vec<f64> = (1..=25).map(f64::from).collect();
        let s = Summary::of(&samples).unwrap();
        assert_eq!(s.p50, 13.0);
        assert!((s.p95 - 23.8).abs() < 1e-12);
        assert_eq!(Summary::of(&[7.0]).unwrap().p95, 7.0);
        assert!(Summary::of(&[]).is_none());
    }
}
