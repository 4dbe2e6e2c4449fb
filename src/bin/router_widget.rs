//! Entry point of the latency widget (`router/?embed=latency`): mount it,
//! nothing else. Its own bundle, so the guide's first load is this widget
//! alone (see `src/latency_widget.rs`).

fn main() {
    leptos::mount::mount_to_body(workbench::LatencyWidget);
}
