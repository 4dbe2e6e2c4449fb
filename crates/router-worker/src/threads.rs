//! Helper threads for the threads build (`+atomics`, shared memory): Web
//! Workers that instantiate this same module on this worker's memory and
//! attach to `router::parallel`'s pool, so the prefill's matmuls and
//! attention heads run on several cores.
//!
//! The helpers are started from a small script made here (a Blob URL), which
//! imports the worker's own wasm-bindgen glue by absolute URL and then calls
//! [`pool_helper`], which never returns: a helper is a thread, blocked in
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
    // The worker runs from `…/router_worker_loader.js`; the glue is beside it.
    let here = scope.location().href();
    let glue = web_sys::Url::new_with_base("router_worker.js", &here).map_err(|e| format!("{e:?}"))?.href();
    let source = format!(
        "importScripts({glue:?});\n\
         self.onmessage = async (event) => {{\n\
           const [module, memory] = event.data;\n\
           await wasm_bindgen({{ module_or_path: module, memory }});\n\
           wasm_bindgen.pool_helper();\n\
         }};\n"
    );
    let options = web_sys::BlobPropertyBag::new();
    options.set_type("text/javascript");
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&Array::of1(&source.into()), &options).map_err(|e| format!("{e:?}"))?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(|e| format!("{e:?}"))?;
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
