//! The serving test of the field guide's note 06: `decide` under open-loop
//! arrivals, one engine, a bounded queue, client timeouts and chunked
//! prefill, with every request kept in the statistics.
//!
//! The scheduler here is pure: [`Server`] is a state machine that the
//! caller steps with the current time and an [`Engine`] to run work on, so
//! the native CLI (which sleeps between arrivals) and the browser worker
//! (which awaits a timer, and lets a Cancel in between steps) drive the same
//! code, and the tests drive it with a clock they advance themselves.
//!
//! The concurrency model is the note's single engine: one request's work at
//! a time. Arrivals that come while the engine computes wait in the queue
//! and are admitted when the engine next looks (a single-threaded server
//! notices them between work units, as this one does: between requests, or
//! between chunks with chunked prefill). Time is wall-clock time from the
//! run's start; nothing is simulated but the clients' arrival times.

#[cfg(feature = "engine")]
pub mod engine;
pub mod plot;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Which waiting request gets the engine when it is free (between
/// requests, and between chunks when prefill is chunked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// First come, first served: the earliest arrival. With chunks, a
    /// started request keeps the engine (it arrived before anyone waiting),
    /// so chunking only adds overhead and lets timeouts act between chunks.
    #[default]
    Fcfs,
    /// The fewest kept tokens left to prefill: a short request that arrives
    /// during a long prompt's prefill runs between its chunks.
    ShortestFirst,
}

impl Policy {
    pub const ALL: [Policy; 2] = [Policy::Fcfs, Policy::ShortestFirst];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Fcfs => "fcfs",
            Policy::ShortestFirst => "shortest_first",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Policy::Fcfs => "FCFS",
            Policy::ShortestFirst => "shortest first",
        }
    }

    pub fn parse(text: &str) -> Result<Policy, ServeError> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == text.trim() || p.label().eq_ignore_ascii_case(text.trim()))
            .ok_or_else(|| ServeError::Setting { field: "policy", reason: format!("`{text}` is not fcfs or shortest_first") })
    }
}

/// One load run's settings. Times in milliseconds unless named otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeSettings {
    /// Poisson arrival rate, requests per second (ignored for a trace file).
    pub rate_per_s: f64,
    /// Arrivals come during this many seconds.
    pub duration_s: f64,
    /// Arrivals in the first `warmup_s` seconds are the warm-up (cold
    /// caches, an empty queue): reported, kept apart from the measurement.
    pub warmup_s: f64,
    /// After the last arrival the run goes on for at most this long, so
    /// queued requests finish or time out; whatever is left then is
    /// reported as unfinished.
    pub drain_s: f64,
    pub seed: u64,
    /// Prefill chunk in tokens; `None` prefills a prompt in one call.
    pub chunk: Option<usize>,
    pub policy: Policy,
    /// The client gives up this long after it sent the request: a waiting
    /// request is dropped, a started one abandoned between chunks, and one
    /// that finishes later counts as timed out.
    pub timeout_ms: f64,
    /// Requests in the system (waiting or started) beyond which an arrival
    /// is rejected at once.
    pub queue_limit: usize,
    /// The service level: served with end-to-end latency (arrival →
    /// decision) at most this.
    pub slo_ms: f64,
}

impl Default for ServeSettings {
    fn default() -> Self {
        ServeSettings {
            rate_per_s: 1.0,
            duration_s: 30.0,
            warmup_s: 5.0,
            drain_s: 15.0,
            seed: 0,
            chunk: None,
            policy: Policy::Fcfs,
            timeout_ms: 15_000.0,
            queue_limit: 16,
            slo_ms: 4_000.0,
        }
    }
}

/// What is wrong with a setting or a trace, naming it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServeError {
    #[error("{field}: {reason}")]
    Setting { field: &'static str, reason: String },
    #[error("trace line {line}: {reason}")]
    Trace { line: usize, reason: String },
}

impl ServeSettings {
    /// Checks every field; the first bad one is named.
    pub fn check(&self) -> Result<(), ServeError> {
        let bad = |field: &'static str, reason: &str| Err(ServeError::Setting { field, reason: reason.to_string() });
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !positive(self.rate_per_s) || self.rate_per_s > 1_000.0 {
            return bad("rate", "must be a number of requests per second above 0 and at most 1000");
        }
        if !positive(self.duration_s) || self.duration_s > 3_600.0 {
            return bad("duration", "must be above 0 and at most 3600 seconds");
        }
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0 && self.warmup_s < self.duration_s) {
            return bad("warmup", "must be at least 0 and shorter than the duration");
        }
        if !(self.drain_s.is_finite() && self.drain_s >= 0.0 && self.drain_s <= 3_600.0) {
            return bad("drain", "must be between 0 and 3600 seconds");
        }
        if self.chunk == Some(0) {
            return bad("chunk", "must be at least 1 token (or absent: no chunking)");
        }
        if !positive(self.timeout_ms) {
            return bad("timeout", "must be above 0 ms");
        }
        if self.queue_limit == 0 {
            return bad("queue limit", "must be at least 1");
        }
        if !positive(self.slo_ms) {
            return bad("SLO", "must be above 0 ms");
        }
        Ok(())
    }

    /// When the measurement interval ends and the drain begins (ms).
    pub fn end_ms(&self) -> f64 {
        self.duration_s * 1000.0
    }

    /// The chunk as a label: `1024` or `whole`.
    pub fn chunk_label(&self) -> String {
        self.chunk.map_or_else(|| "whole".to_string(), |c| c.to_string())
    }
}

