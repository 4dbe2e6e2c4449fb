//! `Router.decide`: mode resolution → conversation assembly → tokenisation →
//! left truncation → prefill → descriptor stacking → scores → cost estimation
//! → ranking, each stage timed on its own.
//!
//! `encode_and_score` is the field guide's microbenchmark boundary: it runs
//! the same tokenise/truncate/prefill/stack/score steps as `decide` (the same
//! code, not a copy) and leaves out mode resolution, cost policy and ranking.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use web_time::Instant;

pub use crate::decision::{
    BuildStage, Decision, FeatureMap, FlopModel, GemmProbe, LoadTimings, PooledFeatures, Pooling, PrefixReuse, Ranked, Scores,
    StageTimings, TruncationSide,
};

use crate::conversation::Conversation;
use crate::elapsed_ms;
use crate::error::{Result, RouterError};
use crate::gguf::Checkpoint;
use crate::head::LoadedHead;
use crate::model::{Backbone, Precision};
use crate::pool::Pool;
use crate::prefix::{Namespace, PrefixCache};
use crate::segment::SegmentView;
use crate::tokenizer::RouterTokenizer;

/// The first bytes of [`Router::descriptor_cache`]'s format.
const DESCRIPTOR_MAGIC: &[u8; 4] = b"RDV1";

/// The default `router_max_tokens` (the field guide's truncation ceiling).
pub const DEFAULT_MAX_TOKENS: usize = 1024;

/// Knobs of the decision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RouterConfig {
    /// Routing texts longer than this are cut from the left.
    pub max_tokens: usize,
    /// Where a cut may start: a multiple of this many text tokens (1: the
    /// latest `max_tokens` exactly). A step of S keeps the kept window's
    /// start fixed while a conversation grows by up to S tokens, so its
    /// prefix stays cached across turns, at the price of seeing up to
    /// S − 1 fewer tokens. See ARCHITECTURE.md, "Prefix reuse and its limits".
    #[serde(default = "one")]
    pub truncation_step: usize,
    /// Which tokens a cut keeps: the latest (default) or the first.
    #[serde(default)]
    pub truncation: TruncationSide,
    /// Softmax temperature over cosine similarities.
    pub temperature: f32,
    pub precision: Precision,
}

/// The reference configuration: f32, no rounding of activations, the same
/// values on every target to 1e-5. The page, the widget and the tools
/// serve [`Precision::SERVED`] (int8) unless asked otherwise.
impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            max_tokens: DEFAULT_MAX_TOKENS,
            truncation_step: 1,
            truncation: TruncationSide::Left,
            temperature: 0.05,
            precision: Precision::DequantizedF32,
        }
    }
}

fn one() -> usize {
    1
}

/// What a router is built from: bytes and the names to report them by.
pub struct RouterAssets<'a> {
    pub gguf: &'a [u8],
    pub gguf_name: &'a str,
    /// The GGUF's SHA-256 (hex), when the caller has already computed it
    /// (the browser does, with WebCrypto); `None` computes it here.
    pub gguf_sha256: Option<&'a str>,
    /// A tokenizer.json; `None` builds the tokenizer from the GGUF metadata.
    pub tokenizer_json: Option<(&'a [u8], &'a str)>,
    pub pool_yaml: &'a [u8],
    pub pool_name: &'a str,
}

/// A loaded router: backbone, tokenizer, pool and the cached descriptor vectors.
///
/// The settings, the checkpoint id and the head are private: they hold
/// invariants (a head fits the settings it was trained under, and its digest
/// is part of the id), so they change only through the methods that keep
/// them (`retruncate`, `set_truncation_step`, `attach_head`, `detach_head`).
pub struct Router {
    pub backbone: Backbone,
    pub tokenizer: RouterTokenizer,
    pub pool: Pool,
    config: RouterConfig,
    /// The GGUF's id, then `+head-…` when a trained head scores.
    checkpoint_id: String,
    /// The GGUF's own id (what a head must have been trained on).
    backbone_checkpoint_id: String,
    /// A trained scoring head; `None` scores by descriptor similarity.
    head: Option<LoadedHead>,
    /// Names the tokenizer for the prefix cache's namespace: `gguf` (built
    /// from the checkpoint's own metadata) or `json-` and 8 hex digits of
    /// the tokenizer.json's SHA-256.
    pub tokenizer_id: String,
    pub weight_type: String,
    pub load_timings: LoadTimings,
    /// One L2-normalised vector per candidate, in pool order, stacked row by
    /// row into one `[candidates × hidden]` matrix once per pool load.
    descriptor_matrix: Vec<f32>,
}

