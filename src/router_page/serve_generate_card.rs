//! Card 8, serving with generation (note 06): the worker serves Poisson
//! arrivals of the task prompts, each decoding an answer of a length drawn
//! from the dataset's recorded outputs, under continuous batching with a
//! K/V budget, once per rate × mixing policy × layout (one instance,
//! colocated replicas, or P/D separation with the K/V crossing as bytes);
//! then the figures per run, the trade-off plot and the trade-off in
//! words, P/D against colocated in words, and the note's figure (P chunks
//! and D iterations per request) for the run picked. Owns the
//! serve-generate jobs.

use bench::decode_study::{
    kv_timeline_svg, pd_timeline_svg, recorded_output_lengths, separation_lines, tradeoff_lines, tradeoff_svg, GenerationForm,
    GenerationRun,
};
use bench::report::format_ms;
use leptos::prelude::*;
use serving::disaggregation::InstanceQueue;
use serving::Percentiles;
use wire::job::GenerationTick;
use wire::{Deferred, JobEvent, JobKind, JobProgress, JobRequest, JobResult};

use super::worker::{JobProgress as JobProgressLine, Worker};
use super::{bytes_label, text_field, Alert, NeedsModel};
use crate::browser;

/// A finished test.
#[derive(Debug, Clone, PartialEq)]
struct Served {
    checkpoint_id: String,
    precision: String,
    runs: Vec<GenerationRun>,
    cancelled: bool,
}

/// The card's state.
#[derive(Clone, Copy)]
struct ServeGenerateState {
    form: RwSignal<GenerationForm>,
    tick: RwSignal<Option<GenerationTick>>,
    served: RwSignal<Option<Served>>,
    /// The run whose timeline is drawn.
    shown: RwSignal<usize>,
    fetching: RwSignal<bool>,
    alert: Alert,
}

impl ServeGenerateState {
    fn apply(self, event: JobEvent) {
        match event {
            JobEvent::Progress(JobProgress::GenerationTick(tick)) => self.tick.set(Some(tick)),
            JobEvent::Finished { result: JobResult::ServedGeneration { checkpoint_id, precision, runs }, cancelled } => match runs.decode()
            {
                Ok(runs) => {
                    self.shown.set(0);
                    self.served.set(Some(Served { checkpoint_id, precision, runs, cancelled }));
                }
                Err(message) => self.alert.show(message),
            },
            _ => {}
        }
    }
}

