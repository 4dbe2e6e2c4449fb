//! The routing-quality study on the router page: the measured table per
//! subset beside its baselines, the cost–quality and truncation figures, and
//! the provenance line. Everything shown comes from a report's `quality`
//! section (`bench-decide --quality`), computed natively by `bench::quality`.

use bench::quality::{count, money, Family, QualityStudy, Subset};
use bench::report::{format_ms, Report};
use leptos::prelude::*;

fn family(f: Family) -> &'static str {
    match f {
        Family::Oracle => "oracle",
        Family::Baseline => "baseline",
        Family::Untrained => "router, untrained",
        Family::Trained => "trained (cross-validated)",
    }
}

/// The provenance line: checkpoint (and head), pool, split, folds, seeds.
pub fn provenance_line(report: &Report, study: &QualityStudy) -> String {
    let p = &report.provenance;
    format!(
        "Checkpoint {}{} · pool {} ({} candidates) · split OOD176, {} tasks ({} failed runs) · {}-fold CV × {} seeds, {}-fold inner CV · router_max_tokens {} ({}) · {} · git {}",
        p.checkpoint_id,
        study.head.as_ref().map_or(String::new(), |h| format!(" + {} (deployable head)", h.id)),
        p.pool_id,
        p.candidates,
        study.tasks,
        study.failed_runs,
        study.cv.folds,
        study.cv.seeds.len(),
        study.cv.inner_folds,
        study.router_max_tokens,
        study.truncation_side.name(),
        report.environment.runtime,
        report.environment.git_revision
    )
}

