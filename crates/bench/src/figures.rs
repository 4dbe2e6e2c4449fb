//! What the page draws from reports, computed here so it is testable natively:
//! the stage breakdown, the side-by-side comparison of two reports, and the
//! latency plot as SVG text (colours come from CSS classes).

use router::StageTimings;

use crate::report::{LengthResult, Report};
use crate::stats::quantile;

/// Median milliseconds per stage group over a length's warm iterations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Breakdown {
    /// Mode resolution, assembly, tokenisation and truncation.
    pub tokenize_ms: f64,
    pub prefill_ms: f64,
    /// Inside the prefill: its projections and its attention (0 in
    /// reports written before they were timed apart).
    pub projections_ms: f64,
    pub attention_ms: f64,
    /// Descriptor stacking and scoring.
    pub scores_ms: f64,
    /// Cost, ranking and (with a trained head) the decision's confidence.
    pub cost_rank_ms: f64,
    /// Median of the whole calls.
    pub total_ms: f64,
}

impl Breakdown {
    /// From the warm iterations' stage timings (the cold call's when there are none).
    pub fn of(result: &LengthResult) -> Breakdown {
        let stages: &[StageTimings] =
            if result.warm_stages.is_empty() { std::slice::from_ref(&result.cold_stages) } else { &result.warm_stages };
        let median = |f: &dyn Fn(&StageTimings) -> f64| {
            let mut v: Vec<f64> = stages.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            quantile(&v, 0.5)
        };
        Breakdown {
            tokenize_ms: median(&|t| t.mode_ms + t.assemble_ms + t.tokenize_ms + t.truncate_ms),
            prefill_ms: median(&|t| t.prefill_ms),
            projections_ms: median(&|t| t.projections_ms),
            attention_ms: median(&|t| t.attention_ms),
            scores_ms: median(&|t| t.stack_ms + t.score_ms),
            cost_rank_ms: median(&|t| t.cost_ms + t.rank_ms + t.confidence_ms),
            total_ms: median(&|t| t.total_ms),
        }
    }
}

impl Breakdown {
    /// One line of a prefill's parts for a terminal: ms and share of the
    /// prefill for projections, attention and the rest.
    pub fn prefill_parts_line(&self, tokens: usize) -> String {
        let share = |ms: f64| format!("{ms:.1} ms ({:.0} %)", 100.0 * ms / self.prefill_ms.max(1e-9));
        let rest = (self.prefill_ms - self.projections_ms - self.attention_ms).max(0.0);
        format!(
            "{tokens:>5} tokens: prefill {:.1} ms = projections {} + attention {} + rest {}",
            self.prefill_ms,
            share(self.projections_ms),
            share(self.attention_ms),
            share(rest)
        )
    }
}

/// One length present in both reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ComparedLength {
    pub prompt_tokens: usize,
    pub left_p50_ms: Option<f64>,
    pub right_p50_ms: Option<f64>,
    /// right ÷ left of the warm medians.
    pub p50_ratio: Option<f64>,
    pub left_cold_ms: f64,
    pub right_cold_ms: f64,
    pub cold_ratio: f64,
}

/// Pairs the lengths both reports measured, in the left report's order.
pub fn compare(left: &Report, right: &Report) -> Vec<ComparedLength> {
    left.results
        .iter()
        .filter_map(|l| {
            let r = right.results.iter().find(|r| r.prompt_tokens == l.prompt_tokens)?;
            let (lp, rp) = (l.warm.map(|s| s.p50), r.warm.map(|s| s.p50));
            Some(ComparedLength {
                prompt_tokens: l.prompt_tokens,
                left_p50_ms: lp,
                right_p50_ms: rp,
                p50_ratio: lp.zip(rp).map(|(a, b)| b / a),
                left_cold_ms: l.cold_ms,
                right_cold_ms: r.cold_ms,
                cold_ratio: r.cold_ms / l.cold_ms,
            })
        })
        .collect()
}

/// A report drawn in the plot, with its legend label and CSS class suffix.
pub struct Series<'a> {
    pub label: &'a str,
    pub report: &'a Report,
}

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 280.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
/// Height of one legend line above the plot area.
const LEGEND_LINE: f64 = 14.0;
const BOTTOM: f64 = 40.0;

