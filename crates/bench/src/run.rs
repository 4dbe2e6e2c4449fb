//! The protocol: per length, one cold call, then warm-ups, then timed
//! iterations of `decide`, then timed `encode_and_score` calls.

use router::prompts::BenchPrompt;
use router::{Result, Router, StageTimings};
use web_time::Instant;

use crate::report::LengthResult;
use crate::stats::Summary;

/// How many calls at which lengths.
#[derive(Debug, Clone, PartialEq)]
pub struct Protocol {
    pub lengths: Vec<usize>,
    pub warmup: usize,
    pub iterations: usize,
    /// Timed `encode_and_score` calls per length (0 to skip).
    pub encode_iterations: usize,
}

impl Default for Protocol {
    fn default() -> Self {
        Protocol { lengths: vec![15, 256, 1024], warmup: 5, iterations: 25, encode_iterations: 25 }
    }
}

/// What the runner reports as it goes; return `false` to stop early.
pub trait Progress {
    fn step(&mut self, prompt_tokens: usize, phase: &str, done: usize, total: usize) -> bool;
}

impl<F: FnMut(usize, &str, usize, usize) -> bool> Progress for F {
    fn step(&mut self, prompt_tokens: usize, phase: &str, done: usize, total: usize) -> bool {
        self(prompt_tokens, phase, done, total)
    }
}

fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(f64, T)> {
    let started = Instant::now();
    let out = f()?;
    Ok((started.elapsed().as_secs_f64() * 1000.0, out))
}

/// Runs the protocol for each prompt (one per length, in order). The router
/// must be freshly loaded for the first call to be cold. Returns what was
/// completed; `Ok` with fewer lengths when `progress` asked to stop.
pub fn run(
    router: &Router,
    prompts: &[BenchPrompt],
    protocol: &Protocol,
    mode: Option<&str>,
    progress: &mut dyn Progress,
) -> Result<Vec<LengthResult>> {
    let mut results = Vec::new();
    let per_length = 1 + protocol.warmup + protocol.iterations + protocol.encode_iterations;
    for prompt in prompts {
        let n = prompt.tokens;
        let mut done = 0;
        let mut tick = |phase: &str, done: &mut usize| {
            *done += 1;
            progress.step(n, phase, *done, per_length)
        };
        let (cold_ms, cold) = timed(|| router.decide(&prompt.conversation, mode))?;
        if !tick("cold", &mut done) {
            break;
        }
        let mut warmup_ms = Vec::new();
        for _ in 0..protocol.warmup {
            warmup_ms.push(timed(|| router.decide(&prompt.conversation, mode))?.0);
            if !tick("warm-up", &mut done) {
                return Ok(results);
            }
        }
        let mut warm_ms = Vec::new();
        let mut warm_stages: Vec<StageTimings> = Vec::new();
        for _ in 0..protocol.iterations {
            let (t, d) = timed(|| router.decide(&prompt.conversation, mode))?;
            warm_ms.push(t);
            warm_stages.push(d.timings);
            if !tick("iterations", &mut done) {
                return Ok(results);
            }
        }
        let routing_text = prompt.conversation.routing_text();
        let mut encode_ms = Vec::new();
        for _ in 0..protocol.encode_iterations {
            encode_ms.push(timed(|| router.encode_and_score(&routing_text))?.0);
            if !tick("encode+scores", &mut done) {
                return Ok(results);
            }
        }
        results.push(LengthResult {
            prompt_tokens: cold.tokens_used,
            characters: prompt.characters,
            truncated: cold.truncated,
            cold_ms,
            cold_stages: cold.timings,
            warm: Summary::of(&warm_ms),
            warmup_ms,
            warm_ms,
            warm_stages,
            encode_and_score: Summary::of(&encode_ms),
            encode_and_score_ms: encode_ms,
            top_candidate: cold.ranked.first().map(|r| r.id.clone()).unwrap_or_default(),
        });
    }
    Ok(results)
}