/// A prompt the trace draws from: its name and its kept length in tokens
/// (after `router_max_tokens`), known before the run so that the
/// shortest-first policy can order waiting requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracePrompt {
    pub task: String,
    pub tokens: usize,
}

/// One arrival of the workload trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    pub id: usize,
    pub at_ms: f64,
    /// Index into the run's prompts.
    pub prompt: usize,
}

/// Poisson arrivals at `rate` per second for `duration_s`, each drawing a
/// prompt uniformly from `prompts` (the real length mix), from `seed` alone.
pub fn poisson_trace(rate_per_s: f64, duration_s: f64, seed: u64, prompts: usize) -> Vec<Arrival> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut arrivals = Vec::new();
    let mut t = 0.0;
    if prompts == 0 {
        return arrivals;
    }
    loop {
        // Exponential gaps by inversion; 1 − U keeps the logarithm finite.
        let u: f64 = rng.random();
        t += -(1.0 - u).ln() / rate_per_s * 1000.0;
        if t >= duration_s * 1000.0 {
            return arrivals;
        }
        arrivals.push(Arrival { id: arrivals.len(), at_ms: t, prompt: rng.random_range(0..prompts) });
    }
}

/// One line of a trace file: an arrival time and either a task of the
/// prompt set (by id) or a conversation's text as one user turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceLine {
    pub at_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<router::Conversation>,
}

/// Parses a trace file (JSON lines, arrival times non-decreasing and within
/// an hour); blank lines are skipped. Errors name the line.
pub fn parse_trace(text: &str) -> Result<Vec<TraceLine>, ServeError> {
    let mut lines = Vec::new();
    let mut last = 0.0;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let entry: TraceLine = serde_json::from_str(raw).map_err(|e| ServeError::Trace { line, reason: e.to_string() })?;
        if !(entry.at_ms.is_finite() && (0.0..=3_600_000.0).contains(&entry.at_ms)) {
            return Err(ServeError::Trace { line, reason: format!("at_ms = {} is not between 0 and 3600000", entry.at_ms) });
        }
        if entry.at_ms < last {
            return Err(ServeError::Trace { line, reason: format!("at_ms = {} comes before the previous line's {last}", entry.at_ms) });
        }
        if entry.task.is_some() == entry.conversation.is_some() {
            return Err(ServeError::Trace { line, reason: "give exactly one of `task` and `conversation`".into() });
        }
        last = entry.at_ms;
        lines.push(entry);
    }
    if lines.is_empty() {
        return Err(ServeError::Trace { line: 0, reason: "the trace has no arrivals".into() });
    }
    Ok(lines)
}

/// A conversation a trace may send, by name (a task id, or
/// `trace-arrival-N` for a conversation written in the trace).
pub type NamedConversation = (String, router::Conversation);

/// A replayed trace over a task set: the conversations it sends (the
/// tasks it names, then each inline conversation) by name, and its
/// arrivals indexing them. An unknown task is named with its line.
pub fn trace_arrivals(lines: &[TraceLine], tasks: &[NamedConversation]) -> Result<(Vec<NamedConversation>, Vec<Arrival>), ServeError> {
    let mut named: Vec<NamedConversation> = Vec::new();
    let mut arrivals = Vec::with_capacity(lines.len());
    for (id, line) in lines.iter().enumerate() {
        let prompt = match (&line.task, &line.conversation) {
            (Some(task), _) => match named.iter().position(|(n, _)| n == task) {
                Some(index) => index,
                None => {
                    let (_, conversation) = tasks
                        .iter()
                        .find(|(n, _)| n == task)
                        .ok_or_else(|| ServeError::Trace { line: id + 1, reason: format!("task `{task}` is not in the task file") })?;
                    named.push((task.clone(), conversation.clone()));
                    named.len() - 1
                }
            },
            (None, Some(conversation)) => {
                named.push((format!("trace-arrival-{}", id + 1), conversation.clone()));
                named.len() - 1
            }
            (None, None) => return Err(ServeError::Trace { line: id + 1, reason: "no task or conversation".into() }),
        };
        arrivals.push(Arrival { id, at_ms: line.at_ms, prompt });
    }
    Ok((named, arrivals))
}

/// Fits a run's settings to a replayed trace: the arrivals last as long as
/// the trace does (at least the asked duration), and the offered rate is
/// the trace's own (arrivals per second of the run).
pub fn fit_to_trace(settings: &mut ServeSettings, arrivals: &[Arrival]) {
    let last_s = arrivals.last().map_or(0.0, |a| a.at_ms / 1000.0);
    // An arrival at the very end still falls inside the run.
    settings.duration_s = settings.duration_s.max(last_s + 0.001);
    settings.rate_per_s = arrivals.len().max(1) as f64 / settings.duration_s;
}

/// Prompt-length classes for the chunking trade-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthClass {
    /// At most [`SHORT_TOKENS`] kept tokens.
    Short,
    Medium,
    /// At least [`LONG_TOKENS`] kept tokens (most are cut to 1,024).
    Long,
}

