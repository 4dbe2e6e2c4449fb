//! Card 2, try a decision: a conversation (from a CodeRouterBench task or
//! typed), a mode, and the ranking `Router.decide` returns with its stage
//! timings and prefix reuse. Owns the decide jobs.

use bench::report::format_ms;
use bench::roofline::DeviceCeilings;
use leptos::prelude::*;
use router::{Conversation, CostTerm, Decision, Neighbour, ScoringChoice};
use wire::session::ModelState;
use wire::{JobEvent, JobKind, JobRequest, JobResult, Scoring};

use super::worker::Worker;
use super::{bytes_label, Alert, PageForm};
use crate::roofline_view::{self, RooflineView};

/// The last decision, with the training tasks nearest to it (a trained
/// head's decision only).
#[derive(Clone)]
struct Decided {
    decision: Decision,
    neighbours: Vec<Neighbour>,
}

/// The card's state: the last decision, the worker's memory after it,
/// and this device's ceilings once asked for (they hold for the loaded
/// model, so every later decision's roofline reads them).
#[derive(Clone, Copy)]
struct DecideState {
    decided: RwSignal<Option<Decided>>,
    /// The worker's wasm memory after the last decision.
    worker_memory: RwSignal<Option<u64>>,
    ceilings: RwSignal<Option<DeviceCeilings>>,
}

impl DecideState {
    fn apply(self, event: JobEvent) {
        match event {
            JobEvent::Finished { result: JobResult::Decided { decision, neighbours, wasm_memory_bytes }, .. } => {
                // A list that does not decode only loses the explanation.
                self.decided.set(Some(Decided { decision: *decision, neighbours: neighbours.decode().unwrap_or_default() }));
                self.worker_memory.set(Some(wasm_memory_bytes));
            }
            JobEvent::Finished { result: JobResult::Roofline(ceilings), .. } => self.ceilings.set(Some(ceilings)),
            _ => {}
        }
    }
}