#[component]
pub fn ServeGenerateCard() -> impl IntoView {
    let worker = expect_context::<Worker>();
    let alert = expect_context::<Alert>();
    let state = ServeGenerateState {
        form: RwSignal::new(GenerationForm::default()),
        tick: RwSignal::new(None),
        served: RwSignal::new(None),
        shown: RwSignal::new(0),
        fetching: RwSignal::new(false),
        alert,
    };
    worker.on_job(JobKind::ServeGenerate, move |event| state.apply(event));
    let run = move |_| {
        let (plan, cap) = match state.form.with_untracked(GenerationForm::parse) {
            Ok(parsed) => parsed,
            Err(message) => return alert.show(message),
        };
        alert.clear();
        state.fetching.set(true);
        leptos::task::spawn_local(async move {
            // The dataset's outcomes, as the quality card reads them: the
            // output tokens per call are the lengths drawn from.
            let lengths = browser::fetch_text("data/ood176_results_long.csv")
                .await
                .and_then(|csv| recorded_output_lengths(&csv, cap).map_err(|e| format!("data/ood176_results_long.csv: {e}")));
            state.fetching.set(false);
            match lengths {
                Ok(output_lengths) => {
                    if worker.start(JobRequest::ServeGenerate { plan: Deferred::encode(&plan), output_lengths }, None) {
                        state.tick.set(None);
                        state.served.set(None);
                    }
                }
                Err(message) => alert.show(message),
            }
        });
    };
    let progress = move || {
        (worker.running.get() == Some(JobKind::ServeGenerate)).then(|| {
            let text = state.tick.get().map_or("preparing the prompts".to_string(), |t| {
                let all: InstanceQueue = t.instances.iter().copied().sum();
                format!(
                    "run {} of {}: {:.1} s, {} finished, {} running, {} waiting · K/V of the running batch: {} by the formula, {} allocated in pages, {} of the {} budget counted",
                    t.run + 1,
                    t.runs,
                    t.t_ms / 1000.0,
                    t.finished,
                    all.running,
                    all.waiting,
                    bytes_label(t.kv.payload as f64),
                    bytes_label(t.kv.allocated as f64),
                    bytes_label(t.counted_kv_bytes as f64),
                    bytes_label(t.budget_kv_bytes as f64),
                ) + &by_instance(&t)
            });
            let (value, max) = state.tick.get().map_or((0.0, 1.0), |t| (t.run as f64, t.runs as f64));
            view! { <JobProgressLine id="gen-serve" label="Serving test with generation progress" value=value max=max text=text/> }
        })
    };
    let field = move |name: &'static str, label, get, set| text_field(state.form, format!("gen-serve-{name}"), label, get, set);
    view! {
        <section class="card" aria-labelledby="gen-serve-h">
            <h2 id="gen-serve-h">"8 · Serving with generation (note 06)"</h2>
            <p class="note">
                "Requests arrive at random (Poisson) with a task prompt cut to a length and an answer length drawn from the tokens per call "
                "the dataset's runs produced (capped); the worker's engine serves them an iteration at a time: every running sequence "
                "decodes one token in one batched pass, and new prompts are prefilled either whole before any decode (prefill-first), only "
                "once the running ones are done (decode-first), or in chunks beside the decodes within a token budget (chunked). K/V lives "
                "in pages of 16 tokens under a budget; when it runs out the newest sequence is preempted and recomputed later."
            </p>
            <p class="note">
                "Layouts: single (one engine instance), replicas:N (N instances, arrivals dealt round-robin) or pd (one instance prefills "
                "each prompt to its first token and hands the sequence, its K/V as bytes, to another that decodes the rest). Every instance "
                "keeps a clock of its own that advances by the time its steps took on this worker, as serve-generate does natively: two "
                "instances stand for two devices, not two threads of this one, and idle time is skipped rather than waited out. A hand-off "
                "takes the measured copy out of one instance's pages and into the other's, plus its bytes at the link's rate when one is given."
            </p>
            <div class="row">
                {field("rates", "Rates (requests/s)", |f| f.rates.clone(), |f, v| f.rates = v)}
                {field("mixings", "Mixing", |f| f.mixings.clone(), |f, v| f.mixings = v)}
                {field("layouts", "Layouts", |f| f.layouts.clone(), |f, v| f.layouts = v)}
                {field("duration", "Arrivals (s)", |f| f.duration_s.clone(), |f, v| f.duration_s = v)}
                {field("warmup", "Warm-up (s)", |f| f.warmup_s.clone(), |f, v| f.warmup_s = v)}
            </div>
            <div class="row">
                {field("prompt", "Prompt tokens (cut)", |f| f.max_prompt_tokens.clone(), |f, v| f.max_prompt_tokens = v)}
                {field("cap", "Answer tokens (cap)", |f| f.max_new_cap.clone(), |f, v| f.max_new_cap = v)}
                {field("budget", "K/V budget (MiB)", |f| f.kv_budget_mib.clone(), |f, v| f.kv_budget_mib = v)}
                {field("running", "Most running", |f| f.max_running.clone(), |f, v| f.max_running = v)}
                {field("link", "P/D link (Gbit/s, empty: none)", |f| f.link_gbit.clone(), |f, v| f.link_gbit = v)}
            </div>
            <NeedsModel/>
            <button type="button" data-testid="gen-serve-run"
                disabled=move || !worker.can_start(JobKind::ServeGenerate) || state.fetching.get() on:click=run>
                "Run the serving test with generation"
            </button>
            {progress}
            {move || state.served.get().map(|served| view! { <ServedView served=served shown=state.shown/> })}
        </section>
    }
}

/// Where the requests are when there is more than one instance: "· prefill:
/// 1 running, 4 waiting; decode: 6 running, 0 waiting".
fn by_instance(tick: &GenerationTick) -> String {
    if tick.instances.len() < 2 {
        return String::new();
    }
    let each: Vec<String> = tick
        .instances
        .iter()
        .enumerate()
        .map(|(i, q)| format!("{}: {} running, {} waiting", tick.layout.role(i), q.running, q.waiting))
        .collect();
    format!(" · {}", each.join("; "))
}

