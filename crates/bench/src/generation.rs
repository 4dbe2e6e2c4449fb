//! Generation on a loaded router, as the page's Generate card and the CLI
//! run it: the prompt from a conversation in the checkpoint's chat layout,
//! the one-sequence loop stepped token by token (the caller yields between
//! tokens), and the summary with the calculator's payload bytes beside the
//! engine's allocated bytes (note 03's "payload bytes are not allocated
//! bytes"). [`Generating`] is the engine's sequence as the batching
//! scheduler sees it.

use std::sync::Arc;

use router::generate::{step, GenerationTimings, Sequence, BLOCK_TOKENS};
use router::gguf::Hparams;
use router::sampling::{GenerationSummary, ParamError, SamplingParams};
use router::segment::KvState;
use router::{Conversation, Router};
use serving::batching::Work;
use web_time::Instant;

/// The K/V shape of a checkpoint in the calculator's terms: one run of
/// layers per kind (Gemma 3's sliding-window layers keep their window).
pub fn kv_shape(h: &Hparams) -> kv::model::ModelShape {
    let mut runs: Vec<kv::model::LayerRun> = Vec::new();
    for i in 0..h.layers {
        let kind = match h.architecture.layer_kind(i, h.rope_theta, h.sliding_window).window {
            Some(window) => kv::model::LayerKind::Sliding { window: window as u64 },
            None => kv::model::LayerKind::Full,
        };
        match runs.last_mut() {
            Some(run) if run.kind == kind => run.count += 1,
            _ => runs.push(kv::model::LayerRun { kind, count: 1, kv_heads: h.kv_heads as u32, head_dim: h.head_dim as u32 }),
        }
    }
    kv::model::ModelShape { layers: h.layers as u32, kv_heads: h.kv_heads as u32, head_dim: h.head_dim as u32, runs }
}

/// The calculator's K/V bytes for one sequence of `tokens` in f32 (the
/// engine's element type): `Σ_layers 2 × H_kv × d_head × 4 × retained(T)`.
pub fn payload_kv_bytes(shape: &kv::model::ModelShape, tokens: usize) -> u64 {
    shape.runs.iter().map(|run| run.count as u128 * run.elements_per_token() * 4 * run.retained(tokens as u64) as u128).sum::<u128>() as u64
}

/// The part of [`payload_kv_bytes`] for `held` tokens that the last `own`
/// of them make up: a sequence continuing a shared prefix holds those in
/// its own pages, the prefix's once in the cache. A layer's window keeps
/// the last tokens, so its own share is `min(own, retained(held))`.
pub fn own_payload_kv_bytes(shape: &kv::model::ModelShape, held: usize, own: usize) -> u64 {
    let own = own.min(held) as u64;
    shape.runs.iter().map(|run| run.count as u128 * run.elements_per_token() * 4 * run.retained(held as u64).min(own) as u128).sum::<u128>()
        as u64
}

/// A generation in progress on `router`, stepped one token at a time.
pub struct SingleGeneration {
    pub sequence: Sequence,
    pub timings: GenerationTimings,
    started: Instant,
    last: Instant,
}

/// One step's news: the text released and whether the generation ended.
pub struct TokenStep {
    pub text: String,
    pub done: bool,
}

impl SingleGeneration {
    /// Tokenizes the conversation as the checkpoint's chat template writes
    /// it, with the assistant's turn opened; refuses bad parameters and a
    /// prompt that does not fit, naming the field.
    pub fn start(router: &Router, conversation: &Conversation, params: SamplingParams) -> Result<SingleGeneration, ParamError> {
        params.check()?;
        let text = conversation.generation_prompt(router.tokenizer.layout);
        let prompt =
            router.tokenizer.encode(&text).map_err(|e| ParamError { field: router::sampling::Field::Prompt, reason: e.to_string() })?;
        let sequence = Sequence::new(&router.backbone, prompt, KvState::default(), params)?;
        let now = Instant::now();
        let timings = GenerationTimings { prompt_tokens: sequence.prompt_len(), ..GenerationTimings::default() };
        Ok(SingleGeneration { sequence, timings, started: now, last: now })
    }

