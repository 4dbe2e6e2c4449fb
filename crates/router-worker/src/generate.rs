//! The Generate job: one sequence on the loaded router, a token a step,
//! each piece of text posted as it is released, with a yield between
//! tokens so Cancel is read (a cancelled generation keeps its tokens). And
//! the generating serving test: many sequences batched by the scheduler.
//! And the whole request: `decide` routes a user turn, then this engine,
//! standing in for the chosen candidate, generates the answer. And the
//! decode-speed bench, row by row.

use bench::client_run::{RequestAccount, Routed, ServerTimings};
use bench::decode_speed::{DecodePlan, DecodeSpeed};
use bench::decode_study::{GenerationPlan, GenerationRun};
use bench::generation::{formula_bytes_per_token, generation_requests, RouterStepEngine, SingleGeneration};
use bench::report::{LatencyReport, NoStudies, Provenance};
use router::generate::BLOCK_TOKENS;
use router::sampling::SamplingParams;
use router::Conversation;
use serving::disaggregation::{Cluster, ClusterSettings, ClusterStep};
use wire::desk::{Finished, JobTicket, Outcome};
use wire::job::GenerationTick;
use wire::{Deferred, JobProgress, JobResult};

use crate::studies::environment;
use crate::{now_ms, Loaded, RouterWorker};

