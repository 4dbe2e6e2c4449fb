//! The engine thread: one OS thread owns the loaded router and an open
//! [`GenServer`] (the same scheduler `serve-generate` and the page step),
//! takes requests from the HTTP handlers between iterations, and streams
//! each sequence's text back on a channel of its own as the iterations
//! produce it.
//!
//! The handlers never compute: they check the request's fields, hand it
//! over and forward what comes back. A client that goes away drops its
//! channel's receiver; before every iteration the thread looks for closed
//! channels and cancels those requests ([`GenServer::cancel`]), so a
//! disconnected client's sequence and K/V are freed before the next
//! iteration runs, whether it was waiting or generating.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bench::client_run::{Routed, ServerTimings};
use bench::generation::Generating;
use router::generate::{step, Sequence};
use router::segment::KvState;
use router::Router;
use serving::batching::Work;
use serving::generation::{GenOutcome, GenRecord, GenRequest, GenServer, GenSettings, GenStep, StepEngine};
use tokio::sync::{mpsc, oneshot};
use web_time::Instant;

use crate::openai::{refusal, ApiError, Checked, Usage};

/// How the engine thread serves.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The scheduler's settings (K/V budget in blocks, mixing, memory policy, queue timeout).
    pub gen: GenSettings,
    /// The name clients ask for (`model`).
    pub model_id: String,
    /// `model: "auto"` is routed with `Router.decide` first, in this mode
    /// (`None`: the pool's default); `None` here: no routing.
    pub routing: Option<Option<String>>,
}

/// A request handed to the engine thread.
pub struct Submission {
    pub id: u64,
    pub checked: Checked,
    /// Whether the request asked for `auto` (route it first).
    pub auto: bool,
    /// When the handler had read the whole request.
    pub received: Instant,
    pub reply: oneshot::Sender<Result<Accepted, ApiError>>,
}

/// A request the engine took: its stream of events.
pub struct Accepted {
    pub routed: Option<Routed>,
    pub decide_ms: Option<f64>,
    pub events: mpsc::UnboundedReceiver<Event>,
}

/// What the engine sends a request's handler.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// One token was chosen; the text it released (often empty: a partial
    /// character, a held stop text's prefix).
    Token(String),
    /// It ended as served.
    Done { finish_reason: &'static str, usage: Usage, timings: ServerTimings },
    /// It ended otherwise (its queue timeout, the engine failing, the server stopping).
    Failed(ApiError),
}

/// The engine's gauges and counters, in vLLM's names with this
/// workbench's prefix, for `GET /metrics` (and the tests, which watch a
/// cancelled request's K/V come back).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    pub running: usize,
    pub waiting: usize,
    pub kv_blocks_in_use: usize,
    pub kv_blocks_total: usize,
    pub block_tokens: usize,
    pub outcomes: HashMap<&'static str, u64>,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub iterations_total: u64,
    pub preemptions_total: u64,
}

impl Metrics {
    /// Nothing served yet, over a budget of `budget_blocks`.
    fn new(budget_blocks: usize) -> Metrics {
        Metrics { kv_blocks_total: budget_blocks, block_tokens: router::generate::BLOCK_TOKENS, ..Metrics::default() }
    }

    /// Prometheus's text format.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, kind: &str, value: String| {
            out.push_str(&format!("# HELP workbench:{name} {help}\n# TYPE workbench:{name} {kind}\n"));
            out.push_str(&format!("workbench:{name} {value}\n"));
        };
        gauge("num_requests_running", "Requests in the running batch.", "gauge", self.running.to_string());
        gauge("num_requests_waiting", "Requests waiting to be scheduled.", "gauge", self.waiting.to_string());
        gauge("kv_blocks_in_use", "K/V blocks the running sequences hold.", "gauge", self.kv_blocks_in_use.to_string());
        gauge("kv_blocks_total", "K/V blocks in the engine's budget.", "gauge", self.kv_blocks_total.to_string());
        gauge("kv_block_tokens", "Tokens a K/V block holds.", "gauge", self.block_tokens.to_string());
        let usage = if self.kv_blocks_total == 0 { 0.0 } else { self.kv_blocks_in_use as f64 / self.kv_blocks_total as f64 };
        gauge("kv_cache_usage_perc", "Share of the K/V budget in use (0 to 1).", "gauge", format!("{usage:.6}"));
        gauge("prompt_tokens_total", "Prompt tokens of the requests accepted.", "counter", self.prompt_tokens_total.to_string());
        gauge("generation_tokens_total", "Tokens generated.", "counter", self.generation_tokens_total.to_string());
        gauge("iterations_total", "Engine iterations run.", "counter", self.iterations_total.to_string());
        gauge(
            "num_preemptions_total",
            "Sequences preempted (their K/V dropped to be recomputed).",
            "counter",
            self.preemptions_total.to_string(),
        );
        out.push_str(
            "# HELP workbench:request_outcome_total Requests ended, by outcome.\n# TYPE workbench:request_outcome_total counter\n",
        );
        let mut outcomes: Vec<_> = self.outcomes.iter().collect();
        outcomes.sort();
        for (outcome, n) in outcomes {
            out.push_str(&format!("workbench:request_outcome_total{{outcome=\"{outcome}\"}} {n}\n"));
        }
        out
    }

    pub fn outcome(&self, name: &str) -> u64 {
        self.outcomes.get(name).copied().unwrap_or(0)
    }
}