pub const SHORT_TOKENS: usize = 256;
pub const LONG_TOKENS: usize = 768;

impl LengthClass {
    pub fn of(tokens: usize) -> LengthClass {
        match tokens {
            t if t <= SHORT_TOKENS => LengthClass::Short,
            t if t >= LONG_TOKENS => LengthClass::Long,
            _ => LengthClass::Medium,
        }
    }
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A decision before the client's timeout.
    Served,
    /// The client gave up: while waiting, between chunks, or before the
    /// decision came.
    TimedOut,
    /// The queue was full on arrival.
    Rejected,
    /// The engine returned an error.
    Failed,
    /// Still in the system when the run stopped.
    Unfinished,
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [Outcome::Served, Outcome::TimedOut, Outcome::Rejected, Outcome::Failed, Outcome::Unfinished];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Served => "served",
            Outcome::TimedOut => "timed out",
            Outcome::Rejected => "rejected",
            Outcome::Failed => "failed",
            Outcome::Unfinished => "unfinished",
        }
    }
}

/// One request, whatever became of it. Times are ms from the run's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub id: usize,
    pub task: String,
    /// Kept tokens (after `router_max_tokens`).
    pub tokens: usize,
    pub class: LengthClass,
    /// Arrived inside the warm-up.
    pub warmup: bool,
    pub arrival_ms: f64,
    /// When it first got the engine; `None` if it never did.
    pub start_ms: Option<f64>,
    /// When its decision came, or when it was dropped, rejected, or the
    /// run stopped.
    pub end_ms: f64,
    pub outcome: Outcome,
    /// Waiting before it started (or until it ended, if it never did).
    pub queue_ms: f64,
    /// Engine time in the prefill (summed over chunks).
    pub prefill_ms: f64,
    /// Engine time in its other stages (mode, assembly, tokenisation,
    /// truncation, pooling, scores, cost, ranking).
    pub other_ms: f64,
    /// Time after it started during which the engine ran other requests'
    /// chunks (chunked prefill with shortest-first only).
    pub preempted_ms: f64,
    pub chunks: usize,
    /// The top candidate, when served (or finished after the timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RequestRecord {
    /// Arrival → end, whatever the outcome.
    pub fn elapsed_ms(&self) -> f64 {
        self.end_ms - self.arrival_ms
    }

    /// Served within the SLO.
    pub fn within(&self, slo_ms: f64) -> bool {
        self.outcome == Outcome::Served && self.elapsed_ms() <= slo_ms
    }
}

/// Requests in the system at a moment (waiting + started), and how many of
/// them had started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueueSample {
    pub t_ms: f64,
    pub in_system: usize,
    pub waiting: usize,
}

/// What the engine returns for a finished request.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub top: String,
    /// Engine time outside the prefill, ms.
    pub other_ms: f64,
}

/// What the server needs from an engine: start a request (the stages
/// before the prefill), prefill up to a number of tokens, finish (the
/// stages after). Each call is one unit of work the server times.
pub trait Engine {
    type Job;
    /// Starts the request for prompt `prompt`; returns the job and the
    /// engine time of its first stages (ms).
    fn begin(&mut self, prompt: usize) -> Result<(Self::Job, f64), String>;
    /// Kept tokens not prefilled yet.
    fn remaining(&self, job: &Self::Job) -> usize;
    /// Prefills up to `max_tokens` tokens; returns the engine time (ms).
    fn prefill(&mut self, job: &mut Self::Job, max_tokens: usize) -> Result<f64, String>;
    fn finish(&mut self, job: Self::Job) -> Result<Finished, String>;
}

struct Active<J> {
    arrival: usize,
    job: Option<J>,
    start_ms: Option<f64>,
    prefill_ms: f64,
    other_ms: f64,
    busy_ms: f64,
    chunks: usize,
}

/// What one [`Server::step`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Ran a unit of work (a whole request, or one chunk).
    Worked,
    /// Nothing to run before this time (ms from the start).
    IdleUntil(f64),
    /// Every request has an outcome; [`Server::finish`] gives the run.
    Done,
}

/// The single-engine server over a fixed trace.
pub struct Server<J> {
    settings: ServeSettings,
    prompts: Vec<TracePrompt>,
    arrivals: Vec<Arrival>,
    next: usize,
    active: Vec<Active<J>>,
    records: Vec<RequestRecord>,
    /// The queue as the server saw it, at each event it handled: what a
    /// live chart can draw. An arrival during a long step is only seen
    /// after it, so the run's own series is rebuilt from the records.
    queue: Vec<QueueSample>,
    done: bool,
}