impl RouterWorker {
    pub(crate) async fn generate(&self, ticket: &JobTicket, conversation: Conversation, params: SamplingParams) -> Outcome {
        let loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.generate_with(ticket, &loaded, &conversation, params).await;
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn generate_with(&self, ticket: &JobTicket, loaded: &Loaded, conversation: &Conversation, params: SamplingParams) -> Outcome {
        let router = &loaded.router;
        let started = now_ms();
        let mut generation = SingleGeneration::start(router, conversation, params).map_err(|e| e.to_string())?;
        let cancelled = self.stream(ticket, router, &mut generation, || now_ms() - started, |_, _| {}).await?;
        Ok(Finished { result: JobResult::Generated(Deferred::encode(&generation.summary(router, cancelled))), cancelled })
    }

    /// Steps `generation` to its end or a Cancel, posting each token's
    /// text as `Progress(Generated)` stamped with `since()`, and telling
    /// `on_token` (the stamp, the text) too. Returns whether Cancel cut it
    /// short (the tokens so far are kept).
    async fn stream(
        &self,
        ticket: &JobTicket,
        router: &router::Router,
        generation: &mut SingleGeneration,
        since: impl Fn() -> f64,
        mut on_token: impl FnMut(f64, &str),
    ) -> Result<bool, String> {
        loop {
            if self.cancelled(ticket) {
                return Ok(true);
            }
            let step = generation.step(router)?;
            let now = since();
            on_token(now, &step.text);
            let tokens = generation.sequence.generated().len();
            self.progress(ticket, JobProgress::Generated { text: step.text, tokens, ms: now });
            if step.done {
                return Ok(false);
            }
            // Let the Cancel message in. The gap it adds (a timer's
            // minimum, up to 4 ms once timers nest) is inside the
            // inter-token gaps the summary reports: they are what the page
            // shows a reader, not the engine's alone.
            gloo_timers::future::TimeoutFuture::new(0).await;
        }
    }
}

impl RouterWorker {
    /// Note 06's generating experiment: each run of the plan through
    /// `serving::disaggregation::Cluster` on this worker's engine, as
    /// `serve-generate` runs it natively: each instance of the run's layout
    /// on a clock of its own that advances by the time its steps took, so
    /// idle time is skipped, not slept, and two instances stand for two
    /// devices. The worker yields at most every 100 ms of real time,
    /// posting a tick, so Cancel is read.
    pub(crate) async fn serve_generate(&self, ticket: &JobTicket, plan: Deferred<GenerationPlan>, output_lengths: Vec<usize>) -> Outcome {
        let plan = plan.decode()?;
        let loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.serve_generate_with(ticket, &loaded, plan, output_lengths).await;
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn serve_generate_with(&self, ticket: &JobTicket, loaded: &Loaded, plan: GenerationPlan, lengths: Vec<usize>) -> Outcome {
        const YIELD_EVERY_MS: f64 = 100.0;
        plan.check()?;
        if lengths.is_empty() {
            return Err("no output lengths to draw from".into());
        }
        let router = &loaded.router;
        let texts: Vec<String> = self.tasks.iter().map(|t| t.prompt.clone()).collect();
        let sampling = SamplingParams { temperature: 0.8, top_p: 0.95, ..SamplingParams::default() };
        let engine = RouterStepEngine::new(router, &texts, plan.max_prompt_tokens, sampling)?;
        let prompt_tokens: Vec<usize> = engine.prompts.iter().map(Vec::len).collect();
        let block_bytes = formula_bytes_per_token(&router.backbone.hparams) * BLOCK_TOKENS as u64;
        let budget_blocks = ((plan.kv_budget_mib * 1024.0 * 1024.0) as u64 / block_bytes.max(1)) as usize;
        let planned = plan.runs(budget_blocks);
        let mut runs = Vec::new();
        let mut cancelled = false;
        for (index, run) in planned.iter().enumerate() {
            let requests = generation_requests(run.rate_per_s, plan.duration_s, plan.seed, &prompt_tokens, &lengths);
            // Every instance holds the same weights: the one loaded router serves them all.
            let engines = (0..run.layout.instances()).map(|_| engine.clone()).collect();
            let layout = ClusterSettings { layout: run.layout, link_gbit_per_s: plan.link_gbit_per_s };
            let mut cluster = Cluster::new(layout, run.settings, requests, plan.duration_s * 1000.0, engines)?;
            let started = web_time::Instant::now();
            let mut stopwatch = move || started.elapsed().as_secs_f64() * 1000.0;
            let budget_kv_bytes = (run.settings.batch.budget_blocks * run.layout.instances()) as u64 * block_bytes;
            let mut last_yield = 0.0;
            loop {
                if self.cancelled(ticket) {
                    cancelled = true;
                    cluster.stop();
                    break;
                }
                let ClusterStep::Stepped { now_ms, .. } = cluster.step(&mut stopwatch) else { break };
                if stopwatch() - last_yield >= YIELD_EVERY_MS {
                    let tick = GenerationTick {
                        run: index,
                        runs: planned.len(),
                        t_ms: now_ms,
                        finished: cluster.finished(),
                        layout: run.layout,
                        instances: cluster.queues(),
                        kv: cluster.running_kv_bytes(),
                        counted_kv_bytes: cluster.blocks_in_use() as u64 * block_bytes,
                        budget_kv_bytes,
                    };
                    self.progress(ticket, JobProgress::GenerationTick(tick));
                    gloo_timers::future::TimeoutFuture::new(0).await;
                    last_yield = stopwatch();
                }
            }
            runs.push(GenerationRun::from_cluster(run.rate_per_s, &cluster, block_bytes));
            if cancelled {
                break;
            }
        }
        let result = JobResult::ServedGeneration {
            checkpoint_id: router.checkpoint_id().to_string(),
            precision: router.backbone.precision.label(&router.weight_type),
            runs: Deferred::encode(&runs),
        };
        Ok(Finished { result, cancelled })
    }
}

impl RouterWorker {
    /// Decode speed on this worker's engine: the memory-bandwidth probe,
    /// then the plan's rows one at a time (`bench::decode_speed`, the code
    /// `router-generate --decode-speed` runs natively), each posted as it
    /// ends, yielding between rows so Cancel is read (a cancelled run keeps
    /// the rows measured). Prompts are cut from the worker's task texts.
    pub(crate) async fn decode_speed(&self, ticket: &JobTicket, plan: Deferred<DecodePlan>) -> Outcome {
        let plan = plan.decode()?;
        plan.check()?;
        let loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let router = &loaded.router;
        let texts: Vec<String> = self.tasks.iter().map(|t| t.prompt.clone()).collect();
        let bandwidth = router::probe::memory_bandwidth(bench::roofline::BANDWIDTH_PROBE_BYTES, 5);
        let planned = plan.rows();
        let (mut rows, mut cancelled, mut failure) = (Vec::new(), false, None);
        for &(context, batch) in &planned {
            gloo_timers::future::TimeoutFuture::new(0).await;
            if self.cancelled(ticket) {
                cancelled = true;
                break;
            }
            match bench::decode_speed::measure_row(router, &texts, &plan, context, batch) {
                Ok(row) => {
                    self.progress(
                        ticket,
                        JobProgress::DecodeRow { done: rows.len() + 1, total: planned.len(), row: Deferred::encode(&row) },
                    );
                    rows.push(row);
                }
                Err(e) => {
                    failure = Some(format!("context {context} × {batch}: {e}"));
                    break;
                }
            }
        }
        let speed = DecodeSpeed::of(router, &plan, Some(bandwidth), rows);
        *self.loaded.borrow_mut() = Some(loaded);
        match failure {
            Some(message) => Err(message),
            None => Ok(Finished { result: JobResult::DecodeSpeed(Deferred::encode(&speed)), cancelled }),
        }
    }