fn outcome_name(outcome: GenOutcome) -> &'static str {
    match outcome {
        GenOutcome::Served => "served",
        GenOutcome::TimedOut => "timed_out",
        GenOutcome::Rejected => "rejected",
        GenOutcome::Failed => "failed",
        GenOutcome::Unfinished => "unfinished",
        GenOutcome::HandedOff => "handed_off",
        GenOutcome::Cancelled => "cancelled",
    }
}

/// The running engine thread, as the handlers reach it.
#[derive(Clone)]
pub struct EngineHandle {
    submissions: Sender<Submission>,
    pub metrics: Arc<Mutex<Metrics>>,
}

impl EngineHandle {
    /// Hands a request over; `false` if the engine thread has stopped.
    pub fn submit(&self, submission: Submission) -> bool {
        self.submissions.send(submission).is_ok()
    }

    pub fn metrics(&self) -> Metrics {
        self.metrics.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// Starts the engine thread over `router`. It runs until every handle is
/// dropped, then ends what is left as unfinished.
pub fn start(router: Router, config: EngineConfig) -> (EngineHandle, JoinHandle<()>) {
    let (submissions, inbox) = std::sync::mpsc::channel();
    let metrics = Arc::new(Mutex::new(Metrics::new(config.gen.batch.budget_blocks)));
    let shared = metrics.clone();
    let thread = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || run(&router, &config, &inbox, &shared))
        .expect("spawning the engine thread");
    (EngineHandle { submissions, metrics }, thread)
}

/// A request the engine is serving: where its events go, and the times
/// only the engine sees.
struct Client {
    events: mpsc::UnboundedSender<Event>,
    first_token_ms: Option<f64>,
    first_content_ms: Option<f64>,
    finish: Option<&'static str>,
    decide_ms: Option<f64>,
    routed: Option<Routed>,
}

/// The router's engine as the open server steps it: every request arrives
/// with its sequence made, and each token chosen goes straight to its client.
struct Streams<'a> {
    router: &'a Router,
    /// The checkpoint's K/V shape in the calculator's terms, computed once
    /// and shared by every sequence (its payload bytes).
    kv_shape: Arc<kv::model::ModelShape>,
    started: Instant,
    clients: HashMap<u64, Client>,
}

impl Streams<'_> {
    fn now_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1000.0
    }
}

impl StepEngine for Streams<'_> {
    type Seq = Generating;

    fn sequence(&mut self, _request: &GenRequest) -> Result<Generating, String> {
        Err("a request reached the engine without its sequence".into())
    }

    fn step(&mut self, batch: &mut [(u64, &mut Generating, usize)]) -> Result<Vec<bool>, String> {
        let report = {
            let mut feeds: Vec<(&mut Sequence, usize)> = batch.iter_mut().map(|(_, seq, n)| (&mut seq.sequence, *n)).collect();
            step(&self.router.backbone, &self.router.tokenizer, &mut feeds).map_err(|e| e.to_string())?
        };
        let now = self.now_ms();
        for ((id, _, _), emitted) in batch.iter().zip(&report.emitted) {
            let (Some(emitted), Some(client)) = (emitted, self.clients.get_mut(id)) else { continue };
            client.first_token_ms.get_or_insert(now);
            if !emitted.text.trim().is_empty() {
                client.first_content_ms.get_or_insert(now);
            }
            if let Some(finish) = &emitted.finish {
                client.finish = Some(finish.openai());
            }
            // A client gone is noticed before the next iteration.
            let _ = client.events.send(Event::Token(emitted.text.clone()));
        }
        Ok(report.emitted.iter().map(Option::is_some).collect())
    }
}

