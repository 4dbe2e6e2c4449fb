//! The router page's Web Worker.
//!
//! [`RouterWorker`] owns the loaded router and answers [`wire::ToWorker`]
//! messages with [`wire::FromWorker`] ones. It fetches the bundled checkpoint
//! itself (the 98 MB never pass through a message; a second checkpoint the
//! manifest offers on request, Gemma 3, only when the user asks), checks its
//! SHA-256 against the site's manifest, keeps it in the Cache API for the next visit,
//! and runs `Router.decide`, the latency [`Session`] and the serving test's
//! `serving::Server` — the same library code `bench-decide` runs
//! natively.
//!
//! Every piece of work is a job of `wire`'s one protocol: the [`JobDesk`]
//! takes one at a time (refusing another as busy, typed, at once), and each
//! job reports through its ticket and ends with exactly one result or
//! failure. The long jobs yield to the event loop between calls, so a Cancel
//! message is read within one call; a call itself cannot be interrupted (the
//! page terminates the worker when one takes too long). A panic is reported
//! as a message before the instance dies, and the page restarts the worker.

mod generate;
mod io;
mod load;
mod studies;
#[cfg(target_feature = "atomics")]
mod threads;

use std::cell::RefCell;
use std::rc::Rc;

use bench::tasks::Task;
use bench::Protocol;
use js_sys::Reflect;
use load::storage_info;
use router::{Conversation, Precision, PrefixCache, Router};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wire::desk::{Finished, JobDesk, JobTicket, Outbox, Outcome};
use wire::{BuildInfo, Concern, FromWorker, JobProgress, JobRequest, JobResult, LoadProgress, LoadSource, LoadStage, ModelInfo, ToWorker};

/// The real task prompts the bench builds its exact-length prompts from, and
/// the page offers as conversations to start from.
const TASKS_JSONL: &str = include_str!("../../../data/coderouterbench/ood176_sample.jsonl");
const TASKS_NAME: &str = "data/coderouterbench/ood176_sample.jsonl";

/// A loaded router and what it was loaded from.
struct Loaded {
    router: Router,
    /// Kept so the bench can reload for a truly cold first call without
    /// reading the file again.
    bytes: Rc<Vec<u8>>,
    file_name: String,
    info: ModelInfo,
    /// Calls made since the router was loaded.
    calls: usize,
    /// The Decide button's prefix cache: a conversation decided again with
    /// more text prefills only what is new. Dropped with the router.
    prefix_cache: PrefixCache,
    /// The trained head the site pins for this checkpoint, when it has one:
    /// attached at load, and kept here too so the jobs that drop it (the
    /// quality card's routing) or build a new router (the bench's cold
    /// reload) put it back.
    head: Option<router::LoadedHead>,
}