#[component]
pub fn DecideCard() -> impl IntoView {
    let worker = expect_context::<Worker>();
    let form = expect_context::<PageForm>().0;
    let alert = expect_context::<Alert>();
    let state = DecideState { decided: RwSignal::new(None), worker_memory: RwSignal::new(None), ceilings: RwSignal::new(None) };
    worker.on_job(JobKind::Decide, move |event| state.apply(event));
    worker.on_job(JobKind::Roofline, move |event| state.apply(event));
    // A decision belongs to the model that made it: a new load hides it,
    // and a replaced worker takes its memory figure with it.
    let loading = Memo::new(move |_| worker.session.with(|s| matches!(s.model(), ModelState::Loading(_))));
    let gone = Memo::new(move |_| worker.session.with(|s| matches!(s.model(), ModelState::NotLoaded)));
    Effect::new(move |_| {
        if loading.get() || gone.get() {
            state.decided.set(None);
            // Measured for the model a load replaces (its shapes and precision).
            state.ceilings.set(None);
        }
        if gone.get() {
            state.worker_memory.set(None);
        }
    });
    let deciding = move || worker.running.get() == Some(JobKind::Decide);
    let decide = move |_| {
        let f = form.get_untracked();
        if f.user.trim().is_empty() {
            return alert.show("Write a user turn (or pick a task) to decide.".into());
        }
        let scoring = match f.scoring() {
            Ok(scoring) => scoring,
            Err(problem) => return alert.show(format!("{} (the link's `{}`)", problem.message, problem.field)),
        };
        let mut conversation = Conversation::user(f.user);
        if !f.system.trim().is_empty() {
            conversation = conversation.with_system(f.system);
        }
        let mode = Some(f.mode).filter(|m| !m.is_empty());
        alert.clear();
        worker.start(JobRequest::Decide { conversation, mode, scoring }, None);
    };
    // The scoring choice is offered where the checkpoint has a head.
    let head_id = move || match worker.model.get().map(|m| m.scoring.decode()) {
        Some(Ok(Scoring::Trained { head_id, .. })) => Some(head_id),
        _ => None,
    };
    let pick_task = move |ev: leptos::ev::Event| {
        let id = event_target_value(&ev);
        if let Some(task) = worker.tasks.with_untracked(|t| t.iter().find(|t| t.id == id).cloned()) {
            form.update(|f| f.user = task.prompt);
        }
    };
    let modes = move || worker.model.get().map(|m| (m.modes, m.default_mode)).unwrap_or_default();
    view! {
        <section class="card" aria-labelledby="try-h">
            <h2 id="try-h">"2 · Try a decision"</h2>
            <label class="field">"Start from a CodeRouterBench task"
                <select data-testid="task-select" on:change=pick_task>
                    <option value="">"— pick a task prompt —"</option>
                    {move || worker.tasks.get().into_iter().map(|t| {
                        let label = format!("{} · {} · {}", t.id, if t.language.is_empty() { "?" } else { &t.language }, t.title());
                        view! { <option value=t.id.clone()>{label}</option> }
                    }).collect_view()}
                </select>
            </label>
            <label class="field">"System turn (optional)"
                <textarea rows="2" data-testid="conv-system" prop:value=move || form.with(|f| f.system.clone())
                    on:input=move |ev| form.update(|f| f.system = event_target_value(&ev))></textarea>
            </label>
            <label class="field">"User turn"
                <textarea rows="6" data-testid="conv-user" prop:value=move || form.with(|f| f.user.clone())
                    on:input=move |ev| form.update(|f| f.user = event_target_value(&ev))></textarea>
            </label>
            <div class="row">
                <label>"Mode "
                    <select data-testid="mode-select" on:change=move |ev| form.update(|f| f.mode = event_target_value(&ev))>
                        {move || {
                            let (modes, default) = modes();
                            let current = form.with(|f| f.mode.clone());
                            let mut options = vec![view! { <option value="" selected=current.is_empty()>{format!("pool default ({default})")}</option> }.into_any()];
                            options.extend(modes.into_iter().map(|m| {
                                let selected = current == m.name;
                                view! { <option value=m.name.clone() selected=selected>{format!("{} — cost weight {}", m.name, m.cost_weight)}</option> }.into_any()
                            }));
                            options
                        }}
                    </select>
                </label>
                {move || head_id().map(|id| view! {
                    <label>"Scoring "
                        <select data-testid="scoring-select" on:change=move |ev| form.update(|f| {
                            let value = event_target_value(&ev);
                            f.scoring = if value == ScoringChoice::Similarity.name() { value } else { String::new() };
                        })>
                            <option value="trained" selected=move || form.with(|f| f.scoring.is_empty())>{format!("trained head ({id})")}</option>
                            <option value="similarity" selected=move || form.with(|f| f.scoring == "similarity")>"similarity (untrained)"</option>
                        </select>
                    </label>
                })}
                <button type="button" data-testid="decide-button" disabled=move || !worker.can_start(JobKind::Decide) on:click=decide>
                    {move || if deciding() { "Deciding…" } else { "Decide" }}
                </button>
            </div>
            {move || state.decided.get().map(|d| view! { <DecisionView decision=d.decision neighbours=d.neighbours/> })}
            <RooflineLine state=state/>
            {move || state.worker_memory.get().map(|bytes| view! {
                <p class="note" data-testid="worker-memory" data-bytes=bytes>
                    {format!("Worker memory after this decision: {} (wasm memory only grows; it stays flat while the prefix cache holds its budget).", bytes_label(bytes as f64))}
                </p>
            })}
        </section>
    }
}

