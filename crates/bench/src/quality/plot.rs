//! The quality study's two figures as SVG text (colours come from CSS
//! classes, so the page's light and dark themes apply): the cost–quality
//! curves against the baselines, and quality against decide latency over
//! the truncation settings.

use super::{Family, QualityStudy, Subset};

/// One series: a polyline through its points (or loose points), each
/// optionally labelled.
pub struct PlotSeries {
    pub label: String,
    /// CSS class suffix: `series-<class>`.
    pub class: String,
    pub points: Vec<(f64, f64, Option<String>)>,
    pub line: bool,
}

const W: f64 = 640.0;
const H: f64 = 360.0;
// Margins: left (ticks), right (legend), top, bottom (axis label).
const L: f64 = 56.0;
const R: f64 = 230.0;
const T: f64 = 16.0;
const B: f64 = 40.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn ticks(max: f64) -> Vec<f64> {
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| *s >= raw).unwrap_or(raw);
    (0..=((max / step).ceil() as usize)).map(|i| i as f64 * step).collect()
}

/// A scatter/line plot from zero on both axes.
pub fn plot_svg(title: &str, x_label: &str, y_label: &str, series: &[PlotSeries]) -> String {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(0.0, f64::max).max(1e-9);
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max).max(1e-9);
    let (xt, yt) = (ticks(xs), ticks(ys));
    let (xmax, ymax) = (*xt.last().unwrap_or(&xs), *yt.last().unwrap_or(&ys));
    let x = |v: f64| L + (W - L - R) * v / xmax;
    let y = |v: f64| H - B - (H - T - B) * v / ymax;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" aria-label="{}" class="quality-plot"><title>{}</title>"#,
        escape(title),
        escape(title)
    );
    for t in &xt {
        out.push_str(&format!(r#"<line class="grid" x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}"/><text class="tick" x="{0:.1}" y="{3}" text-anchor="middle">{4}</text>"#, x(*t), T, H - B, H - B + 14.0, t));
    }
    for t in &yt {
        out.push_str(&format!(r#"<line class="grid" x1="{1}" x2="{2}" y1="{0:.1}" y2="{0:.1}"/><text class="tick" x="{3}" y="{0:.1}" text-anchor="end" dominant-baseline="middle">{4}</text>"#, y(*t), L, W - R, L - 6.0, t));
    }
    out.push_str(&format!(
        r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text class="axis" transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (L + W - R) / 2.0,
        H - 6.0,
        escape(x_label),
        (T + H - B) / 2.0,
        escape(y_label)
    ));
    for (i, s) in series.iter().enumerate() {
        let class = format!("series-{}", s.class);
        if s.line && s.points.len() > 1 {
            let path: Vec<String> = s.points.iter().map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1))).collect();
            out.push_str(&format!(r#"<polyline class="{class}" fill="none" points="{}"/>"#, path.join(" ")));
        }
        for p in &s.points {
            out.push_str(&format!(
                r#"<circle class="{class}" cx="{:.1}" cy="{:.1}" r="3"><title>{}: {:.2}, {:.1}</title></circle>"#,
                x(p.0),
                y(p.1),
                escape(&s.label),
                p.0,
                p.1
            ));
            if let Some(label) = &p.2 {
                // Points in the right third are labelled to their left, clear of the legend.
                let (dx, anchor) = if p.0 > 0.66 * xmax { (-5.0, "end") } else { (5.0, "start") };
                out.push_str(&format!(
                    r#"<text class="point-label" x="{:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"#,
                    x(p.0) + dx,
                    y(p.1) - 4.0,
                    escape(label)
                ));
            }
        }
        let ly = T + 14.0 + 18.0 * i as f64;
        out.push_str(&format!(
            r#"<circle class="{class}" cx="{:.1}" cy="{ly:.1}" r="4"/><text class="legend" x="{:.1}" y="{ly:.1}" dominant-baseline="middle">{}</text>"#,
            W - R + 12.0,
            W - R + 22.0,
            escape(&s.label)
        ));
    }
    out.push_str("</svg>");
    out
}

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
}
