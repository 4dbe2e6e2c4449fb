//! The serving figures as SVG text (colours from CSS classes, so the page's
//! themes apply): goodput against offered load with the knee, the chunking
//! trade-off, one run's timeline (a bar per request, waiting and engine
//! time apart, as in the note's figure) and its queue over time.

use super::ServeStudy;
use crate::svg::{escape, plot_svg, step_points, PlotSeries};
use serving::{LengthClass, Outcome, Policy, QueueSample, ServeRun, KNEE_SHARE};

/// Served-within-SLO throughput, decisions and arrivals per second against
/// the offered (nominal) rate (the load sweep), with the knee and the
/// goodput peak labelled.
pub fn load_svg(study: &ServeStudy) -> String {
    let sweep = study.load_sweep();
    let knee = study.knee();
    let peak = study.goodput_peak().map(|r| r.summary.offered_per_s);
    let point = |r: &&ServeRun, y: f64| {
        let rate = Some(r.summary.offered_per_s);
        let label = match (rate == knee, rate == peak) {
            (true, true) => Some(format!("knee ({}% within SLO), most served", (KNEE_SHARE * 100.0) as u32)),
            (true, false) => Some(format!("knee ({}% within SLO)", (KNEE_SHARE * 100.0) as u32)),
            (false, true) => Some("most served within SLO".to_string()),
            (false, false) => None,
        };
        (r.summary.offered_per_s, y, label)
    };
    let slo = sweep.first().map_or(0.0, |r| r.settings.slo_ms);
    let series = vec![
        PlotSeries {
            label: "arrived /s".into(),
            class: "baseline".into(),
            points: sweep.iter().map(|r| (r.summary.offered_per_s, r.arrived_per_s(), None)).collect(),
            line: true,
        },
        PlotSeries {
            label: "decisions/s".into(),
            class: "q1".into(),
            points: sweep.iter().map(|r| (r.summary.offered_per_s, r.summary.throughput_per_s, None)).collect(),
            line: true,
        },
        PlotSeries {
            label: format!("served ≤ {slo:.0} ms /s"),
            class: "q0".into(),
            points: sweep.iter().map(|r| point(r, r.summary.goodput_per_s)).collect(),
            line: true,
        },
    ];
    plot_svg("Served within the SLO against offered load", "offered rate (requests/s)", "requests/s", &series)
}

/// p95 end-to-end latency of short and long requests against the chunk
/// size, one line per (rate, policy, class) at the sweep's first two
/// rates; "whole" is plotted at the
/// router's `router_max_tokens`. Unserved p95s are left out of a line.
pub fn chunks_svg(study: &ServeStudy) -> String {
    let mut series = Vec::new();
    for (ri, rate) in study.chunk_rates().into_iter().enumerate().take(2) {
        for policy in Policy::ALL {
            for class in [LengthClass::Short, LengthClass::Long] {
                let mut points: Vec<(f64, f64, Option<String>)> = study
                    .runs
                    .iter()
                    .filter(|r| r.settings.rate_per_s == rate && r.settings.policy == policy)
                    .filter_map(|r| {
                        let c = r.settings.chunk.unwrap_or(study.router_max_tokens).min(study.router_max_tokens) as f64;
                        let p = if class == LengthClass::Short { r.summary.short.p95 } else { r.summary.long.p95 };
                        p.map(|p| (c, p / 1000.0, None))
                    })
                    .collect();
                if points.is_empty() {
                    continue;
                }
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                let name = if class == LengthClass::Short { "short" } else { "long" };
                series.push(PlotSeries {
                    label: format!("{name}, {rate}/s, {}", policy.label()),
                    // Colour by policy, faded for the second rate, dashed for long requests.
                    class: format!(
                        "{}{}{}",
                        if policy == Policy::Fcfs { "f" } else { "p" },
                        ri.min(1),
                        if class == LengthClass::Short { "s" } else { "l" }
                    ),
                    points,
                    line: true,
                });
            }
        }
    }
    plot_svg("p95 latency against prefill chunk", "chunk (tokens; 1024 = whole)", "p95 end to end (s)", &series)
}

const W: f64 = 640.0;
const L: f64 = 56.0;
const R: f64 = 16.0;

