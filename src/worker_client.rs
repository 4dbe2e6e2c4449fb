//! The UI thread's handle on the router worker: spawn it, post messages,
//! hear its answers and its crashes. Dropping the handle terminates the
//! worker, which is how a stuck or crashed worker is replaced.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wire::{FromWorker, ToWorker};

/// The loader shim Trunk writes for the `router_worker` binary.
const WORKER_SCRIPT: &str = "./router_worker_loader.js";

pub struct WorkerClient {
    worker: web_sys::Worker,
    // Kept alive as long as the worker they listen to.
    _on_message: Closure<dyn Fn(web_sys::MessageEvent)>,
    _on_error: Closure<dyn Fn(web_sys::ErrorEvent)>,
}

impl WorkerClient {
    /// Starts the worker. `on_message` gets every decoded message (or why one
    /// could not be read); `on_error` gets uncaught errors, including the
    /// trap a Rust panic ends in.
    pub fn spawn(
        on_message: impl Fn(Result<FromWorker, String>) + 'static,
        on_error: impl Fn(String) + 'static,
    ) -> Result<WorkerClient, String> {
        let worker = web_sys::Worker::new(WORKER_SCRIPT).map_err(|e| format!("could not start the router worker: {e:?}"))?;
        let on_message = Closure::<dyn Fn(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            let message = event
                .data()
                .as_string()
                .ok_or_else(|| "the worker sent a message that is not text".to_string())
                .and_then(|t| FromWorker::from_json(&t));
            on_message(message);
        });
        let on_error = Closure::<dyn Fn(web_sys::ErrorEvent)>::new(move |event: web_sys::ErrorEvent| {
            event.prevent_default();
            let message = event.message();
            on_error(if message.is_empty() { "the router worker failed to start or crashed".into() } else { message });
        });
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        Ok(WorkerClient { worker, _on_message: on_message, _on_error: on_error })
    }

    /// Posts a message, with a user-picked file beside it when given.
    pub fn send(&self, message: &ToWorker, file: Option<&web_sys::File>) -> Result<(), String> {
        let envelope = js_sys::Object::new();
        let set = |key: &str, value: &JsValue| js_sys::Reflect::set(&envelope, &key.into(), value).map(|_| ());
        set(wire::JSON_FIELD, &JsValue::from_str(&message.to_json())).map_err(|e| format!("{e:?}"))?;
        if let Some(file) = file {
            set(wire::FILE_FIELD, file).map_err(|e| format!("{e:?}"))?;
        }
        self.worker.post_message(&envelope).map_err(|e| format!("could not reach the router worker: {e:?}"))
    }
}

impl Drop for WorkerClient {
    fn drop(&mut self) {
        self.worker.set_onmessage(None);
        self.worker.set_onerror(None);
        self.worker.terminate();
    }
}
