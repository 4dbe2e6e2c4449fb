//! The latency widget (`router/?embed=latency`): the field guide's published
//! routing-latency table beside an empty "this browser" column, and one
//! button that fills it.
//!
//! It is its own bundle (bin `router-widget`) so the guide's first load stays
//! small: this module, the report's types and the share codec, and nothing
//! that runs the model. The worker (and with it the checkpoint) is fetched
//! only when the reader presses *Run in this browser*; a shared report in the
//! fragment is rendered read-only and starts nothing.

use bench::estimate::format_duration;
use bench::guide::{widget_rows, PUBLISHED_CONDITIONS};
use bench::page::RouterForm;
use bench::report::{format_ms, LatencyReport};
use bench::roofline::DeviceCeilings;
use bench::Protocol;
use leptos::prelude::*;
use leptos::task::spawn_local;
use wire::{
    FromWorker, JobEvent, JobId, JobProgress, JobRequest, JobResult, LoadProgress, LoadSource, LoadStage, ModelInfo, Source, ToWorker,
};

use crate::browser;
use crate::report_view::measured_where;
use crate::roofline_view::{self, RooflineView};
use crate::worker_client::{WorkerBuild, WorkerClient};

/// The site's model manifest, compiled in: the widget names the checkpoint
/// and its size before anything is fetched (the worker fetches the same file
/// and checks the bytes against it).
const MANIFEST_JSON: &str = include_str!("../www/models/manifest.json");

/// `SmolLM2-135M-Instruct Q4_1, 98.02 MiB`, or why the manifest cannot say.
fn bundled_checkpoint() -> String {
    match serde_json::from_str::<wire::Manifest>(MANIFEST_JSON).ok().as_ref().and_then(wire::Manifest::bundled) {
        Some(m) => format!("{}, {}", m.name, kv::units::binary(m.bytes as u128)),
        None => "the bundled checkpoint".into(),
    }
}

/// What the widget is doing: one value, so the button, the progress bar and
/// the status line can never disagree.
#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Nothing started.
    Idle,
    /// The worker script is loading.
    Starting,
    /// The worker is fetching (or reading from the cache), verifying and
    /// loading the checkpoint.
    Loading(LoadProgress),
    /// The protocol runs: `done` of `overall` calls.
    Running { done: usize, overall: usize, prompt_tokens: usize },
    /// After the protocol, one decide of the example task, to show what the
    /// timed calls decided.
    Deciding,
    /// Measuring this device's ceilings for the example decide's roofline
    /// (only when the reader asks, from the details).
    Probing,
    /// The column holds a result (measured here, or shared).
    Shown,
    /// What went wrong, in a sentence; the button runs again.
    Failed(String),
}

impl Phase {
    fn busy(&self) -> bool {
        matches!(self, Phase::Starting | Phase::Loading(_) | Phase::Running { .. } | Phase::Deciding | Phase::Probing)
    }
}

/// Where the shown report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Measured in this browser just now.
    Live,
    /// Decoded from the link's fragment: someone else's measurement.
    Shared,
}

#[derive(Clone, Copy)]
struct Widget {
    /// The protocol settings as the link gave them (raw text, the router
    /// page's fragment codec, the widget's defaults where the link is silent).
    form: StoredValue<RouterForm>,
    phase: RwSignal<Phase>,
    report: RwSignal<Option<(LatencyReport, Origin)>>,
    model: RwSignal<Option<ModelInfo>>,
    /// The example task's decision after a live run (a shared report has none).
    decision: RwSignal<Option<router::Decision>>,
    /// This device's ceilings, once the reader asked for the roofline
    /// (they hold for the loaded checkpoint, so a later run reuses them).
    ceilings: RwSignal<Option<DeviceCeilings>>,
    share_link: RwSignal<Option<String>>,
    client: StoredValue<Option<WorkerClient>, LocalStorage>,
    /// The job the widget started last: answers about any other are stale.
    job: StoredValue<JobId>,
}