    /// The whole request in the page: decide, then generate on this
    /// engine (the stand-in for every candidate), streaming as the Generate
    /// job does. The account's times run from when this worker took the
    /// job: T_queue is everything before the prefill (the decide inside
    /// it, also given apart), T_prompt_path the prefill to the first
    /// token, T_first_content the first token to the first visible text.
    pub(crate) async fn request(
        &self,
        ticket: &JobTicket,
        conversation: Conversation,
        params: SamplingParams,
        mode: Option<String>,
    ) -> Outcome {
        let loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.request_with(ticket, &loaded, &conversation, params, mode.as_deref()).await;
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn request_with(
        &self,
        ticket: &JobTicket,
        loaded: &Loaded,
        conversation: &Conversation,
        params: SamplingParams,
        mode: Option<&str>,
    ) -> Outcome {
        let router = &loaded.router;
        let started_unix_ms = now_ms() as u64;
        let taken = web_time::Instant::now();
        let since = move || taken.elapsed().as_secs_f64() * 1000.0;
        let decision = router.decide(conversation, mode).map_err(|e| e.to_string())?;
        let decide_ms = since();
        let encode_scores_ms = decision.timings.encode_and_score_ms();
        let routed =
            Routed { candidate: decision.ranked.first().map(|r| r.id.clone()).unwrap_or_default(), served_by: loaded.file_name.clone() };
        self.progress(ticket, JobProgress::Routed { candidate: routed.candidate.clone(), served_by: routed.served_by.clone(), decide_ms });
        let mut generation = SingleGeneration::start(router, conversation, params).map_err(|e| e.to_string())?;
        let queue_ms = since();
        let (mut first_token_ms, mut first_content_ms) = (None, None);
        let cancelled = self
            .stream(ticket, router, &mut generation, since, |now, text| {
                first_token_ms.get_or_insert(now);
                if !text.trim().is_empty() {
                    first_content_ms.get_or_insert(now);
                }
            })
            .await?;
        let first_token = first_token_ms.unwrap_or(queue_ms);
        let sequence = &generation.sequence;
        let account = RequestAccount {
            encode_scores_ms,
            timings: ServerTimings {
                queue_ms,
                prompt_path_ms: first_token - queue_ms,
                first_content_ms: first_content_ms.map_or(0.0, |c| c - first_token),
                decide_ms: Some(decide_ms),
                routed: Some(routed),
                prompt_tokens: sequence.prompt_len(),
                prefill_chunks: 1,
                preemptions: 0,
            },
            tokens_out: sequence.generated().len(),
            finish_reason: if cancelled { None } else { sequence.finish().map(|f| f.openai().to_string()) },
        };
        let described = format!("a routed request: decide (mode={}), then generation", mode.unwrap_or("(pool default)"));
        let report = LatencyReport::for_study(
            environment(started_unix_ms, described),
            Provenance::of(router, &loaded.file_name),
            router.load_timings,
            "the page's user turn".into(),
            NoStudies {},
        );
        Ok(Finished { result: JobResult::Requested { report: Box::new(report), account: Deferred::encode(&account) }, cancelled })
    }
}