impl<J> Server<J> {
    pub fn new(settings: ServeSettings, prompts: Vec<TracePrompt>, arrivals: Vec<Arrival>) -> Result<Server<J>, ServeError> {
        settings.check()?;
        if let Some(bad) = arrivals.iter().find(|a| a.prompt >= prompts.len()) {
            return Err(ServeError::Trace { line: bad.id + 1, reason: format!("prompt {} is not in the prompt set", bad.prompt) });
        }
        // An arrival after the last one the run admits would have no record.
        if let Some(late) = arrivals.iter().find(|a| a.at_ms >= settings.end_ms()) {
            return Err(ServeError::Trace {
                line: late.id + 1,
                reason: format!("arrives at {} ms, after the run's {} s of arrivals", late.at_ms, settings.duration_s),
            });
        }
        Ok(Server {
            settings,
            prompts,
            arrivals,
            next: 0,
            active: Vec::new(),
            records: Vec::new(),
            queue: vec![QueueSample { t_ms: 0.0, in_system: 0, waiting: 0 }],
            done: false,
        })
    }

    /// Requests with an outcome so far.
    pub fn records(&self) -> &[RequestRecord] {
        &self.records
    }

    pub fn queue_samples(&self) -> &[QueueSample] {
        &self.queue
    }

    fn record(&mut self, index: usize, end_ms: f64, outcome: Outcome, top: Option<String>, error: Option<String>) {
        let a = self.active.remove(index);
        let arrival = &self.arrivals[a.arrival];
        let prompt = &self.prompts[arrival.prompt];
        let start = a.start_ms;
        self.records.push(RequestRecord {
            id: arrival.id,
            task: prompt.task.clone(),
            tokens: prompt.tokens,
            class: LengthClass::of(prompt.tokens),
            warmup: arrival.at_ms < self.settings.warmup_s * 1000.0,
            arrival_ms: arrival.at_ms,
            start_ms: start,
            end_ms,
            outcome,
            queue_ms: start.unwrap_or(end_ms) - arrival.at_ms,
            prefill_ms: a.prefill_ms,
            other_ms: a.other_ms,
            preempted_ms: start.map_or(0.0, |s| (end_ms - s - a.busy_ms).max(0.0)),
            chunks: a.chunks,
            top,
            error,
        });
    }

    fn sample(&mut self, t_ms: f64) {
        let waiting = self.active.iter().filter(|a| a.start_ms.is_none()).count();
        self.queue.push(QueueSample { t_ms, in_system: self.active.len(), waiting });
    }

    /// Admits the arrivals due by `now`, drops those whose client gave up,
    /// then runs one unit of work on `engine` (a whole request, or one
    /// chunk), reading `clock` after it. Call until it says `Done`.
    pub fn step<E: Engine<Job = J>>(&mut self, engine: &mut E, clock: &mut dyn FnMut() -> f64) -> Step {
        if self.done {
            return Step::Done;
        }
        let now = clock();
        self.admit(now);
        // Clients that gave up, waiting or between chunks.
        let timeout = self.settings.timeout_ms;
        while let Some(index) = self.active.iter().position(|a| now - self.arrivals[a.arrival].at_ms >= timeout) {
            let at = self.arrivals[self.active[index].arrival].at_ms + timeout;
            self.record(index, at, Outcome::TimedOut, None, None);
            self.sample(now);
        }
        let stop = self.settings.end_ms() + self.settings.drain_s * 1000.0;
        if now >= stop {
            while !self.active.is_empty() {
                self.record(0, now, Outcome::Unfinished, None, None);
            }
            self.sample(now);
            self.done = true;
            return Step::Done;
        }
        let Some(index) = self.pick() else {
            if let Some(next) = self.arrivals.get(self.next) {
                return Step::IdleUntil(next.at_ms.min(stop));
            }
            self.done = true;
            return Step::Done;
        };

        let chunk = self.settings.chunk.unwrap_or(usize::MAX);
        let started_now = self.active[index].start_ms.is_none();
        if started_now {
            self.active[index].start_ms = Some(now);
            self.sample(now);
        }
        let prompt = self.arrivals[self.active[index].arrival].prompt;
        let result = (|| -> Result<Option<Finished>, String> {
            let a = &mut self.active[index];
            if a.job.is_none() {
                let (job, spent) = engine.begin(prompt)?;
                a.other_ms += spent;
                a.busy_ms += spent;
                a.job = Some(job);
            }
            let job = a.job.as_mut().expect("begun above");
            let spent = engine.prefill(job, chunk)?;
            a.prefill_ms += spent;
            a.busy_ms += spent;
            a.chunks += 1;
            if engine.remaining(job) > 0 {
                return Ok(None);
            }
            let finished = engine.finish(a.job.take().expect("begun above"))?;
            a.other_ms += finished.other_ms;
            a.busy_ms += finished.other_ms;
            Ok(Some(finished))
        })();
        let end = clock();
        match result {
            Ok(None) => {}
            Ok(Some(finished)) => {
                let arrival = self.arrivals[self.active[index].arrival].at_ms;
                let outcome = if end - arrival <= timeout { Outcome::Served } else { Outcome::TimedOut };
                self.record(index, end, outcome, Some(finished.top), None);
                self.sample(end);
            }
            Err(error) => {
                self.record(index, end, Outcome::Failed, None, Some(error));
                self.sample(end);
            }
        }
        Step::Worked
    }

