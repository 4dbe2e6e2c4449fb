//! The router page (`router/`): load the checkpoint, try a decision (with
//! prefix reuse), run the cold-vs-warm latency protocol, export, compare and
//! share the result, and run the prefix-reuse protocol of note 04.
//!
//! Everything heavy happens in the router worker (`crates/router-worker`);
//! this module only binds inputs to a [`RouterForm`] (mirrored in the URL
//! fragment), posts [`ToWorker`] messages and shows what comes back. A worker
//! that crashes or hangs is terminated and replaced; the inputs live here, so
//! nothing the user typed is lost, and the model is reloaded when it had
//! been loaded before.

use bench::estimate::format_duration;
use bench::page::RouterForm;
use bench::prefix::PrefixReport;
use bench::report::{format_ms, Report};
use bench::tasks::Task;
use leptos::prelude::*;
use leptos::task::spawn_local;
use router::{Conversation, Decision, GemmProbe};
use wasm_bindgen::JsCast;
use wire::{Activity, BuildInfo, FromWorker, ModelInfo, Source, StorageInfo, ToWorker};

use crate::browser;
use crate::quality_view::QualityView;
use crate::report_view::{measured_where, ReportView};
use crate::serve_view::ServeView;
use crate::worker_client::{WorkerBuild, WorkerClient};

/// Milliseconds a running call may take to honour Cancel before the
/// worker is terminated and restarted. A serving test's steps can be a
/// whole long prefill, slower than this on a slow machine: its grace is
/// [`serve_cancel_grace_ms`] instead.
const CANCEL_GRACE_MS: u32 = 3000;

/// The Cancel grace during a serving test before the worker has timed its
/// heaviest prompt: its warm-up is that whole decide, after tokenising
/// every prompt.
const SERVE_WARMUP_GRACE_MS: u32 = 60_000;

/// The Cancel grace during a serving test: the worker checks Cancel
/// between steps, and a step is about as long as one whole decide of the
/// heaviest prompt (most kept tokens, most text to tokenise) at most, which
/// the worker timed (with nothing queued) before the first run. Half as
/// much again and a second cover a noisy machine (prefills measured up to
/// 13 % longer than that warm-up in the native study).
fn serve_cancel_grace_ms(unloaded_heaviest_ms: f64) -> u32 {
    (unloaded_heaviest_ms * 1.5 + 1000.0).clamp(CANCEL_GRACE_MS as f64, 120_000.0) as u32
}

/// Timed follow-ups (and short decides) in the page's prefix protocol.
const PREFIX_ITERATIONS: usize = 5;

#[derive(Debug, Clone, PartialEq)]
enum Status {
    NotLoaded,
    Loading,
    Ready,
    Failed,
}

impl Status {
    fn text(&self) -> &'static str {
        match self {
            Status::NotLoaded => "not loaded",
            Status::Loading => "loading",
            Status::Ready => "ready",
            Status::Failed => "failed",
        }
    }
}

/// A long-running job in the worker: one at a time, each cancellable
/// between calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    Bench,
    PrefixProtocol,
    /// Routing OOD176 tasks for the Quality card.
    RouteTasks,
    /// The Serving card's load runs.
    Serve,
}

/// What was loaded last, to load it again after a restart.
#[derive(Clone)]
enum LoadRequest {
    Bundled,
    /// A checkpoint the manifest offers on request, by its manifest `file`.
    OnRequest(String),
    File(web_sys::File),
}

#[derive(Debug, Clone, PartialEq)]
struct BenchProgress {
    prompts: Vec<(usize, usize)>,
    reloaded: bool,
    overall_done: usize,
    overall: usize,
    prompt_tokens: usize,
    phase: String,
    done: usize,
    per_length: usize,
    last_ms: f64,
}

/// The serving run in progress, as its ticks arrive: its index, the queue
/// so far, requests ended and arrivals in all.
#[derive(Debug, Clone, Default, PartialEq)]
struct ServeLive {
    run: usize,
    samples: Vec<bench::serve::QueueSample>,
    finished: usize,
    arrivals: usize,
}

/// The page's state: signals are `Copy`, so handlers capture all of it.
#[derive(Clone, Copy)]
struct Ctx {
    form: RwSignal<RouterForm>,
    tasks: RwSignal<Vec<Task>>,
    build: RwSignal<Option<BuildInfo>>,
    status: RwSignal<Status>,
    load_stage: RwSignal<Option<(String, u64, Option<u64>)>>,
    model: RwSignal<Option<ModelInfo>>,
    storage: RwSignal<Option<StorageInfo>>,
    decision: RwSignal<Option<Decision>>,
    /// The worker's wasm memory after the last decision.
    worker_memory: RwSignal<Option<u64>>,
    deciding: RwSignal<bool>,
    /// The long-running job the worker is on, if any.
    job: RwSignal<Option<Job>>,
    /// The prefix protocol's long-conversation length (a select's value).
    prefix_tokens: RwSignal<String>,
    prefix_progress: RwSignal<Option<(usize, usize, String)>>,
    prefix_report: RwSignal<Option<(PrefixReport, bool)>>,
    bench_progress: RwSignal<Option<BenchProgress>>,
    cancel_requested: RwSignal<bool>,
    /// How long Cancel may take during the serving test before the worker
    /// is restarted (ms); every other job has [`CANCEL_GRACE_MS`].
    serve_cancel_grace_ms: RwSignal<u32>,
    report: RwSignal<Option<(Report, bool)>>,
    compare_with: RwSignal<Option<(String, Report)>>,
    share_link: RwSignal<Option<String>>,
    gemm: RwSignal<Option<GemmProbe>>,
    probing: RwSignal<bool>,
    /// What the duration estimate said when the shown run started.
    run_estimate_ms: RwSignal<Option<f64>>,
    alert: RwSignal<Option<String>>,
    /// The Quality card's in-browser evaluation: tasks routed so far, and
    /// how the run ended (checkpoint id, head id, cancelled).
    routed_tasks: RwSignal<Vec<bench::quality::RoutedTask>>,
    route_progress: RwSignal<Option<(usize, usize)>>,
    route_done: RwSignal<Option<(String, Option<String>, bool)>>,
    /// The Serving card: the running run's queue so far (index, samples,
    /// finished, arrivals), the runs done, and the finished report.
    serve_live: RwSignal<Option<ServeLive>>,
    /// The finished runs' summary lines.
    serve_runs: RwSignal<Vec<String>>,
    serve_report: RwSignal<Option<(Report, bool)>>,
    worker_started: RwSignal<bool>,
    reload_when_started: RwSignal<bool>,
    /// Counts workers, so a stale timer does not restart a newer one.
    generation: RwSignal<u32>,
    client: StoredValue<Option<WorkerClient>, LocalStorage>,
    last_load: StoredValue<Option<LoadRequest>, LocalStorage>,
}

impl Ctx {
    fn new(form: RouterForm) -> Ctx {
        Ctx {
            form: RwSignal::new(form),
            tasks: RwSignal::new(Vec::new()),
            build: RwSignal::new(None),
            status: RwSignal::new(Status::NotLoaded),
            load_stage: RwSignal::new(None),
            model: RwSignal::new(None),
            storage: RwSignal::new(None),
            decision: RwSignal::new(None),
            worker_memory: RwSignal::new(None),
            deciding: RwSignal::new(false),
            job: RwSignal::new(None),
            prefix_tokens: RwSignal::new("256".into()),
            prefix_progress: RwSignal::new(None),
            prefix_report: RwSignal::new(None),
            bench_progress: RwSignal::new(None),
            cancel_requested: RwSignal::new(false),
            serve_cancel_grace_ms: RwSignal::new(SERVE_WARMUP_GRACE_MS),
            report: RwSignal::new(None),
            compare_with: RwSignal::new(None),
            share_link: RwSignal::new(None),
            run_estimate_ms: RwSignal::new(None),
            gemm: RwSignal::new(None),
            probing: RwSignal::new(false),
            alert: RwSignal::new(None),
            routed_tasks: RwSignal::new(Vec::new()),
            route_progress: RwSignal::new(None),
            route_done: RwSignal::new(None),
            serve_live: RwSignal::new(None),
            serve_runs: RwSignal::new(Vec::new()),
            serve_report: RwSignal::new(None),
            worker_started: RwSignal::new(false),
            reload_when_started: RwSignal::new(false),
            generation: RwSignal::new(0),
            client: StoredValue::new_local(None),
            last_load: StoredValue::new_local(None),
        }
    }