/// A cut on a grid coarser than the room for text would keep nothing.
fn check_truncation_step(step: usize, max_tokens: usize, leading: usize) -> Result<()> {
    let room = max_tokens.saturating_sub(leading);
    if step == 0 || step >= room.max(2) {
        return Err(RouterError::Request(format!(
            "truncation step {step} must be at least 1 and less than the {room} text tokens router_max_tokens = {max_tokens} leaves"
        )));
    }
    Ok(())
}

/// Adds a prefill's projection and attention time to a call's stage timings.
fn add_profile(timings: &mut StageTimings, segment: &crate::segment::Segment) {
    let (projections_ms, attention_ms) = segment.prefill_profile();
    timings.projections_ms += projections_ms;
    timings.attention_ms += attention_ms;
}

impl Router {
    /// Loads everything, timing weights, tokenizer and descriptors apart.
    pub fn load(assets: &RouterAssets, config: RouterConfig) -> Result<Router> {
        Router::load_with_progress(assets, config, &mut |_, _, _| {})
    }

    /// [`Router::load`], calling `progress(stage, done, total)` before each
    /// step (weights, tokenizer, then the descriptors once per candidate),
    /// so a page can say what a long load is doing.
    pub fn load_with_progress(
        assets: &RouterAssets,
        config: RouterConfig,
        progress: &mut dyn FnMut(BuildStage, usize, usize),
    ) -> Result<Router> {
        Router::load_with_cache(assets, config, progress, None)
    }

    /// [`Router::load_with_progress`], taking the descriptor vectors from
    /// `descriptor_cache` (what [`Router::descriptor_cache`] wrote on an
    /// earlier load) when it was written for this very checkpoint, precision
    /// and kernel, tokenizer, truncation and pool; otherwise (absent, stale
    /// or damaged) they are encoded as usual.
    pub fn load_with_cache(
        assets: &RouterAssets,
        config: RouterConfig,
        progress: &mut dyn FnMut(BuildStage, usize, usize),
        descriptor_cache: Option<&[u8]>,
    ) -> Result<Router> {
        progress(BuildStage::Weights, 0, 1);
        let started = Instant::now();
        let checkpoint = Checkpoint::parse_with_sha256(assets.gguf, assets.gguf_name, assets.gguf_sha256)?;
        let backbone = Backbone::load(&checkpoint, config.precision)?;
        let weights_ms = elapsed_ms(started);

        progress(BuildStage::Tokenizer, 0, 1);
        let started = Instant::now();
        let tokenizer = match assets.tokenizer_json {
            Some((bytes, name)) => RouterTokenizer::from_json(bytes, name)?,
            None => RouterTokenizer::from_gguf(&checkpoint)?,
        };
        tokenizer.check_vocab(checkpoint.hparams.vocab)?;
        check_truncation_step(config.truncation_step, config.max_tokens, tokenizer.leading())?;
        let tokenizer_ms = elapsed_ms(started);

        let tokenizer_id = match assets.tokenizer_json {
            Some((bytes, _)) => format!("json-{}", &crate::gguf::hex(&Sha256::digest(bytes))[..8]),
            None => "gguf".to_string(),
        };

        let pool = Pool::from_yaml(assets.pool_yaml, assets.pool_name)?;
        let mut router = Router {
            backbone,
            tokenizer,
            pool,
            config,
            checkpoint_id: checkpoint.id.clone(),
            backbone_checkpoint_id: checkpoint.id.clone(),
            head: None,
            tokenizer_id,
            weight_type: checkpoint.weight_type.clone(),
            load_timings: LoadTimings { weights_ms, tokenizer_ms, ..LoadTimings::default() },
            descriptor_matrix: Vec::new(),
        };
        let started = Instant::now();
        if descriptor_cache.is_some_and(|bytes| router.reuse_descriptors(bytes)) {
            router.load_timings.descriptors_ms = elapsed_ms(started);
        } else {
            router.embed_descriptors(progress)?;
        }
        Ok(router)
    }