/// Under a decision: the button that measures this device's ceilings, then
/// the roofline of the last decision against them (nothing runs until asked).
#[component]
fn RooflineLine(state: DecideState) -> impl IntoView {
    let worker = expect_context::<Worker>();
    let measuring = move || worker.running.get() == Some(JobKind::Roofline);
    let measure = move |_| {
        worker.start(JobRequest::Roofline, None);
    };
    move || {
        let decided = state.decided.get()?;
        let readout = state.ceilings.get().zip(worker.model.get()).map(|(ceilings, model)| {
            view! { <RooflineView ceilings=ceilings flops=model.flop_model decision=decided.decision/> }
        });
        Some(view! {
            <p class="note">
                <button type="button" class="link" data-testid="roofline-measure" disabled=move || !worker.can_start(JobKind::Roofline) on:click=measure>
                    {move || if measuring() { "Measuring this device's ceilings…" } else { roofline_view::QUESTION }}
                </button>
            </p>
            {readout}
        })
    }
}

/// How the decision was scored, and how sure it is.
fn confidence_view(decision: &Decision) -> impl IntoView {
    let scoring = if decision.scoring == "similarity" {
        "Scored by the untrained descriptor similarity: no confidence to give (it has no measured uncertainty, and it resolved fewer OOD176 tasks than random picks on SmolLM2).".to_string()
    } else {
        format!("Scored by the trained head {}.", decision.scoring)
    };
    let confidence = decision.confidence.clone().map(|c| {
        let unsure = c.unsure();
        // Capitalised: it starts a sentence here.
        let verdict = c.verdict();
        let verdict = format!("{}{}.", verdict[..1].to_uppercase(), &verdict[1..]);
        let text = format!(
            "P(first place stays ahead of second) {:.0} % (utility margin {:.3} against a spread of {:.3}); nearest training task at cosine {:.2} (threshold {:.2}). {verdict}",
            100.0 * c.p_first_ahead,
            c.margin,
            c.margin_sigma,
            c.nearest_similarity,
            c.novelty_threshold,
        );
        view! {
            <p class=if unsure { "note warn" } else { "note" } data-testid="decide-confidence" data-unsure=unsure.to_string()
                data-p-first-ahead=c.p_first_ahead.to_string()>
                {text}
            </p>
        }
    });
    view! {
        <p class="note" data-testid="decide-scoring" data-scoring=decision.scoring.clone()>{scoring}</p>
        {confidence}
    }
}

/// "Why this model": the nearest training tasks and what each backend did.
#[component]
fn Neighbours(neighbours: Vec<Neighbour>) -> impl IntoView {
    (!neighbours.is_empty()).then(|| view! {
        <details class="neighbours" data-testid="decide-neighbours">
            <summary>"Why this model: the most similar training tasks, and which backends resolved them"</summary>
            <ul>
                {neighbours.into_iter().map(|n| {
                    let resolved: Vec<String> = n.outcomes.iter().filter(|o| o.resolved).map(|o| format!("{} (${:.2})", o.candidate, o.cost_usd)).collect();
                    let failed: Vec<String> = n.outcomes.iter().filter(|o| !o.resolved).map(|o| o.candidate.clone()).collect();
                    view! {
                        <li data-testid="neighbour" data-task=n.task.clone()>
                            <strong>{format!("{} (cosine {:.2})", n.task, n.similarity)}</strong>
                            {format!(": {}", n.excerpt)}
                            <br/>
                            {format!(
                                "resolved by {}; not by {}",
                                if resolved.is_empty() { "none".to_string() } else { resolved.join(", ") },
                                if failed.is_empty() { "none".to_string() } else { failed.join(", ") }
                            )}
                        </li>
                    }
                }).collect_view()}
            </ul>
        </details>
    })
}

#[component]
fn DecisionView(decision: Decision, neighbours: Vec<Neighbour>) -> impl IntoView {
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
        ("confidence", t.confidence_ms),
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
            {confidence_view(&decision)}
            <Neighbours neighbours=neighbours/>
            <div class="table-wrap">
                <table>
                    <thead><tr>
                        <th scope="col">"#"</th><th scope="col">"candidate"</th><th scope="col">"score"</th>
                        <th scope="col">"cosine"</th><th scope="col">{match decision.cost_term {
                            None => "est. cost (USD)",
                            Some(CostTerm::Mean) => "mean cost per task (USD)",
                            Some(CostTerm::Predicted) => "predicted cost of this task (USD)",
                        }}</th><th scope="col">"utility"</th>
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
