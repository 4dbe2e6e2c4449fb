//! How a latency report is shown: the field guide's table, the conditions
//! line, the two timing boundaries, the plot, the stage breakdown and where
//! it was measured. The live bench, a shared link and a loaded file all use
//! these components, so a shared result looks exactly like the one measured.

use bench::figures::{compare, latency_svg, Breakdown, Series};

use crate::quality_view::QualityView;
use bench::report::{format_ms, Envelope, Report, TABLE_HEADER};
use leptos::prelude::*;

/// `2026-11-30 10:42 UTC` from Unix milliseconds.
pub fn utc_time(unix_ms: u64) -> String {
    let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(unix_ms as f64));
    let iso = String::from(date.to_iso_string());
    format!("{} {} UTC", &iso.get(..10).unwrap_or(""), &iso.get(11..16).unwrap_or(""))
}

/// One line saying where and when a report was measured.
pub fn measured_where<S>(report: &Envelope<S>) -> String {
    let e = &report.environment;
    let browser = e.user_agent.as_deref().map(|ua| format!(", {ua}")).unwrap_or_default();
    let machine = if e.runtime == "browser" {
        format!(
            "{} logical CPUs reported, simd128 {}, {} thread(s), cross-origin isolated {}",
            e.hardware_concurrency.map(|n| n.to_string()).unwrap_or_else(|| "?".into()),
            if e.simd128 == Some(true) { "on" } else { "off" },
            e.threads,
            if e.cross_origin_isolated == Some(true) { "yes" } else { "no" }
        )
    } else {
        format!("{}, {} thread(s), {}", e.cpu_model, e.threads, e.os)
    };
    format!("Measured {} ({}{browser}; {machine}) on {}, build {}.", e.runtime, e.target, utc_time(e.started_unix_ms), e.git_revision)
}

/// A report loaded to compare with the shown one, and its file's name.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub file: String,
    pub report: Report,
}