impl Loaded {
    /// Scores with the checkpoint's own head again (if it has one).
    fn restore_head(&mut self) -> Result<(), String> {
        match &self.head {
            Some(head) => self.router.attach_loaded_head(head.clone(), &head.id).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

/// The worker: its state and the message handler.
pub struct RouterWorker {
    loaded: RefCell<Option<Loaded>>,
    desk: JobDesk,
    tasks: Vec<Task>,
}

/// Posts to the page (`postMessage` of the JSON text).
struct Page;

impl Outbox for Page {
    fn post(&self, message: &FromWorker) {
        post(message);
    }
}

/// Sets the panic hook and the message handler, then says hello.
pub fn register() {
    std::panic::set_hook(Box::new(|info| post(&FromWorker::Panicked { message: info.to_string() })));
    let tasks = bench::tasks::parse_jsonl(TASKS_JSONL, TASKS_NAME).unwrap_or_default();
    let worker = Rc::new(RouterWorker { loaded: RefCell::new(None), desk: JobDesk::new(), tasks });
    let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    let handler = worker.clone();
    let on_message = Closure::<dyn Fn(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
        let data = event.data();
        let json = Reflect::get(&data, &wire::JSON_FIELD.into()).ok().and_then(|v| v.as_string()).unwrap_or_default();
        let file = Reflect::get(&data, &wire::FILE_FIELD.into()).ok().and_then(|v| v.dyn_into::<web_sys::File>().ok());
        match ToWorker::from_json(&json) {
            // Taken or refused at once, before anything awaits: a second
            // job is refused while one runs, whatever its kind.
            Ok(ToWorker::Start { id, job }) => {
                if let Some(ticket) = handler.desk.accept(id, job.kind(), &Page) {
                    wasm_bindgen_futures::spawn_local(handler.clone().run(ticket, job, file));
                }
            }
            // Cancel is handled at once: the long jobs read it between calls.
            Ok(ToWorker::Cancel { id }) => handler.desk.cancel(id),
            Ok(ToWorker::Storage) => {
                wasm_bindgen_futures::spawn_local(async { post(&FromWorker::Storage { storage: storage_info().await }) })
            }
            Ok(ToWorker::ClearCache) => wasm_bindgen_futures::spawn_local(async {
                if let Err(message) = io::clear_cache().await {
                    post(&FromWorker::Problem { during: Concern::Storage, message });
                }
                post(&FromWorker::Storage { storage: storage_info().await });
            }),
            Err(message) => post(&FromWorker::Problem { during: Concern::Message, message }),
        }
    });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
    #[cfg(target_feature = "atomics")]
    {
        // One helper per further core, up to eight threads in all: the
        // prefill's panels and heads do not keep more busy at these sizes.
        let cores = Reflect::get(&scope.navigator(), &"hardwareConcurrency".into()).ok().and_then(|v| v.as_f64()).unwrap_or(1.0) as usize;
        // A helper that cannot start leaves fewer threads, which every
        // report's provenance records (`threads`); it is not an error.
        let _ = threads::start_helpers(cores.clamp(1, 8) - 1);
    }
    post(&FromWorker::Hello { tasks: worker.tasks.clone(), build: build_info() });
}

fn post(message: &FromWorker) {
    let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    // Posting only fails for uncloneable values; a string always clones.
    let _ = scope.post_message(&JsValue::from_str(&message.to_json()));
}

fn build_info() -> BuildInfo {
    BuildInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        git_revision: env!("WORKER_GIT_REVISION").into(),
        rustc: env!("WORKER_RUSTC_VERSION").into(),
        simd128: cfg!(target_feature = "simd128"),
        // Threads that compute: this worker plus the helpers attached so far.
        threads: router::parallel::threads(),
        cross_origin_isolated: Reflect::get(&js_sys::global(), &"crossOriginIsolated".into()).map(|v| v.is_truthy()).unwrap_or(false),
    }
}

/// The size of this instance's linear memory (an `ArrayBuffer`, or a
/// `SharedArrayBuffer` in the threads build: both have `byteLength`).
pub(crate) fn wasm_memory_bytes() -> u64 {
    let memory: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
    Reflect::get(&memory.buffer(), &"byteLength".into()).ok().and_then(|v| v.as_f64()).unwrap_or(0.0) as u64
}

fn now_ms() -> f64 {
    js_sys::Date::now()
}

impl RouterWorker {
    /// Runs a job the desk took, and ends it with its result or failure.
    async fn run(self: Rc<Self>, ticket: JobTicket, job: JobRequest, file: Option<web_sys::File>) {
        let outcome = match job {
            JobRequest::Load { source: LoadSource::Site { on_request }, precision } => {
                self.load_bundled(&ticket, on_request.as_deref(), precision).await
            }
            JobRequest::Load { source: LoadSource::File { name }, precision } => match file {
                Some(file) => self.load_file(&ticket, file, &name, precision).await,
                None => Err(format!("{name}: no file came with the message")),
            },
            JobRequest::Decide { conversation, mode, scoring } => self.decide(&conversation, mode.as_deref(), scoring),
            JobRequest::Bench { lengths, warmup, iterations, encode_iterations, mode } => {
                let encode_iterations = encode_iterations.unwrap_or(iterations);
                self.bench(&ticket, Protocol { lengths, warmup, iterations, encode_iterations }, mode).await
            }
            JobRequest::Prefix { long_tokens, iterations } => self.prefix_protocol(&ticket, long_tokens, iterations).await,
            JobRequest::Route { tasks, head_json } => self.route_tasks(&ticket, tasks, head_json).await,
            JobRequest::Serve { runs, tasks, trace, mode } => self.serve(&ticket, runs, tasks, trace, mode).await,
            JobRequest::Generate { conversation, params } => self.generate(&ticket, conversation, params).await,
            JobRequest::ServeGenerate { plan, output_lengths } => self.serve_generate(&ticket, plan, output_lengths).await,
            JobRequest::Request { conversation, params, mode } => self.request(&ticket, conversation, params, mode).await,
            JobRequest::DecodeSpeed { plan } => self.decode_speed(&ticket, plan).await,
            JobRequest::GemmProbe { m, k, n, repeats } => router::probe::gemm_probe(m, k, n, repeats, self.precision())
                .map(|probe| Finished::complete(JobResult::GemmProbed(probe)))
                .map_err(|e| e.to_string()),
            JobRequest::Roofline => match self.loaded.borrow().as_ref() {
                Some(loaded) => bench::roofline::measure(&loaded.router)
                    .map(|ceilings| Finished::complete(JobResult::Roofline(ceilings)))
                    .map_err(|e| e.to_string()),
                None => Err("no model is loaded yet".into()),
            },
        };
        self.desk.finish(ticket, outcome, &Page);
    }