/// p50 / p95 / p99; "unserved" where the percentile falls on a request never served.
fn percentiles(p: Percentiles) -> String {
    let one = |v: Option<f64>| v.map_or("unserved".into(), format_ms);
    format!("{} / {} / {}", one(p.p50), one(p.p95), one(p.p99))
}

#[component]
fn ServedView(served: Served, shown: RwSignal<usize>) -> impl IntoView {
    let Served { checkpoint_id, precision, runs, cancelled } = served;
    let lines = tradeoff_lines(&runs);
    let separation = separation_lines(&runs);
    let tradeoff = tradeoff_svg(&runs);
    let labels: Vec<String> = runs.iter().map(GenerationRun::label).collect();
    let timeline_runs = runs.clone();
    let kv_runs = timeline_runs.clone();
    let timeline = move || timeline_runs.get(shown.get()).map(pd_timeline_svg).unwrap_or_default();
    // Runs from older reports recorded no K/V over time: no figure then.
    let kv_timeline = move || kv_runs.get(shown.get()).and_then(kv_timeline_svg);
    view! {
        <div class="report" data-testid="gen-serve-report">
            {cancelled.then(|| view! { <p class="warning">"Cancelled: the runs that ran are shown, the last one cut short."</p> })}
            <p class="note">{format!("{checkpoint_id} · {precision}")}</p>
            <div class="table-wrap">
                <table>
                    <thead><tr>
                        <th scope="col">"run"</th><th scope="col">"served"</th><th scope="col">"TTFT p50 / p95 / p99"</th>
                        <th scope="col">"ITL p50 / p95 / p99"</th><th scope="col">"done p50 / p95 / p99"</th>
                        <th scope="col">"tokens/s"</th><th scope="col">"goodput /s"</th><th scope="col">"preempted"</th>
                    </tr></thead>
                    <tbody>
                        {runs.iter().map(|r| {
                            let s = &r.summary;
                            view! {
                                <tr data-testid="gen-serve-row" data-served=s.served data-measured=s.measured>
                                    <td class="policy">{r.label()}</td>
                                    <td class="num">{format!("{} of {}", s.served, s.measured)}</td>
                                    <td class="num">{percentiles(s.ttft_ms)}</td>
                                    <td class="num">{percentiles(s.itl_ms)}</td>
                                    <td class="num">{percentiles(s.completion_ms)}</td>
                                    <td class="num">{format!("{:.1}", s.tokens_per_s)}</td>
                                    <td class="num">{format!("{:.2}", s.goodput_per_s)}</td>
                                    <td class="num">{s.preemptions}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
            <ul class="note" data-testid="gen-serve-tradeoff">{lines.into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}</ul>
            <figure class="plot" data-testid="gen-serve-tradeoff-plot" inner_html=tradeoff></figure>
            {(!separation.is_empty()).then(|| view! {
                <ul class="note" data-testid="gen-serve-separation">
                    {separation.into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}
                </ul>
            })}
            <label>"Timeline of "
                <select data-testid="gen-serve-shown" on:change=move |ev| shown.set(event_target_value(&ev).parse().unwrap_or(0))>
                    {labels.into_iter().enumerate().map(|(i, l)| view! { <option value=i.to_string()>{l}</option> }).collect_view()}
                </select>
            </label>
            <figure class="plot serve-timeline-figure" data-testid="gen-serve-timeline" inner_html=timeline></figure>
            {move || kv_timeline().map(|svg| view! {
                <figure class="plot" data-testid="gen-serve-kv">
                    <div inner_html=svg></div>
                    <figcaption class="note">
                        "The running batch's K/V after each iteration: the calculator's payload for the tokens held, what the engine's "
                        "pages of 16 tokens allocate for them, and what the scheduler counts against the budget. Payload bytes are not "
                        "allocated bytes (note 03). Beneath: requests running and waiting."
                    </figcaption>
                </figure>
            })}
        </div>
    }
}