impl Widget {
    /// The protocol and precision the link asks for, or every bad field
    /// named in one sentence.
    fn protocol(self) -> Result<(Protocol, Option<router::Precision>), String> {
        let (protocol, precision) = self.form.with_value(|f| (f.protocol(), f.precision()));
        match (protocol, precision) {
            (Ok(protocol), Ok(precision)) => Ok((protocol, precision)),
            (protocol, precision) => {
                let problems = protocol.err().into_iter().flatten().chain(precision.err());
                let named: Vec<String> = problems.map(|p| format!("{}: {}", p.field, p.message)).collect();
                Err(format!("The link asks for a protocol this widget cannot run ({}).", named.join("; ")))
            }
        }
    }

    fn run(self) {
        self.share_link.set(None);
        self.decision.set(None);
        if self.client.with_value(Option::is_none) {
            self.phase.set(Phase::Starting);
            self.spawn();
        } else if self.model.get_untracked().is_none() {
            self.load();
        } else {
            self.bench();
        }
    }

    fn spawn(self) {
        let on_message = move |message: Result<FromWorker, String>| match message {
            Ok(message) => self.on_message(message),
            Err(e) => self.fail(e),
        };
        let on_error = move |message: String| {
            self.client.set_value(None);
            self.model.set(None);
            self.fail(format!("The router worker stopped ({message}). Press Run to start it again."));
        };
        match WorkerClient::spawn(on_message, on_error) {
            Ok(client) => self.client.set_value(Some(client)),
            Err(e) => self.fail(e),
        }
    }

    fn fail(self, message: String) {
        self.phase.set(Phase::Failed(message));
    }

