//! Generation on the one engine: a sequence's state as it grows (its
//! tokens, the K/V it holds, its sampler, its text so far), and the step
//! that advances any number of sequences by one forward pass.
//!
//! A [`Sequence`] holds a shared prefix (a [`KvState`], e.g. from the
//! prefix cache) and its own paged K/V ([`PagedKv`]). [`step`] feeds each
//! sequence some of its pending tokens (a whole prompt, a prompt chunk, or
//! the token it sampled last) through one [`Backbone::forward`]: the
//! projections see every sequence's rows as one batch, attention reads each
//! sequence's own state. Sequences whose tokens are all fed then get logits
//! from one LM-head product and choose their next token. A scheduler
//! decides who is fed how much ([`serving`'s batching module does, for the
//! serving test]); [`generate`] is the one-sequence loop.

use std::time::Duration;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use web_time::Instant;

use crate::elapsed_ms;
use crate::error::{Result, RouterError};
use crate::model::{Backbone, Span};
use crate::sampling::{FinishReason, ParamError, SamplingParams};
use crate::segment::{KvState, PagedKv};
use crate::tokenizer::RouterTokenizer;

/// Tokens a page of a generating sequence's K/V holds (vLLM's default block size).
pub const BLOCK_TOKENS: usize = 16;

/// Chooses tokens from logits, reproducibly from its seed.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(params: &SamplingParams) -> Sampler {
        Sampler { params: params.clone(), rng: ChaCha8Rng::seed_from_u64(params.seed) }
    }

    /// The next token. Greedy takes the arg-max (the lowest id among equal
    /// logits); otherwise logits are divided by the temperature, cut to
    /// the `top_k` largest, softmaxed, cut to the smallest set reaching
    /// `top_p` (vLLM's order: top-k, then top-p), and one token is drawn
    /// with one uniform number from the seeded stream.
    pub fn choose(&mut self, logits: &[f32]) -> u32 {
        if self.params.is_greedy() {
            return argmax(logits);
        }
        let inverse = 1.0 / self.params.temperature as f64;
        let mut candidates: Vec<(u32, f64)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l as f64 * inverse)).collect();
        let by_logit = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = self.params.top_k;
        if k > 0 && k < candidates.len() {
            candidates.select_nth_unstable_by(k - 1, by_logit);
            candidates.truncate(k);
        }
        candidates.sort_unstable_by(by_logit);
        let max = candidates[0].1;
        let mut total = 0.0;
        for c in candidates.iter_mut() {
            c.1 = (c.1 - max).exp();
            total += c.1;
        }
        let top_p = self.params.top_p as f64;
        let mut kept = 0.0;
        let mut keep = candidates.len();
        for (i, c) in candidates.iter().enumerate() {
            kept += c.1 / total;
            if kept >= top_p {
                keep = i + 1;
                break;
            }
        }
        candidates.truncate(keep);
        let kept_total: f64 = candidates.iter().map(|c| c.1).sum();
        // 53 random bits as a uniform number in [0, 1).
        let draw = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * kept_total;
        let mut acc = 0.0;
        for c in &candidates {
            acc += c.1;
            if draw < acc {
                return c.0;
            }
        }
        candidates[candidates.len() - 1].0
    }
}

/// The index of the largest logit, the lowest among equals.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Turns tokens into text as they come, correct across characters split
/// between tokens: the text of the last few tokens is decoded again with
/// each new one, and only a difference that does not end in a partial
/// character (U+FFFD, what a decoder writes for one) is released (the
/// scheme of Hugging Face's text-generation-inference and vLLM).
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
}

impl TextStream {
    /// Adds a token; returns the text it completes, if any.
    pub fn push(&mut self, tokenizer: &RouterTokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let before = tokenizer.decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let after = tokenizer.decode(&self.ids[self.prefix_offset..])?;
        if after.len() > before.len() && !after.ends_with('\u{FFFD}') {
            if let Some(new) = after.get(before.len()..).filter(|_| after.starts_with(&before)) {
                let new = new.to_string();
                self.prefix_offset = self.read_offset;
                self.read_offset = self.ids.len();
                return Ok(new);
            }
        }
        Ok(String::new())
    }

    /// What the tokens pushed so far decode to beyond what was released.
    pub fn flush(&mut self, tokenizer: &RouterTokenizer) -> Result<String> {
        let before = tokenizer.decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let after = tokenizer.decode(&self.ids[self.prefix_offset..])?;
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(after.get(before.len()..).filter(|_| after.starts_with(&before)).unwrap_or_default().to_string())
    }
}