/// A table of text cells under a header row, in its scrolling wrapper
/// (`data-testid` = `id`); cells are right-aligned figures unless `text`.
#[component]
pub fn CellTable(
    id: &'static str,
    columns: &'static [&'static str],
    rows: Vec<Vec<String>>,
    #[prop(default = false)] text: bool,
) -> impl IntoView {
    let class = if text { "" } else { "num" };
    view! {
        <div class="table-wrap">
            <table class="bench-table" data-testid=id>
                <thead><tr>{columns.iter().map(|h| view! { <th scope="col">{*h}</th> }).collect_view()}</tr></thead>
                <tbody>
                    {rows.into_iter().map(|row| view! {
                        <tr>{row.into_iter().map(|cell| view! { <td class=class>{cell}</td> }).collect_view()}</tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

/// The table, conditions, boundaries, plot, breakdown and provenance.
#[component]
pub fn ReportView(report: Report, #[prop(default = None)] compare_with: Option<Comparison>) -> impl IntoView {
    let rows = report.rows();
    let series_label = format!("{} ({})", report.environment.runtime, report.environment.target);
    let svg = match &compare_with {
        Some(Comparison { file: name, report: other }) => {
            latency_svg(&[Series { label: &series_label, report: &report }, Series { label: name, report: other }])
        }
        None => latency_svg(&[Series { label: &series_label, report: &report }]),
    };
    let breakdown: Vec<(usize, Breakdown)> = report.results.iter().map(|r| (r.prompt_tokens, Breakdown::of(r))).collect();
    let boundaries = report.boundaries();
    let e = report.environment.clone();
    let p = report.provenance.clone();
    let versions = e.versions.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
    let environment_rows: Vec<(&'static str, String)> = vec![
        ("runtime", format!("{} · {}", e.runtime, e.target)),
        ("user agent", e.user_agent.clone().unwrap_or_else(|| "–".into())),
        ("hardwareConcurrency", e.hardware_concurrency.map(|n| n.to_string()).unwrap_or_else(|| "–".into())),
        (
            "backend",
            format!(
                "{} · simd128 {} · {} thread(s) · crossOriginIsolated {}",
                p.device,
                flag(e.simd128),
                e.threads,
                flag(e.cross_origin_isolated)
            ),
        ),
        ("CPU · OS", format!("{} · {}", e.cpu_model, e.os)),
        ("build", format!("git {} · {versions}", e.git_revision)),
        ("checkpoint", format!("{} ({})", p.checkpoint_id, p.checkpoint_file)),
        ("backbone", p.backbone.clone()),
        ("precision", p.precision.clone()),
        ("tokenizer", p.tokenizer.clone()),
        ("pool", format!("{} ({}, {} candidates)", p.pool_id, p.pool_name, p.candidates)),
        ("router_max_tokens", p.router_max_tokens.to_string()),
        (
            "protocol",
            format!(
                "{} warm-ups, {} iterations; prompts from {}",
                report.protocol.warmup, report.protocol.iterations, report.protocol.prompts_source
            ),
        ),
        ("started", utc_time(e.started_unix_ms)),
    ];
    let comparison =
        compare_with.map(|Comparison { file: name, report: other }| view! { <CompareTable page=report.clone() loaded=other name=name/> });
    // A quality-only report (`bench-decide --quality`) has no latency rows.
    let quality = report.studies.quality.clone().map(|study| view! { <QualityView report=report.clone() study=study/> });
    let serve = report.studies.serve.clone().map(|study| view! { <crate::serve_view::ServeView study=study/> });
    let requests = report.studies.client.clone().map(|study| view! { <crate::request_view::RequestView study=study/> });
    let latency = (!report.results.is_empty()).then(|| view! {
        <CellTable id="bench-table" columns=&TABLE_HEADER rows=rows.into_iter().map(Vec::from).collect()/>
        <p class="conditions" data-testid="bench-conditions">{report.conditions()}</p>
        {(!boundaries.is_empty()).then(|| view! {
            <p class="boundaries" data-testid="bench-boundaries">
                "Timing boundaries — " {boundaries}
                ". decide includes mode resolution, assembly, cost and ranking; encode+scores stops at the scores. Neither is a client's time to first token."
            </p>
        })}
        <figure class="plot" data-testid="bench-plot" inner_html=svg></figure>
        <h4>"Where a warm decide spends its time (median per stage)"</h4>
        <div class="table-wrap">
            <table class="breakdown" data-testid="bench-breakdown">
                <thead><tr>
                    <th scope="col">"prompt tokens"</th><th scope="col">"tokenise"</th><th scope="col">"prefill"</th>
                    <th scope="col">"of it: projections"</th><th scope="col">"attention"</th><th scope="col">"rest"</th>
                    <th scope="col">"scores"</th><th scope="col">"cost, rank, confidence"</th><th scope="col">"whole call"</th><th scope="col">"prefill share"</th>
                </tr></thead>
                <tbody>
                    {breakdown.into_iter().map(|(tokens, b)| view! {
                        <tr>
                            <td class="num">{tokens}</td>
                            <td class="num">{format_ms(b.tokenize_ms)}</td>
                            <td class="num">{format_ms(b.prefill_ms)}</td>
                            <td class="num">{share(b.projections_ms, b.prefill_ms)}</td>
                            <td class="num">{share(b.attention_ms, b.prefill_ms)}</td>
                            <td class="num">{share((b.prefill_ms - b.projections_ms - b.attention_ms).max(0.0), b.prefill_ms)}</td>
                            <td class="num">{format_ms(b.scores_ms)}</td>
                            <td class="num">{format_ms(b.cost_rank_ms)}</td>
                            <td class="num">{format_ms(b.total_ms)}</td>
                            <td class="num">{format!("{:.1} %", 100.0 * b.prefill_ms / b.total_ms.max(1e-9))}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    });
    view! {
        {latency}
        {quality}
        {serve}
        {requests}
        {comparison}
        <details class="provenance" data-testid="bench-provenance" open>
            <summary>"Environment and provenance"</summary>
            <dl>
                {environment_rows.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd data-field=k>{v}</dd> }).collect_view()}
            </dl>
        </details>
    }
}

/// A prefill part in ms and as a share of the prefill; "–" where a report
/// predates the parts (both zero).
fn share(part_ms: f64, prefill_ms: f64) -> String {
    if part_ms <= 0.0 || prefill_ms <= 0.0 {
        return "–".into();
    }
    format!("{} ({:.0} %)", format_ms(part_ms), 100.0 * part_ms / prefill_ms)
}

fn flag(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "–",
    }
}

/// This page's report next to a loaded one, with ratios per length.
#[component]
fn CompareTable(page: Report, loaded: Report, name: String) -> impl IntoView {
    let rows = compare(&loaded, &page);
    let fmt = |v: Option<f64>| v.map(format_ms).unwrap_or_else(|| "–".into());
    let empty = rows.is_empty();
    view! {
        <h4>{format!("This run next to {name} ({} · {})", loaded.environment.runtime, loaded.environment.target)}</h4>
        <p class="note">{measured_where(&loaded)}</p>
        {empty.then(|| view! { <p class="warning">"The two reports share no prompt length, so there is nothing to pair."</p> })}
        <div class="table-wrap">
            <table class="compare" data-testid="bench-compare">
                <thead><tr>
                    <th scope="col">"prompt tokens"</th>
                    <th scope="col">"p50 here"</th><th scope="col">{format!("p50 {name}")}</th><th scope="col">"here ÷ loaded"</th>
                    <th scope="col">"cold here"</th><th scope="col">{format!("cold {name}")}</th><th scope="col">"here ÷ loaded"</th>
                </tr></thead>
                <tbody>
                    {rows.into_iter().map(|r| view! {
                        <tr>
                            <td class="num">{r.prompt_tokens}</td>
                            <td class="num">{fmt(r.right_p50_ms)}</td>
                            <td class="num">{fmt(r.left_p50_ms)}</td>
                            <td class="num">{r.p50_ratio.map(|x| format!("{x:.2}×")).unwrap_or_else(|| "–".into())}</td>
                            <td class="num">{format_ms(r.right_cold_ms)}</td>
                            <td class="num">{format_ms(r.left_cold_ms)}</td>
                            <td class="num">{format!("{:.2}×", r.cold_ratio)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}
