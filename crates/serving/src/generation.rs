//! The generating server of note 06: open-loop arrivals of requests that
//! each prefill a prompt and decode an answer, scheduled an iteration at a
//! time by [`crate::batching::Scheduler`] on one engine, with every request
//! kept in the records (served, timed out, rejected, failed, cancelled or
//! unfinished)
//! and every iteration logged (which requests were fed how many tokens, as
//! prefill or decode: the note's figure).
//!
//! Pure like [`crate::Server`]: the caller passes the time and a
//! [`StepEngine`] (the router's engine in `bench`, a counting one in the
//! tests), so the CLI, the worker, the OpenAI-compatible server (`gateway`,
//! an open server whose requests [`GenServer::arrive`] as clients send
//! them and [`GenServer::cancel`] when they leave) and the tests drive the
//! same code.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::batching::{BatchSettings, KvBytes, Plan, Scheduler, Work};
use crate::Percentiles;

/// One request of a generating load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenRequest {
    pub id: u64,
    pub arrival_ms: f64,
    /// Which prompt of the prompt set (the engine tokenised it).
    pub prompt: usize,
    pub prompt_tokens: usize,
    pub max_new_tokens: usize,
}

/// What the server needs of an engine.
pub trait StepEngine {
    type Seq: Work;
    /// The sequence for a request.
    fn sequence(&mut self, request: &GenRequest) -> Result<Self::Seq, String>;
    /// One forward pass over `batch` (id, sequence, tokens to feed);
    /// returns, per entry, whether it produced a token.
    fn step(&mut self, batch: &mut [(u64, &mut Self::Seq, usize)]) -> Result<Vec<bool>, String>;
}

/// The server's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GenSettings {
    pub batch: BatchSettings,
    /// A request not started this long after it arrived is given up (its client left).
    pub timeout_ms: f64,
    /// Requests arriving before this are warm-up: run, recorded, left out of the statistics.
    pub warmup_ms: f64,
    /// After the last arrival, how long the server may drain before what is left is unfinished.
    pub drain_ms: f64,
    /// Service levels for goodput: time to first token, and time per output token.
    pub ttft_slo_ms: f64,
    pub tpot_slo_ms: f64,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GenOutcome {
    Served,
    /// Not started within the timeout.
    TimedOut,
    /// Could never fit the K/V budget.
    Rejected,
    /// The engine failed on it.
    Failed,
    /// Still waiting or running when the drain ended.
    Unfinished,
    /// Its first token made, it left this instance for a decode instance
    /// (P/D separation; [`crate::disaggregation`] joins its two records).
    HandedOff,
    /// Its client went away (a closed connection): its sequence and K/V
    /// were freed at once, and what it had received is kept.
    Cancelled,
}

/// One request's life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenRecord {
    pub id: u64,
    pub prompt_tokens: usize,
    pub max_new_tokens: usize,
    pub warmup: bool,
    pub arrival_ms: f64,
    /// The first iteration that fed it.
    pub start_ms: Option<f64>,
    pub first_token_ms: Option<f64>,
    /// When each later token came, ms after the previous one.
    pub gaps_ms: Vec<f64>,
    pub end_ms: f64,
    pub tokens_out: usize,
    /// Iterations that fed its prompt (more than one: chunked, or preempted).
    pub prefill_chunks: usize,
    pub preemptions: usize,
    pub outcome: GenOutcome,
}

impl GenRecord {
    pub fn ttft_ms(&self) -> Option<f64> {
        self.first_token_ms.map(|t| t - self.arrival_ms)
    }

    /// Mean time per output token after the first.
    pub fn tpot_ms(&self) -> Option<f64> {
        (!self.gaps_ms.is_empty()).then(|| self.gaps_ms.iter().sum::<f64>() / self.gaps_ms.len() as f64)
    }
}

/// One fed entry of an iteration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Feed {
    pub id: u64,
    pub tokens: usize,
    /// Part of its prompt (or of a recompute), not a decode.
    pub prefill: bool,
}

