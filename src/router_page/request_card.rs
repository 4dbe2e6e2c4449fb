//! Card 9, the whole request (the field guide's third timing boundary): a
//! user turn goes through `decide`, and this page's own engine, standing in
//! for the candidate the router chose, streams the answer. Each request is
//! reported apart at every boundary: encode + scores and decide (the
//! router's), T_queue, T_prompt_path and T_first_content (the worker's
//! account, on its clock), and the first token, first content, gaps and
//! completion as this page's UI thread saw them; the decomposition is
//! checked against the page's clock. Owns the request jobs; the requests
//! accumulate into one table, one timeline, one export and share link.

use bench::client_run::{ClientRecord, ClientStudy, PageRequest, RequestAccount};
use bench::report::{LatencyReport, Studies};
use leptos::prelude::*;
use leptos::task::spawn_local;
use router::sampling::{ParamError, SamplingForm};
use router::Conversation;
use serving::generation::{GenOutcome, GenRecord};
use web_time::Instant;
use wire::{JobEvent, JobKind, JobProgress, JobRequest, JobResult};

use super::generate_card::{checked_turn, sampling_field};
use super::worker::Worker;
use super::{Alert, NeedsModel, ReportActions};
use crate::browser;
use crate::browser::picked_file;
use crate::request_view::RequestView;

/// The request in flight, on the page's clock: when it was sent, and when
/// each message about it arrived.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    sent: Instant,
    prompt_chars: usize,
    max_new_tokens: usize,
}

/// What the page saw of the request in flight, ms after it was sent.
#[derive(Debug, Clone, Default, PartialEq)]
struct Seen {
    routed: Option<(String, String, f64)>,
    first_event_ms: Option<f64>,
    first_token_ms: Option<f64>,
    first_content_ms: Option<f64>,
    last_token_ms: f64,
    gaps_ms: Vec<f64>,
    text: String,
}

/// The card's state.
#[derive(Clone, Copy)]
struct RequestState {
    prompt: RwSignal<String>,
    form: RwSignal<SamplingForm>,
    refused: RwSignal<Option<ParamError>>,
    in_flight: StoredValue<Option<InFlight>>,
    seen: RwSignal<Seen>,
    requests: RwSignal<Vec<PageRequest>>,
    /// The last request's report envelope (where and on what it ran); the
    /// report shown and shared is it with every request so far.
    envelope: RwSignal<Option<LatencyReport>>,
    alert: Alert,
}

impl RequestState {
    fn now_ms(self) -> Option<f64> {
        self.in_flight.get_value().map(|f| f.sent.elapsed().as_secs_f64() * 1000.0)
    }

    fn apply(self, event: JobEvent) {
        let Some(now) = self.now_ms() else { return };
        match event {
            JobEvent::Progress(JobProgress::Routed { candidate, served_by, decide_ms }) => self.seen.update(|s| {
                s.first_event_ms.get_or_insert(now);
                s.routed = Some((candidate, served_by, decide_ms));
            }),
            JobEvent::Progress(JobProgress::Generated { text, .. }) => self.seen.update(|s| {
                s.first_event_ms.get_or_insert(now);
                match s.first_token_ms {
                    None => s.first_token_ms = Some(now),
                    Some(_) => s.gaps_ms.push(now - s.last_token_ms),
                }
                s.last_token_ms = now;
                if !text.trim().is_empty() {
                    s.first_content_ms.get_or_insert(now);
                }
                s.text.push_str(&text);
            }),
            JobEvent::Finished { result: JobResult::Requested { report, account }, cancelled } => match account.decode() {
                Ok(account) => self.finish(now, *report, account, cancelled),
                Err(message) => self.alert.show(message),
            },
            _ => {}
        }
    }

    /// The request's record on the page's clock, beside the worker's account.
    fn finish(self, end_ms: f64, envelope: LatencyReport, account: RequestAccount, cancelled: bool) {
        let Some(flight) = self.in_flight.get_value() else { return };
        let seen = self.seen.get_untracked();
        let id = self.requests.with_untracked(Vec::len) as u64;
        let client = ClientRecord {
            record: GenRecord {
                id,
                prompt_tokens: account.timings.prompt_tokens,
                max_new_tokens: flight.max_new_tokens,
                warmup: false,
                arrival_ms: 0.0,
                start_ms: Some(account.timings.queue_ms),
                first_token_ms: seen.first_token_ms,
                gaps_ms: seen.gaps_ms,
                end_ms,
                tokens_out: account.tokens_out,
                prefill_chunks: account.timings.prefill_chunks,
                preemptions: account.timings.preemptions,
                outcome: if cancelled { GenOutcome::Cancelled } else { GenOutcome::Served },
            },
            sent_ms: Some(0.0),
            headers_ms: None,
            first_event_ms: seen.first_event_ms,
            // The first message is the routing decision: no text.
            first_event_had_content: false,
            first_content_ms: seen.first_content_ms,
            status: None,
            error: None,
            retries: 0,
            finish_reason: account.finish_reason.clone(),
            server: Some(account.timings.clone()),
        };
        let request = PageRequest { prompt_chars: flight.prompt_chars, encode_scores_ms: account.encode_scores_ms, client };
        self.requests.update(|all| all.push(request));
        self.envelope.set(Some(envelope));
        self.in_flight.set_value(None);
    }
}

