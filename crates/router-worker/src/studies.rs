//! The long jobs: the latency bench, the prefix protocol, routing tasks
//! and the serving test, each stepping the same library code the native CLI
//! runs, yielding between calls so Cancel is read.

use bench::report::{component_versions, Environment, LatencyReport, NoStudies, ProtocolRecord, Provenance, SCHEMA};
use bench::serve;
use bench::{Protocol, Session};
use js_sys::Reflect;
use router::CacheBudget;
use serving::{NamedConversation, ServeSettings};
use wasm_bindgen::prelude::*;
use wire::desk::{Finished, JobTicket, Outcome};
use wire::{Deferred, JobProgress, JobResult};

use crate::load::build_router;
use crate::{build_info, now_ms, Loaded, RouterWorker, TASKS_NAME};

impl RouterWorker {
    /// The note-04 protocol, one call per step with a yield between, on
    /// caches of its own (the Decide button's cache is left as it was).
    pub(crate) async fn prefix_protocol(&self, ticket: &JobTicket, long_tokens: usize, iterations: usize) -> Outcome {
        let loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.prefix_protocol_with(ticket, &loaded, long_tokens, iterations).await;
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn prefix_protocol_with(&self, ticket: &JobTicket, loaded: &Loaded, long_tokens: usize, iterations: usize) -> Outcome {
        let texts: Vec<String> = self.tasks.iter().map(|t| t.prompt.clone()).collect();
        let router = &loaded.router;
        let inputs = bench::prefix::PrefixInputs::from_texts(router, &texts, long_tokens, iterations).map_err(|e| e.to_string())?;
        let mut session = bench::prefix::PrefixSession::new(&inputs, CacheBudget::default());
        let mut cancelled = false;
        while !session.is_finished() {
            if self.cancelled(ticket) {
                cancelled = true;
                break;
            }
            let label = session.step(router, &inputs).map_err(|e| e.to_string())?.unwrap_or_default();
            let (done, total) = session.progress();
            self.progress(ticket, JobProgress::PrefixStep { done, total, label });
            // Let the Cancel message in; outside the timed calls.
            gloo_timers::future::TimeoutFuture::new(0).await;
        }
        Ok(Finished { result: JobResult::Prefix(Deferred::encode(&session.report(router))), cancelled })
    }

    /// Routes tasks one at a time with a yield between (the quality
    /// card's in-browser evaluation), through the same `route_task` the
    /// native study uses. The checkpoint's own head scores again after.
    pub(crate) async fn route_tasks(&self, ticket: &JobTicket, tasks: Vec<wire::TaskPrompt>, head_json: Option<String>) -> Outcome {
        let mut loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.route_tasks_with(ticket, &mut loaded, tasks, head_json).await;
        // Routing leaves the router without a head; the checkpoint's own
        // scores the next decide again.
        let restored = loaded.restore_head();
        *self.loaded.borrow_mut() = Some(loaded);
        restored?;
        outcome
    }

    async fn route_tasks_with(
        &self,
        ticket: &JobTicket,
        loaded: &mut Loaded,
        tasks: Vec<wire::TaskPrompt>,
        head_json: Option<String>,
    ) -> Outcome {
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
            if self.cancelled(ticket) {
                cancelled = true;
                break;
            }
            let outcome = bench::quality::route::route_task(&mut loaded.router, head.as_ref(), &task.id, &task.prompt)
                .map_err(|e| format!("task {}: {e}", task.id))?;
            loaded.calls += 1;
            self.progress(ticket, JobProgress::TaskRouted { done: i + 1, total, routed: Deferred::encode(&outcome.routed) });
            // Let the Cancel message in; outside the timed calls.
            gloo_timers::future::TimeoutFuture::new(0).await;
        }
        let result = JobResult::Routed { checkpoint_id: loaded.router.backbone_checkpoint_id().to_string(), head_id: head.map(|h| h.id) };
        Ok(Finished { result, cancelled })
    }