    /// Feeds what is pending (the prompt at first, then the last token) and
    /// chooses the next token.
    pub fn step(&mut self, router: &Router) -> Result<TokenStep, String> {
        let n = self.sequence.pending();
        if n == 0 {
            return Ok(TokenStep { text: String::new(), done: true });
        }
        let report = step(&router.backbone, &router.tokenizer, &mut [(&mut self.sequence, n)]).map_err(|e| e.to_string())?;
        let now = Instant::now();
        self.timings.token(self.started, self.last, now);
        self.last = now;
        let text = report.emitted.into_iter().flatten().map(|e| e.text).collect();
        Ok(TokenStep { text, done: self.sequence.pending() == 0 })
    }

    /// The summary; `cancelled` generations have no finish reason.
    pub fn summary(&self, router: &Router, cancelled: bool) -> GenerationSummary {
        let seq = &self.sequence;
        let tokens = seq.held();
        GenerationSummary {
            checkpoint_id: router.checkpoint_id().to_string(),
            precision: router.backbone.precision.label(&router.weight_type),
            params: seq.params().clone(),
            prompt_tokens: seq.prompt_len(),
            tokens: seq.generated().to_vec(),
            text: seq.text().to_string(),
            finish: if cancelled { None } else { seq.finish().cloned() },
            first_token_ms: self.timings.first_token_ms,
            gaps_ms: self.timings.gaps_ms.clone(),
            payload_kv_bytes: payload_kv_bytes(&kv_shape(&router.backbone.hparams), tokens),
            allocated_kv_bytes: seq.own_kv().allocated_kv_bytes(),
            block_tokens: BLOCK_TOKENS,
        }
    }
}

/// The engine's sequence as the batching scheduler sees it, with the
/// checkpoint's layer shape its K/V payload is counted by.
pub struct Generating {
    pub sequence: Sequence,
    kv_shape: Arc<kv::model::ModelShape>,
}

impl Generating {
    pub fn new(sequence: Sequence, kv_shape: Arc<kv::model::ModelShape>) -> Generating {
        Generating { sequence, kv_shape }
    }
}

impl Work for Generating {
    fn pending(&self) -> usize {
        self.sequence.pending()
    }
    fn in_prefill(&self) -> bool {
        self.sequence.in_prefill()
    }
    fn finished(&self) -> bool {
        self.sequence.finish().is_some()
    }
    fn blocks_held(&self) -> usize {
        self.sequence.own_kv().blocks()
    }
    fn blocks_after(&self, tokens: usize) -> usize {
        self.sequence.blocks_after(tokens)
    }
    fn blocks_at_most(&self) -> usize {
        // The last token chosen is never fed, so it takes no K/V.
        (self.sequence.prompt_len() + self.sequence.params().max_new_tokens - 1).div_ceil(BLOCK_TOKENS)
    }
    fn preempt(&mut self) {
        self.sequence.preempt()
    }
    /// Its own pages both ways: a shared prefix it reads is the cache's,
    /// counted once there, not in every sequence that continues it.
    fn kv_bytes(&self) -> serving::batching::KvBytes {
        serving::batching::KvBytes {
            payload: own_payload_kv_bytes(&self.kv_shape, self.sequence.held(), self.sequence.own_kv().len()),
            allocated: self.sequence.own_kv().allocated_kv_bytes(),
        }
    }
}

/// The router's engine for the generating server: each request's prompt
/// (token ids, in the checkpoint's chat layout) decoded to exactly its
/// drawn output length (`ignore_eos`), sampled from a seed of its own.
#[derive(Clone)]
pub struct RouterStepEngine<'a> {
    pub router: &'a Router,
    /// Token ids of each prompt of the set.
    pub prompts: Vec<Vec<u32>>,
    pub params: SamplingParams,
    kv_shape: Arc<kv::model::ModelShape>,
}