    /// Starts a job, the widget's only one from now on.
    fn start(self, job: JobRequest) -> bool {
        self.job.update_value(|id| id.0 += 1);
        let message = ToWorker::Start { id: self.job.get_value(), job };
        match self.client.with_value(|c| c.as_ref().map(|c| c.send(&message, None))) {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                self.fail(e);
                false
            }
            None => {
                self.fail("The router worker is not running; press Run to start it.".into());
                false
            }
        }
    }

    fn load(self) {
        let precision = match self.protocol() {
            Ok((_, precision)) => precision,
            Err(e) => return self.fail(e),
        };
        if self.start(JobRequest::Load { source: LoadSource::Site { on_request: None }, precision }) {
            self.phase.set(Phase::Loading(LoadProgress { stage: LoadStage::Starting, done: 0, total: None }));
        }
    }

    /// The protocol, decide only: the widget shows no encode+scores column,
    /// so it asks for none of those calls.
    fn bench(self) {
        let protocol = match self.protocol() {
            Ok((protocol, _)) => protocol,
            Err(e) => return self.fail(e),
        };
        let job = JobRequest::Bench {
            lengths: protocol.lengths,
            warmup: protocol.warmup,
            iterations: protocol.iterations,
            encode_iterations: Some(0),
            mode: None,
        };
        if self.start(job) {
            self.phase.set(Phase::Running { done: 0, overall: 0, prompt_tokens: 0 });
        }
    }

    /// One decide of the link's example task (the page's first task unless
    /// the link gives another) with the checkpoint's scoring: what a reader
    /// of the table would be routed to, and how sure the router is.
    fn decide(self) {
        let user = self.form.with_value(|f| f.user.clone());
        let conversation = router::Conversation::user(user);
        if self.start(JobRequest::Decide { conversation, mode: None, scoring: router::ScoringChoice::Trained }) {
            self.phase.set(Phase::Deciding);
        }
    }

    /// Measures this device's ceilings for the example decide's roofline.
    fn roofline(self) {
        if self.start(JobRequest::Roofline) {
            self.phase.set(Phase::Probing);
        }
    }

    fn on_message(self, message: FromWorker) {
        match message {
            FromWorker::Hello { .. } => self.load(),
            FromWorker::Job { id, event } if id == self.job.get_value() => self.on_job(event),
            FromWorker::Job { .. } | FromWorker::Storage { .. } => {}
            // Only a load's keeping or a message can fail outside a job; a
            // load that was not kept still loaded.
            FromWorker::Problem { .. } => {}
            FromWorker::Panicked { message } => {
                self.client.set_value(None);
                self.model.set(None);
                self.fail(format!("The router worker crashed ({message}). Press Run to start it again."));
            }
        }
    }

    fn on_job(self, event: JobEvent) {
        match event {
            JobEvent::Started | JobEvent::Progress(JobProgress::Reloaded(_)) => {}
            JobEvent::Progress(JobProgress::Load(progress)) => self.phase.set(Phase::Loading(progress)),
            JobEvent::Progress(JobProgress::BenchPrompts { overall, .. }) => {
                self.phase.set(Phase::Running { done: 0, overall, prompt_tokens: 0 })
            }
            JobEvent::Progress(JobProgress::BenchStep(step)) => {
                self.phase.set(Phase::Running { done: step.overall_done, overall: step.overall, prompt_tokens: step.prompt_tokens })
            }
            JobEvent::Progress(_) => {}
            JobEvent::Finished { result: JobResult::Loaded(model), .. } => {
                self.model.set(Some(*model));
                self.bench();
            }
            JobEvent::Finished { result: JobResult::Bench(report), .. } => {
                self.report.set(Some((*report, Origin::Live)));
                self.decide();
            }
            JobEvent::Finished { result: JobResult::Decided { decision, .. }, .. } => {
                self.decision.set(Some(*decision));
                self.phase.set(Phase::Shown);
            }
            JobEvent::Finished { result: JobResult::Roofline(ceilings), .. } => {
                self.ceilings.set(Some(ceilings));
                self.phase.set(Phase::Shown);
            }
            JobEvent::Finished { .. } => {}
            JobEvent::Rejected(why) => self.fail(format!("The router worker refused: {why}.")),
            JobEvent::Failed { message } => self.fail(message),
        }
    }

    /// The widget's address with this report in the fragment: it opens this
    /// same widget, read-only.
    fn share(self) {
        let Some((report, _)) = self.report.get_untracked() else { return };
        let fragment = RouterForm { result: Some(bench::share::encode(&report)), ..RouterForm::widget_default() }
            .to_fragment_against(&RouterForm::widget_default());
        let link = browser::link_with_fragment(&fragment);
        self.share_link.set(Some(link.clone()));
        spawn_local(async move {
            let _ = browser::copy_text(&link).await;
        });
    }

    /// The full router page: with the shown report when it came from a link,
    /// otherwise with this widget's protocol (the page's own form, so its
    /// inputs show the same lengths, warm-ups and iterations).
    fn full_bench_link(self) -> String {
        let form = match self.report.get() {
            Some((report, Origin::Shared)) => RouterForm { result: Some(bench::share::encode(&report)), ..RouterForm::default() },
            _ => self.form.get_value(),
        };
        format!("./#{}", form.to_fragment())
    }
}

