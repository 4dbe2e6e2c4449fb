//! Card 6, the router under load (note 06): the native serving study on
//! request, and load runs in this page's worker with a live queue chart,
//! the timeline and tables, export and a share link. Owns the serve jobs.

use bench::report::{Report, Studies};
use leptos::prelude::*;
use leptos::task::spawn_local;
use wire::{JobEvent, JobKind, JobProgress, JobRequest, JobResult};

use super::serve_form::ServeForm;
use super::worker::{JobProgress as JobProgressLine, Worker};
use super::{fetch_study, text_field, Alert, NeedsModel, PageForm, ReportActions};
use crate::browser;
use crate::browser::picked_file;
use crate::serve_view::ServeView;

/// The serving run in progress, as its ticks arrive: its index, the queue
/// so far, requests ended and arrivals in all.
#[derive(Debug, Clone, Default, PartialEq)]
struct ServeLive {
    run: usize,
    samples: Vec<serving::QueueSample>,
    finished: usize,
    arrivals: usize,
}

/// A finished serving test's report, and whether Cancel cut it short.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    report: Report,
    cancelled: bool,
}

/// A trace file picked to replay: its name, its text, and its problem if
/// it has one.
#[derive(Debug, Clone, PartialEq)]
struct Trace {
    name: String,
    text: String,
    problem: Option<String>,
}

/// The card's state for the run in this browser.
#[derive(Clone, Copy)]
struct ServeState {
    live: RwSignal<Option<ServeLive>>,
    /// The finished runs' summary lines.
    runs_done: RwSignal<Vec<String>>,
    measured: RwSignal<Option<Measured>>,
    alert: Alert,
}

impl ServeState {
    fn apply(self, event: JobEvent) {
        match event {
            JobEvent::Progress(JobProgress::ServeWarmedUp { .. }) => self.live.set(None),
            JobEvent::Progress(JobProgress::ServeTick { run, sample, finished, arrivals }) => self.live.update(|live| match live {
                Some(live) if live.run == run => {
                    live.samples.push(sample);
                    (live.finished, live.arrivals) = (finished, arrivals);
                }
                _ => *live = Some(ServeLive { run, samples: vec![sample], finished, arrivals }),
            }),
            JobEvent::Progress(JobProgress::ServeRunDone { label, settings, summary, .. }) => match summary.decode() {
                Ok(summary) => self.runs_done.update(|runs| runs.push(serving::summary_line(&label, &settings, &summary))),
                Err(message) => self.alert.show(message),
            },
            JobEvent::Finished { result: JobResult::Served { report, study }, cancelled } => {
                self.live.set(None);
                match study.decode() {
                    Ok(study) => {
                        let report = report.with_studies(Studies { serve: Some(study), ..Studies::default() });
                        self.measured.set(Some(Measured { report, cancelled }));
                    }
                    Err(message) => self.alert.show(message),
                }
            }
            _ => {}
        }
    }
}

/// Where the Serving card's native study stands.
#[derive(Debug, Clone, PartialEq)]
enum NativeServe {
    Idle,
    Loading,
    Shown(Box<bench::serve::ServeStudy>),
    Failed(String),
}