    /// Admits the arrivals due by `now`, rejecting those that find the
    /// system full.
    fn admit(&mut self, now: f64) {
        while self.next < self.arrivals.len() && self.arrivals[self.next].at_ms <= now {
            let index = self.next;
            self.next += 1;
            let at = self.arrivals[index].at_ms;
            self.active.push(Active { arrival: index, job: None, start_ms: None, prefill_ms: 0.0, other_ms: 0.0, busy_ms: 0.0, chunks: 0 });
            if self.active.len() > self.settings.queue_limit {
                let last = self.active.len() - 1;
                self.record(last, at, Outcome::Rejected, None, None);
            } else {
                // Sampled when the server saw it (the queue as the server
                // knew it, in time order); the record keeps the arrival time.
                self.sample(now);
            }
        }
    }

    /// Stops the run now (the user cancelled it): the arrivals due are
    /// admitted, every request in the system is recorded as unfinished,
    /// and arrivals not due yet never came.
    pub fn stop(&mut self, now_ms: f64) {
        self.admit(now_ms);
        while !self.active.is_empty() {
            self.record(0, now_ms, Outcome::Unfinished, None, None);
        }
        self.sample(now_ms);
        self.arrivals.truncate(self.next);
        self.done = true;
    }

    /// The request to run next under the policy.
    fn pick(&self) -> Option<usize> {
        let arrival = |a: &Active<J>| self.arrivals[a.arrival].at_ms;
        let by_arrival = |x: &&Active<J>, y: &&Active<J>| arrival(x).total_cmp(&arrival(y));
        let chosen = match self.settings.policy {
            Policy::Fcfs => self.active.iter().min_by(by_arrival),
            Policy::ShortestFirst => self.active.iter().min_by(|x, y| self.left(x).cmp(&self.left(y)).then(by_arrival(x, y))),
        }?;
        self.active.iter().position(|a| std::ptr::eq(a, chosen))
    }

    /// Tokens a request still has to prefill: the trace's kept length
    /// until it starts, then what its job has left.
    fn left(&self, a: &Active<J>) -> usize {
        let tokens = self.prompts[self.arrivals[a.arrival].prompt].tokens;
        tokens.saturating_sub(a.chunks.saturating_mul(self.settings.chunk.unwrap_or(usize::MAX)))
    }

    /// The run: every request's record (in arrival order), the queue over
    /// time and the summary, all from the records.
    pub fn finish(self, label: String) -> ServeRun {
        ServeRun::from_records(label, self.settings, self.records, self.arrivals.len())
    }
}