#[component]
pub fn QualityView(report: Report, study: QualityStudy) -> impl IntoView {
    let subset = RwSignal::new(Subset::All);
    let provenance = provenance_line(&report, &study);
    let curves = study.cost_quality_svg();
    let trade_off = (!study.truncation.is_empty()).then(|| study.truncation_svg());
    let rows = study.rows.clone();
    let table = move || {
        let s = subset.get();
        rows.iter()
            .filter(|r| r.subset == s)
            .map(|r| {
                view! {
                    <tr data-testid="quality-row" data-policy=r.policy.clone() data-resolved=format!("{:.1}", r.resolved.mean)>
                        <th scope="row">{r.policy.clone()}</th>
                        <td>{family(r.family)}</td>
                        <td class="num">{format!("{}/{}", count(&r.resolved), r.tasks)}</td>
                        <td class="num">{format!("{:.0}–{:.0}", r.resolved_ci95[0], r.resolved_ci95[1])}</td>
                        <td class="num">{format!("{:.1} %", 100.0 * r.rate())}</td>
                        <td class="num">{money(r.cost_usd.mean)}</td>
                        <td class="num">{money(r.cost_usd_imputed.mean)}</td>
                        <td class="num">{if r.per_dollar().is_finite() { format!("{:.2}", r.per_dollar()) } else { "∞".into() }}</td>
                        <td class="num">{format!("{:.1} %", 100.0 * r.gap_to_oracle())}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    let note = study.published_note.clone();
    let reliability = (!study.calibration.is_empty()).then(|| study.reliability_svg());
    let calibration = study.calibration.clone();
    let doubt = study.doubt.clone();
    let cost_prediction = study.cost_prediction.clone();
    let truncation_rows: Vec<_> = study
        .truncation
        .iter()
        .flat_map(|p| p.rows.iter().map(move |r| (p.max_tokens, p.side.name(), p.tokens_used_mean, p.decide, r.clone())))
        .collect();
    view! {
        <div class="report quality" data-testid="quality-study">
            <p class="note" data-testid="quality-provenance">{provenance}</p>
            <ul class="verdicts" data-testid="quality-verdicts">
                {study.verdicts().into_iter().map(|v| view! { <li>{v}</li> }).collect_view()}
            </ul>
            <label class="field small">"Tasks"
                <select data-testid="quality-subset" on:change=move |ev| subset.set(match event_target_value(&ev).as_str() {
                    "swebench112" => Subset::Swebench112,
                    "new64" => Subset::New64,
                    _ => Subset::All,
                })>
                    <option value="all">"OOD176 (all 176)"</option>
                    <option value="swebench112">"SWE-bench 112"</option>
                    <option value="new64">"newer 64"</option>
                </select>
            </label>
            <div class="table-wrap">
                <table>
                    <caption>"Routing quality: resolved tasks and backend cost of each policy's choices"</caption>
                    <thead><tr>
                        <th scope="col">"policy"</th><th scope="col">"kind"</th><th scope="col">"resolved"</th><th scope="col">"95 % CI"</th>
                        <th scope="col">"rate"</th><th scope="col">"cost"</th><th scope="col">"cost (failed runs imputed)"</th>
                        <th scope="col">"resolved per $"</th><th scope="col">"gap to oracle"</th>
                    </tr></thead>
                    <tbody>{table}</tbody>
                </table>
            </div>
            {move || (subset.get() == Subset::Swebench112).then(|| view! { <p class="note" data-testid="published-note">{note.clone()}</p> })}
            <p class="note">{format!("Failed runs: {}.", study.failed_run_rule)}</p>
            <ul class="note">
                {study.modes.iter().map(|(m, d)| view! { <li>{format!("{m}: {d}")}</li> }).collect_view()}
                {study.chosen.iter().map(|(p, c)| view! { <li>{format!("{p}, {c}")}</li> }).collect_view()}
            </ul>
            <figure class="plot" data-testid="quality-plot" inner_html=curves></figure>
            {(!truncation_rows.is_empty()).then(|| view! {
                <div class="table-wrap">
                    <table data-testid="truncation-table">
                        <caption>"The truncation trade-off: quality against decide latency (all tasks)"</caption>
                        <thead><tr>
                            <th scope="col">"router_max_tokens"</th><th scope="col">"kept"</th><th scope="col">"tokens (mean)"</th>
                            <th scope="col">"decide p50"</th><th scope="col">"decide p95"</th><th scope="col">"policy"</th>
                            <th scope="col">"resolved"</th><th scope="col">"cost"</th>
                        </tr></thead>
                        <tbody>
                            {truncation_rows.into_iter().map(|(l, side, tokens, decide, r)| view! {
                                <tr>
                                    <td class="num">{l}</td><td>{side}</td><td class="num">{format!("{tokens:.0}")}</td>
                                    <td class="num">{decide.map_or("–".into(), |s| format_ms(s.p50))}</td>
                                    <td class="num">{decide.map_or("–".into(), |s| format_ms(s.p95))}</td>
                                    <td>{r.policy.clone()}</td>
                                    <td class="num">{format!("{}/{}", count(&r.resolved), r.tasks)}</td>
                                    <td class="num">{money(r.cost_usd.mean)}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                </div>
            })}
            {trade_off.map(|svg| view! { <figure class="plot" data-testid="truncation-plot" inner_html=svg></figure> })}
            {(!calibration.is_empty()).then(|| view! {
                <div class="table-wrap">
                    <table data-testid="calibration-table">
                        <caption>"Calibration of the trained head's P(resolve), out of fold over every seed: Brier score against forecasting each candidate's own resolve rate, and how far its P moves between folds (σ, what a decision's close-call flag uses)"</caption>
                        <thead><tr>
                            <th scope="col">"candidate"</th><th scope="col">"resolve rate"</th><th scope="col">"Brier"</th>
                            <th scope="col">"Brier of the rate"</th><th scope="col">"spread σ"</th>
                        </tr></thead>
                        <tbody>
                            {calibration.into_iter().map(|c| view! {
                                <tr data-testid="calibration-row" data-candidate=c.candidate.clone() data-brier=c.brier.to_string()>
                                    <th scope="row">{c.candidate.clone()}</th>
                                    <td class="num">{format!("{:.3}", c.base_rate)}</td>
                                    <td class="num">{format!("{:.3}", c.brier)}</td>
                                    <td class="num">{format!("{:.3}", c.brier_base_rate)}</td>
                                    <td class="num">{format!("{:.3}", c.p_sigma)}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                </div>
            })}
            {(!cost_prediction.is_empty()).then(|| view! {
                <div class="table-wrap">
                    <table data-testid="cost-prediction-table">
                        <caption>"Per-task cost prediction, out of fold over every seed: the absolute log ratio of recorded to predicted cost (0.69 is a factor of 2), against predicting each candidate's mean cost"</caption>
                        <thead><tr>
                            <th scope="col">"candidate"</th><th scope="col">"tasks with a cost"</th><th scope="col">"median error"</th>
                            <th scope="col">"p90 error"</th><th scope="col">"median error, mean cost"</th><th scope="col">"p90 error, mean cost"</th>
                        </tr></thead>
                        <tbody>
                            {cost_prediction.into_iter().map(|c| view! {
                                <tr data-testid="cost-prediction-row" data-candidate=c.model.clone()>
                                    <th scope="row">{c.model.clone()}</th>
                                    <td class="num">{c.tasks}</td>
                                    <td class="num">{format!("{:.2}", c.median_log_error)}</td>
                                    <td class="num">{format!("{:.2}", c.p90_log_error)}</td>
                                    <td class="num">{format!("{:.2}", c.median_log_error_of_mean)}</td>
                                    <td class="num">{format!("{:.2}", c.p90_log_error_of_mean)}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                </div>
            })}
            <PublishedRows/>
            {reliability.map(|svg| view! { <figure class="plot" data-testid="reliability-plot" inner_html=svg></figure> })}
            {doubt.map(|d| view! {
                <div class="table-wrap">
                    <table data-testid="doubt-table">
                        <caption>{format!(
                            "Decisions flagged unsure, out of fold: a close call (the first two utilities within their spread) or a task unlike the training tasks (its nearest below the training tasks' own {}th percentile); mean over seeds",
                            d.novelty_percentile
                        )}</caption>
                        <thead><tr>
                            <th scope="col">"mode"</th><th scope="col">"flag"</th><th scope="col">"flagged"</th><th scope="col">"resolved"</th>
                            <th scope="col">"cost"</th><th scope="col">"not flagged"</th><th scope="col">"resolved"</th><th scope="col">"cost"</th>
                        </tr></thead>
                        <tbody>
                            {d.rows.into_iter().map(|r| {
                                let (flagged_rate, unflagged_rate) = r.rates();
                                view! {
                                    <tr data-testid="doubt-row" data-mode=r.mode.clone()>
                                        <td>{r.mode.clone()}</td><td>{r.reason.label()}</td>
                                        <td class="num">{format!("{:.1}", r.flagged.mean)}</td>
                                        <td class="num">{format!("{:.1} ({:.0} %)", r.flagged_resolved.mean, 100.0 * flagged_rate)}</td>
                                        <td class="num">{money(r.flagged_cost_usd.mean)}</td>
                                        <td class="num">{format!("{:.1}", r.unflagged.mean)}</td>
                                        <td class="num">{format!("{:.1} ({:.0} %)", r.unflagged_resolved.mean, 100.0 * unflagged_rate)}</td>
                                        <td class="num">{money(r.unflagged_cost_usd.mean)}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                </div>
            })}
            <p class="note">
                "176 tasks is a small sample: the intervals are 95 % bootstrap intervals over tasks, and a cross-validated row is a mean ± std over seeds of one split of one benchmark, not a general claim about routers."
            </p>
        </div>
    }
}

/// The dataset's published OOD176 rows of other routers, beside ours
/// above, with how their protocol differs.
#[component]
fn PublishedRows() -> impl IntoView {
    use bench::quality::published::{PROTOCOL, ROWS, SOURCE};
    view! {
        <div class="table-wrap">
            <table data-testid="published-table">
                <caption>{format!("Published OOD176 results of other routers ({SOURCE}): another protocol, not recomputed here")}</caption>
                <thead><tr>
                    <th scope="col">"router"</th><th scope="col">"kind"</th><th scope="col">"resolved"</th><th scope="col">"cost"</th>
                </tr></thead>
                <tbody>
                    {ROWS.iter().map(|r| view! {
                        <tr data-testid="published-row" data-router=r.router data-resolved=format!("{:.1}", r.resolved())>
                            <th scope="row">{r.router}</th>
                            <td>{r.group}</td>
                            <td class="num">{format!("{:.0}/176 ({:.1} %)", r.resolved(), r.resolved_pct)}</td>
                            <td class="num">{if r.stated_cost_usd.is_some() { money(r.cost_usd()) } else { format!("≈ {}", money(r.cost_usd())) }}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
        <p class="note" data-testid="published-protocol">{PROTOCOL}</p>
    }
}