/// One engine iteration, for the note's figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Iteration {
    /// The engine instance that ran it (0 unless several serve one load).
    #[serde(default)]
    pub instance: usize,
    pub start_ms: f64,
    pub end_ms: f64,
    pub feeds: Vec<Feed>,
    pub blocks_in_use: usize,
    /// Requests running and waiting once it ended (older runs: 0).
    #[serde(default)]
    pub running: usize,
    #[serde(default)]
    pub waiting: usize,
    /// The running sequences' K/V once it ended (older runs: 0).
    #[serde(default)]
    pub kv: KvBytes,
}

/// What one [`GenServer::step`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GenStep {
    Worked,
    IdleUntil(f64),
    Done,
}

#[derive(Default)]
struct Live {
    start_ms: Option<f64>,
    first_token_ms: Option<f64>,
    last_token_ms: f64,
    gaps_ms: Vec<f64>,
    tokens_out: usize,
    prefill_chunks: usize,
    preemptions: usize,
}

/// The generating server over a fixed list of requests.
pub struct GenServer<E: StepEngine> {
    settings: GenSettings,
    /// Arrivals not yet admitted, in arrival order (from `next`).
    requests: Vec<GenRequest>,
    next: usize,
    /// Admitted requests not yet recorded, by id (a long-running server
    /// keeps no request past its record).
    admitted: HashMap<u64, GenRequest>,
    scheduler: Scheduler<E::Seq>,
    live: HashMap<u64, Live>,
    records: Vec<GenRecord>,
    iterations: Vec<Iteration>,
    end_of_arrivals_ms: f64,
    done: bool,
    /// More requests may [`GenServer::arrive`] until [`GenServer::close`].
    open: bool,
    /// Sequences that arrived made (a hand-off), by request id.
    arrived: HashMap<u64, E::Seq>,
    /// Whether a sequence leaves after its first token ([`GenServer::handing_off`]).
    hands_off: bool,
    handed_off: Vec<(GenRequest, E::Seq, f64)>,
}

impl<E: StepEngine> GenServer<E> {
    /// `requests` in arrival order; `end_of_arrivals_ms` is when arrivals stop (the drain starts).
    pub fn new(settings: GenSettings, mut requests: Vec<GenRequest>, end_of_arrivals_ms: f64) -> GenServer<E> {
        requests.sort_by(|a, b| a.arrival_ms.total_cmp(&b.arrival_ms));
        GenServer {
            settings,
            requests,
            next: 0,
            admitted: HashMap::new(),
            scheduler: Scheduler::new(settings.batch),
            live: HashMap::new(),
            records: Vec::new(),
            iterations: Vec::new(),
            end_of_arrivals_ms,
            done: false,
            open: false,
            arrived: HashMap::new(),
            hands_off: false,
            handed_off: Vec::new(),
        }
    }

    /// A server whose requests come later, through [`GenServer::arrive`],
    /// until [`GenServer::close`]: a decode instance, fed by hand-offs.
    pub fn open(settings: GenSettings, end_of_arrivals_ms: f64) -> GenServer<E> {
        GenServer { open: true, ..GenServer::new(settings, Vec::new(), end_of_arrivals_ms) }
    }

    /// A prefill instance: each sequence leaves after its first token
    /// (unless that token ends it), to be taken with
    /// [`GenServer::take_handed_off`].
    pub fn handing_off(self) -> GenServer<E> {
        GenServer { hands_off: true, ..self }
    }

    /// A request arriving with its sequence already made (its K/V received).
    pub fn arrive(&mut self, request: GenRequest, sequence: E::Seq) {
        let later = self.requests[self.next..].partition_point(|r| r.arrival_ms <= request.arrival_ms);
        self.arrived.insert(request.id, sequence);
        self.requests.insert(self.next + later, request);
    }