/// The serving test (note 06): the native study on request, and load runs
/// in this page's worker with a live queue chart, the timeline and tables,
/// export and a share link.
#[component]
pub fn ServeCard() -> impl IntoView {
    let worker = expect_context::<Worker>();
    let page_form = expect_context::<PageForm>().0;
    let alert = expect_context::<Alert>();
    let state = ServeState { live: RwSignal::new(None), runs_done: RwSignal::new(Vec::new()), measured: RwSignal::new(None), alert };
    worker.on_job(JobKind::Serve, move |event| state.apply(event));
    let form = RwSignal::new(ServeForm::default());
    let native = RwSignal::new(NativeServe::Idle);
    let fetched_tasks = StoredValue::new_local(None::<Vec<wire::TaskPrompt>>);
    let fetching = RwSignal::new(false);
    // The runs sent to the worker (the form may change while they run).
    let running = StoredValue::new(Vec::<serving::ServeSettings>::new());
    // A replayed trace file (name, text, and its problem if it has one).
    let trace = RwSignal::new(None::<Trace>);
    let pick_trace = move |ev: leptos::ev::Event| {
        let Some(file) = picked_file(&ev) else { return };
        spawn_local(async move {
            let name = file.name();
            match browser::read_file_text(file).await {
                Ok(text) => {
                    let problem = serving::parse_trace(&text).err().map(|e| format!("{name}: {e}"));
                    trace.set(Some(Trace { name, text, problem }));
                }
                Err(e) => trace.set(Some(Trace { problem: Some(format!("{name}: {e}")), name, text: String::new() })),
            }
        });
    };
    let problem = move || form.with(|f| f.runs().err()).or_else(|| trace.with(|t| t.as_ref().and_then(|t| t.problem.clone())));
    let can_run = move || worker.can_start(JobKind::Serve) && !fetching.get() && problem().is_none();
    let show_native = move |_| {
        native.set(NativeServe::Loading);
        spawn_local(async move {
            native.set(match fetch_study("serve.json", "serving study", |r: &Report| r.studies.serve.as_ref()).await {
                Ok((_, study)) => NativeServe::Shown(Box::new(study)),
                Err(e) => NativeServe::Failed(e),
            });
        });
    };
    let run = move |_| {
        let Ok(mut runs) = form.get_untracked().runs() else { return };
        if trace.with_untracked(Option::is_some) {
            // A trace fixes the arrivals: one run per chunk and policy.
            let first = runs[0].rate_per_s;
            runs.retain(|r| r.rate_per_s == first);
        }
        fetching.set(true);
        spawn_local(async move {
            let tasks = match fetched_tasks.get_value() {
                Some(tasks) => Ok(tasks),
                None => browser::fetch_text("data/ood176_tasks.jsonl").await.and_then(|text| {
                    bench::tasks::parse_jsonl(&text, "data/ood176_tasks.jsonl")
                        .map(|tasks| tasks.into_iter().map(|t| wire::TaskPrompt { id: t.id, prompt: t.prompt }).collect())
                }),
            };
            fetching.set(false);
            let tasks = match tasks {
                Ok(tasks) => tasks,
                Err(e) => return alert.show(format!("The prompts could not be read: {e}")),
            };
            fetched_tasks.set_value(Some(tasks.clone()));
            alert.clear();
            let mode = Some(page_form.get_untracked().mode).filter(|m| !m.is_empty());
            let trace = trace.get_untracked().map(|t| t.text);
            running.set_value(runs.clone());
            if worker.start(JobRequest::Serve { runs, tasks, trace, mode }, None) {
                state.runs_done.set(Vec::new());
                state.live.set(None);
                state.measured.set(None);
            }
        });
    };
    let field = move |label, id: &'static str, get, set| text_field(form, id.to_string(), label, get, set);
    let live = move || {
        (worker.running.get() == Some(JobKind::Serve)).then(|| {
            let ServeLive { run: index, samples, finished, arrivals } = state.live.get().unwrap_or_default();
            let total = running.with_value(Vec::len).max(1);
            let end = running.with_value(|r| r.get(index).map_or(1000.0, |s| s.end_ms()));
            let now = samples.last().map_or(0.0, |s| s.t_ms);
            let queue = bench::serve::plot::queue_svg(&samples, end, &format!("run {} of {total}", index + 1));
            let text = match samples.last() {
                None if index == 0 => "Warming up: one decide of the heaviest prompt, nothing queued".to_string(),
                last => format!(
                    "run {} of {total} · {:.1} s · {finished} of {arrivals} requests ended · {} in the system now",
                    index + 1,
                    now / 1000.0,
                    last.map_or(0, |s| s.in_system)
                ),
            };
            let done = state.runs_done.get();
            view! {
                <JobProgressLine id="serve" label="Serving test progress" value=index as f64 + (now / end).min(1.0) max=total as f64 text=text/>
                <figure class="plot" data-testid="serve-live-queue" inner_html=queue></figure>
                <ul class="note" data-testid="serve-runs-done">{done.into_iter().map(|line| view! { <li>{line}</li> }).collect_view()}</ul>
            }
        })
    };
    let result = move || {
        state.measured.get().map(|Measured { report, cancelled }| {
            let study = report.studies.serve.clone();
            view! {
                <h3>"Measured in this browser"</h3>
                {cancelled.then(|| view! { <p class="note" data-testid="serve-cancelled">"Cancelled: the runs so far are shown; the last one stopped early."</p> })}
                <ReportActions report=report file="router-serve.browser.json" id="serve"/>
                {study.map(|study| view! { <ServeView study=study/> })}
            }
        })
    };
    view! {
        <section class="card" aria-labelledby="serve-h">
            <h2 id="serve-h">"6 · The router under load (note 06)"</h2>
            <p class="note">
                "Open-loop arrivals (Poisson, from a seed) of the OOD176 prompts, cut to router_max_tokens, against one engine: this worker runs one request's work at a time, "
                "and requests that arrive while it computes wait in a bounded queue (full: rejected at once). A client gives up after the timeout: a waiting request is dropped, "
                "a started one abandoned between chunks. With chunked prefill, a long prompt is prefilled C tokens at a time and the policy picks who runs between chunks. "
                "Every request is kept: served, timed out, rejected, failed or unfinished. The page stays usable while it runs."
            </p>
            <div class="row">
                <button type="button" data-testid="serve-native-show" disabled=move || native.get() == NativeServe::Loading on:click=show_native>
                    "Show the native study"
                </button>
            </div>
            {move || match native.get() {
                NativeServe::Shown(study) => Some(view! { <h3>"Measured natively (bench-decide --serve)"</h3><ServeView study=*study/> }.into_any()),
                NativeServe::Failed(e) => Some(view! { <p class="problem" role="alert" data-testid="serve-native-error">{e}</p> }.into_any()),
                NativeServe::Loading => Some(view! { <p class="note">"Fetching serve.json…"</p> }.into_any()),
                NativeServe::Idle => None,
            }}
            <h3>"Run it here"</h3>
            <div class="row">
                {field("Rates (req/s, comma-separated)", "serve-rates", |f| f.rates.clone(), |f, v| f.rates = v)}
                {field("Chunks (tokens or whole)", "serve-chunks", |f| f.chunks.clone(), |f, v| f.chunks = v)}
                <label class="field small">"Between chunks"
                    <select data-testid="serve-policy" on:change=move |ev| form.update(|f| f.policy = event_target_value(&ev))>
                        <option value="fcfs">"FCFS"</option>
                        <option value="shortest_first">"shortest first"</option>
                        <option value="both">"both"</option>
                    </select>
                </label>
                {field("Duration (s)", "serve-duration", |f| f.duration.clone(), |f, v| f.duration = v)}
                {field("Warm-up (s)", "serve-warmup", |f| f.warmup.clone(), |f, v| f.warmup = v)}
                {field("Seed", "serve-seed", |f| f.seed.clone(), |f, v| f.seed = v)}
                {field("Client timeout (ms)", "serve-timeout", |f| f.timeout.clone(), |f, v| f.timeout = v)}
                {field("Queue limit", "serve-queue-limit", |f| f.queue_limit.clone(), |f, v| f.queue_limit = v)}
                {field("SLO (ms, arrival → decision)", "serve-slo", |f| f.slo.clone(), |f, v| f.slo = v)}
                <label class="field small">"Or replay a trace (JSON lines: at_ms and a task id or a conversation)"
                    <input type="file" accept=".jsonl,.json,.txt" data-testid="serve-trace" on:change=pick_trace/>
                </label>
            </div>
            {move || trace.get().map(|Trace { name, .. }| view! {
                <p class="note" data-testid="serve-trace-name">
                    {format!("Replaying {name}: its arrival times replace the Poisson arrivals (the rates are ignored; the duration stretches to cover it). ")}
                    <button type="button" class="link" on:click=move |_| trace.set(None)>"Use Poisson arrivals again"</button>
                </p>
            })}
            {move || problem().map(|p| view! { <p class="field-error" role="alert" data-testid="serve-problem">{p}</p> })}
            <div class="row">
                <button type="button" data-testid="serve-run" disabled=move || !can_run() on:click=run>
                    {move || if fetching.get() { "Fetching the prompts…" } else { "Start the load" }}
                </button>
            </div>
            <NeedsModel/>
            {live}
            {result}
        </section>
    }
}
