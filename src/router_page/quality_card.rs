//! Card 5, routing quality (CodeRouterBench OOD176): the study `bench-decide
//! --quality` measured natively, fetched only when asked, with export and a
//! share link; and an evaluation in this browser's worker that routes the
//! first tasks of a subset and compares with the native decisions on the
//! same tasks. Owns the route jobs.

use bench::report::{format_ms, Report};
use leptos::prelude::*;
use leptos::task::spawn_local;
use wire::{JobEvent, JobKind, JobProgress, JobRequest, JobResult};

use super::worker::{JobProgress as JobProgressLine, Worker};
use super::{fetch_study, Alert, NeedsModel, ReportActions};
use crate::browser;
use crate::quality_view::QualityView;

/// How an evaluation in this browser ended: the checkpoint and head its
/// decisions came from, and whether Cancel cut it short.
#[derive(Debug, Clone, PartialEq)]
struct RouteEnded {
    checkpoint: String,
    head: Option<String>,
    cancelled: bool,
}

/// The in-browser evaluation's state: the tasks routed so far, (done,
/// total), and how the run ended.
#[derive(Clone, Copy)]
struct RouteState {
    routed: RwSignal<Vec<bench::quality::RoutedTask>>,
    progress: RwSignal<Option<(usize, usize)>>,
    ended: RwSignal<Option<RouteEnded>>,
    alert: Alert,
}

