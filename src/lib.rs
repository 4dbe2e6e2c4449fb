//! The workbench web app (UI thread): Leptos (CSR) shells over pure crates.
//!
//! Two pages, two bundles. The calculator (`index.html`, bin `workbench`)
//! mounts [`App`]: it binds its inputs to a [`kv::Form`] in the URL query and
//! prints what [`kv::evaluate`] returns. The router page
//! (`router/index.html`, bin `router-page`) mounts [`RouterPage`]: it binds a
//! [`bench::page::RouterForm`] to the URL fragment and talks to the router
//! worker (`crates/router-worker`), the only place the model runs. The
//! router page's address with `?embed=latency` loads a third bundle (bin
//! `router-widget`), [`LatencyWidget`]: the field guide's latency table and a
//! button that runs the protocol in that worker. This crate links no candle,
//! and the calculator's bundle holds no router page code.

pub mod browser;
pub mod kv_distribution;
pub mod kv_gguf;
pub mod kv_page;
pub mod kv_reconcile;
pub mod latency_widget;
pub mod quality_view;
pub mod report_view;
pub mod request_view;
pub mod roofline_view;
pub mod router_page;
pub mod serve_view;
pub mod worker_client;

use leptos::prelude::*;

pub use kv_page::KvPage;
pub use latency_widget::LatencyWidget;
pub use router_page::RouterPage;

/// The calculator. `?embed=kv` renders the compact widget; an old-style
/// `#router…` address is forwarded to the router page, fragment and all.
#[component]
pub fn App() -> impl IntoView {
    let fragment = browser::current_fragment();
    if bench::page::is_router_fragment(&fragment) {
        browser::go_to(&format!("router/#{fragment}"));
    }
    view! { <KvPage/> }
}