#[component]
pub fn RequestCard() -> impl IntoView {
    let worker = expect_context::<Worker>();
    let alert = expect_context::<Alert>();
    let state = RequestState {
        prompt: RwSignal::new("Write a Python function that checks whether a string is a palindrome.".into()),
        form: RwSignal::new(SamplingForm { max_new_tokens: "48".into(), ..SamplingForm::default() }),
        refused: RwSignal::new(None),
        in_flight: StoredValue::new(None),
        seen: RwSignal::new(Seen::default()),
        requests: RwSignal::new(Vec::new()),
        envelope: RwSignal::new(None),
        alert,
    };
    worker.on_job(JobKind::Request, move |event| state.apply(event));
    let send = move |_| {
        let prompt = state.prompt.get_untracked();
        let Some(params) = checked_turn(&prompt, state.form, state.refused, alert, "write a user turn to route and answer") else { return };
        let flight = InFlight { sent: Instant::now(), prompt_chars: prompt.chars().count(), max_new_tokens: params.max_new_tokens };
        let job = JobRequest::Request { conversation: Conversation::user(prompt), params, mode: None };
        if worker.start(job, None) {
            state.in_flight.set_value(Some(flight));
            state.seen.set(Seen::default());
        }
    };
    let running = move || worker.running.get() == Some(JobKind::Request);
    let field = move |name, label, get, set| sampling_field(state.form, state.refused, "req", name, label, get, set);
    // A report `openai-replay --out` wrote: its runs beside this page's requests.
    let opened = RwSignal::new(None::<Result<ClientStudy, String>>);
    let open_report = move |ev: leptos::ev::Event| {
        let Some(file) = picked_file(&ev) else { return };
        spawn_local(async move {
            let name = file.name();
            let study = match browser::read_file_text(file).await {
                Ok(text) => bench::share::parse_report::<Studies>(&text, &name).and_then(|report| {
                    report.studies.client.ok_or_else(|| format!("{name} holds no client section (openai-replay --out writes one)"))
                }),
                Err(e) => Err(format!("{name}: {e}")),
            };
            opened.set(Some(study));
        });
    };
    let routed = move || {
        state.seen.with(|s| s.routed.clone()).map(|(candidate, served_by, decide_ms)| {
            view! {
                <p class="note" data-testid="req-routed" data-candidate=candidate.clone()>
                    {format!("decide chose {candidate} in {decide_ms:.1} ms; {served_by} answers in its place (this page holds one model: every candidate maps to it).")}
                </p>
            }
        })
    };
    view! {
        <section class="card" aria-labelledby="request-h">
            <h2 id="request-h">"9 · The whole request: decide, then the answer (first token & completion)"</h2>
            <p class="note">
                "The third timing boundary, measured at the client. The router decides which candidate should answer; the loaded checkpoint, standing in for "
                "every candidate, then generates and streams the answer. Each request is reported apart: encode + scores and decide (the router's boundaries), "
                "T_queue (decide inside it), T_prompt_path and T_first_content on the worker's clock, and the first token, first visible content, "
                "gaps and completion as this page saw them. TTFT = T_queue + T_prompt_path + T_first_content is checked against the page's clock; the rest "
                "is the messages between worker and page. A routing decision is not a first token, and neither is a client's time to first content."
            </p>
            <NeedsModel/>
            <label class="field">"User turn"
                <textarea rows="3" data-testid="req-prompt" prop:value=move || state.prompt.get()
                    on:input=move |ev| state.prompt.set(event_target_value(&ev))></textarea>
            </label>
            <div class="row">
                {field("temperature", "Temperature", |f| f.temperature.clone(), |f, v| f.temperature = v)}
                {field("seed", "Seed", |f| f.seed.clone(), |f, v| f.seed = v)}
                {field("max_new_tokens", "Max new tokens", |f| f.max_new_tokens.clone(), |f, v| f.max_new_tokens = v)}
            </div>
            <div class="row">
                <button type="button" data-testid="req-send" disabled=move || !worker.can_start(JobKind::Request) on:click=send>
                    {move || if running() { "Answering…" } else { "Send (decide, then generate)" }}
                </button>
            </div>
            {routed}
            <pre class="generated" data-testid="req-output" aria-live="polite">{move || state.seen.with(|s| s.text.clone())}</pre>
            <label class="field">"Open a report from openai-replay --out (its runs against OpenAI-compatible endpoints, at the client)"
                <input type="file" accept=".json,application/json" data-testid="req-open" on:change=open_report/>
            </label>
            {move || opened.get().map(|study| match study {
                Ok(study) => view! { <RequestView study=study/> }.into_any(),
                Err(e) => view! { <p class="problem" role="alert" data-testid="req-open-error">{e}</p> }.into_any(),
            })}
            {move || state.envelope.get().map(|envelope| {
                let study = ClientStudy { requests: state.requests.get(), runs: Vec::new(), arrivals: None };
                let report = envelope.with_studies(Studies { client: Some(study.clone()), ..Studies::default() });
                view! {
                    <RequestView study=study/>
                    <ReportActions report=report file="router-requests.browser.json" id="req"/>
                }
            })}
        </section>
    }
}