    fn progress(&self, ticket: &JobTicket, progress: JobProgress) {
        self.desk.progress(ticket, progress, &Page);
    }

    fn load_stage(&self, ticket: &JobTicket, stage: LoadStage, done: u64, total: Option<u64>) {
        self.progress(ticket, JobProgress::Load(LoadProgress { stage, done, total }));
    }

    fn cancelled(&self, ticket: &JobTicket) -> bool {
        self.desk.cancel_requested(ticket)
    }

    /// The loaded router's precision, else the served one: what the
    /// GEMM probe times.
    fn precision(&self) -> Precision {
        self.loaded.borrow().as_ref().map_or(Precision::SERVED, |l| l.router.config().precision)
    }

    /// One decide, with the checkpoint's head or (`Similarity`) without it;
    /// a head's decision comes with its nearest training tasks, looked up
    /// after decide returned (outside its timings).
    fn decide(&self, conversation: &Conversation, mode: Option<&str>, scoring: wire::ScoringChoice) -> Outcome {
        let mut loaded = self.loaded.borrow_mut();
        let loaded = loaded.as_mut().ok_or("no model is loaded yet")?;
        // The similarity scoring: the head steps aside for this call and
        // comes back (moved, not copied) whatever the call's outcome.
        let aside = if scoring == wire::ScoringChoice::Similarity { loaded.router.detach_head() } else { None };
        let decision = loaded.router.decide_with_cache(conversation, mode, &mut loaded.prefix_cache).map_err(|e| e.to_string());
        if let Some(head) = aside {
            let id = head.id.clone();
            loaded.router.attach_loaded_head(head, &id).map_err(|e| e.to_string())?;
        }
        let decision = decision?;
        loaded.calls += 1;
        let neighbours = match (&decision.confidence, loaded.router.head()) {
            (Some(confidence), Some(head)) if decision.scoring == head.id => head.neighbours(&confidence.nearest),
            _ => Vec::new(),
        };
        Ok(Finished::complete(JobResult::Decided {
            decision: Box::new(decision),
            neighbours: wire::Deferred::encode(&neighbours),
            wasm_memory_bytes: wasm_memory_bytes(),
        }))
    }
}