impl RouteState {
    fn apply(self, event: JobEvent) {
        match event {
            JobEvent::Progress(JobProgress::TaskRouted { done, total, routed }) => match routed.decode() {
                Ok(routed) => {
                    self.progress.set(Some((done, total)));
                    self.routed.update(|r| r.push(routed));
                }
                Err(message) => self.alert.show(message),
            },
            JobEvent::Finished { result: JobResult::Routed { checkpoint_id, head_id }, cancelled } => {
                self.ended.set(Some(RouteEnded { checkpoint: checkpoint_id, head: head_id, cancelled }))
            }
            _ => {}
        }
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

/// The study of every backbone the site measured, side by side: the
/// bundled one's (the card's study) and Gemma 3 270M's, whose report ships
/// with every site (it holds measurements, not Gemma's weights).
#[derive(Debug, Clone, PartialEq)]
struct Backbones {
    rows: Vec<bench::quality::BackboneRow>,
    /// Why a backbone's report is missing, if one is.
    missing: Option<String>,
}

/// The other backbones' reports the card reads, and what to call each.
const OTHER_BACKBONES: [(&str, &str); 1] = [("quality.gemma3.json", "Gemma 3 270M's quality study")];

fn backbone_row(report: &Report, study: &bench::quality::QualityStudy) -> bench::quality::BackboneRow {
    study.backbone_row(&report.provenance.backbone, &report.provenance.checkpoint_id)
}

/// The per-backbone comparison: one row per backbone's study.
#[component]
fn BackboneTable(backbones: Backbones) -> impl IntoView {
    view! {
        <div class="table-wrap">
            <table data-testid="backbone-table">
                <caption>"Per backbone: does a bigger router buy better routing? Each backbone's own study, same tasks, folds and seeds"</caption>
                <thead><tr>
                    <th scope="col">"backbone"</th><th scope="col">"similarity, quality / balanced"</th>
                    <th scope="col">"head (CV), quality"</th><th scope="col">"head (CV), balanced"</th>
                    <th scope="col">"head's λ curve within the best single's cost"</th><th scope="col">"decide p50"</th>
                    <th scope="col">"the deployed head"</th>
                </tr></thead>
                <tbody>
                    {backbones.rows.into_iter().map(|r| {
                        let policy = |row: &Option<bench::quality::PolicyRow>| row.as_ref().map_or("—".to_string(), |row| format!(
                            "{} at {}", bench::quality::count(&row.resolved), bench::quality::money(row.cost_usd.mean)
                        ));
                        let opt = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.0}"));
                        view! {
                            <tr data-testid="backbone-row" data-checkpoint=r.checkpoint_id.clone()
                                data-head-quality=r.head_quality.as_ref().map(|q| format!("{:.1}", q.resolved.mean))>
                                <th scope="row">{r.backbone.clone()}</th>
                                <td class="num">{format!("{} / {}", opt(r.similarity_quality), opt(r.similarity_balanced))}</td>
                                <td class="num">{policy(&r.head_quality)}</td>
                                <td class="num">{policy(&r.head_balanced)}</td>
                                <td>{r.within_label()}</td>
                                <td class="num">{r.decide_p50_ms.map_or("—".to_string(), format_ms)}</td>
                                <td>{format!("{}: {}", r.head_id.clone().unwrap_or_default(), r.head_trained_on.clone().unwrap_or_default())}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </div>
        {backbones.missing.map(|m| view! { <p class="note" data-testid="backbone-missing">{m}</p> })}
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
fn BrowserQuality(study: bench::quality::QualityStudy) -> impl IntoView {
    use bench::quality::{routed_totals, RoutedTask, Subset};
    let worker = expect_context::<Worker>();
    let alert = expect_context::<Alert>();
    let state = RouteState { routed: RwSignal::new(Vec::new()), progress: RwSignal::new(None), ended: RwSignal::new(None), alert };
    worker.on_job(JobKind::Route, move |event| state.apply(event));
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
    let can_run = move || worker.can_start(JobKind::Route) && !fetching.get() && count_problem().is_none();
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
                Err(e) => return alert.show(format!("The evaluation data could not be read: {e}")),
            };
            fetched.set_value(Some(data.clone()));
            let tasks: Vec<wire::TaskPrompt> = data
                .data
                .indices(chosen)
                .into_iter()
                .take(n)
                .map(|t| wire::TaskPrompt { id: data.data.tasks[t].id.clone(), prompt: data.data.tasks[t].prompt.clone() })
                .collect();
            alert.clear();
            if worker.start(JobRequest::Route { tasks, head_json: Some(data.head_json.clone()) }, None) {
                state.routed.set(Vec::new());
                state.progress.set(Some((0, n)));
                state.ended.set(None);
            }
        });
    };
    let progress = move || {
        (worker.running.get() == Some(JobKind::Route)).then(|| {
            let (done, total) = state.progress.get().unwrap_or((0, 1));
            let last = state
                .routed
                .with(|r| r.last().map(|t| format!(" · last: {} ({} tokens, {})", t.id, t.tokens_used, format_ms(t.decide_ms))));
            let text = format!("{done} of {total} tasks routed{}", last.unwrap_or_default());
            view! { <JobProgressLine id="route" label="In-browser evaluation progress" value=done as f64 max=total as f64 text=text/> }
        })
    };
    let native = study.per_task.clone();
    let results = move || {
        let routed = state.routed.get();
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
            <NeedsModel/>
            {progress}
            {move || state.ended.get().map(|RouteEnded { checkpoint, head, cancelled }| view! {
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
pub fn QualityCard() -> impl IntoView {
    let state = RwSignal::new(QualityState::Idle);
    let backbones = RwSignal::new(None::<Backbones>);
    let show = move |_| {
        state.set(QualityState::Loading);
        backbones.set(None);
        spawn_local(async move {
            let shown = fetch_study("quality.json", "quality study", |r: &Report| r.studies.quality.as_ref()).await;
            let first = shown.as_ref().ok().map(|(report, study)| backbone_row(report, study));
            state.set(match shown {
                Ok((report, study)) => QualityState::Shown(Box::new((report, study))),
                Err(e) => QualityState::Failed(e),
            });
            // The other backbones after the study is on screen; one missing
            // is said, not an error of the card.
            let Some(first) = first else { return };
            let mut found = Backbones { rows: vec![first], missing: None };
            for (file, what) in OTHER_BACKBONES {
                match fetch_study(file, what, |r: &Report| r.studies.quality.as_ref()).await {
                    Ok((report, study)) => found.rows.push(backbone_row(&report, &study)),
                    Err(e) => found.missing = Some(format!("{what} is not shown: {e}.")),
                }
            }
            backbones.set(Some(found));
        });
    };
    let report = move || match state.get() {
        QualityState::Shown(shown) => Some(shown.0),
        _ => None,
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
            </div>
            {move || report().map(|report| view! { <ReportActions report=report file="router-quality.cpu.json" id="quality"/> })}
            {move || match state.get() {
                QualityState::Failed(e) => Some(view! { <p class="problem" role="alert" data-testid="quality-error">{e}</p> }.into_any()),
                QualityState::Loading => Some(view! { <p class="note">"Fetching quality.json…"</p> }.into_any()),
                QualityState::Shown(shown) => {
                    let (report, study) = *shown;
                    Some(view! {
                        {move || backbones.get().map(|b| view! { <BackboneTable backbones=b/> })}
                        <QualityView report=report study=study.clone()/>
                        <BrowserQuality study=study/>
                    }.into_any())
                }
                QualityState::Idle => None,
            }}
        </section>
    }
}