    fn spawn_worker(self) {
        self.worker_started.set(false);
        self.generation.update(|g| *g += 1);
        let generation = self.generation.get_untracked();
        let on_message = move |message: Result<FromWorker, String>| match message {
            Ok(message) => self.on_message(message),
            Err(e) => self.alert.set(Some(e)),
        };
        let on_error = move |message: String| {
            if self.generation.get_untracked() != generation {
                return;
            }
            if self.worker_started.get_untracked() {
                let reload = if self.model.get_untracked().is_some() { " and the model reloads" } else { "" };
                self.restart(format!(
                    "The router worker stopped with an error ({message}). It was restarted; your inputs are kept{reload}."
                ));
            } else {
                // A worker that never started (its script missing, wasm refused)
                // would fail again: say so instead of looping.
                self.client.set_value(None);
                self.alert
                    .set(Some(format!("The router worker could not start: {message}. The calculator and shared results still work.")));
            }
        };
        match WorkerClient::spawn(on_message, on_error) {
            Ok(client) => self.client.set_value(Some(client)),
            Err(e) => self.alert.set(Some(e)),
        }
    }

    /// Replaces the worker, keeping every input; reloads the model if one
    /// was loaded.
    fn restart(self, reason: String) {
        self.client.set_value(None);
        // Reload only a model that had loaded: a file that crashes the worker
        // while loading would crash it again.
        let had_model = self.model.get_untracked().is_some();
        self.status.set(Status::NotLoaded);
        self.model.set(None);
        self.load_stage.set(None);
        self.worker_memory.set(None);
        self.deciding.set(false);
        self.job.set(None);
        self.cancel_requested.set(false);
        self.alert.set(Some(reason));
        self.reload_when_started.set(had_model && self.last_load.with_value(Option::is_some));
        self.spawn_worker();
    }

    fn send(self, message: &ToWorker, file: Option<&web_sys::File>) -> bool {
        let sent = self.client.with_value(|c| c.as_ref().map(|c| c.send(message, file)));
        match sent {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                self.alert.set(Some(e));
                false
            }
            None => {
                self.alert.set(Some("The router worker is not running; reload the page to start it.".into()));
                false
            }
        }
    }

    /// Loads what the user asked for; the last alert is dismissed.
    fn load(self, request: LoadRequest) {
        self.alert.set(None);
        self.load_again(request);
    }

    /// Loads without touching the alert: after a restart, the reason the
    /// worker was replaced stays on screen while the model comes back.
    fn load_again(self, request: LoadRequest) {
        // A bad `precision=` in the link is named, kept, and loads nothing.
        let precision = match self.form.with_untracked(RouterForm::precision) {
            Ok(precision) => precision,
            Err(problem) => {
                self.alert.set(Some(format!("{}: {}", problem.field, problem.message)));
                return;
            }
        };
        let (message, file) = match &request {
            LoadRequest::Bundled => (ToWorker::LoadBundled { on_request: None, precision }, None),
            LoadRequest::OnRequest(file) => (ToWorker::LoadBundled { on_request: Some(file.clone()), precision }, None),
            LoadRequest::File(file) => (ToWorker::LoadFile { name: file.name(), precision }, Some(file.clone())),
        };
        self.last_load.set_value(Some(request));
        self.decision.set(None);
        if self.send(&message, file.as_ref()) {
            self.status.set(Status::Loading);
            self.model.set(None);
            self.load_stage.set(Some(("starting".into(), 0, None)));
        }
    }

    fn on_message(self, message: FromWorker) {
        match message {
            FromWorker::Started { tasks, build } => {
                self.worker_started.set(true);
                self.tasks.set(tasks);
                self.build.set(Some(build));
                self.send(&ToWorker::Storage, None);
                if self.reload_when_started.get_untracked() {
                    self.reload_when_started.set(false);
                    if let Some(request) = self.last_load.get_value() {
                        self.load_again(request);
                    }
                }
            }
            FromWorker::LoadProgress { stage, done, total } => {
                if self.job.get_untracked().is_none() {
                    self.status.set(Status::Loading);
                }
                self.load_stage.set(Some((stage, done, total)));
            }
            FromWorker::Loaded { model } => {
                self.model.set(Some(*model));
                self.status.set(Status::Ready);
                self.load_stage.set(None);
            }
            FromWorker::Storage { storage } => self.storage.set(Some(storage)),
            FromWorker::Decided { decision, wasm_memory_bytes } => {
                self.deciding.set(false);
                self.decision.set(Some(decision));
                self.worker_memory.set(Some(wasm_memory_bytes));
            }
            FromWorker::GemmProbed { probe } => {
                self.probing.set(false);
                self.gemm.set(Some(probe));
            }
            FromWorker::BenchStarted { prompts, reloaded, overall } => self.bench_progress.set(Some(BenchProgress {
                prompts,
                reloaded,
                overall_done: 0,
                overall,
                prompt_tokens: 0,
                phase: "starting".into(),
                done: 0,
                per_length: 0,
                last_ms: 0.0,
            })),
            FromWorker::BenchStep { prompt_tokens, phase, ms, done, per_length, overall_done, overall } => {
                self.bench_progress.update(|p| {
                    if let Some(p) = p {
                        *p = BenchProgress { overall_done, overall, prompt_tokens, phase, done, per_length, last_ms: ms, ..p.clone() };
                    }
                })
            }
            FromWorker::BenchDone { report, cancelled } => {
                self.job.set(None);
                self.cancel_requested.set(false);
                self.share_link.set(None);
                self.report.set(Some((*report, cancelled)));
            }
            FromWorker::PrefixStep { done, total, label } => self.prefix_progress.set(Some((done, total, label))),
            FromWorker::PrefixDone { report, cancelled } => {
                self.job.set(None);
                self.cancel_requested.set(false);
                self.prefix_report.set(Some((*report, cancelled)));
            }
            FromWorker::TaskRouted { done, total, routed } => {
                self.route_progress.set(Some((done, total)));
                self.routed_tasks.update(|r| r.push(routed));
            }
            FromWorker::RouteDone { checkpoint_id, head_id, cancelled } => {
                self.job.set(None);
                self.cancel_requested.set(false);
                self.route_done.set(Some((checkpoint_id, head_id, cancelled)));
            }
            FromWorker::ServeStarted { unloaded_heaviest_ms, .. } => {
                self.serve_live.set(None);
                self.serve_cancel_grace_ms.set(serve_cancel_grace_ms(unloaded_heaviest_ms));
            }
            FromWorker::ServeTick { run, sample, finished, arrivals } => self.serve_live.update(|live| match live {
                Some(live) if live.run == run => {
                    live.samples.push(sample);
                    (live.finished, live.arrivals) = (finished, arrivals);
                }
                _ => *live = Some(ServeLive { run, samples: vec![sample], finished, arrivals }),
            }),
            FromWorker::ServeRunDone { label, settings, summary, .. } => {
                self.serve_runs.update(|runs| runs.push(bench::serve::summary_line(&label, &settings, &summary)))
            }
            FromWorker::ServeDone { report, cancelled } => {
                self.job.set(None);
                self.cancel_requested.set(false);
                self.serve_live.set(None);
                self.serve_report.set(Some((*report, cancelled)));
            }
            FromWorker::Failed { during, message } => {
                match during {
                    Activity::Load => {
                        self.status.set(Status::Failed);
                        self.load_stage.set(None);
                        self.model.set(None);
                    }
                    Activity::Decide => {
                        self.deciding.set(false);
                        self.probing.set(false);
                    }
                    Activity::Bench => {
                        self.job.set(None);
                        self.cancel_requested.set(false);
                    }
                    Activity::Storage | Activity::Message => {}
                }
                self.alert.set(Some(message));
            }
            FromWorker::Panicked { message } => {
                self.restart(format!("The router worker crashed ({message}). It was restarted; your inputs are kept."));
            }
        }
    }

    fn decide(self) {
        let form = self.form.get_untracked();
        if form.user.trim().is_empty() {
            self.alert.set(Some("Write a user turn (or pick a task) to decide.".into()));
            return;
        }
        let mut conversation = Conversation::user(form.user);
        if !form.system.trim().is_empty() {
            conversation = conversation.with_system(form.system);
        }
        let mode = Some(form.mode).filter(|m| !m.is_empty());
        self.alert.set(None);
        if self.send(&ToWorker::Decide { conversation, mode }, None) {
            self.deciding.set(true);
        }
    }

    /// How long the protocol the inputs ask for will take here, if a model
    /// is loaded (see `bench::estimate`).
    fn estimate(self) -> Option<bench::estimate::Estimate> {
        let model = self.model.get()?;
        let protocol = self.form.with(|f| f.protocol().ok())?;
        bench::estimate::estimate(&protocol, &model.flop_model, model.load.probe_gflops()?, model.provenance.router_max_tokens)
    }

    fn run_bench(self) {
        let form = self.form.get_untracked();
        let Ok(protocol) = form.protocol() else { return };
        self.run_estimate_ms.set(self.estimate().map(|e| e.total_ms));
        let mode = Some(form.mode).filter(|m| !m.is_empty());
        self.alert.set(None);
        let message = ToWorker::Bench {
            lengths: protocol.lengths,
            warmup: protocol.warmup,
            iterations: protocol.iterations,
            encode_iterations: Some(protocol.encode_iterations),
            mode,
        };
        if self.send(&message, None) {
            self.job.set(Some(Job::Bench));
            self.bench_progress.set(None);
            self.cancel_requested.set(false);
        }
    }

    /// Runs the note-04 prefix protocol in the worker.
    fn run_prefix_protocol(self) {
        let long_tokens = self.prefix_tokens.get_untracked().parse().unwrap_or(256);
        self.alert.set(None);
        if self.send(&ToWorker::PrefixProtocol { long_tokens, iterations: PREFIX_ITERATIONS }, None) {
            self.job.set(Some(Job::PrefixProtocol));
            self.prefix_progress.set(None);
            self.prefix_report.set(None);
            self.cancel_requested.set(false);
        }
    }

    /// The prefill's largest projection shape at 1,024 tokens (FFN gate/up
    /// of SmolLM2), best of 5.
    fn probe_gemm(self) {
        if self.send(&ToWorker::GemmProbe { m: 1024, k: 576, n: 1536, repeats: 5 }, None) {
            self.probing.set(true);
        }
    }

    fn cancel_bench(self) {
        self.send(&ToWorker::Cancel, None);
        self.cancel_requested.set(true);
        let generation = self.generation.get_untracked();
        let grace_ms = match self.job.get_untracked() {
            Some(Job::Serve) => self.serve_cancel_grace_ms.get_untracked(),
            _ => CANCEL_GRACE_MS,
        };
        gloo_timers::callback::Timeout::new(grace_ms, move || {
            if self.generation.get_untracked() == generation && self.job.get_untracked().is_some() && self.cancel_requested.get_untracked() {
                self.restart(format!(
                    "The call in progress did not end within {:.0} s of Cancel, so the worker was stopped and restarted (the model is reloading). No result was kept.",
                    f64::from(grace_ms) / 1000.0
                ));
            }
        })
        .forget();
    }
}