    /// What the descriptor vectors depend on: the backbone's checkpoint,
    /// the precision, the tokenizer, truncation and the pool (its id is a
    /// digest of its bytes), and this crate's version. A cache written
    /// under another key is not used. The build's SIMD features (the
    /// threads build's relaxed SIMD rounds differently from the
    /// single-thread build), but not the integer kernel the browser's
    /// timing probe picks at every load: the two it chooses between
    /// compute the same exact sums, and a key naming the pick missed the
    /// cache whenever the pick turned.
    pub fn descriptor_key(&self) -> String {
        let c = &self.config;
        format!(
            "{} | {} weights, {}{} | {} | max {} {} step {} | pool {} | router {}",
            self.backbone_checkpoint_id,
            self.weight_type,
            self.config.precision.name(),
            crate::kernels::KERNEL_NOTE,
            self.tokenizer_id,
            c.max_tokens,
            c.truncation.name(),
            c.truncation_step,
            self.pool.id,
            env!("CARGO_PKG_VERSION"),
        )
    }

    /// The descriptor vectors and their key as bytes, for a cache that
    /// [`Router::load_with_cache`] reads on a later load: `RDV1`, the key's
    /// length (u32) and text, the encoding's milliseconds and FLOPs (f64),
    /// candidates and width (u32), then the f32 values, all little-endian.
    pub fn descriptor_cache(&self) -> Vec<u8> {
        let key = self.descriptor_key();
        let t = &self.load_timings;
        // Set on both paths: the encoding just done, or the one the record
        // read on this load carried.
        let encoded_ms = t.descriptors_encoded_ms;
        let mut out = Vec::with_capacity(40 + key.len() + 4 * self.descriptor_matrix.len());
        out.extend_from_slice(DESCRIPTOR_MAGIC);
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(&encoded_ms.to_le_bytes());
        out.extend_from_slice(&t.descriptor_flops.to_le_bytes());
        out.extend_from_slice(&(self.pool.candidates.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.backbone.hparams.hidden as u32).to_le_bytes());
        self.descriptor_matrix.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out
    }

