//! The whole request at the client, on the router page: the routed
//! requests' table (the router's two boundaries, the worker's account on
//! its clock, the page's own times), their timeline, and note 06's
//! decomposition checked against the page's clock. Everything shown comes
//! from a report's `client` section, computed by `bench::client_run`; a
//! report the load generator wrote shows its runs' table instead.

use bench::client_run::{
    request_rows, request_timeline_svg, run_rows, runs_svg, ClientRecord, ClientStudy, Decomposition, REQUEST_COLUMNS, RUN_COLUMNS,
};
use leptos::prelude::*;

use crate::report_view::CellTable;

#[component]
pub fn RequestView(study: ClientStudy) -> impl IntoView {
    let requests = (!study.requests.is_empty()).then(|| {
        let rows = request_rows(&study.requests);
        let timeline = request_timeline_svg(&study.requests);
        let clients: Vec<ClientRecord> = study.requests.iter().map(|r| r.client.clone()).collect();
        let lines = Decomposition::of(&clients).lines();
        view! {
            <CellTable id="request-table" columns=&REQUEST_COLUMNS rows=rows/>
            <figure class="plot" data-testid="request-timeline" inner_html=timeline></figure>
            <ul class="verdicts" data-testid="request-decomposition">
                {lines.into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}
            </ul>
        }
    });
    // The load generator's runs (openai-replay), when the report holds them.
    let runs = (!study.runs.is_empty()).then(|| {
        let rows = run_rows(&study.runs);
        let figure = runs_svg(&study.runs);
        // Reports before the trace flag carry no source: theirs were Poisson.
        let arrivals = match study.arrivals.as_deref() {
            None | Some("poisson") => "open-loop Poisson arrivals from the seed".to_string(),
            Some(trace) => format!("the trace {trace}, replayed as written"),
        };
        view! {
            <h4>"Replayed against OpenAI-compatible endpoints (openai-replay), at the client: " {arrivals}</h4>
            <CellTable id="request-runs" columns=&RUN_COLUMNS rows=rows text=true/>
            <figure class="plot" data-testid="request-runs-plot" inner_html=figure></figure>
        }
    });
    view! {
        <div class="request-study" data-testid="request-study">
            {requests}
            {runs}
        </div>
    }
}
