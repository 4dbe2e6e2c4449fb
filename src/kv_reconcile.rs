//! The calculator's vLLM reconciler (note 03, step 3): the user pastes or
//! opens a `/metrics` scrape, and [`kv::reconcile`] lays the ledger out from
//! the calculator's logical payload for the running requests (the form's
//! sequence lengths) to the blocks vLLM allocated, uses and has free, each
//! difference attributed with its arithmetic. The section owns its state
//! in [`ReconcileState`]; a scrape never goes into the link. Lines that do
//! not read are named and the rest kept.

use kv::reconcile::{parse_scrape, reconcile, vllm_metrics, Scrape};
use kv::{units, Inputs, Report};
use leptos::prelude::*;

use crate::kv_page::PasteBox;

/// The text as pasted, the scrape last read from it, and a file that could
/// not be read.
#[derive(Clone, Copy)]
pub struct ReconcileState {
    text: RwSignal<String>,
    scrape: RwSignal<Option<(String, Scrape)>>,
    problem: RwSignal<Option<String>>,
}

impl ReconcileState {
    pub fn new() -> ReconcileState {
        ReconcileState { text: RwSignal::new(String::new()), scrape: RwSignal::new(None), problem: RwSignal::new(None) }
    }

    fn read(&self, name: String, text: &str) {
        self.problem.set(None);
        self.scrape.set(Some((name, parse_scrape(text))));
    }
}

impl Default for ReconcileState {
    fn default() -> Self {
        Self::new()
    }
}

fn signed(bytes: i128) -> String {
    let sign = if bytes < 0 { "−" } else { "" };
    format!("{sign}{}", units::group_digits(bytes.unsigned_abs()))
}

/// The section, given the calculator's last valid inputs and figures.
#[component]
pub fn ReconcileSection(state: ReconcileState, last_good: RwSignal<Option<(Box<Inputs>, Box<Report>)>>) -> impl IntoView {
    let ledger = move || {
        let (name, scrape) = state.scrape.get()?;
        let skipped = (!scrape.skipped.is_empty()).then(|| {
            view! {
                <ul class="problem" data-testid="reconcile-skipped">
                    {scrape.skipped.iter().map(|s| view! { <li>{format!("{name}: {s} (skipped; the other lines are kept)")}</li> }).collect_view()}
                </ul>
            }
        });
        let body = match (vllm_metrics(&scrape), last_good.get()) {
            (Err(e), _) => view! { <p class="problem" role="alert" data-testid="reconcile-problem">{format!("{name}: {e}")}</p> }.into_any(),
            (Ok(_), None) => view! { <p class="hint">"Fix the model's fields above: the ledger is sized with them."</p> }.into_any(),
            (Ok(metrics), Some((inputs, report))) => match reconcile(&inputs, &report, &metrics) {
                Err(e) => view! { <p class="problem" role="alert">{e.to_string()}</p> }.into_any(),
                Ok(ledger) => view! {
                    <table class="terms" data-testid="reconcile-ledger">
                        <thead><tr>
                            <th scope="col">"ledger (one GPU)"</th>
                            <th scope="col" class="num">"blocks"</th>
                            <th scope="col" class="num">"bytes"</th>
                            <th scope="col">"whose figure"</th>
                            <th scope="col">"arithmetic"</th>
                        </tr></thead>
                        <tbody>{ledger.rows.into_iter().map(|r| {
                            let total = r.label.starts_with('=');
                            view! {
                            <tr class:total=total>
                                <th scope="row">{r.label}</th>
                                <td class="num">{r.blocks.map(|b| if b < 0 { format!("−{}", units::group_digits(b.unsigned_abs())) } else { units::group_digits(b as u128) }).unwrap_or_default()}</td>
                                <td class="num">{signed(r.bytes)}</td>
                                <td>{r.source}</td>
                                <td class="expr">{r.arithmetic}</td>
                            </tr>
                            }
                        }).collect_view()}</tbody>
                    </table>
                    <ul class="notes" data-testid="reconcile-notes">{ledger.notes.into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}</ul>
                }
                .into_any(),
            },
        };
        Some(view! { {skipped} {body} })
    };
    view! {
        <section class="reconcile" data-testid="reconcile">
            <h2>"Reconcile with vLLM's /metrics"</h2>
            <p class="hint">
                "Paste a scrape of a running vLLM's /metrics (curl http://host:8000/metrics) and set the sequence lengths above to its running requests' retained tokens: "
                "the ledger goes from this page's logical payload to the blocks vLLM allocated, uses and has free, and attributes each difference. "
                "A pasted scrape stays in this page: it is never put in the link."
            </p>
            <PasteBox
                text=state.text
                id="reconcile"
                label="vLLM /metrics scrape"
                placeholder="vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"27000\",...} 1.0\nvllm:kv_cache_usage_perc 0.25\nvllm:num_requests_running 4"
                pasted="the pasted scrape"
                button="Reconcile"
                accept=".txt,.prom,text/plain"
                on_read=move |name, text| state.read(name, &text)
                on_error=move |e| state.problem.set(Some(e))
            />
            {move || state.problem.get().map(|p| view! { <p class="problem" role="alert">{p}</p> })}
            {ledger}
        </section>
    }
}