/// The widget. Reads its settings from the fragment (`#router&lengths=…`,
/// or a shared `result=r1.…`) and tells an embedding page its height.
#[component]
pub fn LatencyWidget() -> impl IntoView {
    browser::announce_height("latency");
    let (mut form, warnings) = RouterForm::from_fragment_over(RouterForm::widget_default(), &browser::current_fragment());
    let shared = form.result.take().map(|payload| bench::share::decode(&payload));
    let widget = Widget {
        form: StoredValue::new(form),
        phase: RwSignal::new(Phase::Idle),
        report: RwSignal::new(None),
        model: RwSignal::new(None),
        decision: RwSignal::new(None),
        ceilings: RwSignal::new(None),
        share_link: RwSignal::new(None),
        client: StoredValue::new_local(None),
        job: StoredValue::new(JobId(0)),
    };
    let link_problem = match shared {
        Some(Ok(report)) => {
            widget.report.set(Some((report, Origin::Shared)));
            widget.phase.set(Phase::Shown);
            None
        }
        Some(Err(e)) => Some(format!("The shared result in this link cannot be shown: {e}.")),
        None => None,
    };
    let protocol_problem = widget.protocol().err();
    let lengths = widget.protocol().map(|(p, _)| p.lengths).unwrap_or_default();
    let build = WorkerBuild::detect();
    let warnings = (!warnings.is_empty()).then(|| view! { <p class="warning" data-testid="widget-warnings">{warnings.join(" · ")}</p> });

    let rows = move || widget.report.with(|r| widget_rows(&lengths, r.as_ref().map(|(report, _)| report)));
    let column_label = move || match widget.report.get() {
        Some((_, Origin::Shared)) => "shared measurement",
        _ => "this browser",
    };
    let can_run = protocol_problem.is_none();
    view! {
        <main class="latency-widget" data-testid="latency-widget">
            <h1>"Router decide latency: the field guide's table, and this browser"</h1>
            {warnings}
            {link_problem.map(|p| view! { <p class="problem" role="alert" data-testid="widget-link-problem">{p}</p> })}
            <div class="table-wrap">
                <table class="latency-table" data-testid="latency-table">
                    <caption>
                        "Routing decision latency by prompt length. Published: measured natively on Qwen3-0.6B (see conditions below), not here. "
                        {move || format!("Right-hand columns: {}.", column_label())}
                    </caption>
                    <thead>
                        <tr>
                            <th scope="col" rowspan="2">"prompt tokens"</th>
                            <th scope="colgroup" colspan="5">"published (native, Qwen3-0.6B)"</th>
                            <th scope="colgroup" colspan="3" data-testid="measured-heading">{column_label}</th>
                        </tr>
                        <tr>
                            <th scope="col">"characters"</th>
                            <th scope="col">"p50 (warm)"</th>
                            <th scope="col">"p95 (warm)"</th>
                            <th scope="col">"min–max (warm)"</th>
                            <th scope="col">"first call (cold)"</th>
                            <th scope="col" class="here">"p50 (warm)"</th>
                            <th scope="col" class="here">"p95 (warm)"</th>
                            <th scope="col" class="here">"first call (cold)"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {move || rows().into_iter().map(|row| {
                            let published = row.published.map(|p| {
                                [
                                    kv::units::group_digits(p.characters as u128),
                                    format_ms(p.p50_ms),
                                    format_ms(p.p95_ms),
                                    format!("{} – {}", format_ms(p.min_ms), format_ms(p.max_ms)),
                                    format_ms(p.cold_ms),
                                ]
                            }).unwrap_or_else(|| ["–".into(), "–".into(), "–".into(), "–".into(), "–".into()]);
                            let measured = row.measured.map(|m| [m.p50, m.p95, m.cold]).unwrap_or_else(|| ["".into(), "".into(), "".into()]);
                            view! {
                                <tr data-testid="latency-row" data-tokens=row.prompt_tokens>
                                    <th scope="row" class="num">{kv::units::group_digits(row.prompt_tokens as u128)}</th>
                                    {published.into_iter().map(|c| view! { <td class="num">{c}</td> }).collect_view()}
                                    {measured.into_iter().zip(["here-p50", "here-p95", "here-cold"]).map(|(c, id)| view! {
                                        <td class="num here" data-testid=id>{c}</td>
                                    }).collect_view()}
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
            <p class="conditions" data-testid="published-conditions">
                "Published: " {PUBLISHED_CONDITIONS}
                " Measured natively by the field guide's authors on Qwen3-0.6B; this widget runs SmolLM2-135M (Q4_1) in your browser, so the columns share a protocol, not a model or a machine."
            </p>
            <MeasuredLine widget=widget/>
            <DecisionLine widget=widget/>
            <RooflineDetails widget=widget/>
            <div class="widget-actions">
                <button type="button" data-testid="widget-run" on:click=move |_| widget.run()
                    disabled=move || !can_run || widget.phase.with(Phase::busy)>
                    {move || match widget.report.get() {
                        Some((_, Origin::Live)) => "Run again",
                        _ => "Run in this browser",
                    }}
                </button>
                {move || widget.report.get().map(|(_, origin)| view! {
                    <a href=move || widget.full_bench_link() target="_blank" rel="noopener" data-testid="widget-full">"Open the full bench"</a>
                    {(origin == Origin::Live).then(|| view! {
                        <button type="button" class="link" data-testid="widget-share" on:click=move |_| widget.share()>"Copy a share link"</button>
                    })}
                })}
            </div>
            <Progress widget=widget/>
            {move || widget.share_link.get().map(|link| view! {
                <label class="field">"Share link (opens this result read-only; copied)"
                    <input type="text" readonly data-testid="widget-share-link" prop:value=link/>
                </label>
            })}
            <p class="note" data-testid="widget-protocol">
                {match &protocol_problem {
                    Some(p) => p.clone(),
                    None => {
                        let f = widget.form.get_value();
                        format!(
                            "Run: downloads the bundled checkpoint ({}) once, then your browser's cache keeps it, and times decide at {} tokens: the first call (cold), {} warm-ups, then {} timed calls each, {}. {}",
                            bundled_checkpoint(), f.lengths, f.warmup, f.iterations, precision_phrase(f.precision().ok().flatten()), build.sentence()
                        )
                    }
                }}
            </p>
        </main>
    }
}

/// How the run's weights compute, in the protocol sentence.
fn precision_phrase(precision: Option<router::Precision>) -> &'static str {
    match precision {
        Some(router::Precision::IntegerQ8) => "with 8-bit activations and integer dot products (int8; precision=f32 in the link for f32)",
        _ => "with the weights dequantized to f32",
    }
}

/// Under the table: what the right-hand column is and where it was measured.
#[component]
fn MeasuredLine(widget: Widget) -> impl IntoView {
    move || {
        let text = match widget.report.get() {
            Some((report, Origin::Shared)) => format!(
                "Shared measurement (read-only; opening it downloaded no model and ran nothing). {} {} warm-ups, {} timed calls.",
                measured_where(&report),
                report.protocol.warmup,
                report.protocol.iterations
            ),
            Some((report, Origin::Live)) => {
                let source = widget.model.get().map(|m| match m.source {
                    Source::Cached => " The checkpoint came from this browser's cache.",
                    Source::Downloaded => " The checkpoint was downloaded now and cached for the next visit.",
                    Source::UserFile => "",
                });
                format!(
                    "This browser: {} {} warm-ups, {} timed calls per length. Model: {} ({}).{}",
                    measured_where(&report),
                    report.protocol.warmup,
                    report.protocol.iterations,
                    report.provenance.backbone,
                    report.provenance.precision,
                    source.unwrap_or_default()
                )
            }
            None => "This browser: not measured yet.".into(),
        };
        view! { <p class="conditions" data-testid="measured-line">{text}</p> }
    }
}

/// After a live run: where the example task is routed, by which scoring,
/// and how sure the router is (a trained head's confidence and flag).
#[component]
fn DecisionLine(widget: Widget) -> impl IntoView {
    move || {
        let decision = widget.decision.get()?;
        let top = decision.ranked.first().map(|r| r.id.clone()).unwrap_or_default();
        let (scoring, doubt, unsure) = match &decision.confidence {
            Some(c) => (
                format!("the trained head {}", decision.scoring),
                format!(" P(first place stays ahead of second) {:.0} %; {}.", 100.0 * c.p_first_ahead, c.verdict()),
                c.unsure(),
            ),
            None => ("the untrained descriptor similarity (no trained head for this checkpoint)".to_string(), String::new(), false),
        };
        let text = format!(
            "Decided for the example task ({} tokens, {} mode): route to {top}, scored by {scoring}.{doubt}",
            decision.tokens_used, decision.mode
        );
        Some(
            view! { <p class="conditions" data-testid="widget-decision" data-scoring=decision.scoring.clone() data-unsure=unsure.to_string()>{text}</p> },
        )
    }
}

/// After a live run, in details: the example decide against this device's
/// ceilings (measured when the reader asks; nothing runs before).
#[component]
fn RooflineDetails(widget: Widget) -> impl IntoView {
    move || {
        let decision = widget.decision.get()?;
        let model = widget.model.get()?;
        let readout = widget.ceilings.get().map(|ceilings| {
            view! { <RooflineView ceilings=ceilings flops=model.flop_model decision=decision/> }
        });
        Some(view! {
            <details class="roofline-details" data-testid="widget-roofline">
                <summary>"Roofline: how close this decide came to what this device allows"</summary>
                <button type="button" class="link" data-testid="widget-roofline-measure" on:click=move |_| widget.roofline()
                    disabled=move || widget.phase.with(Phase::busy)>
                    {roofline_view::QUESTION}
                </button>
                {readout}
            </details>
        })
    }
}

/// The progress bar and the status line (announced to screen readers).
#[component]
fn Progress(widget: Widget) -> impl IntoView {
    let status = move || match widget.phase.get() {
        Phase::Idle => String::new(),
        Phase::Starting => "Starting the router worker…".into(),
        Phase::Loading(progress) => match progress.total {
            Some(t) if t > 0 && progress.stage.counts_bytes() => format!(
                "Loading the bundled checkpoint: {}, {} of {}.",
                progress.label(),
                kv::units::binary(progress.done as u128),
                kv::units::binary(t as u128)
            ),
            _ => format!("Loading the bundled checkpoint: {}.", progress.label()),
        },
        Phase::Running { done, overall, prompt_tokens } => {
            if prompt_tokens == 0 {
                "Measuring: preparing the prompts…".into()
            } else {
                format!("Measuring: call {done} of {overall} ({prompt_tokens} tokens).")
            }
        }
        Phase::Deciding => "Deciding the example task…".into(),
        Phase::Probing => "Measuring this device's ceilings…".into(),
        Phase::Shown => match widget.report.get() {
            Some((report, Origin::Live)) => {
                let total: f64 =
                    report.results.iter().map(|r| r.cold_ms + r.warmup_ms.iter().sum::<f64>() + r.warm_ms.iter().sum::<f64>()).sum();
                let calls = report.results.iter().map(|r| 1 + r.warmup_ms.len() + r.warm_ms.len()).sum::<usize>();
                format!("Done: {calls} calls in {}.", format_duration(total))
            }
            _ => String::new(),
        },
        Phase::Failed(message) => message,
    };
    let bar = move || {
        let (value, max) = match widget.phase.get() {
            Phase::Loading(LoadProgress { done, total: Some(t), .. }) if t > 0 => (done as f64, t as f64),
            Phase::Running { done, overall, .. } if overall > 0 => (done as f64, overall as f64),
            Phase::Starting | Phase::Loading(_) | Phase::Running { .. } | Phase::Deciding | Phase::Probing => (0.0, 1.0),
            _ => return None,
        };
        Some(view! { <progress data-testid="widget-progress" aria-label="Progress of the run" max=max value=value></progress> })
    };
    let failed = move || matches!(widget.phase.get(), Phase::Failed(_));
    view! {
        <div class="progress-line">
            {bar}
            <span role="status" aria-live="polite" data-testid="widget-status" class:problem=failed>{status}</span>
        </div>
    }
}
