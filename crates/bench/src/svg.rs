//! SVG text shared by every figure the crate draws (the latency plot, the
//! quality and serving figures): one escaper for element text and attribute
//! values, the scatter/line plot the quality and serving studies share, and
//! the step line the queue and K/V-over-time figures draw.
//!
//! The page puts these strings into the DOM with `inner_html`, and their
//! labels can come from a shared link or an imported report, so everything
//! that is not a number goes through [`escape`], in text and in attributes
//! alike: one rule, so no call site has to know which context it writes.

/// Escapes `text` for an XML element's text or a double- or single-quoted
/// attribute value: `&`, `<`, `>`, `"` and `'`.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A step line's points for `samples` (x in pixels, then the value a
/// sample holds from then on), starting from zero: each sample rises or
/// falls at its x. Samples that land in one pixel column are drawn as their
/// largest value, so a long run's figure has a point a column, not one a
/// sample, and no peak hides between two.
pub fn step_points(samples: impl IntoIterator<Item = (f64, f64)>, y: impl Fn(f64) -> f64) -> String {
    let mut columns: Vec<(f64, f64)> = Vec::new();
    for (x, value) in samples {
        let column = x.round();
        match columns.last_mut() {
            Some(last) if last.0 == column => last.1 = last.1.max(value),
            _ => columns.push((column, value)),
        }
    }
    let mut points = Vec::with_capacity(2 * columns.len());
    let mut last = 0.0;
    for (column, value) in columns {
        points.push(format!("{column:.0},{:.1}", y(last)));
        points.push(format!("{column:.0},{:.1}", y(value)));
        last = value;
    }
    points.join(" ")
}

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

fn ticks(max: f64) -> Vec<f64> {
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| *s >= raw).unwrap_or(raw);
    (0..=((max / step).ceil() as usize)).map(|i| i as f64 * step).collect()
}

/// A tick's value as printed: multiples of a step like 0.2 are not exact in
/// binary (3 × 0.2 prints as 0.6000000000000001), so the value is rounded
/// to six decimals first.
fn tick_label(value: f64) -> String {
    let rounded = (value * 1e6).round() / 1e6;
    format!("{rounded}")
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
        out.push_str(&format!(r#"<line class="grid" x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}"/><text class="tick" x="{0:.1}" y="{3}" text-anchor="middle">{4}</text>"#, x(*t), T, H - B, H - B + 14.0, tick_label(*t)));
    }
    for t in &yt {
        out.push_str(&format!(r#"<line class="grid" x1="{1}" x2="{2}" y1="{0:.1}" y2="{0:.1}"/><text class="tick" x="{3}" y="{0:.1}" text-anchor="end" dominant-baseline="middle">{4}</text>"#, y(*t), L, W - R, L - 6.0, tick_label(*t)));
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
        let class = escape(&format!("series-{}", s.class));
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

/// What the escaping tests of every figure share: a label that tries to
/// break out of an attribute and out of an element.
#[cfg(test)]
pub(crate) const HOSTILE: &str = r#"x" onmouseover="alert(1)" y='<script>alert(2)</script>&amp;"#;

/// Checks that `svg` is well-formed XML whose elements are all plot
/// elements with no event-handler attribute, and that `hostile` survives in
/// it as inert text or as an attribute's value (escaped, not dropped).
#[cfg(test)]
pub(crate) fn assert_inert(svg: &str, hostile: &str) {
    assert!(texts_and_values(svg).iter().any(|t| t.contains(hostile)), "the label is missing from {svg}");
}

/// Every text node and attribute value of `svg`, after checking that it is
/// well-formed and holds only plot elements without event handlers.
#[cfg(test)]
pub(crate) fn texts_and_values(svg: &str) -> Vec<String> {
    const ELEMENTS: [&str; 9] = ["svg", "title", "line", "text", "polyline", "polygon", "circle", "rect", "path"];
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed ({e}): {svg}"));
    let mut found = Vec::new();
    for node in doc.descendants() {
        if node.is_text() {
            found.extend(node.text().map(str::to_string));
        }
        if !node.is_element() {
            continue;
        }
        let name = node.tag_name().name();
        assert!(ELEMENTS.contains(&name), "an element <{name}> in {svg}");
        for attribute in node.attributes() {
            assert!(!attribute.name().starts_with("on"), "an attribute {}= on <{name}> in {svg}", attribute.name());
            found.push(attribute.value().to_string());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step a sample, from zero; samples in one pixel column merge to
    /// their largest, the line going on from there.
    #[test]
    fn step_lines_keep_each_columns_peak() {
        let y = |v: f64| 100.0 - v;
        assert_eq!(step_points([(10.0, 3.0), (20.2, 1.0)], y), "10,100.0 10,97.0 20,97.0 20,99.0");
        assert_eq!(step_points([(10.0, 1.0), (10.3, 5.0), (9.8, 2.0), (12.0, 0.0)], y), "10,100.0 10,95.0 12,95.0 12,100.0");
        assert_eq!(step_points(std::iter::empty(), y), "");
    }

    #[test]
    fn ticks_print_without_binary_noise() {
        assert_eq!(tick_label(3.0 * 0.2), "0.6");
        assert_eq!(tick_label(150.0), "150");
        assert_eq!(tick_label(0.000_25), "0.00025");
    }

    #[test]
    fn escape_covers_text_and_both_quotes() {
        assert_eq!(escape(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(escape("plain ≤ text"), "plain ≤ text");
    }

    #[test]
    fn a_hostile_label_stays_text_in_every_part_of_the_plot() {
        let series = [PlotSeries {
            label: HOSTILE.into(),
            class: HOSTILE.into(),
            points: vec![(1.0, 2.0, Some(HOSTILE.into())), (2.0, 3.0, None)],
            line: true,
        }];
        assert_inert(&plot_svg(HOSTILE, HOSTILE, HOSTILE, &series), HOSTILE);
    }
}
