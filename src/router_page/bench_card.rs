//! Card 3, the latency bench: the field guide's cold/warm protocol in the
//! worker, its duration estimate, the matmul probe, and the report with
//! export, comparison and a share link. Owns the bench and probe jobs.

use bench::estimate::format_duration;
use bench::page::RouterForm;
use bench::report::{format_ms, Report, Studies};
use leptos::prelude::*;
use leptos::task::spawn_local;
use router::GemmProbe;
use wire::job::{BenchStep, PromptSize};
use wire::{JobEvent, JobKind, JobProgress, JobRequest, JobResult};

use super::worker::{JobProgress as JobProgressLine, Worker};
use super::{export_report, share_report, Alert, PageForm};
use crate::browser;
use crate::browser::picked_file;
use crate::report_view::{measured_where, Comparison, ReportView};

/// A bench in progress: its prompts once ready, and its last call.
#[derive(Debug, Clone, PartialEq)]
struct BenchProgress {
    prompts: Vec<PromptSize>,
    reloaded: bool,
    overall: usize,
    last: Option<BenchStep>,
}

/// A finished bench's report, and whether Cancel cut it short.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    report: Report,
    cancelled: bool,
}

/// The card's state.
#[derive(Clone, Copy)]
struct BenchState {
    progress: RwSignal<Option<BenchProgress>>,
    measured: RwSignal<Option<Measured>>,
    compare_with: RwSignal<Option<Comparison>>,
    share_link: RwSignal<Option<String>>,
    gemm: RwSignal<Option<GemmProbe>>,
    /// What the duration estimate said when the shown run started.
    estimated_ms: RwSignal<Option<f64>>,
}

impl BenchState {
    fn new() -> BenchState {
        BenchState {
            progress: RwSignal::new(None),
            measured: RwSignal::new(None),
            compare_with: RwSignal::new(None),
            share_link: RwSignal::new(None),
            gemm: RwSignal::new(None),
            estimated_ms: RwSignal::new(None),
        }
    }