    /// No more arrivals: once idle, the server is done.
    pub fn close(&mut self) {
        self.open = false;
    }

    /// The sequences handed off since the last call, with their requests
    /// and the time each left.
    pub fn take_handed_off(&mut self) -> Vec<(GenRequest, E::Seq, f64)> {
        std::mem::take(&mut self.handed_off)
    }

    pub fn records(&self) -> &[GenRecord] {
        &self.records
    }

    pub fn iterations(&self) -> &[Iteration] {
        &self.iterations
    }

    /// The records made since the last call, for a server that runs for
    /// as long as it is up and keeps its own window of them.
    pub fn take_records(&mut self) -> Vec<GenRecord> {
        std::mem::take(&mut self.records)
    }

    /// The iterations run since the last call (as [`GenServer::take_records`]).
    pub fn take_iterations(&mut self) -> Vec<Iteration> {
        std::mem::take(&mut self.iterations)
    }

    /// K/V blocks the running sequences hold now.
    pub fn blocks_in_use(&self) -> usize {
        self.scheduler.blocks_in_use()
    }

    /// The running sequences' K/V now, in bytes.
    pub fn running_kv_bytes(&self) -> KvBytes {
        self.scheduler.running_kv_bytes()
    }

    /// Its client went away: the request leaves wherever it is (not yet
    /// admitted, waiting or running), its sequence and K/V are dropped at
    /// once, and it is recorded as cancelled. False if it is not here
    /// (already recorded).
    pub fn cancel(&mut self, id: u64, now_ms: f64) -> bool {
        if let Some(at) = self.requests[self.next..].iter().position(|r| r.id == id) {
            let request = self.requests.remove(self.next + at);
            self.arrived.remove(&id);
            self.admitted.insert(id, request);
            self.record(id, now_ms, GenOutcome::Cancelled);
            return true;
        }
        if !self.admitted.contains_key(&id) {
            return false;
        }
        drop(self.scheduler.withdraw(id));
        self.record(id, now_ms, GenOutcome::Cancelled);
        true
    }

    pub fn preemptions(&self) -> usize {
        self.scheduler.preemptions()
    }

    /// Requests running and waiting now.
    pub fn queue(&self) -> (usize, usize) {
        (self.scheduler.running(), self.scheduler.waiting())
    }

    /// Ends the run now (a Cancel): what is running or waiting is
    /// unfinished, and requests that have not arrived get no record.
    pub fn stop(&mut self, now_ms: f64) {
        for (id, _) in self.scheduler.drain() {
            self.record(id, now_ms, GenOutcome::Unfinished);
        }
        self.next = self.requests.len();
        self.done = true;
    }

    fn request(&self, id: u64) -> &GenRequest {
        self.admitted.get(&id).expect("an admitted request")
    }

    fn record(&mut self, id: u64, end_ms: f64, outcome: GenOutcome) {
        let request = self.admitted.remove(&id).expect("an admitted request");
        let live = self.live.remove(&id);
        let (start_ms, first_token_ms, gaps_ms, tokens_out, prefill_chunks, preemptions) = match live {
            Some(l) => (l.start_ms, l.first_token_ms, l.gaps_ms, l.tokens_out, l.prefill_chunks, l.preemptions),
            None => (None, None, Vec::new(), 0, 0, 0),
        };
        self.records.push(GenRecord {
            id,
            prompt_tokens: request.prompt_tokens,
            max_new_tokens: request.max_new_tokens,
            warmup: request.arrival_ms < self.settings.warmup_ms,
            arrival_ms: request.arrival_ms,
            start_ms,
            first_token_ms,
            gaps_ms,
            end_ms,
            tokens_out,
            prefill_chunks,
            preemptions,
            outcome,
        });
    }