/// Finds stop texts in the generated text and holds back the tail that
/// could still become one, so a stop text never reaches the page.
#[derive(Debug, Clone, Default)]
struct StopText {
    stops: Vec<String>,
    /// Text decoded and not yet released.
    held: String,
}

impl StopText {
    /// Adds decoded text; returns what may be shown and the stop text found, if any.
    fn push(&mut self, text: &str) -> (String, Option<String>) {
        self.held.push_str(text);
        let first = self.stops.iter().filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s))).min_by_key(|(at, _)| *at);
        if let Some((at, stop)) = first {
            let shown = self.held[..at].to_string();
            let stop = stop.clone();
            self.held.clear();
            return (shown, Some(stop));
        }
        // Keep the longest tail that is a proper prefix of some stop text.
        let keep = self
            .stops
            .iter()
            .flat_map(|s| (1..s.len()).rev().filter(|&n| s.is_char_boundary(n)).map(move |n| &s[..n]))
            .filter(|prefix| self.held.ends_with(prefix))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let shown = self.held[..cut].to_string();
        self.held.drain(..cut);
        (shown, None)
    }

    /// What is still held when generation ends without a stop text.
    fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// One sequence being generated.
#[derive(Debug, Clone)]
pub struct Sequence {
    /// The prompt's tokens, then every token generated.
    tokens: Vec<u32>,
    prompt_len: usize,
    shared: KvState,
    own: PagedKv,
    params: SamplingParams,
    sampler: Sampler,
    stream: TextStream,
    stops: StopText,
    text: String,
    finish: Option<FinishReason>,
    preemptions: usize,
}

/// What a step produced for one sequence: a token, the text it releases,
/// and the reason generation ended if it did.
#[derive(Debug, Clone, PartialEq)]
pub struct Emitted {
    pub token: u32,
    pub text: String,
    pub finish: Option<FinishReason>,
}

impl Sequence {
    /// A sequence for `prompt`, whose first `shared.tokens()` tokens the
    /// caller already holds in `shared` (empty for none). Refuses bad
    /// parameters and a prompt that leaves no room, naming the field.
    pub fn new(
        backbone: &Backbone,
        prompt: Vec<u32>,
        shared: KvState,
        params: SamplingParams,
    ) -> std::result::Result<Sequence, ParamError> {
        params.check()?;
        params.check_fits(prompt.len(), backbone.max_positions())?;
        assert!(shared.tokens() < prompt.len(), "a shared prefix of {} tokens for a prompt of {}", shared.tokens(), prompt.len());
        Ok(Sequence {
            prompt_len: prompt.len(),
            tokens: prompt,
            shared,
            own: PagedKv::new(backbone.kv_layout().without_taps(), BLOCK_TOKENS),
            sampler: Sampler::new(&params),
            stops: StopText { stops: params.stop.clone(), held: String::new() },
            params,
            stream: TextStream::default(),
            text: String::new(),
            finish: None,
            preemptions: 0,
        })
    }

    /// Tokens whose K/V the sequence holds.
    pub fn held(&self) -> usize {
        self.shared.tokens() + self.own.len()
    }

    /// Tokens waiting to be fed: the rest of the prompt, or the token sampled last.
    pub fn pending(&self) -> usize {
        if self.finish.is_some() {
            0
        } else {
            self.tokens.len() - self.held()
        }
    }

    /// Whether the prompt still has tokens to feed (a prefill is due).
    pub fn in_prefill(&self) -> bool {
        self.finish.is_none() && self.held() < self.prompt_len
    }

    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    /// The tokens generated so far.
    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    /// The text released so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn finish(&self) -> Option<&FinishReason> {
        self.finish.as_ref()
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Its own K/V pages.
    pub fn own_kv(&self) -> &PagedKv {
        &self.own
    }

    /// Tokens it holds in a shared prefix (not its own pages).
    pub fn shared_tokens(&self) -> usize {
        self.shared.tokens()
    }

    /// Its own pages, replaced whole (a hand-off arriving).
    pub(crate) fn set_own_kv(&mut self, kv: PagedKv) {
        self.own = kv;
    }

    /// Times its K/V was dropped to be recomputed.
    pub fn preemptions(&self) -> usize {
        self.preemptions
    }