/// Requests in the system (arrived and not yet ended; a rejected one never
/// enters) and waiting (not yet started) over time, exactly, from the
/// records: one sample at t = 0 and one after each instant at which
/// something arrived, started or ended.
pub fn queue_from_records(records: &[RequestRecord]) -> Vec<QueueSample> {
    // (time, change in the system, change in waiting); at equal times the
    // ends come first, so no instant counts a request twice.
    let mut events: Vec<(f64, i64, i64)> = Vec::new();
    for r in records.iter().filter(|r| r.outcome != Outcome::Rejected) {
        events.push((r.arrival_ms, 1, 1));
        match r.start_ms {
            Some(start) => {
                events.push((start, 0, -1));
                events.push((r.end_ms, -1, 0));
            }
            None => events.push((r.end_ms, -1, -1)),
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut queue = vec![QueueSample { t_ms: 0.0, in_system: 0, waiting: 0 }];
    let (mut in_system, mut waiting) = (0i64, 0i64);
    for (i, &(t, d_system, d_waiting)) in events.iter().enumerate() {
        in_system += d_system;
        waiting += d_waiting;
        if events.get(i + 1).is_none_or(|next| next.0 > t) {
            queue.push(QueueSample { t_ms: t, in_system: in_system.max(0) as usize, waiting: waiting.max(0) as usize });
        }
    }
    queue
}

/// p50, p95 and p99 in ms; `None` where a request never got that far
/// counts as beyond every finite value (so a quantile that falls on one is
/// `None`: "not served").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub n: usize,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

impl Percentiles {
    /// Over `values`, where `None` is worse than any value.
    pub fn of(values: impl IntoIterator<Item = Option<f64>>) -> Percentiles {
        let mut finite: Vec<f64> = Vec::new();
        let mut n = 0;
        for v in values {
            n += 1;
            if let Some(v) = v {
                finite.push(v);
            }
        }
        finite.sort_by(f64::total_cmp);
        // Nearest rank among all n (no interpolation: past the last finite
        // value there is nothing to interpolate towards).
        let at = |q: f64| -> Option<f64> {
            let rank = (q * n as f64).ceil().max(1.0) as usize;
            finite.get(rank - 1).copied()
        };
        Percentiles { n, p50: at(0.50), p95: at(0.95), p99: at(0.99) }
    }
}

/// One run's figures over the measurement interval (arrivals after the
/// warm-up), with the warm-up's counts beside them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub offered_per_s: f64,
    pub arrivals: usize,
    pub measured: usize,
    /// Measured requests per outcome, in [`Outcome::ALL`] order.
    pub outcomes: Vec<(Outcome, usize)>,
    pub warmup_outcomes: Vec<(Outcome, usize)>,
    /// End to end over every measured request (not served = beyond).
    pub end_to_end: Percentiles,
    /// Over the measured requests that started.
    pub queue: Percentiles,
    pub prefill: Percentiles,
    pub other: Percentiles,
    pub preempted: Percentiles,
    /// Served within the SLO per second of the measurement interval.
    pub goodput_per_s: f64,
    /// Decisions (served or late) per second of the measurement interval.
    pub throughput_per_s: f64,
    /// End to end of the measured short and long requests.
    pub short: Percentiles,
    pub long: Percentiles,
    /// Requests in the system when the arrivals stopped.
    pub in_system_at_end: usize,
    /// Requests still in the system when the run stopped.
    pub unfinished: usize,
    /// Engine busy time ÷ the run's length.
    pub utilisation: f64,
    pub max_in_system: usize,
}

impl RunSummary {
    pub fn of(settings: &ServeSettings, records: &[RequestRecord], queue: &[QueueSample], arrivals: usize, busy_ms: f64) -> RunSummary {
        let measured: Vec<&RequestRecord> = records.iter().filter(|r| !r.warmup).collect();
        let count = |rs: &[&RequestRecord], o: Outcome| rs.iter().filter(|r| r.outcome == o).count();
        let warm: Vec<&RequestRecord> = records.iter().filter(|r| r.warmup).collect();
        let window_s = settings.duration_s - settings.warmup_s;
        let e2e = |r: &&RequestRecord| (r.outcome == Outcome::Served).then(|| r.elapsed_ms());
        let started: Vec<&&RequestRecord> = measured.iter().filter(|r| r.start_ms.is_some()).collect();
        let class = |c: LengthClass| Percentiles::of(measured.iter().filter(|r| r.class == c).map(e2e));
        let end = settings.end_ms();
        let in_system_at_end = records.iter().filter(|r| r.arrival_ms <= end && r.end_ms > end && r.outcome != Outcome::Rejected).count();
        let run_ms = records.iter().map(|r| r.end_ms).fold(end, f64::max);
        RunSummary {
            offered_per_s: settings.rate_per_s,
            arrivals,
            measured: measured.len(),
            outcomes: Outcome::ALL.iter().map(|&o| (o, count(&measured, o))).collect(),
            warmup_outcomes: Outcome::ALL.iter().map(|&o| (o, count(&warm, o))).collect(),
            end_to_end: Percentiles::of(measured.iter().map(e2e)),
            queue: Percentiles::of(started.iter().map(|r| Some(r.queue_ms))),
            prefill: Percentiles::of(started.iter().map(|r| Some(r.prefill_ms))),
            other: Percentiles::of(started.iter().map(|r| Some(r.other_ms))),
            preempted: Percentiles::of(started.iter().map(|r| Some(r.preempted_ms))),
            goodput_per_s: measured.iter().filter(|r| r.within(settings.slo_ms)).count() as f64 / window_s,
            throughput_per_s: measured.iter().filter(|r| r.top.is_some()).count() as f64 / window_s,
            short: class(LengthClass::Short),
            long: class(LengthClass::Long),
            in_system_at_end,
            unfinished: count(&records.iter().collect::<Vec<_>>(), Outcome::Unfinished),
            utilisation: busy_ms / run_ms.max(1.0),
            max_in_system: queue.iter().map(|q| q.in_system).max().unwrap_or(0),
        }
    }

    pub fn outcome(&self, o: Outcome) -> usize {
        self.outcomes.iter().find(|(x, _)| *x == o).map_or(0, |(_, n)| *n)
    }
}

/// One load run: settings, every request, the queue over time, the figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeRun {
    pub label: String,
    pub settings: ServeSettings,
    pub records: Vec<RequestRecord>,
    pub queue: Vec<QueueSample>,
    pub summary: RunSummary,
}

impl ServeRun {
    /// A run from its settings and records (in any order) and how many
    /// arrivals it had: the queue series and the summary are derived, so a
    /// report's runs can be derived again under this build's definitions
    /// (`bench-decide --serve --render`). The engine's busy time is the
    /// requests' own engine time, prefill and the other stages.
    pub fn from_records(label: String, settings: ServeSettings, mut records: Vec<RequestRecord>, arrivals: usize) -> ServeRun {
        records.sort_by_key(|r| r.id);
        let queue = queue_from_records(&records);
        let busy_ms = records.iter().map(|r| r.prefill_ms + r.other_ms).sum();
        let summary = RunSummary::of(&settings, &records, &queue, arrivals, busy_ms);
        ServeRun { label, settings, records, queue, summary }
    }

    /// This run derived again from its records ([`ServeRun::from_records`]).
    pub fn derived_again(&self) -> ServeRun {
        ServeRun::from_records(self.label.clone(), self.settings.clone(), self.records.clone(), self.summary.arrivals)
    }

    /// Arrivals per second in the measurement interval: what was offered
    /// in fact. A Poisson draw of a few minutes can fall well short of the
    /// nominal rate (or pass it), so the knee compares against this.
    pub fn arrived_per_s(&self) -> f64 {
        self.summary.measured as f64 / (self.settings.duration_s - self.settings.warmup_s)
    }

    /// [`summary_line`] of this run.
    pub fn summary_line(&self) -> String {
        summary_line(&self.label, &self.settings, &self.summary)
    }
}