impl<'a> RouterStepEngine<'a> {
    /// Tokenises each user turn (cut to its first `max_prompt_tokens`
    /// tokens, then put in the chat layout).
    pub fn new(
        router: &'a Router,
        texts: &[String],
        max_prompt_tokens: usize,
        params: SamplingParams,
    ) -> Result<RouterStepEngine<'a>, String> {
        let prompts = texts
            .iter()
            .map(|text| {
                let cut = cut_to_tokens(&router.tokenizer, text, max_prompt_tokens)?;
                router.tokenizer.encode(&Conversation::user(cut).generation_prompt(router.tokenizer.layout)).map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(RouterStepEngine { router, prompts, params, kv_shape: Arc::new(kv_shape(&router.backbone.hparams)) })
    }
}

impl serving::generation::StepEngine for RouterStepEngine<'_> {
    type Seq = Generating;

    fn sequence(&mut self, request: &serving::generation::GenRequest) -> Result<Generating, String> {
        let params = SamplingParams { max_new_tokens: request.max_new_tokens, seed: request.id, ignore_eos: true, ..self.params.clone() };
        let prompt = self.prompts.get(request.prompt).ok_or("no such prompt")?.clone();
        Sequence::new(&self.router.backbone, prompt, KvState::default(), params)
            .map(|sequence| Generating::new(sequence, self.kv_shape.clone()))
            .map_err(|e| e.to_string())
    }

    fn step(&mut self, batch: &mut [(u64, &mut Generating, usize)]) -> Result<Vec<bool>, String> {
        let mut feeds: Vec<(&mut Sequence, usize)> = batch.iter_mut().map(|(_, seq, n)| (&mut seq.sequence, *n)).collect();
        let report = step(&self.router.backbone, &self.router.tokenizer, &mut feeds).map_err(|e| e.to_string())?;
        Ok(report.emitted.iter().map(Option::is_some).collect())
    }
}

/// P/D separation on this engine: the K/V crosses as the bytes
/// [`router::handoff`] writes (the calculator's payload for the prompt).
impl serving::disaggregation::HandOff for RouterStepEngine<'_> {
    type Parcel = router::handoff::KvParcel;

    fn hand_off(&mut self, sequence: Generating) -> Result<(Generating, Self::Parcel), String> {
        router::handoff::hand_off(&self.router.backbone, sequence.sequence)
            .map(|(shell, parcel)| (Generating::new(shell, self.kv_shape.clone()), parcel))
            .map_err(|e| e.to_string())
    }

    fn parcel_bytes(parcel: &Self::Parcel) -> u64 {
        parcel.bytes.len() as u64
    }

    fn payload_bytes(&self, held_tokens: usize) -> u64 {
        payload_kv_bytes(&self.kv_shape, held_tokens)
    }

    fn receive(&mut self, sequence: Generating, parcel: Self::Parcel) -> Result<Generating, String> {
        router::handoff::receive(&self.router.backbone, sequence.sequence, &parcel)
            .map(|received| Generating::new(received, self.kv_shape.clone()))
            .map_err(|e| e.to_string())
    }
}

/// The start of `text` that its first `max_tokens` tokens cover (at least
/// one), how a load's prompts are cut to a length: the serving run and the
/// load generator cut the same texts the same way.
pub fn cut_to_tokens<'t>(tokenizer: &router::tokenizer::RouterTokenizer, text: &'t str, max_tokens: usize) -> Result<&'t str, String> {
    let (ids, ends) = tokenizer.encode_with_ends(text).map_err(|e| e.to_string())?;
    let keep = max_tokens.max(1);
    Ok(if ids.len() > keep { text.get(..ends[keep - 1]).unwrap_or(text) } else { text })
}

