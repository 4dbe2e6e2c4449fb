"""Writes crates/bench/tests/fixtures/logistic_reference.json: a reference fit
of the quality study's learner (bench::quality::learn: L2-regularised logistic
regression on standardised features scaled by 1/sqrt(d), plus a constant bias
feature of 1 that is regularised like the rest) by scikit-learn, so the
hand-written dual Newton solver is checked against a kept library.

The same objective in scikit-learn's terms: minimise
    C * sum(log loss) + |w|^2 / 2  with  C = 1 / reg,  fit_intercept=False,
on the augmented rows [z / sqrt(d), 1], where z is each feature standardised
with the training rows' mean and population standard deviation (ddof = 0).

Run once (dev only; not part of CI):
    python3 -m venv /tmp/skl && /tmp/skl/bin/pip install scikit-learn==1.5.2
    /tmp/skl/bin/python scripts/reference/logistic_reference.py
"""
import json
import math
import pathlib

import numpy as np
import sklearn
from sklearn.linear_model import LogisticRegression

BIAS_FEATURE = 1.0
OUT = pathlib.Path(__file__).resolve().parents[2] / "crates/bench/tests/fixtures/logistic_reference.json"


def dataset():
    """60 rows of 4 features with noisy, not separable labels (seeded)."""
    rng = np.random.default_rng(20261205)
    n, d = 60, 4
    x = rng.normal(size=(n, d)) * np.array([1.0, 3.0, 0.5, 10.0]) + np.array([0.0, 5.0, -2.0, 100.0])
    logit = 1.2 * (x[:, 0]) - 0.4 * (x[:, 1] - 5.0) + 0.05 * (x[:, 3] - 100.0)
    y = rng.random(n) < 1.0 / (1.0 + np.exp(-logit))
    # f32 features, as the study's pooled hidden states are.
    return x.astype(np.float32), y


def main():
    x, y = dataset()
    n, d = x.shape
    xs = x.astype(np.float64)
    mean = xs.mean(axis=0)
    scale = np.maximum(xs.std(axis=0), 1e-8)
    augmented = np.hstack([(xs - mean) / scale / math.sqrt(d), np.full((n, 1), BIAS_FEATURE)])
    fits = []
    for reg in [0.1, 1.0, 10.0]:
        model = LogisticRegression(C=1.0 / reg, fit_intercept=False, solver="lbfgs", tol=1e-12, max_iter=100_000)
        model.fit(augmented, y)
        coef = model.coef_[0]
        weights = coef[:d] / math.sqrt(d) / scale
        bias = coef[d] * BIAS_FEATURE - float(weights @ mean)
        fits.append({
            "reg": reg,
            "weights": weights.tolist(),
            "bias": bias,
            "probabilities": model.predict_proba(augmented)[:, 1].tolist(),
        })
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "source": f"scripts/reference/logistic_reference.py, scikit-learn {sklearn.__version__} (lbfgs, tol 1e-12), numpy {np.__version__}",
        "features": x.astype(float).tolist(),
        "labels": [bool(v) for v in y],
        "fits": fits,
    }, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