    fn apply(self, event: JobEvent) {
        match event {
            JobEvent::Progress(JobProgress::BenchPrompts { prompts, reloaded, overall }) => {
                self.progress.set(Some(BenchProgress { prompts, reloaded, overall, last: None }))
            }
            JobEvent::Progress(JobProgress::BenchStep(step)) => self.progress.update(|p| {
                if let Some(p) = p {
                    p.last = Some(step);
                }
            }),
            JobEvent::Finished { result: JobResult::Bench(report), cancelled } => {
                self.share_link.set(None);
                self.measured.set(Some(Measured { report: report.with_studies(Studies::default()), cancelled }));
            }
            JobEvent::Finished { result: JobResult::GemmProbed(probe), .. } => self.gemm.set(Some(probe)),
            _ => {}
        }
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
pub fn BenchCard() -> impl IntoView {
    let worker = expect_context::<Worker>();
    let form = expect_context::<PageForm>().0;
    let alert = expect_context::<Alert>();
    let state = BenchState::new();
    worker.on_job(JobKind::Bench, move |event| state.apply(event));
    worker.on_job(JobKind::GemmProbe, move |event| state.apply(event));
    // How long the protocol the inputs ask for will take here, once a model
    // is loaded (see `bench::estimate`).
    let estimate = move || {
        let model = worker.model.get()?;
        let protocol = form.with(|f| f.protocol().ok())?;
        bench::estimate::estimate(&protocol, &model.flop_model, model.load.probe_gflops()?, model.provenance.router_max_tokens)
    };
    let problems = Memo::new(move |_| form.with(|f| f.protocol().err().unwrap_or_default()));
    let problem_for = move |field: &'static str| {
        move || {
            problems.with(|p| {
                p.iter().find(|p| p.field == field).map(|p| view! { <span class="field-error" role="alert">{p.message.clone()}</span> })
            })
        }
    };
    let can_run = move || worker.can_start(JobKind::Bench) && problems.with(Vec::is_empty);
    let run = move |_| {
        let f = form.get_untracked();
        let Ok(protocol) = f.protocol() else { return };
        let estimated_ms = estimate().map(|e| e.total_ms);
        let mode = Some(f.mode).filter(|m| !m.is_empty());
        alert.clear();
        let job = JobRequest::Bench {
            lengths: protocol.lengths,
            warmup: protocol.warmup,
            iterations: protocol.iterations,
            encode_iterations: Some(protocol.encode_iterations),
            mode,
        };
        if worker.start(job, None) {
            state.estimated_ms.set(estimated_ms);
            state.progress.set(None);
        }
    };
    let input = move |testid: &'static str,
                      label: &'static str,
                      get: fn(&RouterForm) -> String,
                      set: fn(&mut RouterForm, String),
                      field: &'static str| {
        view! {
            <label class="field small">{label}
                <input type="text" inputmode="numeric" data-testid=testid prop:value=move || form.with(get)
                    on:input=move |ev| form.update(|f| set(f, event_target_value(&ev)))/>
                {problem_for(field)}
            </label>
        }
    };
    let export = move |_| {
        if let Some(m) = state.measured.get_untracked() {
            export_report(&m.report, "router-latency.browser.json", alert);
        }
    };
    let share = move |_| {
        if let Some(m) = state.measured.get_untracked() {
            share_report(&m.report, state.share_link);
        }
    };
    let load_compare = move |ev: leptos::ev::Event| {
        let Some(file) = picked_file(&ev) else { return };
        spawn_local(async move {
            let name = file.name();
            match browser::read_file_text(file).await.and_then(|text| bench::share::parse_report(&text, &name)) {
                Ok(report) => state.compare_with.set(Some(Comparison { file: name, report })),
                Err(e) => alert.show(e),
            }
        });
    };
    let progress = move || {
        (worker.running.get() == Some(JobKind::Bench)).then(|| {
            let p = state.progress.get();
            let (value, max) = match &p {
                Some(BenchProgress { last: Some(step), overall, .. }) => (step.overall_done as f64, (*overall).max(1) as f64),
                Some(p) => (0.0, p.overall.max(1) as f64),
                None => (0.0, 1.0),
            };
            let text = match &p {
                None => "preparing the exact-length prompts".to_string(),
                Some(BenchProgress { prompts, reloaded, last: None, .. }) => format!(
                    "prompts ready ({}){}",
                    prompts.iter().map(|p| format!("{} tokens / {} chars", p.tokens, p.characters)).collect::<Vec<_>>().join(", "),
                    if *reloaded { "; the router was reloaded so the first call is cold" } else { "" }
                ),
                Some(BenchProgress { last: Some(s), .. }) => format!(
                    "{} tokens · {} {}/{} · last call {} · {} of {} calls",
                    s.prompt_tokens,
                    s.phase,
                    s.done,
                    s.per_length,
                    format_ms(s.ms),
                    s.overall_done,
                    s.overall
                ),
            };
            view! { <JobProgressLine id="bench" label="Bench progress" value=value max=max text=text/> }
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
                <button type="button" data-testid="bench-run" disabled=move || !can_run() on:click=run>"Run the bench"</button>
            </div>
            {move || estimate().map(|e| view! {
                <p class="note" data-testid="bench-estimate">
                    {format!(
                        "Estimated on this device: about {} in all ({}), from the prefill speed loading showed ({:.1} GFLOP/s). Long prompts may take longer: attention runs below that speed.",
                        format_duration(e.total_ms),
                        e.per_length.iter().map(|l| format!("{} tokens: {}", l.prompt_tokens, format_duration(l.ms))).collect::<Vec<_>>().join(" · "),
                        e.gflops
                    )}
                </p>
            })}
            <GemmLine state=state/>
            {progress}
            {move || state.measured.get().map(|Measured { report, cancelled }| {
                let compare_with = state.compare_with.get();
                view! {
                    <div class="report" data-testid="bench-report">
                        {cancelled.then(|| view! { <p class="warning">{format!("Cancelled: {} length(s) were measured completely and are shown.", report.results.len())}</p> })}
                        <p class="note">{measured_where(&report)}</p>
                        <p class="note" data-testid="bench-took">{took(&report, state.estimated_ms.get())}</p>
                        <ReportView report=report compare_with=compare_with/>
                        <div class="row">
                            <button type="button" data-testid="bench-export" on:click=export>"Export JSON (bench-decide's schema)"</button>
                            <button type="button" data-testid="bench-share" on:click=share>"Copy a share link"</button>
                            <label class="file-pick">"Compare with a report (e.g. bench-decide's JSON): "
                                <input type="file" accept=".json,application/json" data-testid="bench-compare-file" on:change=load_compare/>
                            </label>
                        </div>
                        {move || state.share_link.get().map(|link| view! {
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

/// The attainable matmul rate here, and how much of it the last run's
/// longest warm decide reached.
#[component]
fn GemmLine(state: BenchState) -> impl IntoView {
    let worker = expect_context::<Worker>();
    let reached = move |probe: &GemmProbe| {
        let model = worker.model.get()?;
        let Measured { report, .. } = state.measured.get()?;
        let longest = report.results.iter().filter(|r| r.warm.is_some()).max_by_key(|r| r.prompt_tokens)?;
        let gflops = model.flop_model.prefill(longest.prompt_tokens) / longest.warm?.p50 / 1e6;
        Some(format!(
            " The last run's warm p50 at {} tokens ran the prefill at {:.1} GFLOP/s: {:.0} % of it.",
            longest.prompt_tokens,
            gflops,
            100.0 * gflops / probe.gflops
        ))
    };
    let probing = move || worker.running.get() == Some(JobKind::GemmProbe);
    // The prefill's largest projection shape at 1,024 tokens (FFN gate/up
    // of SmolLM2), best of 5.
    let probe = move |_| {
        worker.start(JobRequest::GemmProbe { m: 1024, k: 576, n: 1536, repeats: 5 }, None);
    };
    view! {
        <p class="note" data-testid="gemm-line">
            <button type="button" class="link" data-testid="gemm-probe" disabled=move || !worker.can_start(JobKind::GemmProbe) on:click=probe>
                {move || if probing() { "Measuring this browser's matmul speed…" } else { "Measure this browser's matmul speed" }}
            </button>
            {move || state.gemm.get().map(|p| format!(
                " GEMM [{}×{}]·[{}×{}]ᵀ, the backbone's own matmul: {:.1} GFLOP/s (best of {}, median {}).{}",
                p.m, p.k, p.n, p.k, p.gflops, p.repeats, format_ms(p.median_ms), reached(&p).unwrap_or_default()
            ))}
        </p>
    }
}
