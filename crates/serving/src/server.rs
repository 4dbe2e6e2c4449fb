//! The single-engine scheduler as a state machine: [`Server::step`] with
//! the current time and an [`Engine`] admits the arrivals due, drops the
//! requests whose client gave up, and runs one unit of work (a whole
//! request, or one chunk of its prefill).

use crate::{Arrival, LengthClass, Outcome, Policy, QueueSample, RequestRecord, ServeError, ServeRun, ServeSettings, TracePrompt};

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
    pub fn settings(&self) -> &ServeSettings {
        &self.settings
    }

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