    /// Takes the descriptor vectors from a cache's bytes when they were
    /// written under this router's key, with the right shape and finite
    /// values; false (and nothing changed) otherwise.
    fn reuse_descriptors(&mut self, bytes: &[u8]) -> bool {
        let mut rest = bytes;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, tail) = rest.split_at_checked(n)?;
            rest = tail;
            Some(head)
        };
        let parsed = (|| {
            (take(4)? == DESCRIPTOR_MAGIC).then_some(())?;
            let key_len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
            let key = std::str::from_utf8(take(key_len)?).ok()?.to_string();
            let encoded_ms = f64::from_le_bytes(take(8)?.try_into().ok()?);
            let flops = f64::from_le_bytes(take(8)?.try_into().ok()?);
            let count = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
            let hidden = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
            let values = take(count.checked_mul(hidden)?.checked_mul(4)?)?;
            let matrix: Vec<f32> = values.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            // Bytes after the values mean a damaged or foreign record.
            (bytes.len() == 32 + key_len + values.len()).then_some(())?;
            Some((key, encoded_ms, flops, count, hidden, matrix))
        })();
        let Some((key, encoded_ms, flops, count, hidden, matrix)) = parsed else { return false };
        let fits = key == self.descriptor_key()
            && count == self.pool.candidates.len()
            && hidden == self.backbone.hparams.hidden
            && matrix.iter().all(|v| v.is_finite());
        if fits {
            self.descriptor_matrix = matrix;
            let t = &mut self.load_timings;
            (t.descriptors_cached, t.descriptors_encoded_ms, t.descriptor_flops) = (true, encoded_ms, flops);
        }
        fits
    }

    /// Encodes every candidate descriptor (truncated like a routing text)
    /// into the stacked matrix, timing it into the load timings.
    fn embed_descriptors(&mut self, progress: &mut dyn FnMut(BuildStage, usize, usize)) -> Result<()> {
        let started = Instant::now();
        let count = self.pool.candidates.len();
        let mut rows = Vec::with_capacity(count);
        let flops = self.backbone.hparams.flop_model();
        let mut descriptor_flops = 0.0;
        for (i, candidate) in self.pool.candidates.iter().enumerate() {
            progress(BuildStage::Descriptors, i, count);
            let (row, used) = self.embed_text(&candidate.descriptor)?;
            rows.push(row);
            descriptor_flops += flops.prefill(used);
        }
        self.load_timings.descriptor_flops = descriptor_flops;
        self.descriptor_matrix = rows.concat();
        self.load_timings.descriptors_ms = elapsed_ms(started);
        self.load_timings.descriptors_encoded_ms = self.load_timings.descriptors_ms;
        self.load_timings.descriptors_cached = false;
        Ok(())
    }

    /// The settings this router was loaded (or since retruncated) with.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// The checkpoint id shown everywhere: the GGUF's, then `+head-…` when a
    /// trained head scores.
    pub fn checkpoint_id(&self) -> &str {
        &self.checkpoint_id
    }

    /// The GGUF's own id (what a head must have been trained on).
    pub fn backbone_checkpoint_id(&self) -> &str {
        &self.backbone_checkpoint_id
    }

    /// The trained scoring head, if one is attached.
    pub fn head(&self) -> Option<&LoadedHead> {
        self.head.as_ref()
    }

    /// Changes the grid a left cut starts on (1: plain left truncation),
    /// checked as at load. The descriptors are not encoded again: the
    /// truncation study compares both policies against the same ones.
    pub fn set_truncation_step(&mut self, step: usize) -> Result<()> {
        check_truncation_step(step, self.config.max_tokens, self.tokenizer.leading())?;
        self.config.truncation_step = step;
        Ok(())
    }

    /// Changes `router_max_tokens` and the truncation side, and encodes the
    /// descriptors again under them (as a fresh load would). A head trained
    /// for other settings is detached.
    pub fn retruncate(&mut self, max_tokens: usize, side: TruncationSide) -> Result<()> {
        let room = max_tokens.saturating_sub(self.tokenizer.leading());
        if room == 0 || self.config.truncation_step >= room.max(2) {
            return Err(RouterError::Request(format!(
                "router_max_tokens = {max_tokens} leaves no room for text with truncation step {}",
                self.config.truncation_step
            )));
        }
        self.config.max_tokens = max_tokens;
        self.config.truncation = side;
        if self.head.as_ref().is_some_and(|h| (h.head.router_max_tokens, h.head.truncation) != (max_tokens, side)) {
            self.detach_head();
        }
        self.embed_descriptors(&mut |_, _, _| {})
    }

    /// The embedding of a plain text, truncated like a routing text, and
    /// the tokens prefilled.
    fn embed_text(&self, text: &str) -> Result<(Vec<f32>, usize)> {
        let kept = self.truncate(&self.tokenizer.encode(text)?)?;
        Ok((self.backbone.embed(&kept, self.tokenizer.leading())?, kept.len()))
    }

    /// Truncation to `max_tokens`: the leading BOS (when the model expects
    /// one) stays first, then the text's latest tokens, cut where a
    /// multiple of `truncation_step` text tokens ends (or, keeping the
    /// start, its first tokens). Fails when no text token is left.
    fn truncate(&self, ids: &[u32]) -> Result<Vec<u32>> {
        let lead = self.tokenizer.leading().min(ids.len());
        let text = ids.len() - lead;
        let room = self.config.max_tokens.saturating_sub(lead);
        let keep = match text.checked_sub(room) {
            Some(over) if over > 0 && self.config.truncation == TruncationSide::Left => {
                // Round the cut up to the step's grid: the start moves only
                // when the text passes the next multiple.
                let step = self.config.truncation_step.max(1);
                text - over.div_ceil(step).saturating_mul(step).min(text)
            }
            // Keeping the start cuts at the end, where no grid applies.
            Some(over) if over > 0 => room,
            _ => text,
        };
        if keep == 0 {
            return Err(RouterError::Request(if text == 0 {
                "nothing to encode: zero tokens".into()
            } else {
                format!("router_max_tokens = {} leaves no room for text after the BOS token", self.config.max_tokens)
            }));
        }
        let kept = match self.config.truncation {
            TruncationSide::Left => &ids[ids.len() - keep..],
            TruncationSide::KeepStart => &ids[lead..lead + keep],
        };
        Ok(ids[..lead].iter().chain(kept).copied().collect())
    }

    /// The namespace this router's states belong to in a prefix cache.
    pub fn namespace(&self) -> Namespace {
        // The backbone's id, not the scoring's: a head does not change the
        // states, so decisions with and without it share cached prefixes.
        Namespace {
            checkpoint_id: self.backbone_checkpoint_id.clone(),
            precision: self.config.precision,
            tokenizer_id: self.tokenizer_id.clone(),
            max_tokens: self.config.max_tokens,
        }
    }

    /// Tokenise → truncate, timing each into `t`: the kept ids and the
    /// text's whole length in tokens.
    fn encode(&self, routing_text: &str, t: &mut StageTimings) -> Result<(Vec<u32>, usize)> {
        let started = Instant::now();
        let ids = self.tokenizer.encode(routing_text)?;
        t.tokenize_ms = elapsed_ms(started);

        // The task statement sits near the start, and truncation cuts from
        // the left: a long conversation keeps its latest tokens.
        let started = Instant::now();
        // Fails on an empty text, as the backbone would; a cache must not
        // answer it with an empty pool.
        let kept = self.truncate(&ids)?;
        t.truncate_ms = elapsed_ms(started);
        Ok((kept, ids.len()))
    }

    /// Prefills the job's unprefilled tokens with a prefix cache: the
    /// longest held prefix is not prefilled again, the rest is added to it
    /// (lookup and insert timed on their own).
    fn prefill_cached(&self, job: &mut PendingDecide, cache: &mut PrefixCache) -> Result<()> {
        let kept = job.kept.as_slice();
        let started = Instant::now();
        let lookup = cache.lookup(&self.namespace(), kept);
        job.timings.lookup_ms = elapsed_ms(started);
        let (reused, mut state) = (lookup.matched, lookup.state.clone());
        let started = Instant::now();
        let suffix = &kept[reused..];
        if suffix.is_empty() {
            // The whole text is held: its pooled embedding needs no prefill.
            cache.release(lookup);
            job.timings.prefill_ms = elapsed_ms(started);
            job.timings.insert_ms = 0.0;
        } else {
            let segment = match self.backbone.prefill(&lookup.state, suffix) {
                Ok(segment) => {
                    add_profile(&mut job.timings, &segment);
                    Arc::new(segment)
                }
                Err(e) => {
                    cache.release(lookup);
                    return Err(e);
                }
            };
            state.push(SegmentView::whole(segment.clone()));
            job.timings.prefill_ms = elapsed_ms(started);
            let started = Instant::now();
            cache.insert(kept, lookup, segment);
            job.timings.insert_ms = elapsed_ms(started);
        }
        job.prefix = Some(PrefixReuse {
            reused_tokens: reused,
            prefilled_tokens: suffix.len(),
            cache_tokens: cache.tokens_held(),
            cache_bytes: cache.bytes_held(),
            evictions_total: cache.stats().evictions,
        });
        job.prefilled = kept.len();
        job.state = state;
        job.chunks = 1;
        Ok(())
    }

    /// The feature maps this backbone offers a head: every tapped depth
    /// and the final one, each with every pooling.
    pub fn feature_maps(&self) -> Vec<FeatureMap> {
        let depths = std::iter::once(None).chain(self.backbone.taps().iter().map(|&t| Some(t)));
        depths.flat_map(|after_layers| Pooling::ALL.map(|pooling| FeatureMap { after_layers, pooling })).collect()
    }

    /// `map`'s features of a prefilled state (zeros when the backbone does
    /// not tap its depth; a head reading one is refused when attached).
    fn pool_map(&self, state: &crate::segment::KvState, map: FeatureMap) -> Vec<f32> {
        let hidden = self.backbone.hparams.hidden;
        match self.backbone.depth_of(map.after_layers) {
            Some(depth) => state.pooled(depth, map.pooling, hidden, self.tokenizer.leading()),
            None => vec![0.0; map.pooling.width(hidden)],
        }
    }

    /// Pooling → stack → score over a prefilled job's state, timing each
    /// into its timings. `every_map`: pool every feature map (a study's
    /// features), not only the ones the scoring reads.
    fn score(&self, job: &mut PendingDecide, every_map: bool) -> (Scores, PooledFeatures) {
        let t = &mut job.timings;
        let hidden = self.backbone.hparams.hidden;
        // Every pooling comes from the same hidden states (timed with the
        // prefill that wrote them); the final mean is the query the
        // similarity scoring compares, and a head reads its own map.
        let started = Instant::now();
        let mut maps = vec![FeatureMap::FINAL_MEAN];
        if every_map {
            maps = self.feature_maps();
        } else if let Some(head) = &self.head {
            maps.push(head.head.feature_map());
        }
        maps.dedup();
        let pooled = PooledFeatures { maps: maps.into_iter().map(|map| (map, self.pool_map(&job.state, map))).collect() };
        t.prefill_ms += elapsed_ms(started);
        let query = pooled.get(FeatureMap::FINAL_MEAN).unwrap_or_default();

        // The stacked matrix is built once per pool load; per call this stage
        // only takes it and checks it fits the query.
        let started = Instant::now();
        let matrix = self.descriptor_matrix.as_slice();
        debug_assert_eq!(matrix.len(), hidden * self.pool.candidates.len());
        t.stack_ms = elapsed_ms(started);

        let started = Instant::now();
        let cosines: Vec<f32> = matrix.chunks_exact(hidden).map(|row| row.iter().zip(query).map(|(a, b)| a * b).sum()).collect();
        let scores = match &self.head {
            Some(head) => head.probabilities(pooled.get(head.head.feature_map()).unwrap_or_default()),
            None => softmax(&cosines, self.config.temperature),
        };
        t.score_ms = elapsed_ms(started);
        let keep = job.kept.len();
        let scores = Scores {
            scores,
            cosines,
            tokens_total: job.tokens_total,
            tokens_used: keep,
            truncated: keep < job.tokens_total,
            timings: *t,
            prefix: job.prefix,
        };
        (scores, pooled)
    }

    /// The microbenchmark boundary: encode a routing text and score the
    /// candidates (no mode resolution, cost policy or ranking).
    pub fn encode_and_score(&self, routing_text: &str) -> Result<Scores> {
        let started = Instant::now();
        let mut timings = StageTimings::default();
        let (kept, tokens_total) = self.encode(routing_text, &mut timings)?;
        let mut job = PendingDecide::new(String::new(), 0.0, kept, tokens_total, timings);
        self.prefill_chunk(&mut job, usize::MAX)?;
        let (mut scores, _) = self.score(&mut job, false);
        scores.timings.total_ms = elapsed_ms(started);
        Ok(scores)
    }

    /// The complete routing call, prefilling every kept token.
    pub fn decide(&self, conversation: &Conversation, mode: Option<&str>) -> Result<Decision> {
        Ok(self.decide_in(conversation, mode, None, false)?.0)
    }

    /// The complete routing call with prefix reuse: the longest prefix of
    /// the kept tokens that `cache` holds is not prefilled again, and the
    /// rest is added to it. Rankings equal `decide`'s; scores agree to
    /// float rounding (summation order differs where a prefix is reused).
    pub fn decide_with_cache(&self, conversation: &Conversation, mode: Option<&str>, cache: &mut PrefixCache) -> Result<Decision> {
        Ok(self.decide_in(conversation, mode, Some(cache), false)?.0)
    }

    /// [`Router::decide`] (with a prefix cache when given one), also
    /// returning every feature map of the same prefill ([`Router::feature_maps`]):
    /// the features a scoring head is trained on.
    pub fn decide_with_features(
        &self,
        conversation: &Conversation,
        mode: Option<&str>,
        cache: Option<&mut PrefixCache>,
    ) -> Result<(Decision, PooledFeatures)> {
        self.decide_in(conversation, mode, cache, true)
    }

    /// Attaches a trained scoring head (a head file's bytes; `file` names it
    /// in errors). From then on scores are its P(resolve), costs its
    /// recorded means, each mode's λ its own, and the checkpoint id names
    /// it. The head must have been trained on this GGUF, this pool, and
    /// this `router_max_tokens` and truncation side.
    pub fn attach_head(&mut self, bytes: &[u8], file: &str) -> Result<()> {
        self.attach_loaded_head(LoadedHead::from_json(bytes, file)?, file)
    }

    /// [`Router::attach_head`] for a head already read (`file` names it in errors).
    pub fn attach_loaded_head(&mut self, head: LoadedHead, file: &str) -> Result<()> {
        let ids: Vec<&str> = self.pool.candidates.iter().map(|c| c.id.as_str()).collect();
        let modes: Vec<&str> = self.pool.modes.keys().map(String::as_str).collect();
        head.check_fits(file, self.backbone.hparams.hidden, &ids, &modes)?;
        let bad = |reason: String| RouterError::Head { file: file.to_string(), reason };
        if let (Some(layers), None) = (head.head.after_layers, self.backbone.depth_of(head.head.after_layers)) {
            return Err(bad(format!(
                "reads the hidden states after {layers} layers; this backbone keeps them after {:?} only",
                self.backbone.taps()
            )));
        }
        if head.head.backbone_checkpoint_id != self.backbone_checkpoint_id {
            return Err(bad(format!(
                "trained on checkpoint {}, this router runs {}",
                head.head.backbone_checkpoint_id, self.backbone_checkpoint_id
            )));
        }
        if (head.head.router_max_tokens, head.head.truncation) != (self.config.max_tokens, self.config.truncation) {
            return Err(bad(format!(
                "trained on features truncated to {} tokens ({}), this router keeps {} ({})",
                head.head.router_max_tokens,
                head.head.truncation.name(),
                self.config.max_tokens,
                self.config.truncation.name()
            )));
        }
        self.checkpoint_id = format!("{}+{}", self.backbone_checkpoint_id, head.id);
        self.head = Some(head);
        Ok(())
    }

    /// Scores by descriptor similarity again (the untrained scoring),
    /// handing back the head that scored until now.
    pub fn detach_head(&mut self) -> Option<LoadedHead> {
        self.checkpoint_id = self.backbone_checkpoint_id.clone();
        self.head.take()
    }

    fn decide_in(
        &self,
        conversation: &Conversation,
        mode: Option<&str>,
        cache: Option<&mut PrefixCache>,
        every_map: bool,
    ) -> Result<(Decision, PooledFeatures)> {
        let call = Instant::now();
        let mut job = self.begin_decide(conversation, mode)?;
        match cache {
            None => {
                self.prefill_chunk(&mut job, usize::MAX)?;
            }
            Some(cache) => self.prefill_cached(&mut job, cache)?,
        }
        let (mut decision, pooled) = self.conclude(job, every_map)?;
        decision.timings.total_ms = elapsed_ms(call);
        Ok((decision, pooled))
    }

    /// The first stages of a decide (mode resolution, assembly,
    /// tokenisation, truncation), leaving the prefill to
    /// [`Router::prefill_chunk`] and the rest to [`Router::finish_decide`]:
    /// a scheduler can run other work between a long prompt's chunks.
    pub fn begin_decide(&self, conversation: &Conversation, mode: Option<&str>) -> Result<PendingDecide> {
        let mut t = StageTimings::default();
        let started = Instant::now();
        let mode_name = mode.map(str::trim).filter(|m| !m.is_empty()).unwrap_or(&self.pool.default_mode).to_string();
        let cost_weight = match self.pool.modes.get(&mode_name) {
            // A head carries its own λ per mode (checked at attach).
            Some(m) => self.head.as_ref().and_then(|h| h.head.modes.get(&mode_name).copied()).unwrap_or(m.cost_weight),
            None => {
                return Err(RouterError::Request(format!(
                    "unknown mode `{mode_name}` (the pool has: {})",
                    self.pool.modes.keys().cloned().collect::<Vec<_>>().join(", ")
                )))
            }
        };
        t.mode_ms = elapsed_ms(started);

        let started = Instant::now();
        if conversation.messages.iter().all(|m| m.content.trim().is_empty()) {
            return Err(RouterError::Request("the conversation is empty".into()));
        }
        let routing_text = conversation.routing_text(self.tokenizer.layout);
        t.assemble_ms = elapsed_ms(started);

        let (kept, tokens_total) = self.encode(&routing_text, &mut t)?;
        let mut job = PendingDecide::new(mode_name, cost_weight, kept, tokens_total, t);
        job.busy_ms = t.mode_ms + t.assemble_ms + t.tokenize_ms + t.truncate_ms;
        Ok(job)
    }

    /// Prefills up to `max_tokens` more of the job's kept tokens (at least
    /// one while any remain), continuing from the state the earlier chunks
    /// wrote; returns how many it prefilled (0 once all are). The final
    /// hidden states equal one whole prefill's up to float summation order,
    /// so the decision ranks the same.
    pub fn prefill_chunk(&self, job: &mut PendingDecide, max_tokens: usize) -> Result<usize> {
        let take = job.remaining().min(max_tokens.max(1));
        if take == 0 {
            return Ok(0);
        }
        let started = Instant::now();
        let chunk = &job.kept[job.prefilled..job.prefilled + take];
        let segment = self.backbone.prefill(&job.state, chunk)?;
        add_profile(&mut job.timings, &segment);
        job.state.push(SegmentView::whole(Arc::new(segment)));
        job.prefilled += take;
        job.chunks += 1;
        let spent = elapsed_ms(started);
        job.timings.prefill_ms += spent;
        job.busy_ms += spent;
        Ok(take)
    }

    /// Prefills whatever is left in one go, then pooling, scores, cost and
    /// ranking. The decision's `total_ms` is the engine time the job used
    /// (its stages, summed), not the wall time since `begin_decide`, which
    /// includes whatever ran between its chunks.
    pub fn finish_decide(&self, mut job: PendingDecide) -> Result<Decision> {
        self.prefill_chunk(&mut job, usize::MAX)?;
        let busy = job.busy_ms;
        let started = Instant::now();
        let (mut decision, _) = self.conclude(job, false)?;
        decision.timings.total_ms = busy + elapsed_ms(started);
        Ok(decision)
    }

    /// Pooling, scores, cost and ranking of a prefilled job.
    fn conclude(&self, mut job: PendingDecide, every_map: bool) -> Result<(Decision, PooledFeatures)> {
        let (scores, pooled) = self.score(&mut job, every_map);
        let mut t = job.timings;
        let started = Instant::now();
        let costs: Vec<f64> = match &self.head {
            // What the candidate spent per task on the head's training data, or its prediction for this task.
            Some(head) => head.costs(pooled.get(head.head.feature_map()).unwrap_or_default()),
            // One call's price: the routing text in, the expected answer out.
            None => self
                .pool
                .candidates
                .iter()
                .map(|c| {
                    (scores.tokens_total as f64 * c.price_per_1m_input + c.expected_output_tokens as f64 * c.price_per_1m_output) / 1e6
                })
                .collect(),
        };
        t.cost_ms = elapsed_ms(started);

        let started = Instant::now();
        let ids: Vec<&str> = self.pool.candidates.iter().map(|c| c.id.as_str()).collect();
        let ranked = crate::decision::rank(&ids, &scores.scores, &scores.cosines, &costs, job.cost_weight);
        t.rank_ms = elapsed_ms(started);
        let started = Instant::now();
        let confidence = self.head.as_ref().map(|head| head.confidence(pooled.get(head.head.feature_map()).unwrap_or_default(), &ranked));
        t.confidence_ms = elapsed_ms(started);
        let scoring = self.head.as_ref().map_or_else(|| "similarity".to_string(), |h| h.id.clone());
        let decision = Decision {
            cost_term: self.head.as_ref().map(|h| h.head.cost_term),
            confidence,
            scoring,
            mode: job.mode,
            cost_weight: job.cost_weight,
            ranked,
            tokens_total: scores.tokens_total,
            tokens_used: scores.tokens_used,
            truncated: scores.truncated,
            timings: t,
            prefix: scores.prefix,
        };
        Ok((decision, pooled))
    }

    /// The precision, for reports (`Q4_1 weights dequantized to f32 …`).
    /// int8 asked of a file whose projections the integer kernels cannot
    /// read (Q8_0) is said to run as f32, or in part, with the count.
    pub fn precision_label(&self) -> String {
        let label = self.config.precision.label(&self.weight_type);
        if self.config.precision != Precision::IntegerQ8 {
            return label;
        }
        match self.backbone.integer_projections() {
            (0, _) => format!(
                "{}; int8 asked for, but the integer kernels take none of this file's projections (8-bit Q8_0 values do not fit their 7-bit operand)",
                Precision::DequantizedF32.label(&self.weight_type)
            ),
            (integer, all) if integer < all => {
                format!("{label}; {} of {all} projections stay f32 (a format the integer kernels do not take, e.g. Q8_0)", all - integer)
            }
            _ => label,
        }
    }
}