    /// Admits the arrivals due by `now`, gives up on requests waiting past
    /// the timeout, then runs one iteration on `engine`, reading `clock`
    /// after it. Call until it says `Done`.
    pub fn step(&mut self, engine: &mut E, clock: &mut dyn FnMut() -> f64) -> GenStep {
        if self.done {
            return GenStep::Done;
        }
        let now = clock();
        while let Some(request) = self.requests.get(self.next).filter(|r| r.arrival_ms <= now).cloned() {
            self.next += 1;
            self.admitted.insert(request.id, request.clone());
            let made = match self.arrived.remove(&request.id) {
                Some(sequence) => Ok(sequence),
                None => engine.sequence(&request),
            };
            match made {
                Ok(seq) => {
                    self.live.insert(request.id, Live::default());
                    self.scheduler.submit(request.id, seq);
                }
                Err(_) => self.record(request.id, now, GenOutcome::Failed),
            }
        }
        // Admitted arrivals live in `admitted` now.
        self.requests.drain(..self.next);
        self.next = 0;
        for (id, _) in self.scheduler.take_rejected() {
            self.record(id, now, GenOutcome::Rejected);
        }
        // Clients that gave up before their request started.
        let expired: Vec<u64> = self
            .scheduler
            .waiting_ids()
            .filter(|id| {
                self.live.get(id).is_some_and(|l| l.start_ms.is_none()) && now - self.request(*id).arrival_ms >= self.settings.timeout_ms
            })
            .collect();
        for id in expired {
            self.scheduler.withdraw(id);
            let at = self.request(id).arrival_ms + self.settings.timeout_ms;
            self.record(id, at, GenOutcome::TimedOut);
        }
        if now >= self.end_of_arrivals_ms + self.settings.drain_ms {
            for (id, _) in self.scheduler.drain() {
                self.record(id, now, GenOutcome::Unfinished);
            }
            self.done = true;
            return GenStep::Done;
        }
        let plan = self.scheduler.plan();
        self.count_preemptions(&plan);
        if plan.is_empty() {
            return match self.requests.get(self.next) {
                Some(next) => GenStep::IdleUntil(next.arrival_ms.min(self.end_of_arrivals_ms + self.settings.drain_ms)),
                None if self.scheduler.is_idle() && self.open => GenStep::IdleUntil(f64::INFINITY),
                None if self.scheduler.is_idle() => {
                    self.done = true;
                    GenStep::Done
                }
                // Waiting requests that cannot start: only a timeout or the drain's end moves them.
                None => GenStep::IdleUntil(now + 1.0),
            };
        }
        let started = now;
        let mut batch = self.scheduler.batch_mut(&plan);
        let feeds: Vec<Feed> = batch.iter().map(|(id, seq, n)| Feed { id: *id, tokens: *n, prefill: seq.in_prefill() || *n > 1 }).collect();
        let result = engine.step(&mut batch);
        drop(batch);
        let end = clock();
        match result {
            Ok(produced) => {
                for (feed, &token) in feeds.iter().zip(&produced) {
                    let live = self.live.get_mut(&feed.id).expect("a running request is live");
                    live.start_ms.get_or_insert(started);
                    if feed.prefill {
                        live.prefill_chunks += 1;
                    }
                    if token {
                        match live.first_token_ms {
                            None => live.first_token_ms = Some(end),
                            Some(_) => live.gaps_ms.push(end - live.last_token_ms),
                        }
                        live.last_token_ms = end;
                        live.tokens_out += 1;
                    }
                }
                for (id, _) in self.scheduler.retire() {
                    self.record(id, end, GenOutcome::Served);
                }
                if self.hands_off {
                    let first_tokens: Vec<u64> = feeds
                        .iter()
                        .zip(&produced)
                        .filter(|(feed, &token)| token && self.live.get(&feed.id).is_some_and(|l| l.tokens_out == 1))
                        .map(|(feed, _)| feed.id)
                        .collect();
                    for id in first_tokens {
                        if let Some(sequence) = self.scheduler.withdraw(id) {
                            self.handed_off.push((self.request(id).clone(), sequence, end));
                            self.record(id, end, GenOutcome::HandedOff);
                        }
                    }
                }
            }
            Err(_) => {
                // A failed step fails every request it fed.
                for feed in &feeds {
                    self.scheduler.withdraw(feed.id);
                    self.record(feed.id, end, GenOutcome::Failed);
                }
            }
        }
        self.iterations.push(Iteration {
            instance: 0,
            start_ms: started,
            end_ms: end,
            feeds,
            blocks_in_use: self.scheduler.blocks_in_use(),
            running: self.scheduler.running(),
            waiting: self.scheduler.waiting(),
            kv: self.scheduler.running_kv_bytes(),
        });
        GenStep::Worked
    }

