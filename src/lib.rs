//! The workbench web app: a Leptos (CSR) shell over the pure `kv` crate.
//!
//! `main.rs` only mounts [`App`]. The page reads its state from the URL query,
//! binds every input to a [`kv::Form`], and prints what [`kv::evaluate`]
//! returns. No arithmetic lives here: the page shows what the pure crate
//! computes, so the command line twin prints the same numbers.

pub mod browser;
pub mod kv_page;

use leptos::prelude::*;

pub use kv_page::KvPage;

/// The whole app. `?embed=kv` renders the compact widget for an iframe.
#[component]
pub fn App() -> impl IntoView {
    view! { <KvPage/> }
}
