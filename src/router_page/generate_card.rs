//! Card 7, generate: the loaded checkpoint answers a user turn in its chat
//! layout, token by token, the text streamed as the worker releases it;
//! then the engine's time to the first token, the gaps between tokens, why
//! it stopped, and the K/V the calculator counts beside what the engine
//! allocated. Owns the generate jobs. The form is text, checked with the
//! worker's own rules before anything is sent, so a refused field is named
//! and nothing typed is lost. Below it, the decode-speed bench in this
//! worker (its own panel and state).

use bench::decode_speed::{DecodePlanForm, DecodeRow, DecodeSpeed};
use bench::report::format_ms;
use bench::Summary;
use leptos::prelude::*;
use router::sampling::{GenerationSummary, ParamError, SamplingForm, SamplingParams};
use router::Conversation;
use wire::{Deferred, JobEvent, JobKind, JobProgress, JobRequest, JobResult};

use super::worker::{JobProgress as JobProgressLine, Worker};
use super::{bytes_label, text_field, Alert};

/// What the card shows of a running or finished generation.
#[derive(Debug, Clone, PartialEq, Default)]
struct Streamed {
    text: String,
    tokens: usize,
    ms: f64,
}

/// A finished generation, and whether Cancel cut it short.
#[derive(Debug, Clone, PartialEq)]
struct Generated {
    summary: GenerationSummary,
    cancelled: bool,
}

/// The card's state.
#[derive(Clone, Copy)]
struct GenerateState {
    prompt: RwSignal<String>,
    form: RwSignal<SamplingForm>,
    /// The field the last check refused, shown beside it.
    refused: RwSignal<Option<ParamError>>,
    streamed: RwSignal<Streamed>,
    generated: RwSignal<Option<Generated>>,
    alert: Alert,
}

impl GenerateState {
    fn apply(self, event: JobEvent) {
        match event {
            JobEvent::Progress(JobProgress::Generated { text, tokens, ms }) => self.streamed.update(|s| {
                s.text.push_str(&text);
                s.tokens = tokens;
                s.ms = ms;
            }),
            JobEvent::Finished { result: JobResult::Generated(summary), cancelled } => match summary.decode() {
                Ok(summary) => self.generated.set(Some(Generated { summary, cancelled })),
                Err(message) => self.alert.show(message),
            },
            _ => {}
        }
    }
}

#[component]
pub fn GenerateCard() -> impl IntoView {
    let worker = expect_context::<Worker>();
    let alert = expect_context::<Alert>();
    let state = GenerateState {
        prompt: RwSignal::new("Explain what a KV cache is, in two sentences.".into()),
        form: RwSignal::new(SamplingForm::default()),
        refused: RwSignal::new(None),
        streamed: RwSignal::new(Streamed::default()),
        generated: RwSignal::new(None),
        alert,
    };
    worker.on_job(JobKind::Generate, move |event| state.apply(event));
    let run = move |_| {
        let prompt = state.prompt.get_untracked();
        let Some(params) = checked_turn(&prompt, state.form, state.refused, alert, "write a user turn to answer") else { return };
        if worker.start(JobRequest::Generate { conversation: Conversation::user(prompt), params }, None) {
            state.streamed.set(Streamed::default());
            state.generated.set(None);
        }
    };
    let running = move || worker.running.get() == Some(JobKind::Generate);
    let progress = move || {
        running().then(|| {
            let Streamed { tokens, ms, .. } = state.streamed.get();
            let max = state.form.with(|f| f.max_new_tokens.trim().parse::<f64>().unwrap_or(1.0));
            let text = format!("{tokens} tokens in {}", format_ms(ms));
            view! { <JobProgressLine id="generate" label="Generation progress" value=tokens as f64 max=max text=text/> }
        })
    };
    let field = move |name, label, get, set| sampling_field(state.form, state.refused, "gen", name, label, get, set);
    view! {
        <section class="card" aria-labelledby="generate-h">
            <h2 id="generate-h">"7 · Generate (note 06: from prefill to decode)"</h2>
            <p class="note">
                "The loaded checkpoint answers in its chat layout: one prefill of the prompt, then one decode step a token, each reading the "
                "keys and values held so far (in pages of 16 tokens). Temperature 0 is greedy; the same seed gives the same tokens. "
                "The times are the engine's, in this worker: the first token's includes the prefill; a gap includes the worker's yield to read Cancel."
            </p>
            <label class="field">"User turn"
                <textarea rows="3" data-testid="gen-prompt" prop:value=move || state.prompt.get()
                    on:input=move |ev| state.prompt.set(event_target_value(&ev))></textarea>
            </label>
            <div class="row">
                {field("temperature", "Temperature", |f| f.temperature.clone(), |f, v| f.temperature = v)}
                {field("top_k", "Top-k (0: all)", |f| f.top_k.clone(), |f, v| f.top_k = v)}
                {field("top_p", "Top-p", |f| f.top_p.clone(), |f, v| f.top_p = v)}
                {field("seed", "Seed", |f| f.seed.clone(), |f, v| f.seed = v)}
                {field("max_new_tokens", "Max new tokens", |f| f.max_new_tokens.clone(), |f, v| f.max_new_tokens = v)}
            </div>
            <label class="field">"Stop texts (one a line)"
                <textarea rows="2" data-testid="gen-stop" aria-invalid=move || state.refused.with(|r| r.as_ref().is_some_and(|r| r.field.name() == "stop")).to_string()
                    prop:value=move || state.form.with(|f| f.stop.clone())
                    on:input=move |ev| state.form.update(|f| f.stop = event_target_value(&ev))></textarea>
            </label>
            <div class="row">
                <button type="button" data-testid="gen-run" disabled=move || !worker.can_start(JobKind::Generate) on:click=run>
                    {move || if running() { "Generating…" } else { "Generate" }}
                </button>
            </div>
            {progress}
            <pre class="generated" data-testid="gen-output" aria-live="polite">{move || state.streamed.with(|s| s.text.clone())}</pre>
            {move || state.generated.get().map(|Generated { summary, cancelled }| view! { <GenerationView summary=summary cancelled=cancelled/> })}
            <DecodeSpeedPanel/>
        </section>
    }
}