/// A generating load: Poisson arrivals of the prompt set with output
/// lengths drawn from `lengths`, each from the one seed.
pub fn generation_requests(
    rate_per_s: f64,
    duration_s: f64,
    seed: u64,
    prompt_tokens: &[usize],
    lengths: &[usize],
) -> Vec<serving::generation::GenRequest> {
    let arrivals: Vec<TracedArrival> = serving::poisson_trace(rate_per_s, duration_s, seed, prompt_tokens.len())
        .into_iter()
        .map(|a| TracedArrival { at_ms: a.at_ms, prompt: a.prompt, max_new_tokens: None })
        .collect();
    traced_requests(&arrivals, seed, prompt_tokens, lengths)
}

/// One arrival of a generating load: when, which prompt of the run's set,
/// and the answer's length where the trace gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct TracedArrival {
    pub at_ms: f64,
    pub prompt: usize,
    pub max_new_tokens: Option<usize>,
}

/// A trace file read for a generating load: the texts it sends (the tasks
/// it names, then each conversation written out, in the order of
/// [`serving::trace_arrivals`]) and an arrival a line.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationTrace {
    pub texts: Vec<String>,
    pub arrivals: Vec<TracedArrival>,
}

impl GenerationTrace {
    /// The trace's lines over a task set (`(id, prompt)`). The generating
    /// load sends one user turn a request, cut to the run's prompt length,
    /// so a written-out conversation must be exactly that; anything else
    /// is refused with its line rather than sent differently from the
    /// prefill-only test's reading of the same file.
    pub fn new(lines: &[serving::TraceLine], tasks: &[(String, String)]) -> Result<GenerationTrace, String> {
        for line in lines {
            if let Some(conversation) = &line.conversation {
                if !matches!(conversation.messages.as_slice(), [m] if m.role == router::Role::User) {
                    return Err(format!(
                        "trace line {}: a generating load sends one user turn a request; this conversation has {} messages ({})",
                        line.line,
                        conversation.messages.len(),
                        conversation.messages.iter().map(|m| m.role.name()).collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
        let named: Vec<serving::NamedConversation> = tasks
            .iter()
            .map(|(id, prompt)| serving::NamedConversation { name: id.clone(), conversation: Conversation::user(prompt.clone()) })
            .collect();
        let replay = serving::trace_arrivals(lines, &named).map_err(|e| e.to_string())?;
        let texts = replay
            .conversations
            .into_iter()
            .map(|n| n.conversation.messages.into_iter().next().map(|m| m.content).unwrap_or_default())
            .collect();
        let arrivals = replay
            .arrivals
            .iter()
            .zip(lines)
            .map(|(a, line)| TracedArrival { at_ms: a.at_ms, prompt: a.prompt, max_new_tokens: line.max_tokens })
            .collect();
        Ok(GenerationTrace { texts, arrivals })
    }

    /// The run's length: to just past the last arrival, so that it falls
    /// inside the run (the serving test's [`serving::fit_to_trace`]).
    pub fn duration_s(&self) -> f64 {
        self.arrivals.last().map_or(0.0, |a| a.at_ms / 1000.0) + 0.001
    }

    /// Arrivals a second over [`GenerationTrace::duration_s`]: the rate a
    /// report files the run under and tables print, so rounded to
    /// thousandths (it labels the run; the arrivals keep their times).
    pub fn rate_per_s(&self) -> f64 {
        (self.arrivals.len() as f64 / self.duration_s() * 1000.0).round() / 1000.0
    }
}

/// Requests from arrivals: each takes the trace's answer length, or draws
/// one from `lengths` by `seed`. A draw is made for every arrival, given
/// or not, so an arrival's drawn length does not depend on whether an
/// earlier line named its own. `lengths` is never empty (the dataset's
/// reader refuses results without output tokens).
pub fn traced_requests(
    arrivals: &[TracedArrival],
    seed: u64,
    prompt_tokens: &[usize],
    lengths: &[usize],
) -> Vec<serving::generation::GenRequest> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x6f75_7470_7574);
    arrivals
        .iter()
        .enumerate()
        .map(|(id, a)| {
            let drawn = lengths[rng.random_range(0..lengths.len())];
            serving::generation::GenRequest {
                id: id as u64,
                arrival_ms: a.at_ms,
                prompt: a.prompt,
                prompt_tokens: prompt_tokens[a.prompt],
                max_new_tokens: a.max_new_tokens.unwrap_or(drawn),
            }
        })
        .collect()
}

/// The calculator's K/V bytes a token for this checkpoint in f32 with every
/// layer keeping every token (this engine's pages hold all layers; a
/// sliding window's saving is the calculator's payload, not its allocation).
pub fn formula_bytes_per_token(h: &Hparams) -> u64 {
    let shape = kv::model::ModelShape::uniform(h.layers as u32, h.kv_heads as u32, h.head_dim as u32);
    shape.runs.iter().map(|r| r.count as u128 * r.elements_per_token() * 4).sum::<u128>() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sequence's own share of the payload: every own token under full
    /// attention, and under a window only the own tokens it keeps; with
    /// nothing shared, the whole payload.
    #[test]
    fn own_payload_counts_only_the_tokens_in_own_pages() {
        use kv::model::{LayerKind, LayerRun, ModelShape};
        let run = |kind, count| LayerRun { kind, count, kv_heads: 1, head_dim: 2 };
        let shape = ModelShape {
            layers: 3,
            kv_heads: 1,
            head_dim: 2,
            runs: vec![run(LayerKind::Full, 1), run(LayerKind::Sliding { window: 4 }, 2)],
        };
        // Per token and layer: K and V, 2 values, 4 bytes = 16 bytes.
        assert_eq!(payload_kv_bytes(&shape, 10), 16 * (10 + 2 * 4));
        assert_eq!(own_payload_kv_bytes(&shape, 10, 10), payload_kv_bytes(&shape, 10));
        assert_eq!(own_payload_kv_bytes(&shape, 10, 3), 16 * (3 + 2 * 3));
        assert_eq!(own_payload_kv_bytes(&shape, 10, 6), 16 * (6 + 2 * 4));
        assert_eq!(own_payload_kv_bytes(&shape, 10, 0), 0);
    }

    /// A trace names tasks by id (each sent once however often it
    /// arrives), writes one-turn conversations out, and may give an
    /// answer's length; lengths it leaves out are the Poisson load's draws.
    #[test]
    fn a_generating_trace_replays_its_lines_as_written() {
        let text = concat!(
            "{\"at_ms\": 0, \"task\": \"b\", \"max_tokens\": 5}\n",
            "{\"at_ms\": 250, \"conversation\": {\"messages\": [{\"role\": \"user\", \"content\": \"Reverse a list.\"}]}}\n",
            "\n",
            "{\"at_ms\": 900, \"task\": \"b\"}\n",
        );
        let tasks = [("a".to_string(), "Task A.".to_string()), ("b".to_string(), "Task B.".to_string())];
        let trace = GenerationTrace::new(&serving::parse_trace(text).unwrap(), &tasks).unwrap();
        assert_eq!(trace.texts, ["Task B.", "Reverse a list."]);
        let prompts: Vec<(f64, usize, Option<usize>)> = trace.arrivals.iter().map(|a| (a.at_ms, a.prompt, a.max_new_tokens)).collect();
        assert_eq!(prompts, [(0.0, 0, Some(5)), (250.0, 1, None), (900.0, 0, None)]);
        assert!((trace.duration_s() - 0.901).abs() < 1e-12 && trace.rate_per_s() == 3.33);
        let lengths = [7, 11, 13];
        let requests = traced_requests(&trace.arrivals, 3, &[40, 9], &lengths);
        assert_eq!(requests[0].max_new_tokens, 5);
        assert_eq!((requests[1].prompt_tokens, requests[2].prompt_tokens), (9, 40));
        assert!(requests[1..].iter().all(|r| lengths.contains(&r.max_new_tokens)));
        // The Poisson load draws as it did before traces shared its path:
        // one length a request, in arrival order, from the seed's own
        // stream (written out here, so the path cannot be checked against
        // itself), so runs recorded before replay the same.
        use rand::{Rng, SeedableRng};
        let poisson = generation_requests(50.0, 1.0, 3, &[40, 9], &lengths);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3 ^ 0x6f75_7470_7574);
        let arrivals = serving::poisson_trace(50.0, 1.0, 3, 2);
        assert!(arrivals.len() > 20);
        let expected: Vec<(f64, usize, usize)> =
            arrivals.iter().map(|a| (a.at_ms, a.prompt, lengths[rng.random_range(0..lengths.len())])).collect();
        assert_eq!(poisson.iter().map(|r| (r.arrival_ms, r.prompt, r.max_new_tokens)).collect::<Vec<_>>(), expected);
        // A trace line that names its length still takes its draw: the next
        // line's drawn length is the same as if the first had drawn.
        let named = [TracedArrival { max_new_tokens: Some(5), ..trace.arrivals[1].clone() }, trace.arrivals[1].clone()];
        let drawn = [TracedArrival { max_new_tokens: None, ..trace.arrivals[1].clone() }, trace.arrivals[1].clone()];
        let (a, b) = (traced_requests(&named, 3, &[40, 9], &lengths), traced_requests(&drawn, 3, &[40, 9], &lengths));
        assert_eq!((a[0].max_new_tokens, a[1].max_new_tokens), (5, b[1].max_new_tokens));
        // (The seed's first two draws differ, so a skipped draw would show.)
        assert_ne!(b[0].max_new_tokens, b[1].max_new_tokens);
    }

    #[test]
    fn a_generating_trace_refuses_what_it_cannot_send_by_line() {
        let tasks = [("a".to_string(), "Task A.".to_string())];
        let two_turns = concat!(
            "{\"at_ms\": 0, \"task\": \"a\"}\n",
            "{\"at_ms\": 1, \"conversation\": {\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}]}}\n",
        );
        assert_eq!(
            GenerationTrace::new(&serving::parse_trace(two_turns).unwrap(), &tasks).unwrap_err(),
            "trace line 2: a generating load sends one user turn a request; this conversation has 2 messages (system, user)"
        );
        // Lines are the file's, blank ones counted.
        let unknown = serving::parse_trace("{\"at_ms\": 0, \"task\": \"a\"}\n\n{\"at_ms\": 2, \"task\": \"zzz\"}").unwrap();
        assert_eq!(GenerationTrace::new(&unknown, &tasks).unwrap_err(), "trace line 3: task `zzz` is not in the task file");
    }

    /// Gemma 3 270M's shape: 18 layers, every sixth global, the rest a
    /// window of 512; 1 K/V head of 256. At 1,000 tokens the calculator
    /// keeps 512 for the 15 sliding layers.
    #[test]
    fn sliding_layers_keep_their_window_in_the_payload() {
        let h = Hparams {
            architecture: &router::arch::GEMMA3,
            layers: 18,
            hidden: 640,
            heads: 4,
            kv_heads: 1,
            head_dim: 256,
            ffn: 2048,
            vocab: 262_144,
            rms_eps: 1e-6,
            rope_theta: 1e6,
            context_length: 32_768,
            sliding_window: Some(512),
        };
        let shape = kv_shape(&h);
        assert_eq!(shape.runs.iter().map(|r| r.count).sum::<u64>(), 18);
        let per_token_layer = 2 * 256 * 4;
        assert_eq!(payload_kv_bytes(&shape, 1000), (3 * 1000 + 15 * 512) * per_token_layer);
        assert_eq!(payload_kv_bytes(&shape, 100), 18 * 100 * per_token_layer);
    }
}