    fn count_preemptions(&mut self, plan: &Plan) {
        for id in &plan.preempted {
            if let Some(live) = self.live.get_mut(id) {
                live.preemptions += 1;
            }
        }
    }
}

/// A run's figures over the requests after the warm-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenSummary {
    pub measured: usize,
    pub served: usize,
    pub timed_out: usize,
    pub rejected: usize,
    pub failed: usize,
    pub unfinished: usize,
    /// Whose client went away mid-request (older runs: none).
    #[serde(default)]
    pub cancelled: usize,
    /// Over the measured requests; one never served counts as beyond every value.
    pub ttft_ms: Percentiles,
    /// Every gap between tokens of the measured requests, pooled.
    pub itl_ms: Percentiles,
    /// Arrival to the last token, over the measured requests; one never
    /// served counts as beyond every value.
    pub completion_ms: Percentiles,
    /// Tokens out a second over the measurement interval.
    pub tokens_per_s: f64,
    /// Requests a second served within both SLOs (TTFT, and TPOT).
    pub goodput_per_s: f64,
    pub preemptions: usize,
    /// From the end of the warm-up to the last measured request's end.
    pub interval_ms: f64,
}

impl GenSummary {
    /// The measured requests not served, by outcome, in words (`None` when every one was).
    pub fn losses(&self) -> Option<String> {
        let lost = self.timed_out + self.rejected + self.failed + self.unfinished + self.cancelled;
        (lost > 0).then(|| {
            format!(
                "{} timed out, {} rejected, {} failed, {} unfinished, {} cancelled",
                self.timed_out, self.rejected, self.failed, self.unfinished, self.cancelled
            )
        })
    }