    /// Drops its own K/V (preemption by recompute, as vLLM's V1 does): the
    /// prompt and the tokens generated so far are fed again as one prefill
    /// when it is scheduled next. The sampler's stream continues.
    pub fn preempt(&mut self) {
        self.own.clear();
        self.preemptions += 1;
    }

    /// Blocks it would hold after feeding `tokens` more.
    pub fn blocks_after(&self, tokens: usize) -> usize {
        self.own.blocks_for(self.own.len() + tokens)
    }

    /// Records a chosen token: ends the sequence on an end-of-generation
    /// token, a stop text or the token limit.
    fn accept(&mut self, tokenizer: &RouterTokenizer, end_of_generation: &[u32], token: u32) -> Result<Emitted> {
        self.tokens.push(token);
        let mut decoded = String::new();
        let mut finish = None;
        if end_of_generation.contains(&token) && !self.params.ignore_eos {
            finish = Some(FinishReason::EndOfTurn { token });
        } else {
            decoded = self.stream.push(tokenizer, token)?;
        }
        if finish.is_none() && self.generated().len() >= self.params.max_new_tokens {
            finish = Some(FinishReason::MaxTokens);
        }
        if finish.is_some() {
            // The last token may end inside a character: what is left is
            // released as the decoder writes it, so the pieces joined are
            // always the decoded text.
            decoded.push_str(&self.stream.flush(tokenizer)?);
        }
        let (mut shown, stop) = self.stops.push(&decoded);
        if let Some(text) = stop {
            finish = Some(FinishReason::Stop { text });
        } else if finish.is_some() {
            shown.push_str(&self.stops.flush());
        }
        self.text.push_str(&shown);
        self.finish = finish.clone();
        Ok(Emitted { token, text: shown, finish })
    }
}

/// What one step did: per sequence fed, the token it chose (or `None`
/// for a prompt chunk that did not reach the prompt's end), and where the
/// time went.
#[derive(Debug, Clone, Default)]
pub struct StepReport {
    pub emitted: Vec<Option<Emitted>>,
    /// Rows through the projections (tokens fed).
    pub rows: usize,
    pub forward_ms: f64,
    /// Of `forward_ms`: the layers' projections, and attention over each
    /// sequence's own K/V.
    pub projections_ms: f64,
    pub attention_ms: f64,
    pub lm_head_ms: f64,
    pub sample_ms: f64,
}

/// Advances each `(sequence, tokens)` by feeding it that many of its
/// pending tokens (at least 1, at most [`Sequence::pending`]) in one
/// forward pass, then lets every sequence that has no pending tokens left
/// choose its next one.
pub fn step(backbone: &Backbone, tokenizer: &RouterTokenizer, batch: &mut [(&mut Sequence, usize)]) -> Result<StepReport> {
    for (seq, n) in batch.iter() {
        if *n == 0 || *n > seq.pending() {
            return Err(RouterError::Request(format!("feeding {n} tokens to a sequence with {} pending", seq.pending())));
        }
    }
    let started = Instant::now();
    let fed: Vec<usize> = batch.iter().map(|(_, n)| *n).collect();
    let forward = {
        let mut spans: Vec<Span<'_>> = batch
            .iter_mut()
            .map(|(seq, n)| {
                let held = seq.shared.tokens() + seq.own.len();
                let Sequence { tokens, shared, own, .. } = &mut **seq;
                Span { shared, own, ids: &tokens[held..held + *n] }
            })
            .collect();
        backbone.forward(&mut spans)?
    };
    let forward_ms = elapsed_ms(started);
    let hidden = backbone.hparams.hidden;
    let ready: Vec<usize> = (0..batch.len()).filter(|&i| batch[i].0.pending() == 0).collect();
    let mut rows = Vec::with_capacity(ready.len() * hidden);
    for &i in &ready {
        rows.extend_from_slice(forward.last_row(i, fed[i], hidden));
    }
    let started = Instant::now();
    let logits = if ready.is_empty() { Vec::new() } else { backbone.logits(&rows, ready.len())? };
    let lm_head_ms = elapsed_ms(started);
    let started = Instant::now();
    let vocab = backbone.hparams.vocab;
    let end_of_generation = tokenizer.end_of_generation();
    let mut emitted = vec![None; batch.len()];
    for (r, &i) in ready.iter().enumerate() {
        let seq = &mut *batch[i].0;
        let token = seq.sampler.choose(&logits[r * vocab..][..vocab]);
        emitted[i] = Some(seq.accept(tokenizer, &end_of_generation, token)?);
    }
    Ok(StepReport {
        emitted,
        rows: fed.iter().sum(),
        forward_ms,
        projections_ms: forward.projections_ms,
        attention_ms: forward.attention_ms,
        lm_head_ms,
        sample_ms: elapsed_ms(started),
    })
}