/// The page. A shared result (`#router&result=…`) is shown read-only and
/// starts nothing until the user asks for the live bench.
#[component]
pub fn RouterPage() -> impl IntoView {
    let (form, warnings) = RouterForm::from_fragment(&browser::current_fragment());
    let ctx = Ctx::new(form);
    let shared = Memo::new(move |_| ctx.form.with(|f| f.result.clone()));
    Effect::new(move |_| browser::replace_fragment(&ctx.form.with(RouterForm::to_fragment)));
    // The worker starts when the live page is shown, not for a shared result.
    Effect::new(move |_| {
        if shared.get().is_none() && ctx.client.with_value(Option::is_none) && !ctx.worker_started.get_untracked() {
            ctx.spawn_worker();
        }
    });
    let warnings = (!warnings.is_empty()).then(|| view! { <p class="warning" data-testid="query-warnings">{warnings.join(" · ")}</p> });
    view! {
        <main class="router">
            <header class="page-head">
                <p class="crumbs"><a href="../" data-testid="to-calculator">"← KV-cache calculator"</a></p>
                <h1>"Router decide latency, in this browser"</h1>
                <p class="lede">
                    "A quantized router (SmolLM2-135M bundled; Gemma 3 270M on request) runs here through candle compiled to WebAssembly, in a Web Worker. "
                    "The first call at each prompt length is reported apart from the warm calls: a warm median is not the first request's experience."
                </p>
            </header>
            {warnings}
            {move || ctx.alert.get().map(|a| view! {
                <p class="problem" role="alert" data-testid="router-alert">
                    {a} " " <button type="button" class="link" on:click=move |_| ctx.alert.set(None)>"Dismiss"</button>
                </p>
            })}
            {move || match shared.get() {
                Some(payload) => view! { <SharedResult ctx=ctx payload=payload/> }.into_any(),
                None => view! { <LivePage ctx=ctx/> }.into_any(),
            }}
        </main>
    }
}

#[component]
fn SharedResult(ctx: Ctx, payload: String) -> impl IntoView {
    let open_live = move |_| ctx.form.update(|f| f.result = None);
    match bench::share::decode(&payload) {
        Ok(report) => view! {
            <section class="card shared" data-testid="shared-result">
                <h2>"Shared result (read-only)"</h2>
                <p class="banner" data-testid="shared-label">
                    "This is a result someone measured and shared, not a new measurement: opening it downloaded no model and ran nothing. "
                    {measured_where(&report)}
                </p>
                <ReportView report=report/>
                <button type="button" on:click=open_live data-testid="open-live">"Open the live bench"</button>
            </section>
        }
        .into_any(),
        Err(e) => view! {
            <section class="card shared">
                <p class="problem" role="alert" data-testid="shared-error">{format!("This share link cannot be shown: {e}.")}</p>
                <button type="button" on:click=open_live data-testid="open-live">"Open the live bench"</button>
            </section>
        }
        .into_any(),
    }
}

#[component]
fn LivePage(ctx: Ctx) -> impl IntoView {
    view! {
        <ModelCard ctx=ctx/>
        <TryIt ctx=ctx/>
        <BenchCard ctx=ctx/>
        <PrefixCard ctx=ctx/>
        <QualityCard ctx=ctx/>
        <ServeCard ctx=ctx/>
    }
}

/// Where the Quality card stands: one state, not several flags.
#[derive(Debug, Clone, PartialEq)]
enum QualityState {
    Idle,
    Loading,
    Shown(Box<(Report, bench::quality::QualityStudy)>),
    Failed(String),
}

/// Puts `report` in this page's address (read-only result), shows the link
/// in `shown` and copies it to the clipboard.
fn share_report(report: &Report, shown: RwSignal<Option<String>>) {
    let fragment = RouterForm { result: Some(bench::share::encode(report)), ..RouterForm::default() }.to_fragment();
    let link = browser::link_with_fragment(&fragment);
    shown.set(Some(link.clone()));
    spawn_local(async move {
        let _ = browser::copy_text(&link).await;
    });
}

/// Fetches a committed report (`file`, beside the page) and the study in
/// its section; errors name the file and what is missing.
async fn fetch_study<T>(file: &str, what: &str, section: fn(&Report) -> Option<Result<T, String>>) -> Result<(Report, T), String> {
    let report = bench::share::parse_report(&browser::fetch_text(file).await?, file)?;
    match section(&report) {
        Some(Ok(study)) => Ok((report, study)),
        Some(Err(e)) => Err(format!("{file}: {e}")),
        None => Err(format!("{file} holds no {what}")),
    }
}

