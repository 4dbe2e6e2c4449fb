//! Entry point of the router page (`router/index.html`): mount it, nothing else.

fn main() {
    leptos::mount::mount_to_body(workbench::RouterPage);
}
