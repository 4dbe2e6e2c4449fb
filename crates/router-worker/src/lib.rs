//! The router page's Web Worker.
//!
//! [`RouterWorker`] owns the loaded router and answers [`wire::ToWorker`]
//! messages with [`wire::FromWorker`] ones. It fetches the bundled checkpoint
//! itself (the 98 MB never pass through a message; a second checkpoint the
//! manifest offers on request, Gemma 3, only when the user asks), checks its
//! SHA-256 against the site's manifest, keeps it in the Cache API for the next visit,
//! and runs `Router.decide`, the latency [`Session`] and the serving test's
//! `bench::serve::Server` — the same library code `bench-decide` runs
//! natively.
//!
//! The bench yields to the event loop between calls, so a Cancel message is
//! read within one call; a call itself cannot be interrupted (the page
//! terminates the worker when one takes too long). A panic is reported as a
//! message before the instance dies, and the page restarts the worker.

mod io;
#[cfg(target_feature = "atomics")]
mod threads;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bench::report::{component_versions, Environment, ProtocolRecord, Provenance, Report, SCHEMA};
use bench::serve::{self, ServeSettings};
use bench::tasks::Task;
use bench::{Protocol, Session};
use js_sys::Reflect;
use router::{CacheBudget, Conversation, Precision, PrefixCache, Router, RouterAssets, RouterConfig};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wire::{Activity, BuildInfo, FromWorker, Manifest, ManifestModel, ModeInfo, ModelInfo, Source, StorageInfo, ToWorker};

/// The pool the page routes over, compiled in (it is configuration, not data
/// the user supplies).
const POOL_YAML: &[u8] = include_bytes!("../../../configs/pool.coderouterbench.yaml");
const POOL_NAME: &str = "configs/pool.coderouterbench.yaml";
/// The real task prompts the bench builds its exact-length prompts from, and
/// the page offers as conversations to start from.
const TASKS_JSONL: &str = include_str!("../../../data/coderouterbench/ood176_sample.jsonl");
const TASKS_NAME: &str = "data/coderouterbench/ood176_sample.jsonl";
const MANIFEST_URL: &str = "models/manifest.json";

/// A router built but not yet the loaded one, and where to keep its
/// descriptor vectors once it is (`None`: they came from there).
struct Prepared {
    router: Router,
    keep: Option<(web_sys::Cache, String)>,
}

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
}

/// The worker: its state and the message handler.
pub struct RouterWorker {
    loaded: RefCell<Option<Loaded>>,
    busy: Cell<Option<Activity>>,
    cancel: Cell<bool>,
    tasks: Vec<Task>,
}

