//! A scheduler's test bench: an engine whose work takes known time on a
//! clock the test advances, so what the server decides (admission, order,
//! timeouts, the records) is checked exactly. For this crate's tests and,
//! through the `testing` feature, the studies built on it.

use std::cell::Cell;
use std::rc::Rc;

use crate::batching::Work;
use crate::*;

/// Work costs `per_token` ms per prefilled token plus `per_call` ms per
/// prefill call (a chunk's fixed overhead), `edges` ms before and after.
pub struct TimedEngine {
    pub clock: Rc<Cell<f64>>,
    pub prompts: Vec<TracePrompt>,
    pub per_token: f64,
    pub per_call: f64,
    pub edges: f64,
    /// A task whose requests the engine refuses.
    pub fail_task: Option<&'static str>,
}

pub struct TimedJob {
    prompt: usize,
    left: usize,
}

impl TimedEngine {
    fn spend(&self, ms: f64) -> f64 {
        self.clock.set(self.clock.get() + ms);
        ms
    }
}

impl Engine for TimedEngine {
    type Job = TimedJob;
    fn begin(&mut self, prompt: usize) -> Result<(TimedJob, f64), String> {
        if Some(self.prompts[prompt].task.as_str()) == self.fail_task {
            return Err("the engine refused it".into());
        }
        Ok((TimedJob { prompt, left: self.prompts[prompt].tokens }, self.spend(self.edges)))
    }
    fn remaining(&self, job: &TimedJob) -> usize {
        job.left
    }
    fn prefill(&mut self, job: &mut TimedJob, max_tokens: usize) -> Result<f64, String> {
        let take = job.left.min(max_tokens);
        job.left -= take;
        Ok(self.spend(self.per_call + self.per_token * take as f64))
    }
    fn finish(&mut self, job: TimedJob) -> Result<Finished, String> {
        Ok(Finished { top: format!("top-of-{}", self.prompts[job.prompt].task), other_ms: self.spend(self.edges) })
    }
}

pub fn prompts() -> Vec<TracePrompt> {
    vec![TracePrompt { task: "short".into(), tokens: 64 }, TracePrompt { task: "long".into(), tokens: 1024 }]
}

pub fn engine(clock: &Rc<Cell<f64>>) -> TimedEngine {
    TimedEngine { clock: clock.clone(), prompts: prompts(), per_token: 1.0, per_call: 5.0, edges: 1.0, fail_task: None }
}

/// Steps the server to the end, jumping the clock over idle time.
pub fn drive(mut server: Server<TimedJob>, engine: &mut TimedEngine, clock: &Rc<Cell<f64>>) -> ServeRun {
    let read = clock.clone();
    let mut now = move || read.get();
    for _ in 0..100_000 {
        match server.step(engine, &mut now) {
            Step::Worked => {}
            Step::IdleUntil(t) => clock.set(clock.get().max(t)),
            Step::Done => {
                // The limit holds where it is enforced: in the queue as the
                // server saw it when it admitted each arrival.
                let limit = server.settings().queue_limit;
                assert!(server.queue_samples().iter().all(|q| q.in_system <= limit), "{:?}", server.queue_samples());
                return server.finish("test".into());
            }
        }
    }
    panic!("the server never finished");
}

pub fn arrivals(list: &[(f64, usize)]) -> Vec<Arrival> {
    list.iter().enumerate().map(|(id, &(at_ms, prompt))| Arrival { id, at_ms, prompt }).collect()
}

pub fn settings(chunk: Option<usize>, policy: Policy) -> ServeSettings {
    ServeSettings { duration_s: 10.0, warmup_s: 0.0, drain_s: 10.0, chunk, policy, ..ServeSettings::default() }
}

/// A run with no records whose figures say: `offered` requests per second
/// asked, `arrived` per second drawn over the measurement interval, and
/// `goodput` per second served within the SLO (for the knee and the
/// verdicts).
pub fn drawn_run(offered: f64, arrived: f64, goodput: f64) -> ServeRun {
    let settings = ServeSettings { rate_per_s: offered, ..ServeSettings::default() };
    let window = settings.duration_s - settings.warmup_s;
    let mut summary = RunSummary::of(&settings, &[], &[], 0, 0.0);
    summary.goodput_per_s = goodput;
    summary.measured = (arrived * window).round() as usize;
    ServeRun { label: String::new(), settings, records: vec![], queue: vec![], summary }
}

/// Tokens a block of [`CountingSeq`] holds.
pub const COUNTING_BLOCK: usize = 4;

/// K/V bytes a token of [`CountingSeq`] takes.
pub const COUNTING_TOKEN_BYTES: usize = 16;

/// A generating sequence without a model, for the batching scheduler's
/// and the generating server's tests: `max_new` tokens after `prompt`,
/// one chosen whenever every token it holds is fed, K/V in blocks of
/// [`COUNTING_BLOCK`].
#[derive(Debug, Clone)]
pub struct CountingSeq {
    pub prompt: usize,
    pub max_new: usize,
    pub generated: usize,
    pub held: usize,
    pub preempted: usize,
}

impl CountingSeq {
    pub fn new(prompt: usize, max_new: usize) -> CountingSeq {
        CountingSeq { prompt, max_new, generated: 0, held: 0, preempted: 0 }
    }

    /// What an engine step does: hold `n` more tokens, and choose one when
    /// everything is fed. Returns whether it chose one.
    pub fn feed(&mut self, n: usize) -> bool {
        assert!(n >= 1 && n <= self.pending(), "fed {n} of {} pending", self.pending());
        self.held += n;
        let chose = self.held == self.prompt + self.generated;
        self.generated += usize::from(chose);
        chose
    }
}

impl Work for CountingSeq {
    fn pending(&self) -> usize {
        if self.finished() {
            0
        } else {
            self.prompt + self.generated - self.held
        }
    }
    fn in_prefill(&self) -> bool {
        !self.finished() && self.held < self.prompt
    }
    fn finished(&self) -> bool {
        self.generated >= self.max_new
    }
    fn blocks_held(&self) -> usize {
        self.held.div_ceil(COUNTING_BLOCK)
    }
    fn blocks_after(&self, tokens: usize) -> usize {
        (self.held + tokens).div_ceil(COUNTING_BLOCK)
    }
    fn blocks_at_most(&self) -> usize {
        (self.prompt + self.max_new - 1).div_ceil(COUNTING_BLOCK)
    }
    fn preempt(&mut self) {
        self.held = 0;
        self.preempted += 1;
    }
    fn kv_bytes(&self) -> crate::batching::KvBytes {
        crate::batching::KvBytes {
            payload: (self.held * COUNTING_TOKEN_BYTES) as u64,
            allocated: (self.blocks_held() * COUNTING_BLOCK * COUNTING_TOKEN_BYTES) as u64,
        }
    }
}

/// Generating requests from drawn `(prompt tokens, max new tokens, gap
/// before it in ms)`, ids and prompts numbered in order: the generating
/// servers' property tests draw their loads this way.
pub fn gen_requests(drawn: &[(usize, usize, f64)]) -> Vec<crate::generation::GenRequest> {
    let mut at = 0.0;
    drawn
        .iter()
        .enumerate()
        .map(|(i, &(prompt_tokens, max_new_tokens, gap))| {
            at += gap;
            crate::generation::GenRequest { id: i as u64, arrival_ms: at, prompt: i, prompt_tokens, max_new_tokens }
        })
        .collect()
}