/// The decode-speed panel's state: the plan as typed, the rows measured
/// so far, and the finished run.
#[derive(Clone, Copy)]
struct DecodeSpeedState {
    form: RwSignal<DecodePlanForm>,
    rows: RwSignal<Vec<DecodeRow>>,
    total: RwSignal<usize>,
    finished: RwSignal<Option<(DecodeSpeed, bool)>>,
    alert: Alert,
}

impl DecodeSpeedState {
    fn apply(self, event: JobEvent) {
        match event {
            JobEvent::Progress(JobProgress::DecodeRow { total, row, .. }) => match row.decode() {
                Ok(row) => {
                    self.total.set(total);
                    self.rows.update(|rows| rows.push(row));
                }
                Err(message) => self.alert.show(message),
            },
            JobEvent::Finished { result: JobResult::DecodeSpeed(speed), cancelled } => match speed.decode() {
                Ok(speed) => self.finished.set(Some((speed, cancelled))),
                Err(message) => self.alert.show(message),
            },
            _ => {}
        }
    }
}

/// Decode speed in this worker (issue 36's item 6 in the browser): the
/// same rows `router-generate --decode-speed` measures natively, with the
/// bytes a step reads against this device's memory bandwidth.
#[component]
fn DecodeSpeedPanel() -> impl IntoView {
    let worker = expect_context::<Worker>();
    let alert = expect_context::<Alert>();
    let state = DecodeSpeedState {
        form: RwSignal::new(DecodePlanForm::default()),
        rows: RwSignal::new(Vec::new()),
        total: RwSignal::new(0),
        finished: RwSignal::new(None),
        alert,
    };
    worker.on_job(JobKind::DecodeSpeed, move |event| state.apply(event));
    let run = move |_| match state.form.with_untracked(DecodePlanForm::parse) {
        Ok(plan) => {
            alert.clear();
            if worker.start(JobRequest::DecodeSpeed { plan: Deferred::encode(&plan) }, None) {
                state.rows.set(Vec::new());
                state.total.set(plan.rows().len());
                state.finished.set(None);
            }
        }
        Err(message) => alert.show(format!("decode speed: {message}")),
    };
    let progress = move || {
        (worker.running.get() == Some(JobKind::DecodeSpeed)).then(|| {
            let (done, total) = (state.rows.with(Vec::len), state.total.get());
            let text = state.rows.with(|rows| {
                rows.last().map_or("measuring this device's memory bandwidth, then the first row".to_string(), |r| {
                    format!("row {done} of {total}: {} × {} tokens, {:.1} tokens/s", r.batch, r.context, r.tokens_per_s)
                })
            });
            view! { <JobProgressLine id="decode" label="Decode-speed progress" value=done as f64 max=total.max(1) as f64 text=text/> }
        })
    };
    let field = move |name: &'static str, label, get, set| text_field(state.form, format!("decode-{name}"), label, get, set);
    view! {
        <h3>"Decode speed"</h3>
        <p class="note">
            "One sequence's tokens a second at each context, then several sequences decoding together (one batched pass a token), "
            "each prefilled untimed to exactly its context. A step reads every weight once whatever the batch, and each sequence's "
            "keys and values: the bytes a token costs, against this device's memory bandwidth (measured first), say how close a step "
            "is to what the device allows."
        </p>
        <div class="row">
            {field("contexts", "One sequence at (tokens)", |f| f.contexts.clone(), |f, v| f.contexts = v)}
            {field("batches", "Batches", |f| f.batches.clone(), |f, v| f.batches = v)}
            {field("batch-context", "Batch context", |f| f.batch_context.clone(), |f, v| f.batch_context = v)}
            {field("steps", "Timed steps", |f| f.steps.clone(), |f, v| f.steps = v)}
        </div>
        <button type="button" data-testid="decode-run" disabled=move || !worker.can_start(JobKind::DecodeSpeed) on:click=run>
            "Measure decode speed"
        </button>
        {progress}
        {move || state.finished.get().map(|(speed, cancelled)| {
            let rows = speed.rows.len();
            let gain = speed.batch_gain(8).map(|g| format!("{g:.2}")).unwrap_or_default();
            view! {
                <div class="report" data-testid="decode-speed" data-rows=rows data-gain8=gain>
                    {cancelled.then(|| view! { <p class="warning">"Cancelled: the rows measured so far are shown."</p> })}
                    <pre class="table">{speed.lines().join("\n")}</pre>
                </div>
            }
        })}
    }
}

