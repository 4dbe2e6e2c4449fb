//! Card 1, the model: load the bundled checkpoint, one offered on request
//! or the user's own GGUF, at a chosen precision; show the load's progress,
//! the loaded checkpoint's facts and the browser's storage.
//!
//! The model's state is the session's (every card reads it); this card only
//! starts loads and shows it. It owns no state of its own.

use bench::report::format_ms;
use leptos::prelude::*;
use wire::session::ModelState;
use wire::{JobKind, ModelInfo, Scoring, Source, ToWorker};

use super::worker::{LoadRequest, Worker};
use super::{bytes_label, PageForm};
use crate::browser::{self, picked_file};
use crate::worker_client::WorkerBuild;

#[component]
pub fn ModelCard() -> impl IntoView {
    let worker = expect_context::<Worker>();
    let form = expect_context::<PageForm>().0;
    // Every job the worker may be on blocks a load, the short ones too
    // (the session's rule): a Load pressed during a Decide is refused.
    let busy = move || !worker.can_start(JobKind::Load);
    let on_drop = move |ev: leptos::ev::DragEvent| {
        ev.prevent_default();
        if let Some(file) = browser::dropped_file(&ev) {
            worker.load(LoadRequest::File(file));
        }
    };
    let progress = move || {
        worker.session.with(|s| match s.model() {
            ModelState::Loading(progress) => Some(*progress),
            _ => None,
        })
        .map(|progress| {
            let stage = progress.label();
            let (value, max, text) = match progress.total {
                Some(t) if t > 1 && progress.done > 0 && progress.stage.counts_bytes() => (
                    progress.done as f64,
                    t as f64,
                    format!("{stage}: {} of {}", kv::units::binary(progress.done as u128), kv::units::binary(t as u128)),
                ),
                // Items (the descriptors) count in the label itself.
                Some(t) if t > 1 && progress.done > 0 => (progress.done as f64, t as f64, stage),
                Some(t) if t > 1 => (0.0, t as f64, stage),
                _ => (0.0, 0.0, stage),
            };
            view! {
                <div class="progress-line">
                    {if max > 0.0 { view! { <progress data-testid="model-progress" aria-label="Model loading progress" max=max value=value></progress> }.into_any() }
                     else { view! { <progress data-testid="model-progress" aria-label="Model loading progress"></progress> }.into_any() }}
                    <span data-testid="model-stage">{text}</span>
                </div>
            }
        })
    };
    let clear = move |_| worker.ask(ToWorker::ClearCache);
    view! {
        <section class="card" aria-labelledby="model-h">
            <h2 id="model-h">"1 · Model"</h2>
            <div class="row">
                <button type="button" data-testid="model-load" disabled=busy on:click=move |_| worker.load(LoadRequest::Bundled)>
                    "Load the bundled SmolLM2-135M-Instruct Q4_1 (94 MiB)"
                </button>
                {move || worker.storage.get().map(|s| s.on_request.into_iter().map(|wire::OfferedModel { model, cached }| {
                    let file = model.file.clone();
                    let label = format!(
                        "Fetch {} ({}, {}){}",
                        model.name,
                        kv::units::binary(model.bytes as u128),
                        model.license.split(" (").next().unwrap_or_default(),
                        if cached { ", cached" } else { "" }
                    );
                    view! {
                        <button type="button" data-testid="model-load-on-request" data-file=file.clone() title=model.source.clone()
                            disabled=busy on:click=move |_| worker.load(LoadRequest::OnRequest(file.clone()))>
                            {label}
                        </button>
                    }
                }).collect_view())}
                <label class="file-pick" on:dragover=|ev: leptos::ev::DragEvent| ev.prevent_default() on:drop=on_drop>
                    "…or pick or drop your own GGUF (llama, qwen2, qwen3 or gemma3, e.g. Qwen3-0.6B): "
                    <input type="file" accept=".gguf" data-testid="model-file" disabled=busy
                        on:change=move |ev| if let Some(file) = picked_file(&ev) { worker.load(LoadRequest::File(file)) }/>
                </label>
            </div>
            <label>"Weights compute in: "
                <select data-testid="precision-select" disabled=busy on:change=move |ev| form.update(|f| f.precision = event_target_value(&ev))>
                    {[
                        ("", format!("default ({})", router::Precision::SERVED.flag())),
                        ("f32", "f32: weights dequantized at load (the reference arithmetic)".to_string()),
                        ("int8", "int8: 8-bit activations × stored blocks, integer dot".to_string()),
                    ]
                        .into_iter()
                        .map(|(value, label)| view! {
                            <option value=value selected=move || form.with(|f| f.precision == value)>{label}</option>
                        })
                        .collect_view()}
                </select>
                " (applies at the next load)"
            </label>
            <p>"Status: " <strong data-testid="model-status">{move || worker.session.with(|s| s.model().text())}</strong></p>
            <p class="hint" data-testid="worker-build">{WorkerBuild::detect().sentence()}</p>
            {progress}
            {move || worker.model.get().map(|m| view! { <ModelFacts model=m/> })}
            {move || worker.storage.get().map(|s| {
                let why = if s.note.is_empty() { String::new() } else { format!(" ({})", s.note) };
                let usage = match (s.usage_bytes, s.quota_bytes) {
                    (Some(u), Some(q)) => format!("This site stores {} of its {} quota in this browser.", bytes_label(u), bytes_label(q)),
                    _ => format!("Storage use is not available here{why}."),
                };
                // When the figures are there but the cache is not, the note says why.
                let cached = if s.model_cached {
                    "The bundled checkpoint is cached: the next visit reads it from here, not the network.".to_string()
                } else if s.usage_bytes.is_some() {
                    format!("The bundled checkpoint is not cached{why}.")
                } else {
                    "The bundled checkpoint is not cached.".to_string()
                };
                view! {
                    <p class="storage" data-testid="storage">
                        {usage} " " {cached} " "
                        <button type="button" class="link" data-testid="cache-clear" on:click=clear disabled=move || !s.model_cached>"Clear the cached checkpoint"</button>
                    </p>
                }
            })}
        </section>
    }
}

