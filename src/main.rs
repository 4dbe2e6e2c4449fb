//! Entry point of the web app: mount the page, nothing else.

fn main() {
    leptos::mount::mount_to_body(workbench::App);
}