fn softmax(xs: &[f32], temperature: f32) -> Vec<f32> {
    let t = temperature.max(1e-6);
    let max = xs.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = xs.iter().map(|x| ((x - max) / t).exp()).collect();
    let sum: f32 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}

/// A decide between [`Router::begin_decide`] and [`Router::finish_decide`]:
/// the kept token ids, the K/V state of the chunks prefilled so far, and
/// the stage timings spent on it.
#[derive(Debug)]
pub struct PendingDecide {
    mode: String,
    cost_weight: f64,
    kept: Vec<u32>,
    tokens_total: usize,
    state: crate::segment::KvState,
    prefilled: usize,
    chunks: usize,
    prefix: Option<PrefixReuse>,
    timings: StageTimings,
    busy_ms: f64,
}

impl PendingDecide {
    fn new(mode: String, cost_weight: f64, kept: Vec<u32>, tokens_total: usize, timings: StageTimings) -> PendingDecide {
        PendingDecide {
            mode,
            cost_weight,
            kept,
            tokens_total,
            state: crate::segment::KvState::default(),
            prefilled: 0,
            chunks: 0,
            prefix: None,
            timings,
            busy_ms: 0.0,
        }
    }

    /// The tokens the decision reads (after truncation).
    pub fn tokens_kept(&self) -> usize {
        self.kept.len()
    }

    /// Kept tokens not prefilled yet.
    pub fn remaining(&self) -> usize {
        self.kept.len() - self.prefilled
    }

    /// Prefill calls so far.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// The stage timings so far (prefill summed over the chunks).
    pub fn timings(&self) -> &StageTimings {
        &self.timings
    }

    /// The final hidden states of the tokens prefilled so far,
    /// `[tokens × hidden]` row by row: what a test compares between a
    /// chunked and a whole prefill.
    pub fn hidden_states(&self) -> Vec<f32> {
        let mut out = Vec::new();
        for view in self.state.views() {
            out.extend_from_slice(view.segment.hidden(view.rows.clone()));
        }
        out
    }
}
