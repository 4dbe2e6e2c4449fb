//! Card 4, prefix reuse (note 04): the field guide's protocol of prefix
//! hits, misses, pressure and recovery, each against a full prefill, and a
//! long conversation extended by a short turn against a short decide. Owns
//! the prefix jobs.

use bench::prefix::PrefixReport;
use bench::report::format_ms;
use leptos::prelude::*;
use wire::{JobEvent, JobKind, JobProgress, JobRequest, JobResult};

use super::bytes_label;
use super::worker::{JobProgress as JobProgressLine, Worker};
use super::Alert;

/// Timed follow-ups (and short decides) in the page's prefix protocol.
const PREFIX_ITERATIONS: usize = 5;

/// One step of a running protocol.
#[derive(Debug, Clone, PartialEq)]
struct PrefixStep {
    done: usize,
    total: usize,
    label: String,
}

/// A finished protocol's report, and whether Cancel cut it short.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    report: PrefixReport,
    cancelled: bool,
}

/// The card's state.
#[derive(Clone, Copy)]
struct PrefixState {
    /// The long conversation's length (a select's value).
    long_tokens: RwSignal<String>,
    step: RwSignal<Option<PrefixStep>>,
    measured: RwSignal<Option<Measured>>,
    alert: Alert,
}

impl PrefixState {
    fn apply(self, event: JobEvent) {
        match event {
            JobEvent::Progress(JobProgress::PrefixStep { done, total, label }) => self.step.set(Some(PrefixStep { done, total, label })),
            JobEvent::Finished { result: JobResult::Prefix(report), cancelled } => match report.decode() {
                Ok(report) => self.measured.set(Some(Measured { report, cancelled })),
                Err(message) => self.alert.show(message),
            },
            _ => {}
        }
    }
}

#[component]
pub fn PrefixCard() -> impl IntoView {
    let worker = expect_context::<Worker>();
    let alert = expect_context::<Alert>();
    let state = PrefixState { long_tokens: RwSignal::new("256".into()), step: RwSignal::new(None), measured: RwSignal::new(None), alert };
    worker.on_job(JobKind::Prefix, move |event| state.apply(event));
    let run = move |_| {
        let long_tokens = state.long_tokens.get_untracked().parse().unwrap_or(256);
        alert.clear();
        if worker.start(JobRequest::Prefix { long_tokens, iterations: PREFIX_ITERATIONS }, None) {
            state.step.set(None);
            state.measured.set(None);
        }
    };
    let progress = move || {
        (worker.running.get() == Some(JobKind::Prefix)).then(|| {
            let PrefixStep { done, total, label } =
                state.step.get().unwrap_or(PrefixStep { done: 0, total: 1, label: "building the conversations".into() });
            let text = format!("{done} of {total}: {label}");
            view! { <JobProgressLine id="prefix" label="Prefix protocol progress" value=done as f64 max=total as f64 text=text/> }
        })
    };
    view! {
        <section class="card" aria-labelledby="prefix-h">
            <h2 id="prefix-h">"4 · Prefix reuse (note 04)"</h2>
            <p class="note">
                "The router keeps the keys and values of token prefixes it has prefilled in a radix tree (per checkpoint, precision, tokenizer and router_max_tokens) "
                "and prefills only what follows the longest held prefix. The protocol sends shared prefixes (hits), the same request in other tokens "
                "(misses), unrelated requests until the cache evicts, then the first conversation again. Every step runs a full prefill too, so the "
                "table shows the time avoided and that the ranking did not change. Left truncation defeats reuse: once a conversation passes "
                "router_max_tokens, each turn moves the kept window's start, and the held prefix no longer matches."
            </p>
            <div class="row">
                <label class="field small">"Long conversation (tokens)"
                    <select data-testid="prefix-tokens" prop:value=move || state.long_tokens.get()
                        on:change=move |ev| state.long_tokens.set(event_target_value(&ev))>
                        <option value="256">"256"</option>
                        <option value="1000">"1,000 (+ a 16-token turn fits router_max_tokens)"</option>
                    </select>
                </label>
                <button type="button" data-testid="prefix-run" disabled=move || !worker.can_start(JobKind::Prefix) on:click=run>
                    "Run the prefix protocol"
                </button>
            </div>
            {progress}
            {move || state.measured.get().map(|Measured { report, cancelled }| view! { <PrefixReportView report=report cancelled=cancelled/> })}
        </section>
    }
}

