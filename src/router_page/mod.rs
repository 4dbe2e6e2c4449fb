//! The router page (`router/`): load a checkpoint, try a decision (with
//! prefix reuse), run the cold-vs-warm latency protocol, the prefix-reuse
//! protocol of note 04, the routing-quality study and the serving test of
//! note 06; export, compare and share each result.
//!
//! Everything heavy happens in the router worker (`crates/router-worker`).
//! This folder holds the page's shell and one module per card; each card
//! owns its state in a named struct, exposes one component, and handles the
//! events of the jobs it starts. What is truly shared is provided as
//! context: the worker session ([`worker::Worker`]), the link's form
//! ([`PageForm`], mirrored in the URL fragment) and the page's alert
//! ([`Alert`]). A card may not read another card's state; what two cards
//! need (the loaded model, whether a job runs) is the session's.

mod bench_card;
mod decide_card;
mod generate_card;
mod model_card;
mod prefix_card;
mod quality_card;
mod request_card;
mod serve_card;
mod serve_form;
mod serve_generate_card;
mod worker;

use bench::page::RouterForm;
use bench::report::Report;
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::browser;
use crate::report_view::{measured_where, ReportView};

/// The link's settings (the fragment): the model card's precision, the
/// decide card's conversation and mode, the bench card's protocol.
#[derive(Clone, Copy)]
pub struct PageForm(pub RwSignal<RouterForm>);

/// The page's one alert line: what went wrong last, until dismissed or
/// replaced.
#[derive(Clone, Copy)]
pub struct Alert(RwSignal<Option<String>>);

impl Alert {
    pub fn show(self, message: String) {
        self.0.set(Some(message));
    }

    pub fn clear(self) {
        self.0.set(None);
    }
}

/// The page. A shared result (`#router&result=…`) is shown read-only and
/// starts nothing until the user asks for the live bench.
#[component]
pub fn RouterPage() -> impl IntoView {
    let (form, warnings) = RouterForm::from_fragment(&browser::current_fragment());
    let form = PageForm(RwSignal::new(form));
    let alert = Alert(RwSignal::new(None));
    provide_context(form);
    provide_context(alert);
    let shared = Memo::new(move |_| form.0.with(|f| f.result.clone()));
    Effect::new(move |_| browser::replace_fragment(&form.0.with(RouterForm::to_fragment)));
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
            {move || alert.0.get().map(|a| view! {
                <p class="problem" role="alert" data-testid="router-alert">
                    {a} " " <button type="button" class="link" on:click=move |_| alert.clear()>"Dismiss"</button>
                </p>
            })}
            {move || match shared.get() {
                Some(payload) => view! { <SharedResult payload=payload/> }.into_any(),
                None => view! { <LivePage/> }.into_any(),
            }}
        </main>
    }
}

#[component]
fn SharedResult(payload: String) -> impl IntoView {
    let form = expect_context::<PageForm>();
    let open_live = move |_| form.0.update(|f| f.result = None);
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

/// The live page: the worker starts with it (not for a shared result), and
/// stops when it goes.
#[component]
fn LivePage() -> impl IntoView {
    provide_context(worker::Worker::start_session(expect_context(), expect_context()));
    view! {
        <model_card::ModelCard/>
        <decide_card::DecideCard/>
        <bench_card::BenchCard/>
        <prefix_card::PrefixCard/>
        <quality_card::QualityCard/>
        <serve_card::ServeCard/>
        <generate_card::GenerateCard/>
        <serve_generate_card::ServeGenerateCard/>
        <request_card::RequestCard/>
    }
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

/// Downloads `report` as pretty JSON named `file`; a failure is the alert.
fn export_report(report: &Report, file: &str, alert: Alert) {
    let json = serde_json::to_string_pretty(report).unwrap_or_default();
    if let Err(e) = browser::download_text(file, &json, "application/json") {
        alert.show(format!("Export failed: {e}"));
    }
}

/// A shown report's Export and Share buttons (`{id}-export`, `{id}-share`)
/// and, once shared, its link (`{id}-share-link`).
#[component]
fn ReportActions(report: Report, file: &'static str, id: &'static str) -> impl IntoView {
    let alert = expect_context::<Alert>();
    let link = RwSignal::new(None::<String>);
    let (exported, shared) = (report.clone(), report);
    view! {
        <div class="row">
            <button type="button" data-testid=format!("{id}-export") on:click=move |_| export_report(&exported, file, alert)>"Export JSON"</button>
            <button type="button" data-testid=format!("{id}-share") on:click=move |_| share_report(&shared, link)>"Copy a share link"</button>
        </div>
        {move || link.get().map(|link| view! { <p class="note"><a data-testid=format!("{id}-share-link") href=link>"Share link"</a>" (copied)"</p> })}
    }
}

/// Fetches a committed report (`file`, beside the page) and the study in
/// its section; errors name the file and what is missing.
async fn fetch_study<T: Clone>(file: &str, what: &str, section: fn(&Report) -> Option<&T>) -> Result<(Report, T), String> {
    let report: Report = bench::share::parse_report(&browser::fetch_text(file).await?, file)?;
    let study = section(&report).cloned().ok_or_else(|| format!("{file} holds no {what}"))?;
    Ok((report, study))
}

/// One text field of a card's form (`F`, the fields as typed): labelled,
/// read from the form and written back to it on every keystroke, so
/// nothing typed is lost whatever the check later says of it.
fn text_field<F: Send + Sync + 'static>(
    form: RwSignal<F>,
    testid: String,
    label: &'static str,
    get: fn(&F) -> String,
    set: fn(&mut F, String),
) -> impl IntoView {
    view! {
        <label class="field small">{label}
            <input type="text" data-testid=testid prop:value=move || form.with(get) on:input=move |ev| form.update(|f| set(f, event_target_value(&ev)))/>
        </label>
    }
}

fn bytes_label(n: f64) -> String {
    kv::units::binary(n.max(0.0) as u128)
}

/// "Load the model first (card 1)." while no model is ready.
#[component]
fn NeedsModel() -> impl IntoView {
    let worker = expect_context::<worker::Worker>();
    move || worker.model.with(Option::is_none).then(|| view! { <p class="note">"Load the model first (card 1)."</p> })
}