/// One bar per request in arrival order: waiting (queue), then engine and
/// preempted time between start and end; the outcome as the bar's class.
pub fn timeline_svg(run: &ServeRun) -> String {
    let rows = run.records.len().max(1);
    let bar = match rows {
        0..=40 => 10.0,
        41..=120 => 4.0,
        _ => 2.0,
    };
    let h = 30.0 + bar * rows as f64 + 24.0;
    let end = run.records.iter().map(|r| r.end_ms).fold(run.settings.end_ms(), f64::max).max(1.0);
    let x = |t: f64| L + (W - L - R) * t / end;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h:.0}" role="img" class="serve-timeline" aria-label="Timeline: {0}"><title>Timeline: {0}</title>"#,
        escape(&run.label)
    );
    out.push_str(&time_axis(end, h, x));
    for (i, r) in run.records.iter().enumerate() {
        let y = 28.0 + bar * i as f64;
        let wait_end = r.start_ms.unwrap_or(r.end_ms);
        out.push_str(&format!(
            r#"<rect class="wait {}" x="{:.1}" y="{y:.1}" width="{:.2}" height="{:.1}"><title>#{} {} ({} tokens): waited {:.0} ms, {}</title></rect>"#,
            outcome_class(r.outcome),
            x(r.arrival_ms),
            (x(wait_end) - x(r.arrival_ms)).max(0.5),
            bar * 0.8,
            r.id,
            escape(&r.task),
            r.tokens,
            r.queue_ms,
            r.outcome.label()
        ));
        if let Some(start) = r.start_ms {
            out.push_str(&format!(
                r#"<rect class="work {}" x="{:.1}" y="{y:.1}" width="{:.2}" height="{:.1}"><title>#{}: prefill {:.0} ms, other {:.0} ms, preempted {:.0} ms</title></rect>"#,
                outcome_class(r.outcome),
                x(start),
                (x(r.end_ms) - x(start)).max(0.5),
                bar * 0.8,
                r.id,
                r.prefill_ms,
                r.other_ms,
                r.preempted_ms
            ));
        }
    }
    out.push_str(&format!(
        r#"<text class="legend" x="{L}" y="{:.1}">bars: waiting (light) then started → decision (dark); red: timed out, rejected or failed</text></svg>"#,
        h - 4.0
    ));
    out
}

/// A timeline's vertical grid and its second ticks along the top, from 0
/// to `end_ms`, in a figure `h` high whose time maps to `x`.
pub(crate) fn time_axis(end_ms: f64, h: f64, x: impl Fn(f64) -> f64) -> String {
    let step = super::plot_step(end_ms / 1000.0);
    let mut out = String::new();
    let mut t = 0.0;
    while t <= end_ms / 1000.0 + 1e-9 {
        out.push_str(&format!(
            r#"<line class="grid" x1="{0:.1}" x2="{0:.1}" y1="24" y2="{1:.1}"/><text class="tick" x="{0:.1}" y="18" text-anchor="middle">{2}s</text>"#,
            x(t * 1000.0),
            h - 20.0,
            t
        ));
        t += step;
    }
    out
}

fn outcome_class(o: Outcome) -> &'static str {
    match o {
        Outcome::Served => "served",
        Outcome::TimedOut | Outcome::Unfinished => "late",
        Outcome::Rejected | Outcome::Failed => "dropped",
    }
}

/// Requests in the system over time (a step line), waiting ones beneath.
pub fn queue_svg(samples: &[QueueSample], end_ms: f64, label: &str) -> String {
    let h = 160.0;
    let (top, bottom) = (12.0, 22.0);
    let end = samples.iter().map(|s| s.t_ms).fold(end_ms, f64::max).max(1.0);
    let max = samples.iter().map(|s| s.in_system).max().unwrap_or(0).max(1) as f64;
    let x = |t: f64| L + (W - L - R) * t / end;
    let y = |n: f64| h - bottom - (h - top - bottom) * n / max;
    let step_line = |value: &dyn Fn(&QueueSample) -> usize| step_points(samples.iter().map(|s| (x(s.t_ms), value(s) as f64)), y);
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h}" role="img" class="serve-queue" aria-label="Queue: {0}"><title>Queue: {0}</title><line class="grid" x1="{L}" x2="{1:.1}" y1="{2:.1}" y2="{2:.1}"/><text class="tick" x="{3}" y="{2:.1}" text-anchor="end">0</text><text class="tick" x="{3}" y="{4:.1}" text-anchor="end" dominant-baseline="hanging">{5}</text><text class="tick" x="{1:.1}" y="{6:.1}" text-anchor="end">{7:.1} s</text><polyline class="in-system" fill="none" points="{8}"/><polyline class="waiting" fill="none" points="{9}"/><text class="legend" x="{L}" y="{6:.1}">in the system (green), of them waiting (blue)</text></svg>"#,
        escape(label),
        W - R,
        y(0.0),
        L - 6.0,
        top,
        max,
        h - 4.0,
        end / 1000.0,
        step_line(&|s| s.in_system),
        step_line(&|s| s.waiting),
    )
}