/// Sets the panic hook and the message handler, then says hello.
pub fn register() {
    std::panic::set_hook(Box::new(|info| post(&FromWorker::Panicked { message: info.to_string() })));
    let tasks = bench::tasks::parse_jsonl(TASKS_JSONL, TASKS_NAME).unwrap_or_default();
    let worker = Rc::new(RouterWorker { loaded: RefCell::new(None), busy: Cell::new(None), cancel: Cell::new(false), tasks });
    let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    let handler = worker.clone();
    let on_message = Closure::<dyn Fn(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
        let data = event.data();
        let json = Reflect::get(&data, &wire::JSON_FIELD.into()).ok().and_then(|v| v.as_string()).unwrap_or_default();
        let file = Reflect::get(&data, &wire::FILE_FIELD.into()).ok().and_then(|v| v.dyn_into::<web_sys::File>().ok());
        match ToWorker::from_json(&json) {
            // Cancel is handled at once: the bench loop reads the flag between calls.
            Ok(ToWorker::Cancel) => handler.cancel.set(true),
            Ok(message) => wasm_bindgen_futures::spawn_local(handler.clone().handle(message, file)),
            Err(message) => post(&FromWorker::Failed { during: Activity::Message, message }),
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
    post(&FromWorker::Started { tasks: worker.tasks.clone(), build: build_info() });
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
    async fn handle(self: Rc<Self>, message: ToWorker, file: Option<web_sys::File>) {
        let activity = match &message {
            ToWorker::LoadBundled { .. } | ToWorker::LoadFile { .. } => Activity::Load,
            ToWorker::Decide { .. } | ToWorker::GemmProbe { .. } => Activity::Decide,
            ToWorker::Bench { .. } | ToWorker::PrefixProtocol { .. } | ToWorker::RouteTasks { .. } | ToWorker::Serve { .. } => {
                Activity::Bench
            }
            ToWorker::Storage | ToWorker::ClearCache | ToWorker::Cancel => Activity::Storage,
        };
        if matches!(activity, Activity::Load | Activity::Decide | Activity::Bench) {
            if let Some(current) = self.busy.get() {
                let message = format!("the worker is busy ({current:?}); wait for it to finish or cancel it").to_lowercase();
                post(&FromWorker::Failed { during: activity, message });
                return;
            }
            self.busy.set(Some(activity));
        }
        let outcome = match message {
            ToWorker::LoadBundled { on_request, precision } => self.load_bundled(on_request.as_deref(), precision).await,
            ToWorker::LoadFile { name, precision } => match file {
                Some(file) => self.load_file(file, &name, precision).await,
                None => Err(format!("{name}: no file came with the message")),
            },
            ToWorker::Decide { conversation, mode } => self.decide(&conversation, mode.as_deref()),
            ToWorker::Bench { lengths, warmup, iterations, encode_iterations, mode } => {
                let encode_iterations = encode_iterations.unwrap_or(iterations);
                self.bench(Protocol { lengths, warmup, iterations, encode_iterations }, mode).await
            }
            ToWorker::PrefixProtocol { long_tokens, iterations } => self.prefix_protocol(long_tokens, iterations).await,
            ToWorker::RouteTasks { tasks, head_json } => self.route_tasks(tasks, head_json).await,
            ToWorker::Serve { runs, tasks, trace, mode } => self.serve(runs, tasks, trace, mode).await,
            ToWorker::GemmProbe { m, k, n, repeats } => match router::probe::gemm_probe(m, k, n, repeats, self.precision()) {
                Ok(probe) => {
                    post(&FromWorker::GemmProbed { probe });
                    Ok(())
                }
                Err(e) => Err(e.to_string()),
            },
            ToWorker::Storage => {
                post(&FromWorker::Storage { storage: storage_info().await });
                Ok(())
            }
            ToWorker::ClearCache => match io::clear_cache().await {
                Ok(_) => {
                    post(&FromWorker::Storage { storage: storage_info().await });
                    Ok(())
                }
                Err(e) => Err(e),
            },
            ToWorker::Cancel => Ok(()),
        };
        if matches!(activity, Activity::Load | Activity::Decide | Activity::Bench) {
            self.busy.set(None);
        }
        if let Err(message) = outcome {
            post(&FromWorker::Failed { during: activity, message });
        }
    }

    /// The loaded router's precision, else the default one: what the
    /// GEMM probe times.
    fn precision(&self) -> Precision {
        self.loaded.borrow().as_ref().map_or(RouterConfig::default().precision, |l| l.router.config().precision)
    }

    async fn load_bundled(&self, on_request: Option<&str>, precision: Option<Precision>) -> Result<(), String> {
        progress("reading the model manifest", 0, None);
        // Started now, it is running by the time the bytes are in.
        let digest_helper = io::DigestHelper::spawn();
        let manifest = manifest().await?;
        let model = match on_request {
            None => manifest.bundled().cloned().ok_or_else(|| format!("{MANIFEST_URL}: lists no bundled model"))?,
            Some(file) => manifest
                .on_request(file)
                .cloned()
                .ok_or_else(|| format!("{file}: the site's manifest offers no such checkpoint on request; nothing was fetched"))?,
        };
        // The one URL the checkpoint is fetched, cached and deleted under.
        let url = io::site_url(&model.file);
        let cache = io::open_cache().await;
        let hit = match &cache {
            Ok(cache) => io::cached(cache, &url).await,
            Err(_) => None,
        };
        let source = if hit.is_some() { Source::Cached } else { Source::Downloaded };
        let started = now_ms();
        let response = match hit {
            Some(response) => response,
            None => io::fetch(&url).await.map_err(|e| {
                if model.on_request {
                    format!(
                        "{e}. {} is offered on request and this site does not serve it ({}); you can pick the file yourself below",
                        model.name, model.source
                    )
                } else {
                    e
                }
            })?,
        };
        let stage = if source == Source::Cached { "reading the cached checkpoint" } else { "downloading the checkpoint" };
        let body = response.body().ok_or_else(|| format!("{}: the response has no body", model.file))?;
        let total = model.bytes;
        let (bytes, chunks) = io::read_stream(body, &model.file, total, &mut |done| progress(stage, done, Some(total))).await?;
        let read_ms = now_ms() - started;

        // Only a download has anything to store: a cached read lets its
        // chunks go before the weights are built.
        let chunks = (source == Source::Downloaded).then_some(chunks);
        // Verification overlaps the weight load: a helper worker digests the
        // bytes (`io::Sha256Job`) while the router is built under the
        // manifest's digest. The router is shown, and anything kept, only
        // once the bytes' own digest agrees; `verify_ms` is the wait left
        // after the build.
        progress("preparing the weights while SHA-256 is checked against the manifest", 0, None);
        self.loaded.borrow_mut().take();
        let digest = io::Sha256Job::start(&bytes, digest_helper);
        let prepared = if bytes.len() as u64 == model.bytes {
            Some(self.prepare_router(&bytes, &model.file, &model.sha256, precision).await)
        } else {
            None
        };
        let started = now_ms();
        let sha256 = digest.finish().await?;
        let verify_ms = now_ms() - started;
        let prepared = match prepared {
            Some(prepared) if sha256 == model.sha256 => prepared?,
            _ => {
                if let Ok(cache) = &cache {
                    // A damaged cached copy must not be read again on the next visit.
                    let _ = wasm_bindgen_futures::JsFuture::from(cache.delete_with_str(&url)).await;
                }
                return Err(format!(
                    "{}: SHA-256 {sha256} ({} bytes) does not match the manifest's {} ({} bytes); the file was not loaded{}",
                    model.file,
                    bytes.len(),
                    model.sha256,
                    model.bytes,
                    if source == Source::Cached { " and the cached copy was deleted" } else { "" }
                ));
            }
        };
        if let (Some(chunks), Ok(cache)) = (&chunks, &cache) {
            // A full quota costs the next visit a download, not this load:
            // the model still loads, and the page is told why nothing was kept.
            if let Err(e) = io::store(cache, &url, chunks).await {
                post(&FromWorker::Failed {
                    during: Activity::Storage,
                    message: format!(
                        "{} was loaded but not kept in this browser's cache ({e}): the next visit downloads it again",
                        model.file
                    ),
                });
            }
        }
        drop(chunks);
        let info = ModelInfoParts { source, read_ms, verify_ms, sha256, sha256_checked: true };
        self.install(prepared, Rc::new(bytes), &model.file, info).await;
        // The storage figures follow on their own: awaited here, they would
        // keep the worker busy after `Loaded`, and a page that starts a
        // bench the moment it hears `Loaded` (the latency widget) would be
        // told the worker is still loading.
        wasm_bindgen_futures::spawn_local(async { post(&FromWorker::Storage { storage: storage_info().await }) });
        Ok(())
    }

    async fn load_file(&self, file: web_sys::File, name: &str, precision: Option<Precision>) -> Result<(), String> {
        let total = file.size() as u64;
        let started = now_ms();
        let (bytes, _) = io::read_stream(file.stream(), name, total, &mut |done| progress("reading the file", done, Some(total))).await?;
        let read_ms = now_ms() - started;
        progress("hashing the file", 0, None);
        let started = now_ms();
        let sha256 = io::sha256_hex(&bytes).await?;
        let verify_ms = now_ms() - started;
        let info = ModelInfoParts { source: Source::UserFile, read_ms, verify_ms, sha256, sha256_checked: false };
        self.loaded.borrow_mut().take();
        let prepared = self.prepare_router(&bytes, name, &info.sha256, precision).await?;
        self.install(prepared, Rc::new(bytes), name, info).await;
        Ok(())
    }

    /// Builds a router from bytes whose digest is `sha256` (the old one must
    /// be dropped first: two routers at once may not fit). The candidates'
    /// descriptor vectors come from the browser's cache when an earlier load
    /// of the same file at the same precision kept them there (the router
    /// checks the settings they were encoded under), so a second visit skips
    /// encoding them.
    async fn prepare_router(&self, bytes: &[u8], file_name: &str, sha256: &str, precision: Option<Precision>) -> Result<Prepared, String> {
        let precision = precision.unwrap_or(RouterConfig::default().precision);
        let cache = io::open_cache().await.ok();
        // The revision too: vectors another build's kernels encoded are not
        // this build's, though every setting the router checks matches.
        let url = io::site_url(&format!("descriptor-cache/{sha256}.{}.{}.bin", precision.flag(), env!("WORKER_GIT_REVISION")));
        let cached = match &cache {
            Some(cache) => io::cached_bytes(cache, &url).await,
            None => None,
        };
        let router = build_router(bytes, file_name, sha256, precision, cached.as_deref())?;
        let keep = if router.load_timings.descriptors_cached { None } else { cache.map(|cache| (cache, url)) };
        Ok(Prepared { router, keep })
    }

    /// Makes a prepared (and, for a site's checkpoint, verified) router the
    /// loaded one, tells the page, and keeps newly encoded descriptor vectors.
    async fn install(&self, prepared: Prepared, bytes: Rc<Vec<u8>>, file_name: &str, parts: ModelInfoParts) {
        let Prepared { router, keep } = prepared;
        if let Some((cache, url)) = keep {
            // Not keeping them only costs the next load the encoding.
            let _ = io::store_bytes(&cache, &url, &router.descriptor_cache()).await;
        }
        let info = model_info(&router, file_name, bytes.len() as u64, parts);
        post(&FromWorker::Loaded { model: Box::new(info.clone()) });
        *self.loaded.borrow_mut() = Some(Loaded {
            router,
            bytes,
            file_name: file_name.to_string(),
            info,
            calls: 0,
            prefix_cache: PrefixCache::new(CacheBudget::default()),
        });
    }

    fn decide(&self, conversation: &Conversation, mode: Option<&str>) -> Result<(), String> {
        let mut loaded = self.loaded.borrow_mut();
        let loaded = loaded.as_mut().ok_or("no model is loaded yet")?;
        let decision = loaded.router.decide_with_cache(conversation, mode, &mut loaded.prefix_cache).map_err(|e| e.to_string())?;
        loaded.calls += 1;
        post(&FromWorker::Decided { decision, wasm_memory_bytes: wasm_memory_bytes() });
        Ok(())
    }

    /// The note-04 protocol, one call per step with a yield between, on
    /// caches of its own (the Decide button's cache is left as it was).
    async fn prefix_protocol(&self, long_tokens: usize, iterations: usize) -> Result<(), String> {
        self.cancel.set(false);
        let loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.prefix_protocol_with(&loaded, long_tokens, iterations).await;
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn prefix_protocol_with(&self, loaded: &Loaded, long_tokens: usize, iterations: usize) -> Result<(), String> {
        let texts: Vec<String> = self.tasks.iter().map(|t| t.prompt.clone()).collect();
        let router = &loaded.router;
        let inputs = bench::prefix::PrefixInputs::from_texts(router, &texts, long_tokens, iterations).map_err(|e| e.to_string())?;
        let mut session = bench::prefix::PrefixSession::new(&inputs, CacheBudget::default());
        let mut cancelled = false;
        while !session.is_finished() {
            if self.cancel.get() {
                cancelled = true;
                break;
            }
            let label = session.step(router, &inputs).map_err(|e| e.to_string())?.unwrap_or_default();
            let (done, total) = session.progress();
            post(&FromWorker::PrefixStep { done, total, label });
            // Let the Cancel message in; outside the timed calls.
            gloo_timers::future::TimeoutFuture::new(0).await;
        }
        post(&FromWorker::PrefixDone { report: Box::new(session.report(router)), cancelled });
        Ok(())
    }

    /// Routes tasks one at a time with a yield between (the quality
    /// card's in-browser evaluation), through the same `route_task` the
    /// native study uses. The router is left without a head.
    async fn route_tasks(&self, tasks: Vec<wire::TaskPrompt>, head_json: Option<String>) -> Result<(), String> {
        self.cancel.set(false);
        let mut loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.route_tasks_with(&mut loaded, tasks, head_json).await;
        loaded.router.detach_head();
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn route_tasks_with(&self, loaded: &mut Loaded, tasks: Vec<wire::TaskPrompt>, head_json: Option<String>) -> Result<(), String> {
        const HEAD_FILE: &str = "the trained head";
        let head =
            head_json.map(|json| router::LoadedHead::from_json(json.as_bytes(), HEAD_FILE)).transpose().map_err(|e| e.to_string())?;
        if let Some(head) = &head {
            // Refuse a head that does not fit before routing anything.
            loaded.router.attach_loaded_head(head.clone(), HEAD_FILE).map_err(|e| e.to_string())?;
            loaded.router.detach_head();
        }
        let total = tasks.len();
        let mut cancelled = false;
        for (i, task) in tasks.iter().enumerate() {
            if self.cancel.get() {
                cancelled = true;
                break;
            }
            let outcome = bench::quality::route::route_task(&mut loaded.router, head.as_ref(), &task.id, &task.prompt)
                .map_err(|e| format!("task {}: {e}", task.id))?;
            loaded.calls += 1;
            post(&FromWorker::TaskRouted { done: i + 1, total, routed: outcome.routed });
            // Let the Cancel message in; outside the timed calls.
            gloo_timers::future::TimeoutFuture::new(0).await;
        }
        post(&FromWorker::RouteDone {
            checkpoint_id: loaded.router.backbone_checkpoint_id().to_string(),
            head_id: head.map(|h| h.id),
            cancelled,
        });
        Ok(())
    }

    /// The serving test: each run in real time on this worker's one
    /// engine, through the same `bench::serve::Server` the native CLI
    /// steps. While the engine is idle the worker awaits a timer (at most
    /// 50 ms at a time, so Cancel is read); while it works it yields at
    /// most every 100 ms, to post the queue and let Cancel in.
    async fn serve(
        &self,
        runs: Vec<ServeSettings>,
        tasks: Vec<wire::TaskPrompt>,
        trace: Option<String>,
        mode: Option<String>,
    ) -> Result<(), String> {
        self.cancel.set(false);
        let loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.serve_with(&loaded, runs, tasks, trace, mode).await;
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn serve_with(
        &self,
        loaded: &Loaded,
        plan: Vec<ServeSettings>,
        tasks: Vec<wire::TaskPrompt>,
        trace: Option<String>,
        mode: Option<String>,
    ) -> Result<(), String> {
        const YIELD_EVERY_MS: f64 = 100.0;
        const LONGEST_WAIT_MS: f64 = 50.0;
        let started_unix_ms = now_ms() as u64;
        for settings in &plan {
            settings.check().map_err(|e| e.to_string())?;
        }
        let named: Vec<(String, Conversation)> = tasks.iter().map(|t| (t.id.clone(), serve::engine::user_turn(&t.prompt))).collect();
        let (named, replay, arrivals_name) = match &trace {
            Some(text) => {
                let lines = serve::parse_trace(text).map_err(|e| e.to_string())?;
                let (named, arrivals) = serve::trace_arrivals(&lines, &named).map_err(|e| e.to_string())?;
                (named, Some(arrivals), "trace file".to_string())
            }
            None => (named, None, "poisson".to_string()),
        };
        let (mut engine, prompts) = serve::engine::RouterEngine::new(&loaded.router, named, mode.clone())?;
        let unloaded_heaviest_ms = engine.warm_up(&prompts)?;
        post(&FromWorker::ServeStarted { prompts: prompts.len(), runs: plan.len(), unloaded_heaviest_ms });
        let mut runs = Vec::new();
        let mut cancelled = false;
        for (index, mut settings) in plan.into_iter().enumerate() {
            let arrivals = match &replay {
                Some(arrivals) => {
                    serve::fit_to_trace(&mut settings, arrivals);
                    arrivals.clone()
                }
                None => serve::poisson_trace(settings.rate_per_s, settings.duration_s, settings.seed, prompts.len()),
            };
            let total = arrivals.len();
            let label = serve::run_label(&settings);
            let mut server = serve::Server::new(settings, prompts.clone(), arrivals).map_err(|e| e.to_string())?;
            let start = web_time::Instant::now();
            let clock = move || start.elapsed().as_secs_f64() * 1000.0;
            let tick = |server: &serve::Server<_>| {
                let sample = *server.queue_samples().last().expect("a server starts with a sample");
                post(&FromWorker::ServeTick {
                    run: index,
                    sample: serve::QueueSample { t_ms: clock(), ..sample },
                    finished: server.records().len(),
                    arrivals: total,
                });
            };
            let mut last_yield = 0.0;
            loop {
                if self.cancel.get() {
                    cancelled = true;
                    server.stop(clock());
                    break;
                }
                match server.step(&mut engine, &mut { clock }) {
                    serve::Step::Worked => {
                        if clock() - last_yield >= YIELD_EVERY_MS {
                            tick(&server);
                            gloo_timers::future::TimeoutFuture::new(0).await;
                            last_yield = clock();
                        }
                    }
                    serve::Step::IdleUntil(t) => {
                        tick(&server);
                        let wait = (t - clock()).clamp(0.0, LONGEST_WAIT_MS);
                        gloo_timers::future::TimeoutFuture::new(wait.ceil() as u32).await;
                        last_yield = clock();
                    }
                    serve::Step::Done => break,
                }
            }
            let run = server.finish(if cancelled { format!("{label} (cancelled)") } else { label });
            post(&FromWorker::ServeRunDone {
                index,
                label: run.label.clone(),
                settings: run.settings.clone(),
                summary: Box::new(run.summary.clone()),
            });
            runs.push(run);
            if cancelled {
                break;
            }
        }
        let router = &loaded.router;
        let study = serve::ServeStudy {
            prompt_set: "OOD176 prompts (router/data/ood176_tasks.jsonl)".into(),
            prompts,
            router_max_tokens: router.config().max_tokens,
            arrivals: arrivals_name,
            runs,
            note: "router page's worker; the page's UI thread stays live".into(),
            unloaded_heaviest_ms: Some(unloaded_heaviest_ms),
        };
        let described = format!(
            "serving test: {} runs, {} arrivals, mode={}",
            study.runs.len(),
            study.arrivals,
            mode.as_deref().unwrap_or("(pool default)")
        );
        let mut report = Report::for_study(
            environment(started_unix_ms, described),
            Provenance::of(router, &loaded.file_name),
            router.load_timings,
            study.prompt_set.clone(),
        );
        report.set_serve(&study);
        post(&FromWorker::ServeDone { report: Box::new(report), cancelled });
        Ok(())
    }

    async fn bench(&self, protocol: Protocol, mode: Option<String>) -> Result<(), String> {
        self.cancel.set(false);
        let mut loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.bench_with(&mut loaded, protocol, mode).await;
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn bench_with(&self, loaded: &mut Loaded, protocol: Protocol, mode: Option<String>) -> Result<(), String> {
        let started_unix_ms = now_ms() as u64;
        if let Some(mode) = mode.as_deref().filter(|m| !loaded.router.pool.modes.contains_key(*m)) {
            return Err(format!("unknown mode `{mode}`"));
        }
        let texts: Vec<String> = self.tasks.iter().map(|t| t.prompt.clone()).collect();
        let prompts = protocol
            .lengths
            .iter()
            .map(|&n| router::prompts::exact_prompt(&loaded.router.tokenizer, &texts, n).map_err(|e| format!("{n} tokens: {e}")))
            .collect::<Result<Vec<_>, String>>()?;
        // The protocol's first call must be the first after loading; earlier
        // decides would have warmed it, so reload from the kept bytes.
        let reloaded = loaded.calls > 0;
        if reloaded {
            loaded.calls = 0;
            // Descriptors encoded again, as bench-decide's load does, so the
            // first call follows the same work in both.
            let router = build_router(&loaded.bytes, &loaded.file_name, &loaded.info.sha256, loaded.router.config().precision, None)?;
            loaded.info.load = router.load_timings;
            loaded.router = router;
            loaded.prefix_cache.clear();
            post(&FromWorker::Loaded { model: Box::new(loaded.info.clone()) });
        }
        let mut session = Session::new(&prompts, protocol.clone(), mode.as_deref());
        post(&FromWorker::BenchStarted {
            prompts: prompts.iter().map(|p| (p.tokens, p.characters)).collect(),
            reloaded,
            overall: session.overall(),
        });
        let mut cancelled = false;
        loop {
            if self.cancel.get() {
                cancelled = true;
                break;
            }
            let step = session.step(&loaded.router).map_err(|e| e.to_string());
            loaded.calls += 1;
            match step? {
                Some(s) => post(&FromWorker::BenchStep {
                    prompt_tokens: s.prompt_tokens,
                    phase: s.phase.label().into(),
                    ms: s.ms,
                    done: s.done,
                    per_length: s.per_length,
                    overall_done: s.overall_done,
                    overall: s.overall,
                }),
                None => break,
            }
            // Let the Cancel message in; outside the timed calls.
            gloo_timers::future::TimeoutFuture::new(0).await;
        }
        let router = &loaded.router;
        let report = Report {
            schema: SCHEMA.into(),
            environment: environment(started_unix_ms, protocol_line(&protocol, mode.as_deref())),
            provenance: Provenance::of(router, &loaded.file_name),
            protocol: ProtocolRecord {
                lengths: protocol.lengths.clone(),
                warmup: protocol.warmup,
                iterations: protocol.iterations,
                prompts_source: format!("{TASKS_NAME} (bundled)"),
            },
            load: router.load_timings,
            results: session.into_results(),
            prefix: None,
            truncation: None,
            quality: None,
            serve: None,
        };
        post(&FromWorker::BenchDone { report: Box::new(report), cancelled });
        Ok(())
    }
}

/// The parts of [`ModelInfo`] known before the router is built.
struct ModelInfoParts {
    source: Source,
    read_ms: f64,
    verify_ms: f64,
    sha256: String,
    sha256_checked: bool,
}

fn progress(stage: &str, done: u64, total: Option<u64>) {
    post(&FromWorker::LoadProgress { stage: stage.to_string(), done, total });
}

/// `sha256` is WebCrypto's digest of `bytes`, already computed: the router's
/// own (portable) SHA-256 would take seconds in wasm.
fn build_router(bytes: &[u8], file_name: &str, sha256: &str, precision: Precision, descriptors: Option<&[u8]>) -> Result<Router, String> {
    let assets = RouterAssets {
        gguf: bytes,
        gguf_name: file_name,
        gguf_sha256: Some(sha256),
        tokenizer_json: None,
        pool_yaml: POOL_YAML,
        pool_name: POOL_NAME,
    };
    let mut on_stage = |stage: &str, done: usize, total: usize| {
        let label = match stage {
            "weights" => "parsing the GGUF and preparing the weights".to_string(),
            "tokenizer" => "building the tokenizer from the GGUF metadata".to_string(),
            "descriptors" => format!("encoding candidate descriptors ({}/{total})", done + 1),
            other => other.to_string(),
        };
        progress(&label, done as u64, Some(total as u64));
    };
    Router::load_with_cache(&assets, RouterConfig { precision, ..RouterConfig::default() }, &mut on_stage, descriptors)
        .map_err(|e| e.to_string())
}

fn model_info(router: &Router, file_name: &str, bytes: u64, parts: ModelInfoParts) -> ModelInfo {
    ModelInfo {
        provenance: Provenance::of(router, file_name),
        source: parts.source,
        bytes,
        sha256: parts.sha256,
        sha256_checked: parts.sha256_checked,
        read_ms: parts.read_ms,
        verify_ms: parts.verify_ms,
        load: router.load_timings,
        wasm_memory_bytes: wasm_memory_bytes(),
        flop_model: router.backbone.hparams.flop_model(),
        modes: router
            .pool
            .modes
            .iter()
            .map(|(name, m)| ModeInfo { name: name.clone(), cost_weight: m.cost_weight, description: m.description.clone() })
            .collect(),
        default_mode: router.pool.default_mode.clone(),
        candidates: router.pool.candidates.iter().map(|c| c.id.clone()).collect(),
    }
}

async fn storage_info() -> StorageInfo {
    let (usage_bytes, quota_bytes, mut note) = match io::storage_estimate().await {
        Ok((usage, quota)) => (Some(usage).filter(|v| v.is_finite()), Some(quota).filter(|v| v.is_finite()), String::new()),
        Err(e) => (None, None, e),
    };
    let manifest = manifest().await.unwrap_or(Manifest { models: Vec::new() });
    let cache = io::open_cache().await;
    if let Err(e) = &cache {
        note = e.clone();
    }
    let is_cached = |model: ManifestModel| {
        let cache = cache.as_ref().ok().cloned();
        async move {
            let cached = match cache {
                Some(cache) => io::cached(&cache, &io::site_url(&model.file)).await.is_some(),
                None => false,
            };
            (model, cached)
        }
    };
    let model_cached = match manifest.bundled() {
        Some(model) => is_cached(model.clone()).await.1,
        None => false,
    };
    let mut on_request = Vec::new();
    for model in manifest.models.iter().filter(|m| m.on_request) {
        on_request.push(is_cached(model.clone()).await);
    }
    StorageInfo { usage_bytes, quota_bytes, model_cached, on_request, note }
}

/// The site's checkpoint list.
async fn manifest() -> Result<Manifest, String> {
    let text = io::fetch_text(&io::site_url(MANIFEST_URL)).await?;
    serde_json::from_str(&text).map_err(|e| format!("{MANIFEST_URL}: not a model manifest: {e}"))
}

/// The latency protocol as the report's command line states it.
fn protocol_line(protocol: &Protocol, mode: Option<&str>) -> String {
    let lengths: Vec<String> = protocol.lengths.iter().map(usize::to_string).collect();
    format!(
        "lengths={} warmup={} iterations={} mode={}",
        lengths.join(","),
        protocol.warmup,
        protocol.iterations,
        mode.unwrap_or("(pool default)")
    )
}

/// Where a bench ran (`described`: what ran): what a page may know about its machine.
fn environment(started_unix_ms: u64, described: String) -> Environment {
    let global = js_sys::global();
    let navigator = Reflect::get(&global, &"navigator".into()).unwrap_or(JsValue::UNDEFINED);
    let text = |key: &str| Reflect::get(&navigator, &key.into()).ok().and_then(|v| v.as_string());
    let build = build_info();
    Environment {
        runtime: "browser".into(),
        target: "wasm32-unknown-unknown".into(),
        command_line: vec!["router page (web worker)".into(), described],
        versions: component_versions(env!("WORKER_RUSTC_VERSION")),
        git_revision: build.git_revision,
        cpu_model: "not exposed to web pages".into(),
        threads: build.threads,
        os: text("platform").unwrap_or_default(),
        user_agent: text("userAgent"),
        hardware_concurrency: Reflect::get(&navigator, &"hardwareConcurrency".into()).ok().and_then(|v| v.as_f64()).map(|v| v as usize),
        simd128: Some(build.simd128),
        cross_origin_isolated: Some(build.cross_origin_isolated),
        started_unix_ms,
    }
}
