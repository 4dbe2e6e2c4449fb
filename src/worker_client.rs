//! The UI thread's handle on the router worker: spawn it, post messages,
//! hear its answers and its crashes. Dropping the handle terminates the
//! worker, which is how a stuck or crashed worker is replaced.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wire::{FromWorker, ToWorker};

/// The loader shim Trunk writes for the `router_worker` binary: SIMD128, one thread.
const WORKER_SCRIPT: &str = "./router_worker_loader.js";
/// The threads build (`scripts/build-threads-worker.sh`): shared memory,
/// helper threads, relaxed-SIMD fused multiply–add.
const THREADS_WORKER_SCRIPT: &str = "./threads/router_worker_loader.js";

/// A module using one relaxed-SIMD instruction (`i8x16.relaxed_swizzle`);
/// `WebAssembly.validate` accepts it only where relaxed SIMD is available.
const RELAXED_SIMD_PROBE: [u8; 36] =
    [0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 15, 1, 13, 0, 65, 1, 253, 15, 65, 2, 253, 15, 253, 128, 2, 11];

/// Which worker build this page can run, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerBuild {
    /// Helper threads and relaxed SIMD.
    Threads,
    /// One thread, SIMD128: the page is not cross-origin isolated (no
    /// SharedArrayBuffer), the browser lacks relaxed SIMD, or it reports one core.
    SingleThread(&'static str),
}

impl WorkerBuild {
    /// The build for this page, decided once: what the page starts, its
    /// model card, the roofline readout and the widget all name the same
    /// build, and a re-render does not validate the probe module again.
    pub fn detect() -> WorkerBuild {
        thread_local! {
            static DETECTED: std::cell::OnceCell<WorkerBuild> = const { std::cell::OnceCell::new() };
        }
        DETECTED.with(|detected| *detected.get_or_init(WorkerBuild::probe))
    }

    /// What this browser and page allow, read now.
    fn probe() -> WorkerBuild {
        let global = js_sys::global();
        let get = |key: &str| js_sys::Reflect::get(&global, &key.into()).unwrap_or(JsValue::UNDEFINED);
        if !get("crossOriginIsolated").is_truthy() || get("SharedArrayBuffer").is_undefined() {
            return WorkerBuild::SingleThread("the page is not cross-origin isolated, so it cannot share memory between threads");
        }
        let probe = js_sys::Uint8Array::from(&RELAXED_SIMD_PROBE[..]);
        if !js_sys::WebAssembly::validate(&probe.into()).unwrap_or(false) {
            return WorkerBuild::SingleThread("this browser has no relaxed SIMD");
        }
        let navigator = js_sys::Reflect::get(&global, &"navigator".into()).unwrap_or(JsValue::UNDEFINED);
        let cores = js_sys::Reflect::get(&navigator, &"hardwareConcurrency".into()).ok().and_then(|v| v.as_f64()).unwrap_or(1.0);
        if cores < 2.0 {
            return WorkerBuild::SingleThread("the browser reports one core");
        }
        WorkerBuild::Threads
    }

    /// Which build runs, in a sentence (the threads count once the helpers
    /// have attached is in every report's environment).
    pub fn sentence(self) -> String {
        match self {
            WorkerBuild::Threads => "Worker: the threads build (helper threads on shared memory, relaxed-SIMD fused multiply–add).".into(),
            WorkerBuild::SingleThread(why) => format!("Worker: the single-thread SIMD128 build, because {why}."),
        }
    }

    fn script(self) -> &'static str {
        match self {
            WorkerBuild::Threads => THREADS_WORKER_SCRIPT,
            WorkerBuild::SingleThread(_) => WORKER_SCRIPT,
        }
    }
}

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
        let worker =
            web_sys::Worker::new(WorkerBuild::detect().script()).map_err(|e| format!("could not start the router worker: {e:?}"))?;
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
