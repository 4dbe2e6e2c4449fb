//! The serving test on the router page: a study's verdicts, its table (one
//! row per run, every request counted), the load and chunking figures, and
//! one run's timeline and queue. Everything shown comes from a report's
//! `serve` section, computed by `bench::serve` (natively or in the worker).

use bench::serve::{plot, ServeStudy};
use leptos::prelude::*;

#[component]
pub fn ServeView(study: ServeStudy) -> impl IntoView {
    let chosen = RwSignal::new(study.runs.len().saturating_sub(1));
    let verdicts = study.verdicts();
    let load = (study.load_sweep().len() > 1).then(|| plot::load_svg(&study));
    let chunks = (!study.chunk_rates().is_empty()).then(|| plot::chunks_svg(&study));
    let table = study.table_cells();
    let runs = study.runs.clone();
    let labels: Vec<(usize, String)> = runs.iter().enumerate().map(|(i, r)| (i, r.label.clone())).collect();
    let run_figures = move || {
        let run = runs.get(chosen.get())?.clone();
        let queue = plot::queue_svg(&run.queue, run.settings.end_ms(), &run.label);
        let timeline = plot::timeline_svg(&run);
        Some(view! {
            <figure class="plot" data-testid="serve-queue-figure" inner_html=queue></figure>
            <figure class="plot serve-timeline-figure" data-testid="serve-timeline" inner_html=timeline></figure>
        })
    };
    view! {
        <div class="serve-study" data-testid="serve-study">
            <ul class="verdicts" data-testid="serve-verdicts">
                {verdicts.into_iter().map(|v| view! { <li>{v}</li> }).collect_view()}
            </ul>
            <div class="table-wrap">
                <table data-testid="serve-table">
                    <thead><tr>{table.0.into_iter().map(|h| view! { <th scope="col">{h}</th> }).collect_view()}</tr></thead>
                    <tbody>
                        {table.1.into_iter().map(|row| view! {
                            <tr data-testid="serve-row">{row.into_iter().map(|c| view! { <td class="num">{c}</td> }).collect_view()}</tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
            <p class="note">{format!(
                "Over the measurement interval (arrivals after the warm-up); latencies in ms, arrival to decision. \"not served\" where the percentile falls on a request that timed out, was rejected or did not finish: they stay in the statistics. Prompts: {} ({} prompts, router_max_tokens {}), arrivals: {}. {}",
                study.prompt_set, study.prompts.len(), study.router_max_tokens, study.arrivals, study.note
            )}</p>
            {load.map(|svg| view! { <figure class="plot" data-testid="serve-load-plot" inner_html=svg></figure> })}
            {chunks.map(|svg| view! { <figure class="plot" data-testid="serve-chunk-plot" inner_html=svg></figure> })}
            <label class="field small">"Run"
                <select data-testid="serve-run-select" on:change=move |ev| chosen.set(event_target_value(&ev).parse().unwrap_or(0))>
                    {labels.into_iter().map(|(i, l)| view! { <option value=i.to_string() selected=i == chosen.get_untracked()>{l}</option> }).collect_view()}
                </select>
            </label>
            {run_figures}
        </div>
    }
}
