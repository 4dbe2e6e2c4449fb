//! The quality study's figures as SVG text (colours come from CSS
//! classes, so the page's light and dark themes apply): the cost–quality
//! curves against the baselines, quality against decide latency over the
//! truncation settings, and the head's reliability diagram.

use super::{Family, QualityStudy, Subset};
use crate::svg::{plot_svg, PlotSeries};

impl QualityStudy {
    /// Resolved tasks against total cost (all tasks): each router's λ curve,
    /// the oracle and the always-X baselines.
    pub fn cost_quality_svg(&self) -> String {
        let mut series: Vec<PlotSeries> = self
            .curves
            .iter()
            .enumerate()
            .map(|(i, c)| PlotSeries {
                label: c.policy.clone(),
                class: format!("q{i}"),
                points: c.points.iter().map(|p| (p.cost_usd.mean, p.resolved.mean, None)).collect(),
                line: true,
            })
            .collect();
        let points = |family: Family| -> Vec<(f64, f64, Option<String>)> {
            self.rows
                .iter()
                .filter(|r| r.subset == Subset::All && r.family == family)
                .map(|r| {
                    (
                        r.cost_usd.mean,
                        r.resolved.mean,
                        Some(r.policy.trim_start_matches("always ").split(' ').next().unwrap_or("").to_string()),
                    )
                })
                .collect()
        };
        series.push(PlotSeries { label: "oracle".into(), class: "oracle".into(), points: points(Family::Oracle), line: false });
        series.push(PlotSeries { label: "baselines".into(), class: "baseline".into(), points: points(Family::Baseline), line: false });
        plot_svg(
            "Resolved tasks against backend cost, OOD176",
            "total backend cost (USD)",
            &format!("tasks resolved (of {})", self.tasks),
            &series,
        )
    }

    /// Resolved tasks against the decide p50 over the truncation settings,
    /// one line per side and policy, points labelled with router_max_tokens.
    pub fn truncation_svg(&self) -> String {
        let mut series = Vec::new();
        for side in [router::TruncationSide::Left, router::TruncationSide::KeepStart] {
            let policies: Vec<String> =
                self.truncation.first().map(|p| p.rows.iter().map(|r| r.policy.clone()).collect()).unwrap_or_default();
            // The similarity scoring and the head's cost-blind mode (the
            // balanced rows' quality moves with their cost; the table has them).
            for (i, policy) in policies.iter().enumerate().filter(|(_, p)| !(p.starts_with("head") && p.ends_with("balanced"))) {
                let points: Vec<(f64, f64, Option<String>)> = self
                    .truncation
                    .iter()
                    .filter(|p| p.side == side)
                    .filter_map(|p| Some((p.decide?.p50, p.rows.get(i)?.resolved.mean, Some(p.max_tokens.to_string()))))
                    .collect();
                series.push(PlotSeries {
                    label: format!("{policy}, {}", side.name()),
                    class: format!("t{}{i}", side.name()),
                    points,
                    line: true,
                });
            }
        }
        plot_svg(
            "Routing quality against decide latency over router_max_tokens",
            "decide p50 (ms)",
            &format!("tasks resolved (of {})", self.tasks),
            &series,
        )
    }

    /// The head's reliability diagram: per candidate, the share resolved
    /// against the mean predicted P(resolve) in each bin that holds any
    /// out-of-fold prediction, beside the diagonal of perfect calibration.
    pub fn reliability_svg(&self) -> String {
        let mut series = vec![PlotSeries {
            label: "perfectly calibrated".into(),
            class: "oracle".into(),
            points: vec![(0.0, 0.0, None), (1.0, 1.0, None)],
            line: true,
        }];
        series.extend(self.calibration.iter().enumerate().map(|(i, c)| PlotSeries {
            label: format!("{} (Brier {:.3})", c.candidate, c.brier),
            class: format!("q{}", i % 8),
            points: c.bins.iter().filter(|b| b.count > 0).map(|b| (b.mean_p, b.observed, None)).collect(),
            line: true,
        }));
        plot_svg("Reliability of the head's P(resolve), out of fold", "predicted P(resolve), bin mean", "share resolved", &series)
    }
}