/// The knee of a load sweep: the highest offered rate at which at least
/// `share` of the measured arrivals were served within the SLO, with every
/// lower rate too (runs in rate order).
pub fn knee(runs: &[&ServeRun], share: f64) -> Option<f64> {
    let mut knee = None;
    for run in runs {
        if run.summary.goodput_per_s >= share * run.arrived_per_s() {
            knee = Some(run.summary.offered_per_s);
        } else {
            break;
        }
    }
    knee
}

/// The share of the arrivals that must be served within the SLO for a
/// rate to count as sustained (below the knee).
pub const KNEE_SHARE: f64 = 0.9;

/// A serving study: the runs of a load sweep and a chunking sweep, on one
/// checkpoint and prompt set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeStudy {
    /// Where the prompts came from, and how long each is kept.
    pub prompt_set: String,
    pub prompts: Vec<TracePrompt>,
    pub router_max_tokens: usize,
    /// `poisson` or the trace file's name.
    pub arrivals: String,
    pub runs: Vec<ServeRun>,
    /// What else ran on the machine, as the caller states it.
    #[serde(default)]
    pub note: String,
    /// One whole decide of the heaviest prompt (most kept tokens, then
    /// most text to tokenise) before the first run, nothing queued (ms):
    /// the slowest request on this machine without load, against which the
    /// SLO is read. Absent in studies written before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unloaded_heaviest_ms: Option<f64>,
}

impl ServeStudy {
    /// Runs without chunking under FCFS, by rate: the load sweep.
    pub fn load_sweep(&self) -> Vec<&ServeRun> {
        let mut runs: Vec<&ServeRun> =
            self.runs.iter().filter(|r| r.settings.chunk.is_none() && r.settings.policy == Policy::Fcfs).collect();
        runs.sort_by(|a, b| a.settings.rate_per_s.total_cmp(&b.settings.rate_per_s));
        runs.dedup_by(|a, b| a.settings.rate_per_s == b.settings.rate_per_s);
        runs
    }

    pub fn knee(&self) -> Option<f64> {
        knee(&self.load_sweep(), KNEE_SHARE)
    }

    /// The load-sweep run that served the most within the SLO per second
    /// (the lowest rate on a tie): past it, more offered load serves no
    /// more. Unlike the knee it exists even when the SLO is tighter than
    /// some unloaded requests.
    pub fn goodput_peak(&self) -> Option<&ServeRun> {
        self.load_sweep().into_iter().fold(None, |best: Option<&ServeRun>, run| match best {
            Some(b) if b.summary.goodput_per_s >= run.summary.goodput_per_s => Some(b),
            _ => Some(run),
        })
    }

    /// The rates at which more than one chunk setting ran: the chunk sweep.
    pub fn chunk_rates(&self) -> Vec<f64> {
        let mut rates: Vec<f64> = self.runs.iter().map(|r| r.settings.rate_per_s).collect();
        rates.sort_by(f64::total_cmp);
        rates.dedup();
        rates
            .into_iter()
            .filter(|&rate| self.runs.iter().filter(|r| r.settings.rate_per_s == rate && r.settings.chunk.is_some()).count() > 0)
            .collect()
    }
}

/// A round step for time ticks over `seconds`.
fn plot_step(seconds: f64) -> f64 {
    [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0].into_iter().find(|s| seconds / s <= 10.0).unwrap_or(1200.0)
}

/// A latency in a sentence: "1234 ms", or "not served".
fn with_unit(p: Option<f64>) -> String {
    p.map_or_else(|| "not served".to_string(), |v| format!("{v:.0} ms"))
}

fn ms_or_beyond(p: Option<f64>) -> String {
    p.map_or_else(|| "not served".to_string(), |v| format!("{v:.0}"))
}

/// A run's name: offered rate, chunk and policy.
pub fn run_label(settings: &ServeSettings) -> String {
    let rate = (settings.rate_per_s * 1000.0).round() / 1000.0;
    format!("{rate} req/s, chunk {}, {}", settings.chunk_label(), settings.policy.label())
}

/// One line per run, as the CLI prints it while a sweep runs and the page
/// lists the finished runs: from the run's name, settings and figures only
/// (the worker posts these, not the records, as each run ends).
pub fn summary_line(label: &str, settings: &ServeSettings, s: &RunSummary) -> String {
    format!(
        "{}: {} measured, {} served ({} within {:.0} ms), {} timed out, {} rejected, {} unfinished; end to end p50/p95/p99 {}/{}/{} ms; goodput {:.2}/s; max {} in system",
        label,
        s.measured,
        s.outcome(Outcome::Served),
        (s.goodput_per_s * (settings.duration_s - settings.warmup_s)).round(),
        settings.slo_ms,
        s.outcome(Outcome::TimedOut),
        s.outcome(Outcome::Rejected),
        s.unfinished,
        ms_or_beyond(s.end_to_end.p50),
        ms_or_beyond(s.end_to_end.p95),
        ms_or_beyond(s.end_to_end.p99),
        s.goodput_per_s,
        s.max_in_system
    )
}

