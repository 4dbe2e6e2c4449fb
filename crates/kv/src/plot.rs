//! The capacity plot as SVG text: KV bytes on one GPU against context length
//! for the current model and dtype, the GPU's KV budget as a line, and the
//! current length mix as a point.
//!
//! Producing markup here keeps the plot's arithmetic testable natively; the
//! page only inserts the string. Colours come from CSS classes so dark mode
//! works without re-rendering.

use crate::calc::{compute, Inputs, Report};
use crate::runs::Run;
use crate::units;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 40.0;
const POINTS: u64 = 64;

/// Renders the plot for `inputs` (whose figures are `report`). Every point is
/// a full calculation with `n` sequences of length `T`, `n` being the number
/// of sequences in the mix.
pub fn svg(inputs: &Inputs, report: &Report) -> String {
    let n = report.sequences.max(1).min(u64::MAX as u128) as u64;
    let longest = inputs.seqs.iter().map(|r| r.value).max().unwrap_or(1) as f64;
    // Show where the budget runs out for n sequences too, unless that is so
    // far away that the current mix would be squeezed into the corner.
    let crossing = report.budget.as_ref().map(|b| b.max_retained_tokens as f64 / n as f64 * 1.1).unwrap_or(0.0);
    let x_max = nice_ceiling((longest * 1.25).max(crossing.min(longest * 64.0)).max(16.0));
    let mut curve = Vec::new();
    for i in 0..=POINTS {
        let t = ((x_max * i as f64 / POINTS as f64).round() as u64).max(1);
        let mut at = inputs.clone();
        at.seqs = vec![Run { value: t, count: n }];
        at.vllm = None;
        at.budget = None;
        if let Ok(r) = compute(&at) {
            curve.push((t as f64, r.tensor_parallel.per_gpu_allocated_bytes as f64));
        }
    }
    let budget = report.budget.as_ref().map(|b| b.kv_budget_bytes_per_gpu as f64);
    let mean_t = report.total_tokens as f64 / n as f64;
    let mix = (mean_t, report.tensor_parallel.per_gpu_allocated_bytes as f64);
    let y_top = curve.iter().map(|p| p.1).chain(budget).chain([mix.1]).fold(1.0, f64::max);
    // Nice tick values in the binary unit the axis is labelled in.
    let unit = (0..7).map(|k| 1024f64.powi(k)).take_while(|u| y_top * 1.08 >= *u).last().unwrap_or(1.0);
    let y_max = nice_ceiling(y_top * 1.08 / unit) * unit;

    let sx = |x: f64| LEFT + (WIDTH - LEFT - RIGHT) * x / x_max;
    let sy = |y: f64| HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * y / y_max;
    let mut s = String::new();
    s.push_str(&format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="kvplot-title" class="kv-plot"><title id="kvplot-title">KV bytes per GPU for {n} sequences against context length</title>"#
    ));
    for i in 0..=4 {
        let y = y_max * i as f64 / 4.0;
        let py = sy(y);
        s.push_str(&format!(r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{py:.1}" y2="{py:.1}"/>"#, WIDTH - RIGHT));
        s.push_str(&format!(
            r#"<text class="tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            py + 4.0,
            units::binary(y as u128)
        ));
        let x = x_max * i as f64 / 4.0;
        let px = sx(x);
        s.push_str(&format!(
            r#"<text class="tick" x="{px:.1}" y="{}" text-anchor="middle">{}</text>"#,
            HEIGHT - BOTTOM + 16.0,
            tokens_label(x)
        ));
    }
    s.push_str(&format!(
        r#"<text class="axis" x="{:.1}" y="{}" text-anchor="middle">context length T (tokens) · {n} sequences · block {}</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 6.0,
        // The block the figures are counted in: a hybrid model's is vLLM's.
        report.block
    ));
    let points: Vec<(f64, f64)> = curve.iter().map(|&(x, y)| (sx(x), sy(y))).collect();
    let level = budget.map(|b| (sy(b), format!("KV budget per GPU {}", units::binary(b as u128))));
    push_curve_and_level(&mut s, &points, level);
    s.push_str(&format!(
        r#"<circle class="mix" cx="{:.1}" cy="{:.1}" r="5"><title>current mix: mean T {:.0}, {} per GPU</title></circle>"#,
        sx(mix.0),
        sy(mix.1),
        mix.0,
        units::binary(mix.1 as u128)
    ));
    s.push_str("</svg>");
    s
}

/// Capacity against the percentile of retained length: sequences that fit
/// on one GPU if every sequence were as long as that percentile, with the
/// mean's count as a line (a distribution sized by its mean).
pub fn distribution_svg(report: &crate::distribution::DistributionReport) -> String {
    let mean = report.rows.first().map_or(0.0, |r| r.sequences as f64);
    let y_top = report.curve.iter().map(|p| p.sequences as f64).chain([mean]).fold(1.0, f64::max);
    let y_max = nice_ceiling(y_top * 1.08);
    let (x_min, x_max) = (50.0, 100.0);
    let sx = |x: f64| LEFT + (WIDTH - LEFT - RIGHT) * (x - x_min) / (x_max - x_min);
    let sy = |y: f64| HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * y / y_max;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="kvdist-title" class="kv-plot"><title id="kvdist-title">Sequences that fit on one GPU against the percentile of retained length</title>"#
    );
    for i in 0..=4 {
        let y = y_max * i as f64 / 4.0;
        let py = sy(y);
        s.push_str(&format!(r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{py:.1}" y2="{py:.1}"/>"#, WIDTH - RIGHT));
        // Counts are whole, but a quarter of a nice maximum may not be (12.5).
        let label = if y.fract() == 0.0 { units::group_digits(y as u128) } else { format!("{y:.1}") };
        s.push_str(&format!(r#"<text class="tick" x="{}" y="{:.1}" text-anchor="end">{label}</text>"#, LEFT - 6.0, py + 4.0));
    }
    for p in (50..=100).step_by(10) {
        s.push_str(&format!(
            r#"<text class="tick" x="{:.1}" y="{}" text-anchor="middle">p{p}</text>"#,
            sx(p as f64),
            HEIGHT - BOTTOM + 16.0
        ));
    }
    s.push_str(&format!(
        r#"<text class="axis" x="{:.1}" y="{}" text-anchor="middle">percentile of retained length (prompt + answer) · {} sequences in the sample</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 6.0,
        report.samples
    ));
    let points: Vec<(f64, f64)> = report.curve.iter().map(|p| (sx(p.percentile as f64), sy(p.sequences as f64))).collect();
    push_curve_and_level(&mut s, &points, Some((sy(mean), format!("sized by the mean: {}", units::group_digits(mean as u128)))));
    for label in ["p95", "p99"] {
        if let (Some(row), Some(p)) = (report.rows.iter().find(|r| r.label == label), label[1..].parse::<f64>().ok()) {
            s.push_str(&format!(
                r#"<circle class="mix" cx="{:.1}" cy="{:.1}" r="4"><title>{label}: {} tokens, {} sequences</title></circle>"#,
                sx(p),
                sy(row.sequences as f64),
                row.retained_tokens,
                row.sequences
            ));
        }
    }
    s.push_str("</svg>");
    s
}

/// A curve through `points` (in the figure's coordinates) and, where
/// given, a labelled horizontal line at a height: the budget in one plot,
/// the mean's capacity in the other. Labels are built from numbers only.
fn push_curve_and_level(s: &mut String, points: &[(f64, f64)], level: Option<(f64, String)>) {
    let path: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    s.push_str(&format!(r#"<polyline class="curve" fill="none" points="{}"/>"#, path.join(" ")));
    if let Some((py, label)) = level {
        s.push_str(&format!(r#"<line class="budget" x1="{LEFT}" x2="{}" y1="{py:.1}" y2="{py:.1}"/>"#, WIDTH - RIGHT));
        s.push_str(&format!(
            r#"<text class="budget-label" x="{}" y="{:.1}" text-anchor="end">{label}</text>"#,
            WIDTH - RIGHT - 4.0,
            py - 5.0
        ));
    }
}

/// 1, 2, 2.5 or 5 × 10^k, at least `v` (for tick labels a person can read).
fn nice_ceiling(v: f64) -> f64 {
    let exp = 10f64.powf(v.max(1e-9).log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * exp >= v {
            return m * exp;
        }
    }
    10.0 * exp
}

fn tokens_label(t: f64) -> String {
    if t >= 1_000_000.0 {
        format!("{:.1}M", t / 1_000_000.0).replace(".0M", "M")
    } else if t >= 1000.0 {
        format!("{:.1}k", t / 1000.0).replace(".0k", "k")
    } else {
        format!("{t:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plot_has_curve_budget_and_mix() {
        let mut inputs = Inputs::seed();
        inputs.budget = Some(crate::calc::GpuBudget {
            gpu_bytes: 80 << 30,
            reserve: units::Decimal { numerator: 1, scale: 1 },
            params: 8_000_000_000,
            weight_dtype: crate::Dtype::Bf16,
            weight_bytes: None,
        });
        let report = compute(&inputs).unwrap();
        let svg = svg(&inputs, &report);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains(r#"class="curve""#));
        assert!(svg.contains(r#"class="budget""#));
        assert!(svg.contains(r#"class="mix""#));
        assert_eq!(svg.matches("<polyline").count(), 1);
    }

    #[test]
    fn distribution_plot_has_the_curve_the_mean_and_the_tail() {
        let lengths = crate::distribution::parse_lengths("input,output\n100,10\n2000,200\n30000,500\n").unwrap();
        let report = crate::distribution::capacity(&Inputs::seed(), 40 << 30, &lengths).unwrap();
        let svg = distribution_svg(&report);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert_eq!(svg.matches(r#"class="mix""#).count(), 2);
        assert!(svg.contains("sized by the mean: "), "{svg}");
    }
}