#[component]
fn PrefixReportView(report: PrefixReport, cancelled: bool) -> impl IntoView {
    let e = report.extension.clone();
    let p50 = |s: &Option<bench::Summary>| s.as_ref().map(|s| format_ms(s.p50)).unwrap_or_else(|| "–".into());
    let lookup = e.extended_lookup.as_ref().map(|s| format!("{:.3} ms", s.p50)).unwrap_or_else(|| "–".into());
    view! {
        <div class="report" data-testid="prefix-report">
            {cancelled.then(|| view! { <p class="warning">"Cancelled: the steps that ran are shown."</p> })}
            <div class="table-wrap">
                <table>
                    <thead><tr>
                        <th scope="col">"phase"</th><th scope="col">"step"</th><th scope="col">"tokens"</th><th scope="col">"reused"</th>
                        <th scope="col">"prefilled"</th><th scope="col">"lookup"</th><th scope="col">"prefill (suffix)"</th>
                        <th scope="col">"full prefill"</th><th scope="col">"avoided"</th><th scope="col">"cache tokens / budget"</th>
                        <th scope="col">"evictions"</th><th scope="col">"same ranking"</th>
                    </tr></thead>
                    <tbody>
                        {report.steps.iter().map(|s| view! {
                            <tr data-testid="prefix-row" data-phase=s.phase.clone() data-reused=s.reused_tokens.to_string() data-same=s.same_ranking.to_string()>
                                <td>{s.phase.clone()}</td>
                                <td>{s.label.clone()}</td>
                                <td class="num">{s.tokens}</td>
                                <td class="num">{s.reused_tokens}</td>
                                <td class="num">{s.prefilled_tokens}</td>
                                <td class="num">{format!("{:.3} ms", s.lookup_ms)}</td>
                                <td class="num">{format_ms(s.prefill_ms)}</td>
                                <td class="num">{format_ms(s.full_prefill_ms)}</td>
                                <td class="num">{format_ms(s.avoided_prefill_ms)}</td>
                                <td class="num">{format!("{} / {}", s.cache_tokens, s.budget_tokens)}</td>
                                <td class="num">{s.evictions_total}</td>
                                <td>{if s.same_ranking { "yes".to_string() } else { format!("NO (max score difference {:.2e})", s.max_score_difference) }}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
            {(!e.extended_ms.is_empty()).then(|| view! {
                <p class="note" data-testid="prefix-target">
                    {format!(
                        "A {}-token conversation extended by {} tokens, its prefix cached: p50 {} (lookup p50 {}) against a {}-token decide from scratch: p50 {}; ratio {:.2} (target ≤ 2), lookup {:.3} % of it (target ≤ 1 %). {} iterations each; T_cached ≈ T_lookup + T_prefill(suffix | prefix).",
                        e.prefix_tokens, e.added_tokens, p50(&e.extended), lookup, e.short_tokens, p50(&e.short),
                        e.ratio_p50, e.lookup_share_p50 * 100.0, e.extended_ms.len()
                    )}
                </p>
            })}
            <p class="note">{format!(
                "Cache budget {} tokens / {}; one token holds {} of K/V and hidden state. Scores of a cached decide agree with a full prefill within {:e}.",
                report.budget_tokens, bytes_label(report.budget_bytes as f64), bytes_label(report.bytes_per_token as f64), report.score_tolerance
            )}</p>
        </div>
    }
}
