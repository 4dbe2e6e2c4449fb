//! The router worker's entry point: register the message handler, nothing else.
//! Trunk builds this binary as a worker (`data-type="worker"`) and the page
//! spawns it through the generated loader shim.

fn main() {
    router_worker::register();
}