/// Latency against prompt tokens on log–log axes: per series, the warm p50
/// as a line with its p95 and min–max as bands, and the cold first calls as
/// separate hollow points, so the two are never read as one.
pub fn latency_svg(series: &[Series]) -> String {
    let results = || series.iter().flat_map(|s| s.report.results.iter());
    let xs: Vec<f64> = results().map(|r| r.prompt_tokens.max(1) as f64).collect();
    let ys: Vec<f64> =
        results().flat_map(|r| [Some(r.cold_ms), r.warm.map(|w| w.max), r.warm.map(|w| w.min)]).flatten().filter(|v| *v > 0.0).collect();
    // One legend line per series and one for the marks, above the plot area.
    let top = LEGEND_LINE * (series.len() as f64 + 1.0) + 10.0;
    let height = HEIGHT + top;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" role="img" aria-labelledby="latplot-title" class="latency-plot"><title id="latplot-title">Decide latency against prompt tokens: warm p50 with p95 and min–max bands, cold first calls as hollow points</title>"#,
    );
    if xs.is_empty() || ys.is_empty() {
        s.push_str(r#"<text class="axis" x="320" y="140" text-anchor="middle">No lengths measured yet.</text></svg>"#);
        return s;
    }
    let (x_lo, x_hi) = decade_bounds(&xs);
    let (y_lo, y_hi) = decade_bounds(&ys);
    let sx = |x: f64| LEFT + (WIDTH - LEFT - RIGHT) * (x.max(1e-9).log10() - x_lo) / (x_hi - x_lo);
    let sy = |y: f64| height - BOTTOM - (HEIGHT - BOTTOM) * (y.max(1e-9).log10() - y_lo) / (y_hi - y_lo);
    for d in (y_lo as i32)..=(y_hi as i32) {
        let v = 10f64.powi(d);
        let py = sy(v);
        s.push_str(&format!(r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{py:.1}" y2="{py:.1}"/>"#, WIDTH - RIGHT));
        s.push_str(&format!(r#"<text class="axis" x="{}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, py + 4.0, ms_label(v)));
    }
    for d in (x_lo as i32)..=(x_hi as i32) {
        let px = sx(10f64.powi(d));
        s.push_str(&format!(r#"<line class="grid" x1="{px:.1}" x2="{px:.1}" y1="{top}" y2="{}"/>"#, height - BOTTOM));
        s.push_str(&format!(
            r#"<text class="axis" x="{px:.1}" y="{}" text-anchor="middle">{}</text>"#,
            height - BOTTOM + 16.0,
            10u64.pow(d.max(0) as u32)
        ));
    }
    s.push_str(&format!(
        r#"<text class="axis" x="{}" y="{}" text-anchor="middle">prompt tokens (log)</text><text class="axis" x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">decide latency (log)</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        height - 6.0,
        (top + height - BOTTOM) / 2.0,
        (top + height - BOTTOM) / 2.0
    ));
    s.push_str(&format!(
        r#"<text class="legend" x="{LEFT}" y="{}">lines: warm p50 · bands: p50–p95 and min–max · hollow circles: first call (cold)</text>"#,
        LEGEND_LINE * (series.len() as f64 + 1.0)
    ));
    for (i, one) in series.iter().enumerate() {
        let label = crate::svg::escape(one.label);
        let warm: Vec<(f64, crate::Summary)> = one.report.results.iter().filter_map(|r| Some((r.prompt_tokens as f64, r.warm?))).collect();
        let band = |lo: &dyn Fn(&crate::Summary) -> f64, hi: &dyn Fn(&crate::Summary) -> f64| {
            let upper = warm.iter().map(|(x, w)| format!("{:.1},{:.1}", sx(*x), sy(hi(w))));
            let lower = warm.iter().rev().map(|(x, w)| format!("{:.1},{:.1}", sx(*x), sy(lo(w))));
            upper.chain(lower).collect::<Vec<_>>().join(" ")
        };
        if !warm.is_empty() {
            s.push_str(&format!(r#"<polygon class="band-range s{i}" points="{}"/>"#, band(&|w| w.min, &|w| w.max)));
            s.push_str(&format!(r#"<polygon class="band-p95 s{i}" points="{}"/>"#, band(&|w| w.p50, &|w| w.p95)));
            let line: Vec<String> = warm.iter().map(|(x, w)| format!("{:.1},{:.1}", sx(*x), sy(w.p50))).collect();
            s.push_str(&format!(r#"<polyline class="p50 s{i}" points="{}"/>"#, line.join(" ")));
            for (x, w) in &warm {
                s.push_str(&format!(
                    r#"<circle class="p50-point s{i}" cx="{:.1}" cy="{:.1}" r="3"><title>{}: {} tokens, warm p50 {}</title></circle>"#,
                    sx(*x),
                    sy(w.p50),
                    label,
                    *x as usize,
                    ms_label(w.p50)
                ));
            }
        }
        for r in &one.report.results {
            s.push_str(&format!(
                r#"<circle class="cold s{i}" cx="{:.1}" cy="{:.1}" r="5"><title>{}: {} tokens, first call (cold) {}</title></circle>"#,
                sx(r.prompt_tokens as f64),
                sy(r.cold_ms),
                label,
                r.prompt_tokens,
                ms_label(r.cold_ms)
            ));
        }
        let ly = LEGEND_LINE * (i as f64 + 1.0) - 4.0;
        s.push_str(&format!(
            r#"<line class="p50 s{i}" x1="{LEFT}" x2="{}" y1="{ly}" y2="{ly}"/><text class="legend" x="{}" y="{}">{}</text>"#,
            LEFT + 18.0,
            LEFT + 24.0,
            ly + 4.0,
            label
        ));
    }
    s.push_str("</svg>");
    s
}

/// Whole decades around the values (log10), at least one decade wide.
fn decade_bounds(values: &[f64]) -> (f64, f64) {
    let lo = values.iter().cloned().fold(f64::INFINITY, f64::min).log10().floor();
    let hi = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max).log10().ceil();
    (lo, hi.max(lo + 1.0))
}

fn ms_label(v: f64) -> String {
    if v >= 1000.0 {
        format!("{} s", trim(v / 1000.0))
    } else {
        format!("{} ms", trim(v))
    }
}

fn trim(v: f64) -> String {
    if v >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::sample_report;

    #[test]
    fn breakdown_takes_medians_per_stage_group() {
        let report = sample_report();
        let b = Breakdown::of(&report.results[0]);
        let r = &report.results[0];
        let mut prefill: Vec<f64> = r.warm_stages.iter().map(|t| t.prefill_ms).collect();
        prefill.sort_by(f64::total_cmp);
        assert_eq!(b.prefill_ms, quantile(&prefill, 0.5));
        assert!(b.tokenize_ms > 0.0 && b.scores_ms > 0.0 && b.cost_rank_ms > 0.0);
        assert!(b.tokenize_ms + b.prefill_ms + b.scores_ms + b.cost_rank_ms <= b.total_ms * 1.01);
    }

    #[test]
    fn compare_pairs_equal_lengths_and_gives_ratios() {
        let native = sample_report();
        let mut browser = sample_report();
        browser.results.remove(1);
        for r in &mut browser.results {
            r.cold_ms *= 3.0;
            if let Some(w) = r.warm.as_mut() {
                w.p50 *= 2.0;
            }
        }
        let rows = compare(&native, &browser);
        assert_eq!(rows.iter().map(|r| r.prompt_tokens).collect::<Vec<_>>(), vec![15, 1024]);
        assert!(rows.iter().all(|r| (r.p50_ratio.unwrap() - 2.0).abs() < 1e-9 && (r.cold_ratio - 3.0).abs() < 1e-9));
    }

    #[test]
    fn plot_marks_cold_apart_from_warm() {
        let report = sample_report();
        let svg = latency_svg(&[Series { label: "native <cpu>", report: &report }]);
        assert_eq!(svg.matches(r#"class="cold s0""#).count(), 3);
        assert_eq!(svg.matches(r#"class="p50-point s0""#).count(), 3);
        assert!(svg.contains("native &lt;cpu&gt;") && svg.ends_with("</svg>"));
        assert!(svg.contains(">100 ms<") && svg.contains(">10 s<") && svg.contains(">1000<"));
        assert!(latency_svg(&[]).contains("No lengths measured yet."));
    }

    #[test]
    fn a_hostile_series_label_stays_text() {
        let report = sample_report();
        crate::svg::assert_inert(&latency_svg(&[Series { label: crate::svg::HOSTILE, report: &report }]), crate::svg::HOSTILE);
    }
}