impl ServeStudy {
    /// The table's header and one row of cells per run (latencies in ms
    /// over the measurement interval; "not served" where the quantile falls
    /// on a request that timed out, was rejected or did not finish).
    pub fn table_cells(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "offered /s",
            "arrived /s",
            "chunk",
            "policy",
            "measured",
            "served",
            "≤ SLO /s",
            "timed out",
            "rejected",
            "unfinished",
            "e2e p50",
            "e2e p95",
            "e2e p99",
            "queue p95",
            "prefill p95",
            "short p95",
            "long p95",
            "max in system",
            "busy",
        ];
        let rows = self
            .runs
            .iter()
            .map(|r| {
                let s = &r.summary;
                vec![
                    r.settings.rate_per_s.to_string(),
                    format!("{:.2}", r.arrived_per_s()),
                    r.settings.chunk_label(),
                    r.settings.policy.label().to_string(),
                    s.measured.to_string(),
                    s.outcome(Outcome::Served).to_string(),
                    format!("{:.2}", s.goodput_per_s),
                    s.outcome(Outcome::TimedOut).to_string(),
                    s.outcome(Outcome::Rejected).to_string(),
                    s.unfinished.to_string(),
                    ms_or_beyond(s.end_to_end.p50),
                    ms_or_beyond(s.end_to_end.p95),
                    ms_or_beyond(s.end_to_end.p99),
                    ms_or_beyond(s.queue.p95),
                    ms_or_beyond(s.prefill.p95),
                    ms_or_beyond(s.short.p95),
                    ms_or_beyond(s.long.p95),
                    s.max_in_system.to_string(),
                    format!("{:.0} %", s.utilisation * 100.0),
                ]
            })
            .collect();
        (header, rows)
    }

    /// [`ServeStudy::table_cells`] as Markdown.
    pub fn table(&self) -> String {
        let (header, rows) = self.table_cells();
        let mut out = format!("| {} |\n|{}\n", header.join(" | "), "---:|".repeat(header.len()));
        for row in rows {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        out
    }

    /// Sentences computed from the runs: the knee, and at each chunk-sweep
    /// rate what chunking with shortest-first did to short and long
    /// requests against one whole prefill.
    pub fn verdicts(&self) -> Vec<String> {
        let mut out = Vec::new();
        let sweep = self.load_sweep();
        if let (Some(first), Some(last)) = (sweep.first(), sweep.last()) {
            let slo = first.settings.slo_ms;
            out.push(match self.knee().and_then(|k| sweep.iter().find(|r| r.summary.offered_per_s == k)) {
                Some(at) => {
                    let beyond = if last.summary.offered_per_s > at.summary.offered_per_s {
                        format!(
                            " Past it the queue grows: at {} /s offered ({:.2} /s arrived), {:.2} /s within the SLO, {} in the system at most.",
                            last.summary.offered_per_s,
                            last.arrived_per_s(),
                            last.summary.goodput_per_s,
                            last.summary.max_in_system
                        )
                    } else {
                        " The sweep did not go past it.".to_string()
                    };
                    format!(
                        "Knee: up to {} requests/s offered ({:.2} /s arrived in the measured interval), at least {:.0} % of the arrivals were served within {slo:.0} ms.{beyond}",
                        at.summary.offered_per_s,
                        at.arrived_per_s(),
                        KNEE_SHARE * 100.0
                    )
                }
                None => format!(
                    "No knee in the sweep: even at {} requests/s offered less than {:.0} % of the arrivals were served within {slo:.0} ms.",
                    first.summary.offered_per_s,
                    KNEE_SHARE * 100.0
                ),
            });
        }
        if let (Some(peak), Some(last)) = (self.goodput_peak(), sweep.last()) {
            if peak.summary.offered_per_s < last.summary.offered_per_s {
                out.push(format!(
                    "Saturation: the most served within the SLO was {:.2} /s, at {} requests/s offered (engine busy {:.0} %); at {} /s offered it was {:.2} /s.",
                    peak.summary.goodput_per_s,
                    peak.summary.offered_per_s,
                    peak.summary.utilisation * 100.0,
                    last.summary.offered_per_s,
                    last.summary.goodput_per_s
                ));
            }
        }
        if let (Some(unloaded), Some(first)) = (self.unloaded_heaviest_ms, sweep.first()) {
            out.push(format!(
                "The SLO ({:.0} ms) against this machine's speed: one decide of the heaviest prompt ({} tokens kept) took {unloaded:.0} ms with nothing queued.",
                first.settings.slo_ms,
                self.prompts.iter().map(|p| p.tokens).max().unwrap_or(0)
            ));
        }
        for rate in self.chunk_rates() {
            let at = |chunk: Option<usize>, policy: Policy| {
                self.runs.iter().find(|r| r.settings.rate_per_s == rate && r.settings.chunk == chunk && r.settings.policy == policy)
            };
            let Some(whole) = at(None, Policy::Fcfs) else { continue };
            let best = self
                .runs
                .iter()
                .filter(|r| r.settings.rate_per_s == rate && r.settings.chunk.is_some() && r.settings.policy == Policy::ShortestFirst)
                .filter_map(|r| r.summary.short.p95.map(|p| (r, p)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((run, short)) = best {
                out.push(format!(
                    "At {rate} requests/s, chunks of {} with shortest first: short requests' p95 {} against {} with one whole prefill (FCFS); long requests' p95 {} against {}.",
                    run.settings.chunk_label(),
                    with_unit(Some(short)),
                    with_unit(whole.summary.short.p95),
                    with_unit(run.summary.long.p95),
                    with_unit(whole.summary.long.p95)
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