fn run(router: &Router, config: &EngineConfig, inbox: &Receiver<Submission>, metrics: &Mutex<Metrics>) {
    let started = Instant::now();
    let mut server: GenServer<Streams> = GenServer::open(config.gen, f64::INFINITY);
    let kv_shape = Arc::new(bench::generation::kv_shape(&router.backbone.hparams));
    let mut streams = Streams { router, kv_shape, started, clients: HashMap::new() };
    let mut last = GenStep::IdleUntil(f64::INFINITY);
    let mut counters = Metrics::new(config.gen.batch.budget_blocks);
    loop {
        let now = streams.now_ms();
        // Wait for work only when there is none to do.
        let first = match last {
            GenStep::Worked => inbox.try_recv().ok(),
            GenStep::IdleUntil(t) if t.is_finite() => match inbox.recv_timeout(Duration::from_secs_f64(((t - now) / 1000.0).max(0.0))) {
                Ok(s) => Some(s),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            },
            GenStep::IdleUntil(_) => match inbox.recv() {
                Ok(s) => Some(s),
                Err(_) => break,
            },
            GenStep::Done => break,
        };
        for submission in first.into_iter().chain(inbox.try_iter()) {
            admit(router, config, &mut server, &mut streams, submission, &mut counters);
        }
        let gone: Vec<u64> = streams.clients.iter().filter(|(_, c)| c.events.is_closed()).map(|(id, _)| *id).collect();
        for id in gone {
            streams.clients.remove(&id);
            server.cancel(id, streams.now_ms());
        }
        let mut clock = || started.elapsed().as_secs_f64() * 1000.0;
        last = server.step(&mut streams, &mut clock);
        settle(&mut server, &mut streams, &mut counters);
        let (running, waiting) = server.queue();
        counters.running = running;
        counters.waiting = waiting;
        counters.kv_blocks_in_use = server.blocks_in_use();
        counters.preemptions_total = server.preemptions() as u64;
        if let Ok(mut shared) = metrics.lock() {
            *shared = counters.clone();
        }
    }
    // Every handle is gone: what is left will never be read.
    server.stop(streams.now_ms());
    settle(&mut server, &mut streams, &mut counters);
}

/// Tells each ended request's client how it ended, and counts it.
fn settle(server: &mut GenServer<Streams>, streams: &mut Streams, counters: &mut Metrics) {
    // The open server's log of iterations is counted, not kept.
    counters.iterations_total += server.take_iterations().len() as u64;
    for record in server.take_records() {
        counters.generation_tokens_total += record.tokens_out as u64;
        *counters.outcomes.entry(outcome_name(record.outcome)).or_default() += 1;
        let Some(client) = streams.clients.remove(&record.id) else { continue };
        let _ = client.events.send(ending(&record, &client));
    }
}

/// The last event of a request, from its record.
fn ending(record: &GenRecord, client: &Client) -> Event {
    match record.outcome {
        GenOutcome::Served => {
            let start = record.start_ms.unwrap_or(record.arrival_ms);
            let first_token = client.first_token_ms.unwrap_or(record.end_ms);
            let timings = ServerTimings {
                queue_ms: start - record.arrival_ms,
                prompt_path_ms: first_token - start,
                first_content_ms: client.first_content_ms.map_or(0.0, |c| c - first_token),
                decide_ms: client.decide_ms,
                routed: client.routed.clone(),
                prompt_tokens: record.prompt_tokens,
                prefill_chunks: record.prefill_chunks,
                preemptions: record.preemptions,
            };
            let usage = Usage {
                prompt_tokens: record.prompt_tokens,
                completion_tokens: record.tokens_out,
                total_tokens: record.prompt_tokens + record.tokens_out,
            };
            Event::Done { finish_reason: client.finish.unwrap_or("stop"), usage, timings }
        }
        GenOutcome::TimedOut => Event::Failed(ApiError::server(
            503,
            format!("the request waited {:.0} ms without starting (the server's queue timeout)", record.end_ms - record.arrival_ms),
            "queue_timeout",
        )),
        GenOutcome::Rejected => Event::Failed(ApiError::invalid("max_tokens", "the request can never fit the server's K/V budget")),
        GenOutcome::Failed => {
            Event::Failed(ApiError::server(500, "the engine failed on an iteration that fed this request", "engine_error"))
        }
        GenOutcome::Unfinished | GenOutcome::HandedOff | GenOutcome::Cancelled => {
            Event::Failed(ApiError::server(503, "the server stopped before this request finished", "unfinished"))
        }
    }
}