/// The in-browser evaluation's inputs, fetched on first use.
#[derive(Clone)]
struct EvaluationData {
    data: bench::quality::Dataset,
    head_json: String,
}

async fn fetch_evaluation_data() -> Result<EvaluationData, String> {
    const TASKS: &str = "data/ood176_tasks.jsonl";
    const RESULTS: &str = "data/ood176_results_long.csv";
    const HEAD: &str = "head.smollm2-135m.json";
    let head_json = browser::fetch_text(HEAD).await?;
    // The head lists the pool's candidates in order: the models to read.
    let head: serde_json::Value = serde_json::from_str(&head_json).map_err(|e| format!("{HEAD}: {e}"))?;
    let models: Vec<String> =
        head["candidates"].as_array().map(|c| c.iter().filter_map(|c| c["id"].as_str().map(String::from)).collect()).unwrap_or_default();
    let models: Vec<&str> = models.iter().map(String::as_str).collect();
    let (tasks, results) = (browser::fetch_text(TASKS).await?, browser::fetch_text(RESULTS).await?);
    let data = bench::quality::Dataset::parse(&tasks, TASKS, &results, RESULTS, &models).map_err(|e| e.to_string())?;
    Ok(EvaluationData { data, head_json })
}

/// Routes tasks the user picks in this browser's worker, with the same
/// scorings as the native study, and sets the totals beside the native
/// study's decisions for exactly those tasks.
#[component]
fn BrowserQuality(ctx: Ctx, study: bench::quality::QualityStudy) -> impl IntoView {
    use bench::quality::{routed_totals, RoutedTask, Subset};
    let subset = RwSignal::new(Subset::New64);
    let count = RwSignal::new("4".to_string());
    let fetched = StoredValue::new_local(None::<EvaluationData>);
    let fetching = RwSignal::new(false);
    let count_problem = move || {
        count.with(|c| match c.trim().parse::<usize>() {
            Ok(n) if (1..=176).contains(&n) => None,
            _ => Some(format!("`{}` is not a number of tasks from 1 to 176", c.trim())),
        })
    };
    let can_run = move || {
        ctx.status.get() == Status::Ready && ctx.job.get().is_none() && !ctx.deciding.get() && !fetching.get() && count_problem().is_none()
    };
    let run = move |_| {
        let n = count.get_untracked().trim().parse::<usize>().unwrap_or(1);
        let chosen = subset.get_untracked();
        fetching.set(true);
        spawn_local(async move {
            let data = match fetched.get_value() {
                Some(data) => Ok(data),
                None => fetch_evaluation_data().await,
            };
            fetching.set(false);
            let data = match data {
                Ok(data) => data,
                Err(e) => return ctx.alert.set(Some(format!("The evaluation data could not be read: {e}"))),
            };
            fetched.set_value(Some(data.clone()));
            let tasks: Vec<wire::TaskPrompt> = data
                .data
                .indices(chosen)
                .into_iter()
                .take(n)
                .map(|t| wire::TaskPrompt { id: data.data.tasks[t].id.clone(), prompt: data.data.tasks[t].prompt.clone() })
                .collect();
            ctx.alert.set(None);
            if ctx.send(&ToWorker::RouteTasks { tasks, head_json: Some(data.head_json.clone()) }, None) {
                ctx.job.set(Some(Job::RouteTasks));
                ctx.routed_tasks.set(Vec::new());
                ctx.route_progress.set(Some((0, n)));
                ctx.route_done.set(None);
                ctx.cancel_requested.set(false);
            }
        });
    };
    let progress = move || {
        (ctx.job.get() == Some(Job::RouteTasks)).then(|| {
            let (done, total) = ctx.route_progress.get().unwrap_or((0, 1));
            let last = ctx
                .routed_tasks
                .with(|r| r.last().map(|t| format!(" · last: {} ({} tokens, {})", t.id, t.tokens_used, format_ms(t.decide_ms))));
            let text = format!("{done} of {total} tasks routed{}", last.unwrap_or_default());
            view! { <JobProgress ctx=ctx id="route" label="In-browser evaluation progress" value=done as f64 max=total as f64 text=text/> }
        })
    };
    let native = study.per_task.clone();
    let results = move || {
        let routed = ctx.routed_tasks.get();
        let data = fetched.get_value()?;
        if routed.is_empty() {
            return None;
        }
        let ids: Vec<&str> = routed.iter().map(|r| r.id.as_str()).collect();
        let native_same: Vec<RoutedTask> = native.iter().filter(|t| ids.contains(&t.id.as_str())).cloned().collect();
        let modes: Vec<String> = routed[0].similarity_top.keys().cloned().collect();
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            bench::stats::quantile(&v, 0.5)
        };
        let browser_p50 = median(routed.iter().map(|r| r.decide_ms).collect());
        let native_p50 = median(native_same.iter().map(|r| r.decide_ms).collect());
        let rows: Vec<_> = [false, true]
            .into_iter()
            .flat_map(|head| modes.iter().map(move |m| (head, m.clone())))
            .map(|(head, mode)| {
                let b = routed_totals(&data.data, &routed, head, &mode);
                let n = routed_totals(&data.data, &native_same, head, &mode);
                let same = routed
                    .iter()
                    .filter(|r| {
                        let top = |t: &RoutedTask| if head { t.head_top.get(&mode).cloned() } else { t.similarity_top.get(&mode).cloned() };
                        native_same.iter().find(|n| n.id == r.id).is_some_and(|n| top(n) == top(r))
                    })
                    .count();
                let scoring = if head { "trained head (deployable)" } else { "similarity" };
                view! {
                    <tr data-testid="browser-quality-row" data-same=same.to_string() data-tasks=routed.len().to_string()>
                        <th scope="row">{format!("{scoring}, {mode}")}</th>
                        <td class="num">{format!("{:.0} · ${:.2}", b.resolved, b.cost_usd)}</td>
                        <td class="num">{format!("{:.0} · ${:.2}", n.resolved, n.cost_usd)}</td>
                        <td class="num">{format!("{same} of {}", routed.len())}</td>
                    </tr>
                }
            })
            .collect();
        Some(view! {
            <div class="table-wrap">
                <table data-testid="browser-quality">
                    <caption>{format!("The same {} tasks routed here and natively (resolved · recorded cost)", routed.len())}</caption>
                    <thead><tr><th scope="col">"scoring, mode"</th><th scope="col">"this browser"</th><th scope="col">"native study"</th><th scope="col">"same top candidate"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
            <p class="note" data-testid="browser-quality-latency">{format!(
                "Prefilling decide per task, median: {} here, {} in the native run (the first task here may be a cold call). The deployable head saw every task in training: these rows check that this browser reproduces the native decisions, not routing quality (the cross-validated rows above measure that).",
                format_ms(browser_p50), format_ms(native_p50)
            )}</p>
        })
    };
    view! {
        <div class="browser-quality">
            <h3>"Evaluate in this browser"</h3>
            <p class="note">"Routes the first tasks of a subset through decide in this page's worker (similarity scoring and the deployable head, every mode), then compares with the native study's decisions on the same tasks. Fetches the task file (1.9 MB), the outcomes and the head on first use."</p>
            <div class="row">
                <label class="field small">"Subset"
                    <select data-testid="browser-quality-subset" on:change=move |ev| subset.set(match event_target_value(&ev).as_str() {
                        "swebench112" => Subset::Swebench112,
                        "all" => Subset::All,
                        _ => Subset::New64,
                    })>
                        <option value="new64">"newer 64"</option>
                        <option value="swebench112">"SWE-bench 112"</option>
                        <option value="all">"OOD176 (all 176)"</option>
                    </select>
                </label>
                <label class="field small">"First N tasks"
                    <input type="text" inputmode="numeric" data-testid="browser-quality-count" prop:value=move || count.get()
                        on:input=move |ev| count.set(event_target_value(&ev))/>
                    {move || count_problem().map(|p| view! { <span class="field-error" role="alert">{p}</span> })}
                </label>
                <button type="button" data-testid="browser-quality-run" disabled=move || !can_run() on:click=run>
                    {move || if fetching.get() { "Fetching the data…" } else { "Route them here" }}
                </button>
            </div>
            {move || (ctx.status.get() != Status::Ready).then(|| view! { <p class="note">"Load the model first (card 1)."</p> })}
            {progress}
            {move || ctx.route_done.get().map(|(checkpoint, head, cancelled)| view! {
                <p class="note" data-testid="browser-quality-done">{format!(
                    "{}Routed with checkpoint {}{}.",
                    if cancelled { "Cancelled: the tasks routed so far are shown. " } else { "" },
                    checkpoint,
                    head.map(|h| format!(" + {h}")).unwrap_or_default()
                )}</p>
            })}
            {results}
        </div>
    }
}