    /// The serving test: each run in real time on this worker's one
    /// engine, through the same `serving::Server` the native CLI
    /// steps. While the engine is idle the worker awaits a timer (at most
    /// 50 ms at a time, so Cancel is read); while it works it yields at
    /// most every 100 ms, to post the queue and let Cancel in.
    pub(crate) async fn serve(
        &self,
        ticket: &JobTicket,
        runs: Vec<ServeSettings>,
        tasks: Vec<wire::TaskPrompt>,
        trace: Option<String>,
        mode: Option<String>,
    ) -> Outcome {
        let loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.serve_with(ticket, &loaded, runs, tasks, trace, mode).await;
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn serve_with(
        &self,
        ticket: &JobTicket,
        loaded: &Loaded,
        plan: Vec<ServeSettings>,
        tasks: Vec<wire::TaskPrompt>,
        trace: Option<String>,
        mode: Option<String>,
    ) -> Outcome {
        const YIELD_EVERY_MS: f64 = 100.0;
        const LONGEST_WAIT_MS: f64 = 50.0;
        let started_unix_ms = now_ms() as u64;
        for settings in &plan {
            settings.check().map_err(|e| e.to_string())?;
        }
        let named: Vec<NamedConversation> =
            tasks.iter().map(|t| NamedConversation { name: t.id.clone(), conversation: serve::engine::user_turn(&t.prompt) }).collect();
        let (named, replay, arrivals_name) = match &trace {
            Some(text) => {
                let lines = serving::parse_trace(text).map_err(|e| e.to_string())?;
                let replay = serving::trace_arrivals(&lines, &named).map_err(|e| e.to_string())?;
                (replay.conversations, Some(replay.arrivals), "trace file".to_string())
            }
            None => (named, None, "poisson".to_string()),
        };
        let (mut engine, prompts) = serve::engine::RouterEngine::new(&loaded.router, named, mode.clone())?;
        let unloaded_heaviest_ms = engine.warm_up(&prompts)?;
        self.progress(ticket, JobProgress::ServeWarmedUp { prompts: prompts.len(), runs: plan.len(), unloaded_heaviest_ms });
        let mut runs = Vec::new();
        let mut cancelled = false;
        for (index, mut settings) in plan.into_iter().enumerate() {
            let arrivals = match &replay {
                Some(arrivals) => {
                    serving::fit_to_trace(&mut settings, arrivals);
                    arrivals.clone()
                }
                None => serving::poisson_trace(settings.rate_per_s, settings.duration_s, settings.seed, prompts.len()),
            };
            let total = arrivals.len();
            let label = serving::run_label(&settings);
            let mut server = serving::Server::new(settings, prompts.clone(), arrivals).map_err(|e| e.to_string())?;
            let start = web_time::Instant::now();
            let clock = move || start.elapsed().as_secs_f64() * 1000.0;
            let tick = |server: &serving::Server<_>| {
                let sample = *server.queue_samples().last().expect("a server starts with a sample");
                self.progress(
                    ticket,
                    JobProgress::ServeTick {
                        run: index,
                        sample: serving::QueueSample { t_ms: clock(), ..sample },
                        finished: server.records().len(),
                        arrivals: total,
                    },
                );
            };
            let mut last_yield = 0.0;
            loop {
                if self.cancelled(ticket) {
                    cancelled = true;
                    server.stop(clock());
                    break;
                }
                match server.step(&mut engine, &mut { clock }) {
                    serving::Step::Worked => {
                        if clock() - last_yield >= YIELD_EVERY_MS {
                            tick(&server);
                            gloo_timers::future::TimeoutFuture::new(0).await;
                            last_yield = clock();
                        }
                    }
                    serving::Step::IdleUntil(t) => {
                        tick(&server);
                        let wait = (t - clock()).clamp(0.0, LONGEST_WAIT_MS);
                        gloo_timers::future::TimeoutFuture::new(wait.ceil() as u32).await;
                        last_yield = clock();
                    }
                    serving::Step::Done => break,
                }
            }
            let run = server.finish(if cancelled { format!("{label} (cancelled)") } else { label });
            self.progress(
                ticket,
                JobProgress::ServeRunDone {
                    index,
                    label: run.label.clone(),
                    settings: run.settings.clone(),
                    summary: Deferred::encode(&run.summary),
                },
            );
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
        let report = LatencyReport::for_study(
            environment(started_unix_ms, described),
            Provenance::of(router, &loaded.file_name),
            router.load_timings,
            study.prompt_set.clone(),
            NoStudies {},
        );
        Ok(Finished { result: JobResult::Served { report: Box::new(report), study: Deferred::encode(&study) }, cancelled })
    }

    pub(crate) async fn bench(&self, ticket: &JobTicket, protocol: Protocol, mode: Option<String>) -> Outcome {
        let mut loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.bench_with(ticket, &mut loaded, protocol, mode).await;
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn bench_with(&self, ticket: &JobTicket, loaded: &mut Loaded, protocol: Protocol, mode: Option<String>) -> Outcome {
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
            let precision = loaded.router.config().precision;
            let router = build_router(&loaded.bytes, &loaded.file_name, &loaded.info.sha256, precision, None, &mut |_, _, _| {})?;
            loaded.info.load = router.load_timings;
            loaded.router = router;
            loaded.restore_head()?;
            loaded.prefix_cache.clear();
            self.progress(ticket, JobProgress::Reloaded(Box::new(loaded.info.clone())));
        }
        let mut session = Session::new(&prompts, protocol.clone(), mode.as_deref());
        self.progress(
            ticket,
            JobProgress::BenchPrompts {
                prompts: prompts.iter().map(|p| wire::job::PromptSize { tokens: p.tokens, characters: p.characters }).collect(),
                reloaded,
                overall: session.overall(),
            },
        );
        let mut cancelled = false;
        loop {
            if self.cancelled(ticket) {
                cancelled = true;
                break;
            }
            let step = session.step(&loaded.router).map_err(|e| e.to_string());
            loaded.calls += 1;
            match step? {
                Some(s) => self.progress(
                    ticket,
                    JobProgress::BenchStep(wire::job::BenchStep {
                        prompt_tokens: s.prompt_tokens,
                        phase: s.phase.label().into(),
                        ms: s.ms,
                        done: s.done,
                        per_length: s.per_length,
                        overall_done: s.overall_done,
                        overall: s.overall,
                    }),
                ),
                None => break,
            }
            // Let the Cancel message in; outside the timed calls.
            gloo_timers::future::TimeoutFuture::new(0).await;
        }
        let router = &loaded.router;
        let report = LatencyReport {
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
            studies: NoStudies {},
        };
        Ok(Finished { result: JobResult::Bench(Box::new(report)), cancelled })
    }
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
pub(crate) fn environment(started_unix_ms: u64, described: String) -> Environment {
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