/// Routes (for `auto`), tokenizes and checks a request against the model
/// and the K/V budget; replies with its stream, or the error naming the field.
fn admit(
    router: &Router,
    config: &EngineConfig,
    server: &mut GenServer<Streams>,
    streams: &mut Streams,
    submission: Submission,
    counters: &mut Metrics,
) {
    let Submission { id, checked, auto, received, reply } = submission;
    let made = prepare(router, &streams.kv_shape, config, &checked, auto);
    let (sequence, routed, decide_ms) = match made {
        Ok(made) => made,
        Err(e) => {
            let _ = reply.send(Err(e));
            return;
        }
    };
    let (events, receiver) = mpsc::unbounded_channel();
    let prompt_tokens = sequence.sequence.prompt_len();
    let max_new_tokens = sequence.sequence.params().max_new_tokens;
    let accepted = Accepted { routed: routed.clone(), decide_ms, events: receiver };
    if reply.send(Ok(accepted)).is_err() {
        // The handler is gone already: nothing to serve.
        return;
    }
    let arrival_ms = received.duration_since(streams.started).as_secs_f64() * 1000.0;
    counters.prompt_tokens_total += prompt_tokens as u64;
    server.arrive(GenRequest { id, arrival_ms, prompt: 0, prompt_tokens, max_new_tokens }, sequence);
    streams.clients.insert(id, Client { events, first_token_ms: None, first_content_ms: None, finish: None, decide_ms, routed });
}

type Prepared = (Generating, Option<Routed>, Option<f64>);

fn prepare(
    router: &Router,
    kv_shape: &Arc<kv::model::ModelShape>,
    config: &EngineConfig,
    checked: &Checked,
    auto: bool,
) -> Result<Prepared, ApiError> {
    let (routed, decide_ms) = match (&config.routing, auto) {
        (Some(mode), true) => {
            let started = Instant::now();
            let decision = router
                .decide(&checked.conversation, mode.as_deref())
                .map_err(|e| ApiError::server(500, format!("Router.decide failed: {e}"), "router_error"))?;
            let decide_ms = started.elapsed().as_secs_f64() * 1000.0;
            let candidate = decision.ranked.first().map(|r| r.id.clone()).unwrap_or_default();
            (Some(Routed { candidate, served_by: config.model_id.clone() }), Some(decide_ms))
        }
        _ => (None, None),
    };
    let text = checked.conversation.generation_prompt(router.tokenizer.layout);
    let prompt = router.tokenizer.encode(&text).map_err(|e| ApiError::invalid("messages", format!("messages: {e}")))?;
    let mut params = checked.params.clone();
    let context = router.backbone.max_positions();
    if !checked.explicit_max_tokens {
        // A limit the client did not set is cut to what the context leaves.
        params.max_new_tokens = params.max_new_tokens.min(context.saturating_sub(prompt.len()).max(1));
    }
    let sequence = Sequence::new(&router.backbone, prompt, KvState::default(), params)
        .map(|sequence| Generating::new(sequence, kv_shape.clone()))
        .map_err(|e| refusal(&e, checked.max_tokens_field))?;
    let budget = config.gen.batch.budget_blocks;
    let needed = sequence.blocks_at_most();
    if needed > budget {
        let block = router::generate::BLOCK_TOKENS;
        return Err(ApiError::invalid(
            checked.max_tokens_field,
            format!(
                "{}: a prompt of {} tokens and up to {} new ones need {needed} K/V blocks of {block} tokens; this server's whole budget is {budget} (its --kv-budget-mib)",
                checked.max_tokens_field,
                sequence.sequence.prompt_len(),
                sequence.sequence.params().max_new_tokens,
            ),
        )
        .with_code("context_length_exceeded"));
    }
    Ok((sequence, routed, decide_ms))
}
