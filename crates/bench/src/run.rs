//! The protocol: per length, one cold call, then warm-ups, then timed
//! iterations of `decide`, then timed `encode_and_score` calls.
//!
//! [`Session`] runs it one call per [`Session::step`], so a caller can yield
//! between calls: the browser worker answers a Cancel message and reports
//! progress between steps, the CLI simply loops. Both run this code; neither
//! has its own copy of the protocol.

use router::prompts::BenchPrompt;
use router::{Decision, Result, Router, StageTimings};
use web_time::Instant;

use crate::protocol::Protocol;
use crate::report::LengthResult;
use crate::stats::Summary;

/// What the runner reports as it goes; return `false` to stop early.
pub trait Progress {
    fn step(&mut self, prompt_tokens: usize, phase: &str, done: usize, total: usize) -> bool;
}

impl<F: FnMut(usize, &str, usize, usize) -> bool> Progress for F {
    fn step(&mut self, prompt_tokens: usize, phase: &str, done: usize, total: usize) -> bool {
        self(prompt_tokens, phase, done, total)
    }
}

/// Which kind of call a step made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Cold,
    Warmup,
    Iteration,
    EncodeAndScore,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Cold => "cold",
            Phase::Warmup => "warm-up",
            Phase::Iteration => "iterations",
            Phase::EncodeAndScore => "encode+scores",
        }
    }
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepDone {
    pub prompt_tokens: usize,
    pub phase: Phase,
    /// The call's wall time.
    pub ms: f64,
    /// Calls done at this length, of `per_length`.
    pub done: usize,
    pub per_length: usize,
    /// Calls done in the whole session, of `overall`.
    pub overall_done: usize,
    pub overall: usize,
}

/// One length's samples while it is being measured.
#[derive(Default)]
struct Partial {
    cold: Option<(f64, Decision)>,
    warmup_ms: Vec<f64>,
    warm_ms: Vec<f64>,
    warm_stages: Vec<StageTimings>,
    encode_ms: Vec<f64>,
}

/// A protocol run in progress, one call per step.
pub struct Session<'p> {
    prompts: &'p [BenchPrompt],
    protocol: Protocol,
    mode: Option<String>,
    /// Index of the prompt being measured.
    current: usize,
    partial: Partial,
    overall_done: usize,
    results: Vec<LengthResult>,
}

fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(f64, T)> {
    let started = Instant::now();
    let out = f()?;
    Ok((started.elapsed().as_secs_f64() * 1000.0, out))
}

impl<'p> Session<'p> {
    /// A session over `prompts` (one per length, in order). The router must
    /// be freshly loaded for the first call to be cold.
    pub fn new(prompts: &'p [BenchPrompt], protocol: Protocol, mode: Option<&str>) -> Session<'p> {
        Session {
            prompts,
            protocol,
            mode: mode.map(str::to_string),
            current: 0,
            partial: Partial::default(),
            overall_done: 0,
            results: Vec::new(),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.current >= self.prompts.len()
    }

    /// Calls the whole session makes.
    pub fn overall(&self) -> usize {
        self.prompts.len() * self.protocol.calls_per_length()
    }

    /// Makes the next call; `None` once every length is measured.
    pub fn step(&mut self, router: &Router) -> Result<Option<StepDone>> {
        let Some(prompt) = self.prompts.get(self.current) else { return Ok(None) };
        let overall = self.overall();
        let mode = self.mode.as_deref();
        let p = &self.protocol;
        let part = &mut self.partial;
        let (phase, ms) = if part.cold.is_none() {
            let (ms, decision) = timed(|| router.decide(&prompt.conversation, mode))?;
            part.cold = Some((ms, decision));
            (Phase::Cold, ms)
        } else if part.warmup_ms.len() < p.warmup {
            let ms = timed(|| router.decide(&prompt.conversation, mode))?.0;
            part.warmup_ms.push(ms);
            (Phase::Warmup, ms)
        } else if part.warm_ms.len() < p.iterations {
            let (ms, decision) = timed(|| router.decide(&prompt.conversation, mode))?;
            part.warm_ms.push(ms);
            part.warm_stages.push(decision.timings);
            (Phase::Iteration, ms)
        } else {
            let routing_text = prompt.conversation.routing_text(router.tokenizer.layout);
            let ms = timed(|| router.encode_and_score(&routing_text))?.0;
            part.encode_ms.push(ms);
            (Phase::EncodeAndScore, ms)
        };
        let done = 1 + part.warmup_ms.len() + part.warm_ms.len() + part.encode_ms.len();
        self.overall_done += 1;
        let step = StepDone {
            prompt_tokens: prompt.tokens,
            phase,
            ms,
            done,
            per_length: p.calls_per_length(),
            overall_done: self.overall_done,
            overall,
        };
        if part.encode_ms.len() >= p.encode_iterations && part.warm_ms.len() >= p.iterations && part.warmup_ms.len() >= p.warmup {
            let part = std::mem::take(&mut self.partial);
            self.results.push(finish(prompt, part));
            self.current += 1;
        }
        Ok(Some(step))
    }

    /// The lengths measured completely so far.
    pub fn results(&self) -> &[LengthResult] {
        &self.results
    }

    pub fn into_results(self) -> Vec<LengthResult> {
        self.results
    }
}

fn finish(prompt: &BenchPrompt, part: Partial) -> LengthResult {
    let (cold_ms, cold) = part.cold.expect("a length finishes only after its cold call");
    LengthResult {
        prompt_tokens: cold.tokens_used,
        characters: prompt.characters,
        truncated: cold.truncated,
        cold_ms,
        cold_stages: cold.timings,
        warm: Summary::of(&part.warm_ms),
        warmup_ms: part.warmup_ms,
        warm_ms: part.warm_ms,
        warm_stages: part.warm_stages,
        encode_and_score: Summary::of(&part.encode_ms),
        encode_and_score_ms: part.encode_ms,
        top_candidate: cold.ranked.first().map(|r| r.id.clone()).unwrap_or_default(),
    }
}

/// Runs the whole protocol in one go. Returns what was completed; `Ok` with
/// fewer lengths when `progress` asked to stop.
pub fn run(
    router: &Router,
    prompts: &[BenchPrompt],
    protocol: &Protocol,
    mode: Option<&str>,
    progress: &mut dyn Progress,
) -> Result<Vec<LengthResult>> {
    let mut session = Session::new(prompts, protocol.clone(), mode);
    while let Some(step) = session.step(router)? {
        if !progress.step(step.prompt_tokens, step.phase.label(), step.done, step.per_length) {
            break;
        }
    }
    Ok(session.into_results())
}
