//! Helper threads for the threads build (`+atomics`, shared memory): Web
//! Workers that instantiate this same module on this worker's memory and
//! attach to `router::parallel`'s pool, so the prefill's matmuls and
//! attention heads run on several cores.
//!
//! The helpers are started from `router_helper.js`, a file beside this
//! worker's glue (`crates/router-worker/js/`, copied by
//! `scripts/build-threads-worker.sh`; a file and not a Blob URL, so the page's
//! Content-Security-Policy can allow same-origin workers only), which imports
//! the worker's own wasm-bindgen glue and then calls [`pool_helper`], which
//! never returns: a helper is a thread, blocked in
//! `memory.atomic.wait32` when idle. A helper that fails to start only means
//! fewer threads; the caller always runs tasks itself and never waits for a
//! helper that has not attached.

use js_sys::Array;
use wasm_bindgen::prelude::*;

/// The entry point a helper's script calls once it has instantiated the module.
#[wasm_bindgen]
pub fn pool_helper() {
    router::parallel::serve();
}

/// Starts `count` helpers; returns how many workers were created (they
/// attach to the pool a moment later, once instantiated).
pub fn start_helpers(count: usize) -> Result<usize, String> {
    let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    // The worker runs from `…/threads/router_worker_loader.js`; the helper's script is beside it.
    let here = scope.location().href();
    let url = web_sys::Url::new_with_base("router_helper.js", &here).map_err(|e| format!("{e:?}"))?.href();
    let message = Array::of2(&wasm_bindgen::module(), &wasm_bindgen::memory());
    let mut started = 0;
    for _ in 0..count {
        match web_sys::Worker::new(&url) {
            Ok(helper) => {
                if helper.post_message(&message).is_ok() {
                    started += 1;
                }
            }
            Err(e) => return if started > 0 { Ok(started) } else { Err(format!("{e:?}")) },
        }
    }
    Ok(started)
}
