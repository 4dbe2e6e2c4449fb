//! The calculator's "capacity from a length distribution" section (note 03,
//! step 2): the user pastes or opens lengths, or takes the OOD176 example,
//! and [`kv::distribution`] says how many sequences fit at the mean and at
//! the tail, with a plot against the percentile. The section owns its
//! state in [`DistributionState`]. Pasted lengths never go into the link
//! (they can be long and private); the example does, as `lengths=ood176`,
//! and a link carrying it sizes the example on opening. A text that does
//! not read is kept as typed with the line named.

use kv::distribution::{capacity, parse_lengths, Lengths, BUILTIN};
use kv::{units, Form, Inputs, Report};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::browser;
use crate::kv_page::PasteBox;

/// The built-in example: CodeRouterBench's OOD176 runs (MIT), each row a
/// task's totals over its model calls, served beside the router page.
const EXAMPLE_URL: &str = "router/data/ood176_results_long.csv";
const EXAMPLE_NAME: &str = "OOD176 (CodeRouterBench, 8 models × 176 tasks, each row's mean call)";

/// Lengths that read, under the name they came by.
#[derive(Clone, PartialEq)]
struct Sized {
    name: String,
    lengths: Lengths,
}

/// What the section holds: the text as the user typed it, the lengths last
/// read (kept while a later text does not read), and what went wrong.
#[derive(Clone, Copy)]
pub struct DistributionState {
    text: RwSignal<String>,
    read: RwSignal<Option<Sized>>,
    problem: RwSignal<Option<String>>,
    fetching: RwSignal<bool>,
}

impl DistributionState {
    pub fn new() -> DistributionState {
        DistributionState {
            text: RwSignal::new(String::new()),
            read: RwSignal::new(None),
            problem: RwSignal::new(None),
            fetching: RwSignal::new(false),
        }
    }

    /// Reads `text`; on success the link says `lengths=ood176` for the
    /// example and nothing for the user's own lengths.
    fn take(&self, form: RwSignal<Form>, name: String, text: &str, builtin: bool) {
        match parse_lengths(text) {
            Ok(lengths) => {
                self.read.set(Some(Sized { name, lengths }));
                self.problem.set(None);
                form.update(|f| f.set("lengths", if builtin { BUILTIN } else { "" }));
            }
            Err(e) => self.problem.set(Some(format!("{name}: {e}"))),
        }
    }

    /// Fetches and sizes the built-in example.
    fn fetch_example(self, form: RwSignal<Form>) {
        self.fetching.set(true);
        spawn_local(async move {
            match browser::fetch_text(EXAMPLE_URL).await {
                Ok(text) => self.take(form, EXAMPLE_NAME.to_string(), &text, true),
                Err(e) => self.problem.set(Some(format!("the example could not be fetched: {e}"))),
            }
            self.fetching.set(false);
        });
    }
}

impl Default for DistributionState {
    fn default() -> Self {
        Self::new()
    }
}

/// The section, given the calculator's last valid inputs and figures.
#[component]
pub fn DistributionSection(
    state: DistributionState,
    form: RwSignal<Form>,
    last_good: RwSignal<Option<(Box<Inputs>, Box<Report>)>>,
) -> impl IntoView {
    // A link that names the example sizes it on opening.
    if form.with_untracked(|f| f.get("lengths") == BUILTIN) {
        state.fetch_example(form);
    }
    let example = move |_| state.fetch_example(form);
    let figures = move || {
        let sized = state.read.get()?;
        let Some((inputs, report)) = last_good.get() else {
            return Some(view! { <p class="hint">"Fix the model's fields above: capacity is sized with them."</p> }.into_any());
        };
        let Some(budget) = report.budget.as_ref() else {
            return Some(
                view! { <p class="hint" data-testid="dist-needs-budget">"Enter a GPU memory size above: the sequences share its K/V budget."</p> }
                    .into_any(),
            );
        };
        Some(match capacity(&inputs, budget.kv_budget_bytes_per_gpu, &sized.lengths) {
            Err(e) => view! { <p class="problem" role="alert">{e.to_string()}</p> }.into_any(),
            Ok(d) => {
                let svg = kv::plot::distribution_svg(&d);
                let rows = d.rows.clone();
                view! {
                    <p class="source">{format!("Lengths: {}", sized.name)}</p>
                    <ul class="verdicts" data-testid="dist-lines">{d.lines().into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}</ul>
                    <table class="terms" data-testid="dist-table">
                        <thead><tr>
                            <th scope="col">"sized by"</th>
                            <th scope="col" class="num">"retained tokens"</th>
                            <th scope="col" class="num">"allocated per sequence"</th>
                            <th scope="col" class="num">"sequences that fit"</th>
                        </tr></thead>
                        <tbody>{rows.into_iter().map(|r| view! {
                            <tr>
                                <th scope="row">{r.label.clone()}</th>
                                <td class="num">{units::group_digits(r.retained_tokens as u128)}</td>
                                <td class="num">{units::binary(r.bytes_per_sequence)}</td>
                                <td class="num" data-label=r.label.clone()>{units::group_digits(r.sequences)}</td>
                            </tr>
                        }).collect_view()}</tbody>
                    </table>
                    <div class="plot" data-testid="dist-plot" inner_html=svg></div>
                }
                .into_any()
            }
        })
    };
    view! {
        <section class="distribution" data-testid="distribution">
            <h2>"Capacity from a length distribution"</h2>
            <p class="hint">
                "How many sequences fit at once when lengths vary: each sized at its end (prompt + answer), in whole blocks of every layer group, at the mean and at the tail. "
                "Paste CSV with a header (input and output columns, e.g. prompt_tokens,completion_tokens; a calls column divides totals into mean calls) or JSON objects. "
                "Pasted lengths stay in this page: they are not put in the link (the example is, as lengths=ood176)."
            </p>
            <PasteBox
                text=state.text
                id="dist"
                label="Lengths, CSV or JSON"
                placeholder="input,output\n1200,300\n8000,450"
                pasted="the pasted lengths"
                button="Size these lengths"
                accept=".csv,.json,.jsonl,text/csv,application/json"
                on_read=move |name, text| state.take(form, name, &text, false)
                on_error=move |e| state.problem.set(Some(e))
            >
                <button type="button" data-testid="dist-example" disabled=move || state.fetching.get() on:click=example>"Use the OOD176 example"</button>
            </PasteBox>
            {move || state.problem.get().map(|p| view! { <p class="problem" role="alert" data-testid="dist-problem">{p}</p> })}
            {figures}
        </section>
    }
}