/// Reads a user turn and its sampling form with the worker's own rules:
/// an empty turn is refused with `empty` (what to do), a refused field is
/// named in the alert and marked (`refused`); nothing typed is changed.
pub(super) fn checked_turn(
    prompt: &str,
    form: RwSignal<SamplingForm>,
    refused: RwSignal<Option<ParamError>>,
    alert: Alert,
    empty: &str,
) -> Option<SamplingParams> {
    if prompt.trim().is_empty() {
        alert.show(format!("prompt: {empty}."));
        return None;
    }
    match form.with_untracked(SamplingForm::parse) {
        Ok(params) => {
            refused.set(None);
            alert.clear();
            Some(params)
        }
        Err(refusal) => {
            alert.show(refusal.to_string());
            refused.set(Some(refusal));
            None
        }
    }
}

/// One field of a sampling form (`{prefix}-{name}`), marked invalid while
/// the last check refused it.
pub(super) fn sampling_field(
    form: RwSignal<SamplingForm>,
    refused: RwSignal<Option<ParamError>>,
    prefix: &'static str,
    name: &'static str,
    label: &'static str,
    get: fn(&SamplingForm) -> String,
    set: fn(&mut SamplingForm, String),
) -> impl IntoView {
    let bad = move || refused.with(|r| r.as_ref().is_some_and(|r| r.field.name() == name));
    view! {
        <label class="field small">{label}
            <input type="text" data-testid=format!("{prefix}-{name}") aria-invalid=move || bad().to_string()
                prop:value=move || form.with(get)
                on:input=move |ev| form.update(|f| set(f, event_target_value(&ev)))/>
        </label>
    }
}

#[component]
fn GenerationView(summary: GenerationSummary, cancelled: bool) -> impl IntoView {
    let gaps = Summary::of(&summary.gaps_ms);
    let finish = summary.finish.as_ref().map(|f| f.label()).unwrap_or_else(|| "Cancel".into());
    let tokens = summary.tokens.len();
    let ids = summary.tokens.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let gap_line = gaps.map_or_else(
        || "no later tokens".to_string(),
        |g| {
            format!(
                "gap between tokens p50 {} · p95 {} · {:.1} tokens/s",
                format_ms(g.p50),
                format_ms(g.p95),
                summary.decode_tokens_per_s()
            )
        },
    );
    view! {
        <div class="report" data-testid="gen-summary" data-tokens=tokens data-ids=ids data-finish=finish.clone()>
            {cancelled.then(|| view! { <p class="warning">"Cancelled: the tokens generated so far are shown."</p> })}
            <p>{format!(
                "{tokens} tokens after a {}-token prompt · ended by {finish} · first token {} (prefill and one LM-head product) · {gap_line}",
                summary.prompt_tokens, format_ms(summary.first_token_ms)
            )}</p>
            <p class="note" data-testid="gen-kv" data-payload=summary.payload_kv_bytes data-allocated=summary.allocated_kv_bytes>{format!(
                "K/V for these {} tokens: {} by the calculator's formula (f32{}) · {} allocated by the engine (whole pages of {} tokens, every layer keeping every token). Payload bytes are not allocated bytes (note 03).",
                summary.prompt_tokens + tokens.saturating_sub(1),
                bytes_label(summary.payload_kv_bytes as f64),
                if summary.payload_kv_bytes < summary.allocated_kv_bytes / 2 { ", sliding-window layers keeping their window" } else { "" },
                bytes_label(summary.allocated_kv_bytes as f64),
                summary.block_tokens,
            )}</p>
            <p class="note">{format!("{} · {} · seed {}, temperature {}", summary.checkpoint_id, summary.precision, summary.params.seed, summary.params.temperature)}</p>
        </div>
    }
}