/// Routing quality (CodeRouterBench OOD176): the study `bench-decide
/// --quality` measured natively, fetched only when asked, with export and a
/// share link like a latency report.
#[component]
fn QualityCard(ctx: Ctx) -> impl IntoView {
    let state = RwSignal::new(QualityState::Idle);
    let share_link = RwSignal::new(None::<String>);
    let show = move |_| {
        state.set(QualityState::Loading);
        spawn_local(async move {
            state.set(match fetch_study("quality.json", "quality study", Report::quality).await {
                Ok((report, study)) => QualityState::Shown(Box::new((report, study))),
                Err(e) => QualityState::Failed(e),
            });
        });
    };
    let report = move || match state.get() {
        QualityState::Shown(shown) => Some(shown.0),
        _ => None,
    };
    let export = move |_| {
        if let Some(report) = report() {
            let json = serde_json::to_string_pretty(&report).unwrap_or_default();
            if let Err(e) = browser::download_text("router-quality.cpu.json", &json, "application/json") {
                ctx.alert.set(Some(format!("Export failed: {e}")));
            }
        }
    };
    let share = move |_| {
        if let Some(report) = report() {
            share_report(&report, share_link);
        }
    };
    view! {
        <section class="card" aria-labelledby="quality-h">
            <h2 id="quality-h">"5 · Routing quality (CodeRouterBench OOD176)"</h2>
            <p class="note">
                "What the rankings are worth: every OOD176 task (176 real coding tasks, each run by all 8 backends) routed through the same decide, "
                "scored against the recorded outcomes and costs, beside the oracle, each always-X, random and cheapest; and a trained head "
                "(logistic regression per candidate on the backbone's own pooled prefill) cross-validated so no task is scored by a head that saw it. "
                "Measured natively by bench-decide --quality; decide latency here is that run's, not this browser's."
            </p>
            <div class="row">
                <button type="button" data-testid="quality-show" disabled=move || state.get() == QualityState::Loading on:click=show>
                    "Show the measured study"
                </button>
                {move || report().map(|_| view! {
                    <button type="button" data-testid="quality-export" on:click=export>"Export JSON"</button>
                    <button type="button" data-testid="quality-share" on:click=share>"Copy a share link"</button>
                })}
            </div>
            {move || share_link.get().map(|link| view! { <p class="note"><a data-testid="quality-share-link" href=link.clone()>"Share link"</a>" (copied)"</p> })}
            {move || match state.get() {
                QualityState::Failed(e) => Some(view! { <p class="problem" role="alert" data-testid="quality-error">{e}</p> }.into_any()),
                QualityState::Loading => Some(view! { <p class="note">"Fetching quality.json…"</p> }.into_any()),
                QualityState::Shown(shown) => {
                    let (report, study) = *shown;
                    Some(view! {
                        <QualityView report=report study=study.clone()/>
                        <BrowserQuality ctx=ctx study=study/>
                    }.into_any())
                }
                QualityState::Idle => None,
            }}
        </section>
    }
}

fn file_from_input(ev: &leptos::ev::Event) -> Option<web_sys::File> {
    let input: web_sys::HtmlInputElement = ev.target()?.dyn_into().ok()?;
    input.files()?.get(0)
}

fn bytes_label(n: f64) -> String {
    kv::units::binary(n.max(0.0) as u128)
}