#[component]
fn ModelFacts(model: ModelInfo) -> impl IntoView {
    let p = &model.provenance;
    let source = match model.source {
        Source::Downloaded => "downloaded from this site now (and cached), as its manifest lists",
        Source::Cached => "read from this browser's cache (as the manifest lists)",
        Source::UserFile => "your file",
    };
    let sha = if model.sha256_checked {
        format!("{} — matches the manifest", model.sha256)
    } else {
        format!("{} (your file: nothing to check it against)", model.sha256)
    };
    let facts: Vec<(&'static str, String)> = vec![
        ("checkpoint", format!("{} · {} · {}", p.checkpoint_id, p.checkpoint_file, kv::units::binary(model.bytes as u128))),
        ("source", source.to_string()),
        ("SHA-256", sha),
        ("backbone", p.backbone.clone()),
        ("precision", p.precision.clone()),
        ("tokenizer", p.tokenizer.clone()),
        ("pool", format!("{} · {} candidates", p.pool_id, p.candidates)),
        ("read bytes", format_ms(model.read_ms)),
        ("verify (SHA-256)", format_ms(model.verify_ms)),
        ("weight load", format_ms(model.load.weights_ms)),
        ("tokenizer init", format_ms(model.load.tokenizer_ms)),
        (
            "descriptors (once per pool load)",
            if model.load.descriptors_cached {
                format!(
                    "{} (read from this browser's cache; encoding them took {} on the load that kept them)",
                    format_ms(model.load.descriptors_ms),
                    format_ms(model.load.descriptors_encoded_ms)
                )
            } else {
                format_ms(model.load.descriptors_ms)
            },
        ),
        ("wasm memory (high-water)", kv::units::binary(model.wasm_memory_bytes as u128)),
    ];
    view! {
        <dl class="facts" data-testid="model-facts">
            {facts.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd data-field=k>{v}</dd> }).collect_view()}
        </dl>
        <ScoringNote scoring=model.scoring.decode() default_mode=model.default_mode.clone()/>
    }
}

/// How this checkpoint's decisions are scored, and what that is worth: the
/// study's figures for the trained head, or, when no head fits, why not and
/// what the untrained scoring was measured to be worth.
#[component]
fn ScoringNote(scoring: Result<Scoring, String>, default_mode: String) -> impl IntoView {
    let scoring = match scoring {
        Ok(scoring) => scoring,
        Err(e) => {
            return view! { <p class="note warn" data-testid="scoring-note">{format!("How this model scores is unknown: {e}.")}</p> }
                .into_any()
        }
    };
    match scoring {
        Scoring::Trained { head_id, file, trained_on, evaluation } => view! {
            <p class="note" data-testid="scoring-note" data-scoring="trained" data-head=head_id.clone()>
                {format!(
                    "Decisions are scored by the trained head {head_id} ({file}, pinned by SHA-256 in the site's manifest; {trained_on}). {} The untrained similarity scoring stays a choice on card 2.",
                    evaluation.trained_sentence(&default_mode)
                )}
            </p>
        }
        .into_any(),
        Scoring::Untrained { reason, reference } => view! {
            <p class="note warn" data-testid="scoring-note" data-scoring="untrained">
                {format!(
                    "Running untrained: {reason}. Decisions are scored by descriptor similarity. {}",
                    reference.map_or_else(
                        || "Its worth on this backbone is not measured.".to_string(),
                        |r| format!("{} This backbone's is not measured.", r.evaluation.untrained_sentence(&r.backbone, &default_mode))
                    )
                )}
            </p>
        }
        .into_any(),
    }
}