/// One generation's timings, at the engine: the prefill to the first
/// token, then the gap before each later token.
#[derive(Debug, Clone, Default)]
pub struct GenerationTimings {
    pub prompt_tokens: usize,
    pub first_token_ms: f64,
    pub gaps_ms: Vec<f64>,
}

impl GenerationTimings {
    /// Records one more token's time: the first token's from `started`, a
    /// later one's gap from `last`.
    pub fn token(&mut self, started: Instant, last: Instant, now: Instant) {
        if self.first_token_ms == 0.0 && self.gaps_ms.is_empty() {
            self.first_token_ms = ms(now.duration_since(started));
        } else {
            self.gaps_ms.push(ms(now.duration_since(last)));
        }
    }
}

/// Generates from `prompt` alone, calling `on_token` with each token as it
/// is chosen (return `false` to stop early, e.g. on a cancel). Returns the
/// sequence, finished or stopped, and its timings.
pub fn generate(
    backbone: &Backbone,
    tokenizer: &RouterTokenizer,
    prompt: Vec<u32>,
    params: SamplingParams,
    mut on_token: impl FnMut(&Emitted) -> bool,
) -> Result<(Sequence, GenerationTimings)> {
    let mut seq = Sequence::new(backbone, prompt, KvState::default(), params).map_err(|e| RouterError::Request(e.to_string()))?;
    let mut timings = GenerationTimings { prompt_tokens: seq.prompt_len, ..GenerationTimings::default() };
    let mut last = Instant::now();
    let started = last;
    while seq.pending() > 0 {
        let n = seq.pending();
        let report = step(backbone, tokenizer, &mut [(&mut seq, n)])?;
        if let Some(Some(emitted)) = report.emitted.first() {
            let now = Instant::now();
            timings.token(started, last, now);
            last = now;
            if !on_token(emitted) {
                break;
            }
        }
    }
    Ok((seq, timings))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> SamplingParams {
        SamplingParams { temperature, top_k, top_p, seed, ..SamplingParams::default() }
    }

    #[test]
    fn greedy_takes_the_first_largest() {
        assert_eq!(Sampler::new(&SamplingParams::default()).choose(&[0.1, 2.0, 2.0, -1.0]), 1);
    }

    #[test]
    fn a_seed_reproduces_its_draws_and_another_seed_differs() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 37) % 101) as f32 / 20.0).collect();
        let draws = |seed| {
            let mut s = Sampler::new(&params(1.0, 0, 1.0, seed));
            (0..64).map(|_| s.choose(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
    }

    #[test]
    fn top_k_and_top_p_keep_only_the_likeliest() {
        let logits = [5.0, 4.0, 3.0, 0.0, -1.0];
        let mut k2 = Sampler::new(&params(1.0, 2, 1.0, 1));
        assert!((0..500).all(|_| k2.choose(&logits) <= 1));
        // exp(5), exp(4), exp(3) normalised: 0.66, 0.24, 0.09, …: top_p 0.8 keeps two.
        let mut p = Sampler::new(&params(1.0, 0, 0.8, 2));
        let drawn: Vec<u32> = (0..500).map(|_| p.choose(&logits)).collect();
        assert!(drawn.iter().all(|&t| t <= 1) && drawn.contains(&1) && drawn.contains(&0));
        // A tiny top_p is greedy.
        let mut tiny = Sampler::new(&params(1.0, 0, 1e-6, 3));
        assert!((0..100).all(|_| tiny.choose(&logits) == 0));
    }

    #[test]
    fn a_stop_text_is_held_back_until_it_is_or_is_not_one() {
        let mut stops = StopText { stops: vec!["END".into()], held: String::new() };
        assert_eq!(stops.push("hello E"), ("hello ".into(), None));
        assert_eq!(stops.push("N"), (String::new(), None));
        assert_eq!(stops.push("X"), ("ENX".into(), None));
        assert_eq!(stops.push("a ENDb"), ("a ".into(), Some("END".into())));
        let mut multi = StopText { stops: vec!["é!".into()], held: String::new() };
        assert_eq!(multi.push("caf"), ("caf".into(), None));
        assert_eq!(multi.push("é"), (String::new(), None));
        assert_eq!(multi.flush(), "é");
    }
}