    pub fn of(records: &[GenRecord], settings: &GenSettings) -> GenSummary {
        let measured: Vec<&GenRecord> = records.iter().filter(|r| !r.warmup).collect();
        let count = |o: GenOutcome| measured.iter().filter(|r| r.outcome == o).count();
        let served: Vec<&&GenRecord> = measured.iter().filter(|r| r.outcome == GenOutcome::Served).collect();
        let ttft = measured.iter().map(|r| r.ttft_ms());
        let itl = served.iter().flat_map(|r| r.gaps_ms.iter().map(|&g| Some(g)));
        let completion = measured.iter().map(|r| (r.outcome == GenOutcome::Served).then_some(r.end_ms - r.arrival_ms));
        let start = settings.warmup_ms;
        let end = measured.iter().map(|r| r.end_ms).fold(start, f64::max);
        let interval_ms = (end - start).max(1.0);
        let tokens: usize = measured.iter().map(|r| r.tokens_out).sum();
        let good = served
            .iter()
            .filter(|r| r.ttft_ms().is_some_and(|t| t <= settings.ttft_slo_ms) && r.tpot_ms().is_none_or(|t| t <= settings.tpot_slo_ms))
            .count();
        GenSummary {
            measured: measured.len(),
            served: served.len(),
            timed_out: count(GenOutcome::TimedOut),
            rejected: count(GenOutcome::Rejected),
            failed: count(GenOutcome::Failed),
            unfinished: count(GenOutcome::Unfinished),
            cancelled: count(GenOutcome::Cancelled),
            ttft_ms: Percentiles::of(ttft),
            itl_ms: Percentiles::of(itl),
            completion_ms: Percentiles::of(completion),
            tokens_per_s: tokens as f64 * 1000.0 / interval_ms,
            goodput_per_s: good as f64 * 1000.0 / interval_ms,
            preemptions: measured.iter().map(|r| r.preemptions).sum(),
            interval_ms,
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::batching::{Memory, Mixing};
    use proptest::prelude::*;

    use crate::testing::CountingSeq as Counting;

    /// An engine whose step takes 2 ms plus 0.05 ms a token, on a clock it advances.
    struct CountingEngine {
        now: std::rc::Rc<std::cell::Cell<f64>>,
        fail_prompt: Option<usize>,
    }

    impl StepEngine for CountingEngine {
        type Seq = Counting;
        fn sequence(&mut self, r: &GenRequest) -> Result<Counting, String> {
            Ok(Counting::new(r.prompt_tokens, r.max_new_tokens))
        }
        fn step(&mut self, batch: &mut [(u64, &mut Counting, usize)]) -> Result<Vec<bool>, String> {
            let tokens: usize = batch.iter().map(|b| b.2).sum();
            self.now.set(self.now.get() + 2.0 + 0.05 * tokens as f64);
            if batch.iter().any(|b| Some(b.1.prompt) == self.fail_prompt) {
                return Err("a failing prompt".into());
            }
            Ok(batch.iter_mut().map(|(_, seq, n)| seq.feed(*n)).collect())
        }
    }

    fn run(settings: GenSettings, requests: Vec<GenRequest>, fail_prompt: Option<usize>) -> (Vec<GenRecord>, Vec<Iteration>) {
        run_cancelling(settings, requests, fail_prompt, &[])
    }

    /// As [`run`], with clients that leave: `(id, at_ms)`.
    fn run_cancelling(
        settings: GenSettings,
        requests: Vec<GenRequest>,
        fail_prompt: Option<usize>,
        cancels: &[(u64, f64)],
    ) -> (Vec<GenRecord>, Vec<Iteration>) {
        let now = std::rc::Rc::new(std::cell::Cell::new(0.0));
        let mut engine = CountingEngine { now: now.clone(), fail_prompt };
        let end = requests.iter().map(|r| r.arrival_ms).fold(0.0, f64::max) + 1.0;
        let mut server = GenServer::new(settings, requests, end);
        let clock = now.clone();
        let mut cancels = cancels.to_vec();
        loop {
            let t = now.get();
            cancels.retain(|&(id, at)| {
                if at <= t {
                    let blocks = server.blocks_in_use();
                    server.cancel(id, t);
                    assert!(server.blocks_in_use() <= blocks, "cancelling {id} freed nothing it held");
                    false
                } else {
                    true
                }
            });
            match server.step(&mut engine, &mut || clock.get()) {
                GenStep::Done => break,
                GenStep::IdleUntil(t) => now.set(t.max(now.get())),
                GenStep::Worked => {}
            }
        }
        (server.records().to_vec(), server.iterations().to_vec())
    }

    fn settings(mixing: Mixing, memory: Memory, budget_blocks: usize, timeout_ms: f64) -> GenSettings {
        GenSettings {
            batch: BatchSettings { budget_blocks, max_running: 6, mixing, memory },
            timeout_ms,
            warmup_ms: 0.0,
            drain_ms: 10_000.0,
            ttft_slo_ms: 50.0,
            tpot_slo_ms: 5.0,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Every request gets exactly one record; a served one has all its
        /// tokens, a first token after its arrival and gaps for the rest;
        /// iterations never overlap and stay within the token budget.
        #[test]
        fn every_request_is_recorded_once(
            lengths in prop::collection::vec((1usize..60, 1usize..20, 0.0f64..30.0), 1..20),
            chunk in prop::option::of(1usize..48),
            reserve in any::<bool>(),
            budget_blocks in 3usize..40,
            timeout_ms in 5.0f64..400.0,
            fail in prop::option::of(1usize..60),
            cancels in prop::collection::vec((0u64..20, 0.0f64..200.0), 0..4),
        ) {
            let requests = crate::testing::gen_requests(&lengths);
            let mixing = chunk.map_or(Mixing::PrefillFirst, |token_budget| Mixing::Chunked { token_budget });
            let memory = if reserve { Memory::Reserve } else { Memory::Recompute };
            let (records, iterations) =
                run_cancelling(settings(mixing, memory, budget_blocks, timeout_ms), requests.clone(), fail, &cancels);
            let mut ids: Vec<u64> = records.iter().map(|r| r.id).collect();
            ids.sort_unstable();
            prop_assert_eq!(ids, (0..requests.len() as u64).collect::<Vec<_>>());
            for r in &records {
                match r.outcome {
                    GenOutcome::Served => {
                        prop_assert_eq!(r.tokens_out, r.max_new_tokens);
                        prop_assert_eq!(r.gaps_ms.len(), r.tokens_out - 1);
                        prop_assert!(r.first_token_ms.unwrap() > r.arrival_ms);
                    }
                    GenOutcome::Rejected => prop_assert!((r.prompt_tokens + r.max_new_tokens - 1).div_ceil(4) > budget_blocks),
                    GenOutcome::TimedOut => prop_assert!(r.start_ms.is_none()),
                    // A failed step fails every request it fed.
                    GenOutcome::Failed => prop_assert!(fail.is_some()),
                    GenOutcome::Unfinished => {}
                    GenOutcome::Cancelled => prop_assert!(cancels.iter().any(|&(id, _)| id == r.id)),
                    // This server does not hand off.
                    GenOutcome::HandedOff => prop_assert!(false, "a hand-off from a server that keeps its sequences"),
                }
            }
            for pair in iterations.windows(2) {
                prop_assert!(pair[0].end_ms <= pair[1].start_ms);
            }
            for it in &iterations {
                prop_assert!(it.blocks_in_use <= budget_blocks);
                // Payload within the allocated blocks, and those within
                // what the scheduler counts against the budget.
                let block_bytes = (crate::testing::COUNTING_BLOCK * crate::testing::COUNTING_TOKEN_BYTES) as u64;
                prop_assert!(it.kv.payload <= it.kv.allocated, "{:?}", it.kv);
                prop_assert!(it.kv.allocated <= it.blocks_in_use as u64 * block_bytes, "{:?} in {} blocks", it.kv, it.blocks_in_use);
                prop_assert!(it.running > 0 || it.kv == KvBytes::default());
                if let Some(budget) = chunk {
                    prop_assert!(it.feeds.iter().map(|f| f.tokens).sum::<usize>() <= budget);
                }
            }
        }
    }

    /// At the same load, chunked prefill keeps the running decodes' gaps
    /// short where prefill-first stalls them behind every new prompt.
    #[test]
    fn chunking_shortens_the_worst_gaps() {
        let requests: Vec<GenRequest> = (0..12)
            .map(|i| GenRequest { id: i, arrival_ms: i as f64 * 40.0, prompt: i as usize, prompt_tokens: 400, max_new_tokens: 60 })
            .collect();
        let p99 = |mixing| {
            let (records, _) = run(settings(mixing, Memory::Recompute, 10_000, 1e9), requests.clone(), None);
            GenSummary::of(&records, &settings(mixing, Memory::Recompute, 10_000, 1e9)).itl_ms.p99.unwrap()
        };
        // Prefill-first: a 400-token prefill (22 ms here) sits between two
        // tokens of every running decode; chunked: at most one 64-token
        // iteration (5.2 ms) does.
        let (whole, chunked) = (p99(Mixing::PrefillFirst), p99(Mixing::Chunked { token_budget: 64 }));
        assert!(chunked < whole / 2.0, "ITL p99 chunked {chunked} ms against prefill-first {whole} ms");
    }
}