#[component]
fn ModelCard(ctx: Ctx) -> impl IntoView {
    // Every job the worker may be on, the short ones too: a Load pressed
    // during a Decide or the GEMM probe was refused by the busy worker, and
    // the page, having cleared the model to load another, showed none while
    // the worker still held it.
    let busy = move || {
        ctx.status.get() == Status::Loading
            || ctx.job.get().is_some()
            || ctx.deciding.get()
            || ctx.probing.get()
            || !ctx.worker_started.get()
    };
    let on_drop = move |ev: leptos::ev::DragEvent| {
        ev.prevent_default();
        if let Some(file) = ev.data_transfer().and_then(|d| d.files()).and_then(|f| f.get(0)) {
            ctx.load(LoadRequest::File(file));
        }
    };
    let progress = move || {
        ctx.load_stage.get().map(|(stage, done, total)| {
            let (value, max, text) = match total {
                Some(t) if t > 1 && done > 0 => {
                    (done as f64, t as f64, format!("{stage}: {} of {}", bytes_or_count(done, t), bytes_or_count(t, t)))
                }
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
    let clear = move |_| {
        ctx.send(&ToWorker::ClearCache, None);
    };
    view! {
        <section class="card" aria-labelledby="model-h">
            <h2 id="model-h">"1 · Model"</h2>
            <div class="row">
                <button type="button" data-testid="model-load" disabled=busy on:click=move |_| ctx.load(LoadRequest::Bundled)>
                    "Load the bundled SmolLM2-135M-Instruct Q4_1 (94 MiB)"
                </button>
                {move || ctx.storage.get().map(|s| s.on_request.into_iter().map(|(model, cached)| {
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
                            disabled=busy on:click=move |_| ctx.load(LoadRequest::OnRequest(file.clone()))>
                            {label}
                        </button>
                    }
                }).collect_view())}
                <label class="file-pick" on:dragover=|ev: leptos::ev::DragEvent| ev.prevent_default() on:drop=on_drop>
                    "…or pick or drop your own GGUF (llama, qwen2, qwen3 or gemma3, e.g. Qwen3-0.6B): "
                    <input type="file" accept=".gguf" data-testid="model-file" disabled=busy
                        on:change=move |ev| if let Some(file) = file_from_input(&ev) { ctx.load(LoadRequest::File(file)) }/>
                </label>
            </div>
            <label>"Weights compute in: "
                <select data-testid="precision-select" disabled=busy on:change=move |ev| ctx.form.update(|f| f.precision = event_target_value(&ev))>
                    {[("", "default (f32)"), ("f32", "f32: weights dequantized at load"), ("int8", "int8: 8-bit activations × stored blocks, integer dot")]
                        .into_iter()
                        .map(|(value, label)| view! {
                            <option value=value selected=move || ctx.form.with(|f| f.precision == value)>{label}</option>
                        })
                        .collect_view()}
                </select>
                " (applies at the next load)"
            </label>
            <p>"Status: " <strong data-testid="model-status">{move || ctx.status.get().text()}</strong></p>
            <p class="hint" data-testid="worker-build">{WorkerBuild::detect().sentence()}</p>
            {progress}
            {move || ctx.model.get().map(|m| view! { <ModelFacts model=m/> })}
            {move || ctx.storage.get().map(|s| {
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

fn bytes_or_count(n: u64, total: u64) -> String {
    if total > 4096 {
        kv::units::binary(n as u128)
    } else {
        n.to_string()
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
    }
}

#[component]
fn TryIt(ctx: Ctx) -> impl IntoView {
    let ready = move || ctx.status.get() == Status::Ready && ctx.job.get().is_none();
    let pick_task = move |ev: leptos::ev::Event| {
        let id = event_target_value(&ev);
        if let Some(task) = ctx.tasks.with_untracked(|t| t.iter().find(|t| t.id == id).cloned()) {
            ctx.form.update(|f| f.user = task.prompt);
        }
    };
    let modes = move || ctx.model.get().map(|m| (m.modes, m.default_mode)).unwrap_or_default();
    view! {
        <section class="card" aria-labelledby="try-h">
            <h2 id="try-h">"2 · Try a decision"</h2>
            <label class="field">"Start from a CodeRouterBench task"
                <select data-testid="task-select" on:change=pick_task>
                    <option value="">"— pick a task prompt —"</option>
                    {move || ctx.tasks.get().into_iter().map(|t| {
                        let label = format!("{} · {} · {}", t.id, if t.language.is_empty() { "?" } else { &t.language }, t.title());
                        view! { <option value=t.id.clone()>{label}</option> }
                    }).collect_view()}
                </select>
            </label>
            <label class="field">"System turn (optional)"
                <textarea rows="2" data-testid="conv-system" prop:value=move || ctx.form.with(|f| f.system.clone())
                    on:input=move |ev| ctx.form.update(|f| f.system = event_target_value(&ev))></textarea>
            </label>
            <label class="field">"User turn"
                <textarea rows="6" data-testid="conv-user" prop:value=move || ctx.form.with(|f| f.user.clone())
                    on:input=move |ev| ctx.form.update(|f| f.user = event_target_value(&ev))></textarea>
            </label>
            <div class="row">
                <label>"Mode "
                    <select data-testid="mode-select" on:change=move |ev| ctx.form.update(|f| f.mode = event_target_value(&ev))>
                        {move || {
                            let (modes, default) = modes();
                            let current = ctx.form.with(|f| f.mode.clone());
                            let mut options = vec![view! { <option value="" selected=current.is_empty()>{format!("pool default ({default})")}</option> }.into_any()];
                            options.extend(modes.into_iter().map(|m| {
                                let selected = current == m.name;
                                view! { <option value=m.name.clone() selected=selected>{format!("{} — cost weight {}", m.name, m.cost_weight)}</option> }.into_any()
                            }));
                            options
                        }}
                    </select>
                </label>
                <button type="button" data-testid="decide-button" disabled=move || !ready() || ctx.deciding.get() on:click=move |_| ctx.decide()>
                    {move || if ctx.deciding.get() { "Deciding…" } else { "Decide" }}
                </button>
            </div>
            {move || ctx.decision.get().map(|d| view! { <DecisionView decision=d/> })}
            {move || ctx.worker_memory.get().map(|bytes| view! {
                <p class="note" data-testid="worker-memory" data-bytes=bytes>
                    {format!("Worker memory after this decision: {} (wasm memory only grows; it stays flat while the prefix cache holds its budget).", bytes_label(bytes as f64))}
                </p>
            })}
        </section>
    }
}

#[component]
fn DecisionView(decision: Decision) -> impl IntoView {
    let t = decision.timings;
    let stages = [
        ("mode", t.mode_ms),
        ("assemble", t.assemble_ms),
        ("tokenise", t.tokenize_ms),
        ("truncate", t.truncate_ms),
        ("prefill", t.prefill_ms),
        ("stack", t.stack_ms),
        ("scores", t.score_ms),
        ("cost", t.cost_ms),
        ("rank", t.rank_ms),
    ];
    let truncation = if decision.truncated {
        format!("{} of {} tokens prefilled (cut from the left to router_max_tokens)", decision.tokens_used, decision.tokens_total)
    } else {
        format!("{} tokens prefilled (no truncation)", decision.tokens_used)
    };
    view! {
        <div class="decision" data-testid="decide-result">
            <p>
                <strong>{format!("Route to {}", decision.ranked.first().map(|r| r.id.as_str()).unwrap_or("–"))}</strong>
                {format!(" · mode {} (cost weight {}) · {truncation} · decide took {}", decision.mode, decision.cost_weight, format_ms(t.total_ms))}
            </p>
            <div class="table-wrap">
                <table>
                    <thead><tr>
                        <th scope="col">"#"</th><th scope="col">"candidate"</th><th scope="col">"score"</th>
                        <th scope="col">"cosine"</th><th scope="col">"est. cost (USD)"</th><th scope="col">"utility"</th>
                    </tr></thead>
                    <tbody>
                        {decision.ranked.iter().enumerate().map(|(i, r)| view! {
                            <tr data-testid="decide-row" data-candidate=r.id.clone() data-score=r.score.to_string()>
                                <td class="num">{i + 1}</td>
                                <td>{r.id.clone()}</td>
                                <td class="num">{format!("{:.4}", r.score)}</td>
                                <td class="num">{format!("{:.4}", r.cosine)}</td>
                                <td class="num">{format!("{:.5}", r.estimated_cost_usd)}</td>
                                <td class="num">{format!("{:.4}", r.utility)}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
            <p class="stages" data-testid="decide-stages">
                "Stages: " {stages.iter().map(|(k, v)| format!("{k} {}", format_ms(*v))).collect::<Vec<_>>().join(" · ")}
            </p>
            {decision.prefix.map(|p| view! {
                <p class="note" data-testid="decide-reuse">
                    {format!(
                        "Prefix cache: {} of {} tokens reused, {} prefilled (lookup {}, insert {}); the cache holds {} tokens ({}). Decide again with more text to see the reuse.",
                        p.reused_tokens,
                        p.reused_tokens + p.prefilled_tokens,
                        p.prefilled_tokens,
                        format_ms(t.lookup_ms),
                        format_ms(t.insert_ms),
                        p.cache_tokens,
                        bytes_label(p.cache_bytes as f64),
                    )}
                </p>
            })}
        </div>
    }
}

/// The attainable matmul rate here, and how much of it the last run's
/// longest warm decide reached.
#[component]
fn GemmLine(ctx: Ctx) -> impl IntoView {
    let reached = move |probe: &GemmProbe| {
        let model = ctx.model.get()?;
        let (report, _) = ctx.report.get()?;
        let longest = report.results.iter().filter(|r| r.warm.is_some()).max_by_key(|r| r.prompt_tokens)?;
        let gflops = model.flop_model.prefill(longest.prompt_tokens) / longest.warm?.p50 / 1e6;
        Some(format!(
            " The last run's warm p50 at {} tokens ran the prefill at {:.1} GFLOP/s: {:.0} % of it.",
            longest.prompt_tokens,
            gflops,
            100.0 * gflops / probe.gflops
        ))
    };
    view! {
        <p class="note" data-testid="gemm-line">
            <button type="button" class="link" data-testid="gemm-probe" disabled=move || ctx.probing.get() || ctx.job.get().is_some() || ctx.status.get() != Status::Ready
                on:click=move |_| ctx.probe_gemm()>
                {move || if ctx.probing.get() { "Measuring this browser's matmul speed…" } else { "Measure this browser's matmul speed" }}
            </button>
            {move || ctx.gemm.get().map(|p| format!(
                " GEMM [{}×{}]·[{}×{}]ᵀ, the backbone's own matmul: {:.1} GFLOP/s (best of {}, median {}).{}",
                p.m, p.k, p.n, p.k, p.gflops, p.repeats, format_ms(p.median_ms), reached(&p).unwrap_or_default()
            ))}
        </p>
    }
}

/// The calls' total time next to what was estimated before the run.
fn took(report: &Report, estimated_ms: Option<f64>) -> String {
    let total: f64 =
        report.results.iter().map(|r| r.cold_ms + r.warmup_ms.iter().chain(&r.warm_ms).chain(&r.encode_and_score_ms).sum::<f64>()).sum();
    match estimated_ms {
        Some(e) => format!("The calls took {} in all; the estimate before the run said {}.", format_duration(total), format_duration(e)),
        None => format!("The calls took {} in all.", format_duration(total)),
    }
}

#[component]
fn BenchCard(ctx: Ctx) -> impl IntoView {
    let problems = Memo::new(move |_| ctx.form.with(|f| f.protocol().err().unwrap_or_default()));
    let problem_for = move |field: &'static str| {
        move || {
            problems.with(|p| {
                p.iter().find(|p| p.field == field).map(|p| view! { <span class="field-error" role="alert">{p.message.clone()}</span> })
            })
        }
    };
    let can_run =
        move || ctx.status.get() == Status::Ready && ctx.job.get().is_none() && !ctx.deciding.get() && problems.with(Vec::is_empty);
    let input = move |testid: &'static str,
                      label: &'static str,
                      get: fn(&RouterForm) -> String,
                      set: fn(&mut RouterForm, String),
                      field: &'static str| {
        view! {
            <label class="field small">{label}
                <input type="text" inputmode="numeric" data-testid=testid prop:value=move || ctx.form.with(get)
                    on:input=move |ev| ctx.form.update(|f| set(f, event_target_value(&ev)))/>
                {problem_for(field)}
            </label>
        }
    };
    let export = move |_| {
        if let Some((report, _)) = ctx.report.get_untracked() {
            let json = serde_json::to_string_pretty(&report).unwrap_or_default();
            if let Err(e) = browser::download_text("router-latency.browser.json", &json, "application/json") {
                ctx.alert.set(Some(format!("Export failed: {e}")));
            }
        }
    };
    let share = move |_| {
        if let Some((report, _)) = ctx.report.get_untracked() {
            share_report(&report, ctx.share_link);
        }
    };
    let load_compare = move |ev: leptos::ev::Event| {
        let Some(file) = file_from_input(&ev) else { return };
        spawn_local(async move {
            let name = file.name();
            match browser::read_file_text(file).await.and_then(|text| bench::share::parse_report(&text, &name)) {
                Ok(report) => ctx.compare_with.set(Some((name, report))),
                Err(e) => ctx.alert.set(Some(e)),
            }
        });
    };
    let progress = move || {
        (ctx.job.get() == Some(Job::Bench)).then(|| {
            let p = ctx.bench_progress.get();
            let (value, max) = p.as_ref().map(|p| (p.overall_done as f64, p.overall.max(1) as f64)).unwrap_or((0.0, 1.0));
            let text = match &p {
                None => "preparing the exact-length prompts".to_string(),
                Some(p) if p.per_length == 0 => format!(
                    "prompts ready ({}){}",
                    p.prompts.iter().map(|(t, c)| format!("{t} tokens / {c} chars")).collect::<Vec<_>>().join(", "),
                    if p.reloaded { "; the router was reloaded so the first call is cold" } else { "" }
                ),
                Some(p) => format!(
                    "{} tokens · {} {}/{} · last call {} · {} of {} calls",
                    p.prompt_tokens,
                    p.phase,
                    p.done,
                    p.per_length,
                    format_ms(p.last_ms),
                    p.overall_done,
                    p.overall
                ),
            };
            view! { <JobProgress ctx=ctx id="bench" label="Bench progress" value=value max=max text=text/> }
        })
    };
    view! {
        <section class="card" aria-labelledby="bench-h">
            <h2 id="bench-h">"3 · Latency bench"</h2>
            <p class="note">
                "The field guide's protocol: per prompt length, the first call (cold), then warm-ups, then timed iterations of the complete decide, "
                "then as many timed encode+scores calls. Prompts are real CodeRouterBench task texts cut to exactly that many tokens of routing text."
            </p>
            <div class="row">
                {input("bench-lengths", "Prompt lengths (tokens)", |f| f.lengths.clone(), |f, v| f.lengths = v, "lengths")}
                {input("bench-warmup", "Warm-ups", |f| f.warmup.clone(), |f, v| f.warmup = v, "warmup")}
                {input("bench-iterations", "Iterations", |f| f.iterations.clone(), |f, v| f.iterations = v, "iters")}
                <button type="button" data-testid="bench-run" disabled=move || !can_run() on:click=move |_| ctx.run_bench()>"Run the bench"</button>
            </div>
            {move || ctx.estimate().map(|e| view! {
                <p class="note" data-testid="bench-estimate">
                    {format!(
                        "Estimated on this device: about {} in all ({}), from the prefill speed loading showed ({:.1} GFLOP/s). Long prompts may take longer: attention runs below that speed.",
                        format_duration(e.total_ms),
                        e.per_length_ms.iter().map(|(t, ms)| format!("{t} tokens: {}", format_duration(*ms))).collect::<Vec<_>>().join(" · "),
                        e.gflops
                    )}
                </p>
            })}
            <GemmLine ctx=ctx/>
            {progress}
            {move || ctx.report.get().map(|(report, cancelled)| {
                let compare_with = ctx.compare_with.get();
                view! {
                    <div class="report" data-testid="bench-report">
                        {cancelled.then(|| view! { <p class="warning">{format!("Cancelled: {} length(s) were measured completely and are shown.", report.results.len())}</p> })}
                        <p class="note">{measured_where(&report)}</p>
                        <p class="note" data-testid="bench-took">{took(&report, ctx.run_estimate_ms.get())}</p>
                        <ReportView report=report compare_with=compare_with/>
                        <div class="row">
                            <button type="button" data-testid="bench-export" on:click=export>"Export JSON (bench-decide's schema)"</button>
                            <button type="button" data-testid="bench-share" on:click=share>"Copy a share link"</button>
                            <label class="file-pick">"Compare with a report (e.g. bench-decide's JSON): "
                                <input type="file" accept=".json,application/json" data-testid="bench-compare-file" on:change=load_compare/>
                            </label>
                        </div>
                        {move || ctx.share_link.get().map(|link| view! {
                            <label class="field">"Share link (read-only result; copied)"
                                <input type="text" readonly data-testid="share-link" prop:value=link/>
                            </label>
                        })}
                    </div>
                }
            })}
        </section>
    }
}

/// A running job's progress bar, what it is doing, and its Cancel button
/// (`{id}-progress`, `{id}-stage`, `{id}-cancel`).
#[component]
fn JobProgress(ctx: Ctx, id: &'static str, label: &'static str, value: f64, max: f64, text: String) -> impl IntoView {
    view! {
        <div class="progress-line">
            <progress data-testid=format!("{id}-progress") aria-label=label max=max value=value></progress>
            <span data-testid=format!("{id}-stage")>{text}</span>
            <button type="button" data-testid=format!("{id}-cancel") disabled=move || ctx.cancel_requested.get() on:click=move |_| ctx.cancel_bench()>
                {move || if ctx.cancel_requested.get() { "Cancelling…" } else { "Cancel" }}
            </button>
        </div>
    }
}

/// The field guide's note 04, live: prefix hits, misses, pressure and
/// recovery, each against a full prefill, and a long conversation extended
/// by a short turn against a short decide.
#[component]
fn PrefixCard(ctx: Ctx) -> impl IntoView {
    let can_run = move || ctx.status.get() == Status::Ready && ctx.job.get().is_none() && !ctx.deciding.get();
    let progress = move || {
        (ctx.job.get() == Some(Job::PrefixProtocol)).then(|| {
            let (done, total, label) = ctx.prefix_progress.get().unwrap_or((0, 1, "building the conversations".into()));
            let text = format!("{done} of {total}: {label}");
            view! { <JobProgress ctx=ctx id="prefix" label="Prefix protocol progress" value=done as f64 max=total as f64 text=text/> }
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
                    <select data-testid="prefix-tokens" prop:value=move || ctx.prefix_tokens.get()
                        on:change=move |ev| ctx.prefix_tokens.set(event_target_value(&ev))>
                        <option value="256">"256"</option>
                        <option value="1000">"1,000 (+ a 16-token turn fits router_max_tokens)"</option>
                    </select>
                </label>
                <button type="button" data-testid="prefix-run" disabled=move || !can_run() on:click=move |_| ctx.run_prefix_protocol()>
                    "Run the prefix protocol"
                </button>
            </div>
            {progress}
            {move || ctx.prefix_report.get().map(|(report, cancelled)| view! { <PrefixReportView report=report cancelled=cancelled/> })}
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

/// The Serving card's inputs, as typed (kept when invalid).
#[derive(Debug, Clone, PartialEq)]
struct ServeForm {
    rates: String,
    chunks: String,
    policy: String,
    duration: String,
    warmup: String,
    seed: String,
    timeout: String,
    queue_limit: String,
    slo: String,
}

impl Default for ServeForm {
    fn default() -> Self {
        ServeForm {
            // The browser study's settings (tests/e2e/serve-browser.mjs):
            // a rate a 2-core machine's browser sustains, and an SLO above
            // its slowest unloaded decide (a 1,024-token one takes several
            // seconds there).
            rates: "0.05".into(),
            chunks: "whole".into(),
            policy: "fcfs".into(),
            duration: "120".into(),
            warmup: "10".into(),
            seed: "1".into(),
            timeout: "30000".into(),
            queue_limit: "16".into(),
            slo: "20000".into(),
        }
    }
}

/// Most runs one Serving request may ask for (each runs in real time).
const MAX_SERVE_RUNS: usize = 24;

impl ServeForm {
    /// The runs these inputs ask for (rates × chunks × policies), or the
    /// first problem, naming the field.
    fn runs(&self) -> Result<Vec<bench::serve::ServeSettings>, String> {
        use bench::serve::{Policy, ServeSettings};
        fn number(text: &str, field: &str) -> Result<f64, String> {
            text.trim().parse::<f64>().map_err(|_| format!("{field}: `{}` is not a number", text.trim()))
        }
        let list = |text: &str| text.split(',').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect::<Vec<_>>();
        let rates = list(&self.rates).iter().map(|r| number(r, "rates")).collect::<Result<Vec<_>, _>>()?;
        let chunks = list(&self.chunks)
            .iter()
            .map(|c| match c.as_str() {
                "whole" | "none" => Ok(None),
                n => n
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .map(Some)
                    .ok_or_else(|| format!("chunks: `{n}` is not a number of tokens or `whole`")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let policies = match self.policy.as_str() {
            "both" => Policy::ALL.to_vec(),
            p => vec![Policy::parse(p).map_err(|e| e.to_string())?],
        };
        if rates.is_empty() || chunks.is_empty() {
            return Err("rates and chunks: give at least one value each".into());
        }
        let queue_limit = self
            .queue_limit
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("queue limit: `{}` is not a whole number", self.queue_limit.trim()))?;
        let seed = self.seed.trim().parse::<u64>().map_err(|_| format!("seed: `{}` is not a whole number", self.seed.trim()))?;
        let base = ServeSettings {
            duration_s: number(&self.duration, "duration")?,
            warmup_s: number(&self.warmup, "warm-up")?,
            timeout_ms: number(&self.timeout, "timeout")?,
            drain_s: number(&self.timeout, "timeout")? / 1000.0,
            slo_ms: number(&self.slo, "SLO")?,
            queue_limit,
            seed,
            ..ServeSettings::default()
        };
        let mut runs = Vec::new();
        for &rate in &rates {
            for &chunk in &chunks {
                for &policy in &policies {
                    let settings = ServeSettings { rate_per_s: rate, chunk, policy, ..base.clone() };
                    settings.check().map_err(|e| e.to_string())?;
                    runs.push(settings);
                }
            }
        }
        if runs.len() > MAX_SERVE_RUNS {
            return Err(format!("{} runs asked (rates × chunks × policies); at most {MAX_SERVE_RUNS} at a time", runs.len()));
        }
        Ok(runs)
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
fn ServeCard(ctx: Ctx) -> impl IntoView {
    let form = RwSignal::new(ServeForm::default());
    let native = RwSignal::new(NativeServe::Idle);
    let share_link = RwSignal::new(None::<String>);
    let fetched_tasks = StoredValue::new_local(None::<Vec<wire::TaskPrompt>>);
    let fetching = RwSignal::new(false);
    // The runs sent to the worker (the form may change while they run).
    let running = StoredValue::new(Vec::<bench::serve::ServeSettings>::new());
    // A replayed trace file (name, text, and its problem if it has one).
    let trace = RwSignal::new(None::<(String, String, Option<String>)>);
    let pick_trace = move |ev: leptos::ev::Event| {
        let Some(file) = file_from_input(&ev) else { return };
        spawn_local(async move {
            let name = file.name();
            match browser::read_file_text(file).await {
                Ok(text) => {
                    let problem = bench::serve::parse_trace(&text).err().map(|e| format!("{name}: {e}"));
                    trace.set(Some((name, text, problem)));
                }
                Err(e) => trace.set(Some((name.clone(), String::new(), Some(format!("{name}: {e}"))))),
            }
        });
    };
    let problem = move || form.with(|f| f.runs().err()).or_else(|| trace.with(|t| t.as_ref().and_then(|t| t.2.clone())));
    let can_run = move || {
        ctx.status.get() == Status::Ready && ctx.job.get().is_none() && !ctx.deciding.get() && !fetching.get() && problem().is_none()
    };
    let show_native = move |_| {
        native.set(NativeServe::Loading);
        spawn_local(async move {
            native.set(match fetch_study("serve.json", "serving study", Report::serve).await {
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
                Err(e) => return ctx.alert.set(Some(format!("The prompts could not be read: {e}"))),
            };
            fetched_tasks.set_value(Some(tasks.clone()));
            ctx.alert.set(None);
            let mode = Some(ctx.form.get_untracked().mode).filter(|m| !m.is_empty());
            let trace = trace.get_untracked().map(|t| t.1);
            running.set_value(runs.clone());
            if ctx.send(&ToWorker::Serve { runs, tasks, trace, mode }, None) {
                ctx.job.set(Some(Job::Serve));
                ctx.serve_cancel_grace_ms.set(SERVE_WARMUP_GRACE_MS);
                ctx.serve_runs.set(Vec::new());
                ctx.serve_live.set(None);
                ctx.serve_report.set(None);
                share_link.set(None);
                ctx.cancel_requested.set(false);
            }
        });
    };
    let field = move |label: &'static str, id: &'static str, get: fn(&ServeForm) -> String, set: fn(&mut ServeForm, String)| {
        view! {
            <label class="field small">{label}
                <input type="text" data-testid=id prop:value=move || form.with(get) on:input=move |ev| form.update(|f| set(f, event_target_value(&ev)))/>
            </label>
        }
    };
    let live = move || {
        (ctx.job.get() == Some(Job::Serve)).then(|| {
            let ServeLive { run: index, samples, finished, arrivals } = ctx.serve_live.get().unwrap_or_default();
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
            let done = ctx.serve_runs.get();
            view! {
                <JobProgress ctx=ctx id="serve" label="Serving test progress" value=index as f64 + (now / end).min(1.0) max=total as f64 text=text/>
                <figure class="plot" data-testid="serve-live-queue" inner_html=queue></figure>
                <ul class="note" data-testid="serve-runs-done">{done.into_iter().map(|line| view! { <li>{line}</li> }).collect_view()}</ul>
            }
        })
    };
    let result = move || {
        ctx.serve_report.get().map(|(report, cancelled)| {
            let study = report.serve().and_then(Result::ok);
            let export_report = report.clone();
            let export = move |_| {
                let json = serde_json::to_string_pretty(&export_report).unwrap_or_default();
                if let Err(e) = browser::download_text("router-serve.browser.json", &json, "application/json") {
                    ctx.alert.set(Some(format!("Export failed: {e}")));
                }
            };
            let shared = report.clone();
            view! {
                <h3>"Measured in this browser"</h3>
                {cancelled.then(|| view! { <p class="note" data-testid="serve-cancelled">"Cancelled: the runs so far are shown; the last one stopped early."</p> })}
                <div class="row">
                    <button type="button" data-testid="serve-export" on:click=export>"Export JSON"</button>
                    <button type="button" data-testid="serve-share" on:click=move |_| share_report(&shared, share_link)>"Copy a share link"</button>
                </div>
                {move || share_link.get().map(|link| view! { <p class="note"><a data-testid="serve-share-link" href=link.clone()>"Share link"</a>" (copied)"</p> })}
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
            {move || trace.get().map(|(name, _, _)| view! {
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
            {move || (ctx.status.get() != Status::Ready).then(|| view! { <p class="note">"Load the model first (card 1)."</p> })}
            {live}
            {result}
        </section>
    }
}
