//! The capacity calculation: from validated inputs to every figure the page
//! and the CLI print.
//!
//! Everything is counted in bits on `u128` with checked multiplication. Each
//! adjustment (layer groups, quantization scales, prefix sharing, paged-block
//! rounding, tensor-parallel placement) is its own labelled [`Term`], so the
//! logical payload of the field guide's formula is always visible next to
//! what an engine would allocate.

use serde::Serialize;

use crate::dtype::Dtype;
use crate::error::KvError;
use crate::model::{LayerKind, LayerRun, ModelShape, RecurrentState};
use crate::runs::{total_count, Run};
use crate::units::{self, Decimal};
use crate::vllm::VllmObservation;

/// One quantization scale of `bits` for every `group` stored elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ScaleOverhead {
    pub bits: u32,
    pub group: u32,
}

/// A prefix of `tokens` tokens held once for `sequences` sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PrefixSharing {
    pub tokens: u64,
    pub sequences: u64,
}

/// The memory a GPU offers the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuBudget {
    /// Memory of one GPU, in bytes.
    pub gpu_bytes: u128,
    /// The fraction held back for activations, graphs and fragmentation.
    pub reserve: Decimal,
    /// Weight parameters of the whole model (0 when unknown).
    pub params: u64,
    pub weight_dtype: Dtype,
    /// The weights' exact bytes when known (a GGUF's tensors): they replace
    /// `params × weight_dtype`, which a quantization mix does not fit.
    pub weight_bytes: Option<u128>,
}

/// Validated calculator inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    pub model: ModelShape,
    pub kv_dtype: Dtype,
    /// A recurrent layer's state: its convolution part in `state_dtype`, its
    /// SSM part in `ssm_dtype` (vLLM's `--mamba-cache-dtype` and
    /// `--mamba-ssm-cache-dtype`).
    pub state_dtype: Dtype,
    pub ssm_dtype: Dtype,
    pub scale: Option<ScaleOverhead>,
    /// Sequence lengths `T_i`, run-length encoded.
    pub seqs: Vec<Run<u64>>,
    /// Paged-attention block size in tokens (1 = no rounding).
    pub block: u64,
    /// Tensor-parallel degree.
    pub tp: u32,
    pub prefix: Option<PrefixSharing>,
    pub budget: Option<GpuBudget>,
    pub vllm: Option<VllmObservation>,
}

impl Inputs {
    /// The field guide's seed example: L = 32, H_kv = 8, d_head = 128, bf16,
    /// four sequences of 8,192 tokens.
    pub fn seed() -> Inputs {
        Inputs {
            model: ModelShape::uniform(32, 8, 128),
            kv_dtype: Dtype::Bf16,
            state_dtype: Dtype::Bf16,
            ssm_dtype: Dtype::Bf16,
            scale: None,
            seqs: vec![Run { value: 8192, count: 4 }],
            block: 16,
            tp: 1,
            prefix: None,
            budget: None,
            vllm: None,
        }
    }
}

/// One labelled line of a breakdown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Term {
    pub label: String,
    /// The multiplication with the user's numbers.
    pub expression: String,
    pub bits: u128,
    /// Whether the line is subtracted (a saving).
    pub negative: bool,
}

impl Term {
    pub fn bytes_text(&self) -> String {
        bytes_text(self.bits)
    }
}

/// A list of terms and their sum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Breakdown {
    pub terms: Vec<Term>,
    pub total_bits: u128,
}

impl Breakdown {
    pub fn total_bytes(&self) -> u128 {
        units::bits_to_bytes(self.total_bits)
    }
}

/// How one layer group is placed across tensor-parallel ranks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    pub label: String,
    /// `sharded`, `replicated` or `replicated (latent)`.
    pub mode: String,
    pub explanation: String,
}

/// Per-GPU figures under tensor parallelism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorParallel {
    pub degree: u32,
    pub placements: Vec<Placement>,
    pub per_gpu_logical_bytes: u128,
    pub per_gpu_allocated_bytes: u128,
    /// Allocated bytes summed over all GPUs (counts replicas).
    pub all_gpus_allocated_bytes: u128,
    /// Bytes that exist only because heads are replicated.
    pub replication_bytes: u128,
}

/// The GPU-budget inversion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetReport {
    pub gpu_bytes: u128,
    pub reserve_bytes: u128,
    pub weight_bytes_total: u128,
    pub weight_bytes_per_gpu: u128,
    /// What is left for the cache on one GPU (0 when the weights do not fit).
    pub kv_budget_bytes_per_gpu: u128,
    pub weights_fit: bool,
    /// Tokens one GPU can retain if each token is held in every layer.
    pub max_retained_tokens: u128,
    /// Sequences of the current length mix that fit (mean allocated size).
    pub max_sequences: u128,
    pub current_mix_fits: bool,
    pub headroom_bytes: i128,
}

/// The vLLM cross-check: the engine's own count against ours.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrossCheck {
    pub engine_tokens: u128,
    /// Where the token count came from (`GPU KV cache size` or concurrency × length).
    pub tokens_source: String,
    pub kv_memory_bytes: u128,
    pub kv_memory_source: String,
    /// Implied bytes per token (memory ÷ tokens), two decimals.
    pub implied_bytes_per_token: String,
    /// Ours: allocated per-token bytes on one GPU, scales included.
    pub computed_bytes_per_token: u128,
    pub difference_text: String,
}

/// vLLM's paging of a hybrid model (attention and recurrent layers): one
/// page size for both, so the attention block grows until a page of one
/// attention layer holds one recurrent layer's state, and each state is
/// padded to that page. Sizes are one GPU's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HybridPage {
    /// The block the form asked for.
    pub requested_block: u64,
    /// The smallest block whose page holds a state:
    /// `16 × ⌈state ÷ (16 × attention bytes per token)⌉`.
    pub aligned_block: u64,
    /// The block vLLM uses: the larger of the two.
    pub block: u64,
    /// One attention layer's K and V for one token.
    pub attention_token_bits: u128,
    /// One recurrent layer's state for one sequence.
    pub state_bits: u128,
    /// `block × attention_token_bits`: what each state is padded to.
    pub page_bits: u128,
}

impl HybridPage {
    /// The sentence vLLM's two start-up lines correspond to.
    pub fn explanation(&self) -> String {
        let padding = units::decimal_ratio((self.page_bits - self.state_bits) * 100, self.state_bits.max(1));
        let block = if self.block == self.aligned_block {
            format!(
                "the attention block becomes {} tokens, 16 × ⌈{} ÷ (16 × {})⌉ (the form asked for {})",
                self.block,
                bytes_text(self.state_bits),
                bytes_text(self.attention_token_bits),
                self.requested_block
            )
        } else {
            format!("the form's block of {} tokens is kept (at least the {} a state needs)", self.block, self.aligned_block)
        };
        format!(
            "vLLM pages a hybrid model with one page size: {block}, so that one attention layer's page, {} × {} = {} bytes, holds one layer's recurrent state of {} bytes; each state is padded to the page (+{padding} %). Sizes are one GPU's. SGLang keeps states in a pool of their own instead.",
            self.block,
            bytes_text(self.attention_token_bits),
            bytes_text(self.page_bits),
            bytes_text(self.state_bits),
        )
    }
}

/// Every figure of one calculation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `2 × L × H_kv × d_head × b × ΣT_i = N bytes` with the user's numbers.
    pub formula: String,
    pub formula_bytes: u128,
    /// True when that formula is the whole logical payload (uniform full
    /// attention, no scales, no sharing); otherwise it is shown for comparison.
    pub formula_is_payload: bool,
    pub sequences: u128,
    pub total_tokens: u128,
    /// One token held in every layer (payload only).
    pub per_token_bytes: u128,
    pub per_token_bits: u128,
    /// The same on one GPU of the tensor-parallel group (its share of the
    /// heads, replicas included): what one token costs an engine's block.
    pub per_gpu_token_bits: u128,
    pub per_sequence_text: String,
    pub per_sequence_is_mean: bool,
    pub logical: Breakdown,
    pub logical_bytes: u128,
    /// The block the allocation is counted in (a hybrid model's is vLLM's).
    pub block: u64,
    pub hybrid_page: Option<HybridPage>,
    pub allocated: Breakdown,
    pub allocated_bytes: u128,
    pub rounding_bytes: u128,
    pub tensor_parallel: TensorParallel,
    pub budget: Option<BudgetReport>,
    pub cross_check: Option<CrossCheck>,
    pub notes: Vec<String>,
}

/// Prints a bit count as bytes: whole, or with `.5` for a half byte (int4).
pub fn bytes_text(bits: u128) -> String {
    let whole = units::group_digits(bits / 8);
    match bits % 8 {
        0 => whole,
        4 => format!("{whole}.5"),
        r => format!("{whole} + {r}/8"),
    }
}

fn mul(values: &[u128], what: &'static str) -> Result<u128, KvError> {
    values.iter().try_fold(1u128, |acc, v| acc.checked_mul(*v)).ok_or(KvError::Overflow { what })
}

fn add(a: u128, b: u128, what: &'static str) -> Result<u128, KvError> {
    a.checked_add(b).ok_or(KvError::Overflow { what })
}

/// How tokens are counted for one breakdown.
#[derive(Clone, Copy)]
enum Counting {
    Logical,
    /// Whole blocks of `block` tokens; with `hybrid`, each recurrent layer's
    /// state takes one page of `block` tokens of an attention layer.
    Paged {
        block: u64,
        hybrid: bool,
    },
}

impl Counting {
    fn round(self, tokens: u64) -> u128 {
        match self {
            Counting::Logical => tokens as u128,
            Counting::Paged { block, .. } => (tokens as u128).div_ceil(block as u128) * block as u128,
        }
    }
    /// Prefix tokens that can be held once: with pages, only whole blocks.
    fn shared(self, prefix: u64) -> u128 {
        match self {
            Counting::Logical => prefix as u128,
            Counting::Paged { block, .. } => (prefix / block * block) as u128,
        }
    }
}

/// One recurrent layer's state for one sequence, in bits.
fn state_bits(state: &RecurrentState, inputs: &Inputs) -> u128 {
    state.conv_elements() * inputs.state_dtype.bits() as u128 + state.ssm_elements() * inputs.ssm_dtype.bits() as u128
}

/// One attention layer's K and V for one token (the first attention group's
/// shape, as vLLM takes the model's KV heads and head size).
fn attention_token_bits(groups: &[LayerRun], dtype_bits: u128) -> Option<u128> {
    groups.iter().find(|g| g.kind.is_attention()).map(|g| g.elements_per_token() * dtype_bits)
}

/// vLLM's page for a model with both attention and recurrent layers, from
/// one GPU's layer groups; `None` for any other model.
fn hybrid_page(gpu_groups: &[LayerRun], inputs: &Inputs) -> Result<Option<HybridPage>, KvError> {
    let Some(attention_token_bits) = attention_token_bits(gpu_groups, inputs.kv_dtype.bits() as u128) else { return Ok(None) };
    let state = gpu_groups
        .iter()
        .filter_map(|g| match &g.kind {
            LayerKind::Recurrent { state, .. } => Some(state_bits(state, inputs)),
            _ => None,
        })
        .max();
    let Some(state_bits) = state else { return Ok(None) };
    let alignment = mul(&[16, attention_token_bits], "hybrid page")?;
    let needed = mul(&[16, state_bits.div_ceil(alignment)], "hybrid page")?;
    let requested = inputs.block.max(1);
    let aligned = u64::try_from(needed).map_err(|_| KvError::Overflow { what: "hybrid page" })?;
    let block = aligned.max(requested);
    let page_bits = mul(&[block as u128, attention_token_bits], "hybrid page")?;
    Ok(Some(HybridPage { requested_block: requested, aligned_block: aligned, block, attention_token_bits, state_bits, page_bits }))
}

/// How the allocation is counted: the form's block, or vLLM's for a hybrid model.
fn paging(gpu_groups: &[LayerRun], inputs: &Inputs) -> Result<(Counting, Option<HybridPage>), KvError> {
    let page = hybrid_page(gpu_groups, inputs)?;
    let block = page.as_ref().map_or(inputs.block.max(1), |p| p.block);
    Ok((Counting::Paged { block, hybrid: page.is_some() }, page))
}

/// `Σ round(retained(T_i))` for one layer group.
fn retained_tokens(group: &LayerRun, seqs: &[Run<u64>], counting: Counting) -> Result<u128, KvError> {
    seqs.iter().try_fold(0u128, |acc, s| {
        let one = counting.round(group.retained(s.value));
        add(acc, mul(&[one, s.count as u128], "retained tokens")?, "retained tokens")
    })
}

fn scale_bits_per_token(group: &LayerRun, scale: Option<ScaleOverhead>) -> u128 {
    match scale {
        Some(s) => group.elements_per_token().div_ceil(s.group as u128) * s.bits as u128,
        None => 0,
    }
}

/// Bits one token costs across `groups` (payload, plus scales when given).
/// Cannot overflow: layers ≤ 2^32, elements ≤ 2^65, bits ≤ 32.
fn bits_per_token<'a>(groups: impl Iterator<Item = &'a LayerRun>, dtype_bits: u128, scale: Option<ScaleOverhead>) -> u128 {
    groups.map(|g| g.count as u128 * (g.elements_per_token() * dtype_bits + scale_bits_per_token(g, scale))).sum()
}

fn group_label(g: &LayerRun, plain_heads: u32) -> String {
    let heads = if g.kv_heads != plain_heads { format!(" · {} KV heads", g.kv_heads) } else { String::new() };
    match g.kind {
        LayerKind::Full => format!("full attention · {} layers{heads}", g.count),
        LayerKind::Sliding { window } => format!("sliding window {window} · {} layers{heads} · keeps min(Tᵢ, {window})", g.count),
        LayerKind::Mla { kv_lora_rank, qk_rope_head_dim } => {
            format!("MLA latent {kv_lora_rank} + RoPE key {qk_rope_head_dim} · {} layers", g.count)
        }
        LayerKind::Recurrent { family, .. } => format!("{} state · {} layers", family.name(), g.count),
        LayerKind::Stateless => format!("no mixer state · {} layers", g.count),
    }
}

fn group_expression(g: &LayerRun, dtype: Dtype, tokens: u128) -> String {
    let b = dtype.bytes_text();
    match g.kind {
        LayerKind::Full | LayerKind::Sliding { .. } => format!("2 × {} × {} × {} × {b} × {tokens}", g.count, g.kv_heads, g.head_dim),
        LayerKind::Mla { kv_lora_rank, qk_rope_head_dim } => {
            format!("{} × ({kv_lora_rank} + {qk_rope_head_dim}) × {b} × {tokens}", g.count)
        }
        // Per-sequence terms: `breakdown` writes theirs with the state's shape.
        LayerKind::Recurrent { .. } | LayerKind::Stateless => String::new(),
    }
}

/// A breakdown for a given view of the layers (whole model or one GPU's
/// share) and a given way of counting tokens.
fn breakdown(groups: &[LayerRun], inputs: &Inputs, counting: Counting) -> Result<Breakdown, KvError> {
    let dtype_bits = inputs.kv_dtype.bits() as u128;
    let mut terms = Vec::new();
    let mut total = 0u128;
    let mut scale_total = 0u128;
    let mut scale_parts = Vec::new();
    let sequences = total_count(&inputs.seqs);
    for g in groups {
        match &g.kind {
            LayerKind::Recurrent { family, state } => {
                let state_bits = state_bits(state, inputs);
                let page = match (counting, attention_token_bits(groups, dtype_bits)) {
                    (Counting::Paged { block, hybrid: true }, Some(t)) => {
                        Some((block, t, mul(&[block as u128, t], "hybrid page")?.max(state_bits)))
                    }
                    _ => None,
                };
                let (per_layer, expression) = match page {
                    Some((block, token_bits, page_bits)) => (
                        page_bits,
                        format!(
                            "{} × {} bytes (one page: {block} tokens × {} bytes of an attention layer) × {sequences}",
                            g.count,
                            bytes_text(page_bits),
                            bytes_text(token_bits)
                        ),
                    ),
                    None => (
                        state_bits,
                        format!(
                            "{} × ({} × {} × {} + {} × {} × {}) × {sequences}",
                            g.count,
                            state.conv_rows,
                            state.conv_channels,
                            inputs.state_dtype.bytes_text(),
                            state.ssm_heads,
                            // A Mamba-1 state has two dimensions: no "× 1".
                            if state.ssm_cols == 1 {
                                state.ssm_rows.to_string()
                            } else {
                                format!("{} × {}", state.ssm_rows, state.ssm_cols)
                            },
                            inputs.ssm_dtype.bytes_text()
                        ),
                    ),
                };
                let bits = mul(&[g.count as u128, per_layer, sequences], "recurrent state")?;
                total = add(total, bits, "logical payload")?;
                terms.push(Term {
                    label: format!("{} state · {} layers · constant per sequence, whatever its length", family.name(), g.count),
                    expression,
                    bits,
                    negative: false,
                });
                continue;
            }
            LayerKind::Stateless => {
                terms.push(Term {
                    label: format!("no mixer state · {} layers (MLP or MoE only)", g.count),
                    expression: "nothing kept between tokens".into(),
                    bits: 0,
                    negative: false,
                });
                continue;
            }
            LayerKind::Full | LayerKind::Sliding { .. } | LayerKind::Mla { .. } => {}
        }
        let tokens = retained_tokens(g, &inputs.seqs, counting)?;
        let bits = mul(&[g.count as u128, g.elements_per_token(), dtype_bits, tokens], "layer group payload")?;
        total = add(total, bits, "logical payload")?;
        terms.push(Term {
            label: group_label(g, inputs.model.kv_heads),
            expression: group_expression(g, inputs.kv_dtype, tokens),
            bits,
            negative: false,
        });
        if let Some(s) = inputs.scale {
            let per_token = scale_bits_per_token(g, inputs.scale);
            scale_total = add(scale_total, mul(&[g.count as u128, per_token, tokens], "scale overhead")?, "scale overhead")?;
            scale_parts.push(format!("{} × ⌈{} / {}⌉ × {} bit × {tokens}", g.count, g.elements_per_token(), s.group, s.bits));
        }
    }
    if let Some(s) = inputs.scale {
        total = add(total, scale_total, "scale overhead")?;
        terms.push(Term {
            label: format!("quantization scales · one {}-bit scale per {} elements", s.bits, s.group),
            expression: format!("({}) ÷ 8", scale_parts.join(" + ")),
            bits: scale_total,
            negative: false,
        });
    }
    if let Some(p) = inputs.prefix.filter(|p| p.sequences > 1 && p.tokens > 0) {
        // Full and MLA layers keep the prefix for the whole sequence, so every
        // sequence after the first can point at the same copy. A sliding
        // window moves past the prefix, so those layers are not counted as
        // shared (conservative).
        let shared_tokens = counting.shared(p.tokens);
        let per_token = bits_per_token(groups.iter().filter(|g| !matches!(g.kind, LayerKind::Sliding { .. })), dtype_bits, inputs.scale);
        let saving = mul(&[(p.sequences - 1) as u128, shared_tokens, per_token], "prefix saving")?;
        let saving = saving.min(total);
        total -= saving;
        let tokens_text = match counting {
            Counting::Paged { block, .. } if shared_tokens != p.tokens as u128 => {
                format!("{shared_tokens} (whole {block}-token blocks of {})", p.tokens)
            }
            _ => shared_tokens.to_string(),
        };
        terms.push(Term {
            label: format!("prefix sharing · {} tokens held once for {} sequences", p.tokens, p.sequences),
            expression: format!("({} − 1) × {tokens_text} × {} bytes per token (full and MLA layers)", p.sequences, bytes_text(per_token)),
            bits: saving,
            negative: true,
        });
    }
    Ok(Breakdown { terms, total_bits: total })
}

/// The layer groups as one GPU of a `tp`-way group holds them.
fn per_gpu_groups(groups: &[LayerRun], tp: u32) -> Result<(Vec<LayerRun>, Vec<Placement>), KvError> {
    let mut out = Vec::new();
    let mut placements = Vec::new();
    for g in groups {
        let label = group_label(g, g.kv_heads);
        let (heads, mode, explanation) = match g.kind {
            LayerKind::Recurrent { family, state } => {
                let shard = state.shard(tp).map_err(|m| crate::error::FieldError::new("tp", m))?;
                out.push(LayerRun { kind: LayerKind::Recurrent { family, state: shard }, ..g.clone() });
                let explanation = if tp == 1 {
                    "TP = 1: one GPU holds the whole state".to_string()
                } else {
                    format!(
                        "{} conv channels and {} SSM heads ÷ TP {tp} = {} and {} per GPU",
                        state.conv_channels, state.ssm_heads, shard.conv_channels, shard.ssm_heads
                    )
                };
                placements.push(Placement { label, mode: if tp == 1 { "single GPU" } else { "sharded" }.to_string(), explanation });
                continue;
            }
            LayerKind::Stateless => {
                out.push(g.clone());
                placements.push(Placement { label, mode: "no cache".to_string(), explanation: "nothing to place".to_string() });
                continue;
            }
            LayerKind::Mla { .. } => (
                g.kv_heads,
                "replicated (latent)",
                format!("the MLA latent is shared by all heads, so each of the {tp} GPUs holds all of it"),
            ),
            _ if tp == 1 => (g.kv_heads, "single GPU", "TP = 1: one GPU holds every KV head".to_string()),
            _ if g.kv_heads.is_multiple_of(tp) => {
                (g.kv_heads / tp, "sharded", format!("{} KV heads ÷ TP {tp} = {} heads per GPU", g.kv_heads, g.kv_heads / tp))
            }
            _ if tp.is_multiple_of(g.kv_heads) => (
                1,
                "replicated",
                format!("TP {tp} > {} KV heads: each GPU holds 1 head, each head is copied on {} GPUs", g.kv_heads, tp / g.kv_heads),
            ),
            _ => {
                return Err(crate::error::FieldError::new(
                    "tp",
                    format!("TP {tp} neither divides nor is a multiple of {} KV heads; engines refuse this split", g.kv_heads),
                )
                .into())
            }
        };
        out.push(LayerRun { kv_heads: heads, ..g.clone() });
        placements.push(Placement { label, mode: mode.to_string(), explanation });
    }
    Ok((out, placements))
}

fn plain_formula(inputs: &Inputs, total_tokens: u128) -> Result<(String, u128), KvError> {
    let m = &inputs.model;
    let seq_text = match inputs.seqs.as_slice() {
        [one] => format!("{} × {}", one.value, one.count),
        many => format!(
            "({})",
            many.iter()
                .map(|r| if r.count == 1 { r.value.to_string() } else { format!("{} × {}", r.value, r.count) })
                .collect::<Vec<_>>()
                .join(" + ")
        ),
    };
    let bits = mul(
        &[2, m.layers as u128, m.kv_heads as u128, m.head_dim as u128, inputs.kv_dtype.bits() as u128, total_tokens],
        "2 × L × H_kv × d_head × b × ΣTᵢ",
    )?;
    let text = format!(
        "2 × {} × {} × {} × {} × {seq_text} = {} bytes",
        m.layers,
        m.kv_heads,
        m.head_dim,
        inputs.kv_dtype.bytes_text(),
        bytes_text(bits).replace(',', "")
    );
    Ok((text, bits))
}

/// Computes every figure. Errors are overflow or an impossible TP split.
pub fn compute(inputs: &Inputs) -> Result<Report, KvError> {
    let groups = inputs.model.groups();
    let total_tokens = inputs.seqs.iter().try_fold(0u128, |acc, r| add(acc, mul(&[r.value as u128, r.count as u128], "ΣTᵢ")?, "ΣTᵢ"))?;
    let (formula, formula_bits) = plain_formula(inputs, total_tokens)?;
    let sequences = total_count(&inputs.seqs);
    let dtype_bits = inputs.kv_dtype.bits() as u128;
    let per_token_bits = bits_per_token(groups.iter(), dtype_bits, None);

    let logical = breakdown(&groups, inputs, Counting::Logical)?;
    let (gpu_groups, placements) = per_gpu_groups(&groups, inputs.tp.max(1))?;
    // The page is decided on one GPU's share, as vLLM decides it.
    let (paged, hybrid_page) = paging(&gpu_groups, inputs)?;
    let block = match paged {
        Counting::Paged { block, .. } => block,
        Counting::Logical => 1,
    };
    let allocated = breakdown(&groups, inputs, paged)?;

    let per_gpu_logical = breakdown(&gpu_groups, inputs, Counting::Logical)?;
    let per_gpu_allocated = breakdown(&gpu_groups, inputs, paged)?;
    let tp = inputs.tp.max(1) as u128;
    let all_gpus = mul(&[per_gpu_allocated.total_bits, tp], "all-GPU allocation")?;
    let tensor_parallel = TensorParallel {
        degree: inputs.tp.max(1),
        placements,
        per_gpu_logical_bytes: per_gpu_logical.total_bytes(),
        per_gpu_allocated_bytes: per_gpu_allocated.total_bytes(),
        all_gpus_allocated_bytes: units::bits_to_bytes(all_gpus),
        replication_bytes: units::bits_to_bytes(all_gpus.saturating_sub(allocated.total_bits)),
    };

    // One token held in every layer of one GPU, with scales and page
    // rounding ignored: the marginal cost the budget is divided by.
    let gpu_token_bits = bits_per_token(gpu_groups.iter(), dtype_bits, inputs.scale);

    let budget = match inputs.budget {
        Some(b) => Some(invert_budget(b, tp, per_gpu_allocated.total_bits, gpu_token_bits, sequences)?),
        None => None,
    };
    let cross_check = inputs.vllm.as_ref().map(|v| cross_check(v, budget.as_ref(), gpu_token_bits));

    let mut notes = Vec::new();
    let per_sequence_state_bits: u128 = gpu_groups
        .iter()
        .filter_map(|g| match &g.kind {
            LayerKind::Recurrent { state, .. } => Some(g.count as u128 * state_bits(state, inputs)),
            _ => None,
        })
        .sum();
    if per_sequence_state_bits > 0 {
        notes.push(format!(
            "Each sequence holds {} bytes of recurrent state on one GPU however long it is (before any page padding); the per-token figures and the retained-token capacity count attention K/V only, the sequence capacity counts both.",
            bytes_text(per_sequence_state_bits)
        ));
        if inputs.vllm.is_some() {
            notes.push("For a hybrid model the cross-check's per-token comparison covers attention K/V only: vLLM's pages also hold the recurrent states, so its token count is not a per-token figure of ours.".into());
        }
    }
    if groups.iter().any(|g| matches!(g.kind, LayerKind::Sliding { .. })) {
        notes.push("Sliding-window layers are allocated as ⌈min(Tᵢ, window) / block⌉ blocks; engines may keep one extra block while the window crosses a block boundary.".into());
        if inputs.prefix.is_some() {
            notes.push("Prefix sharing is counted for full and MLA layers only: a sliding window moves past the prefix.".into());
        }
    }
    if budget.is_some() && inputs.tp > 1 {
        notes.push("Weights are assumed to shard evenly across the TP ranks.".into());
    }

    let same_length = inputs.seqs.windows(2).all(|w| w[0].value == w[1].value);
    Ok(Report {
        formula,
        formula_bytes: units::bits_to_bytes(formula_bits),
        formula_is_payload: inputs.model.is_plain() && inputs.scale.is_none() && logical.total_bits == formula_bits,
        sequences,
        total_tokens,
        per_token_bytes: units::bits_to_bytes(per_token_bits),
        per_token_bits,
        per_gpu_token_bits: bits_per_token(gpu_groups.iter(), dtype_bits, None),
        per_sequence_text: units::binary_from_bits(logical.total_bits, sequences),
        per_sequence_is_mean: !same_length || inputs.prefix.is_some_and(|p| p.sequences > 1),
        logical_bytes: logical.total_bytes(),
        rounding_bytes: allocated.total_bytes().saturating_sub(logical.total_bytes()),
        allocated_bytes: allocated.total_bytes(),
        logical,
        block,
        hybrid_page,
        allocated,
        tensor_parallel,
        budget,
        cross_check,
        notes,
    })
}

/// Bits one sequence of `tokens` holds on one GPU as an engine allocates
/// it: every layer group's retained tokens rounded up to whole blocks,
/// quantization scales, the GPU's share under tensor parallelism; nothing
/// shared with other sequences. What a length distribution is sized by.
pub fn sequence_allocated_bits(inputs: &Inputs, tokens: u64) -> Result<u128, KvError> {
    let (gpu_groups, _) = per_gpu_groups(&inputs.model.groups(), inputs.tp.max(1))?;
    let one = Inputs { seqs: vec![Run { value: tokens, count: 1 }], prefix: None, budget: None, vllm: None, ..inputs.clone() };
    let (paged, _) = paging(&gpu_groups, inputs)?;
    Ok(breakdown(&gpu_groups, &one, paged)?.total_bits)
}

fn invert_budget(b: GpuBudget, tp: u128, mix_bits: u128, token_bits: u128, sequences: u128) -> Result<BudgetReport, KvError> {
    let usable = mul(&[b.gpu_bytes, b.reserve.denominator() - b.reserve.numerator.min(b.reserve.denominator())], "GPU budget")?
        / b.reserve.denominator();
    let reserve_bytes = b.gpu_bytes - usable;
    let weight_bytes_total = match b.weight_bytes {
        Some(bytes) => bytes,
        None => units::bits_to_bytes(mul(&[b.params as u128, b.weight_dtype.bits() as u128], "weight memory")?),
    };
    let weight_bytes_per_gpu = weight_bytes_total.div_ceil(tp);
    let weights_fit = weight_bytes_per_gpu <= usable;
    let kv_budget = usable.saturating_sub(weight_bytes_per_gpu);
    let kv_budget_bits = mul(&[kv_budget, 8], "KV budget")?;
    let max_retained_tokens = kv_budget_bits.checked_div(token_bits).unwrap_or(0);
    // Sequences drawn from the same length mix: budget ÷ mean allocated size.
    let max_sequences = mul(&[kv_budget_bits, sequences], "sequence capacity")?.checked_div(mix_bits).unwrap_or(0);
    let mix_bytes = units::bits_to_bytes(mix_bits);
    Ok(BudgetReport {
        gpu_bytes: b.gpu_bytes,
        reserve_bytes,
        weight_bytes_total,
        weight_bytes_per_gpu,
        kv_budget_bytes_per_gpu: kv_budget,
        weights_fit,
        max_retained_tokens,
        max_sequences,
        current_mix_fits: weights_fit && mix_bytes <= kv_budget,
        headroom_bytes: kv_budget as i128 - mix_bytes as i128,
    })
}

fn cross_check(v: &VllmObservation, budget: Option<&BudgetReport>, token_bits: u128) -> CrossCheck {
    let (engine_tokens, tokens_source) = v.tokens();
    let (kv_memory_bytes, kv_memory_source) = match (v.kv_memory_bytes, budget) {
        (Some(m), _) => (m, "the log's “Available KV cache memory”".to_string()),
        (None, Some(b)) => (b.kv_budget_bytes_per_gpu, "this page's GPU budget (the log gave no memory line)".to_string()),
        (None, None) => (0, "unknown: paste the “Available KV cache memory” line or fill in the GPU budget".to_string()),
    };
    let computed = units::bits_to_bytes(token_bits);
    // implied − computed = (memory − computed × tokens) / tokens, exactly.
    let (implied_text, difference_text) = match (engine_tokens, kv_memory_bytes, computed.checked_mul(engine_tokens)) {
        (0, _, _) | (_, 0, _) | (_, _, None) => ("—".to_string(), "—".to_string()),
        (tokens, memory, Some(expected)) => {
            let (sign, gap) = if memory >= expected { ("+", memory - expected) } else { ("−", expected - memory) };
            let percent = match gap.checked_mul(100) {
                Some(g) if expected > 0 => {
                    format!(" ({sign}{} %)", units::decimal_ratio(g, expected))
                }
                _ => String::new(),
            };
            (
                units::decimal_ratio(memory, tokens),
                format!("{sign}{} bytes per token{percent}, engine minus computed", units::decimal_ratio(gap, tokens)),
            )
        }
    };
    CrossCheck {
        engine_tokens,
        tokens_source,
        kv_memory_bytes,
        kv_memory_source,
        implied_bytes_per_token: implied_text,
        computed_bytes_per_token: computed,
        difference_text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_example_exactly() {
        let r = compute(&Inputs::seed()).unwrap();
        assert_eq!(r.formula, "2 × 32 × 8 × 128 × 2 × 8192 × 4 = 4294967296 bytes");
        assert_eq!(r.logical_bytes, 4_294_967_296);
        assert_eq!(units::binary(r.logical_bytes), "4.00 GiB");
        assert_eq!(units::binary(r.per_token_bytes), "128.00 KiB");
        assert_eq!(r.per_sequence_text, "1.00 GiB");
        assert!(r.formula_is_payload);
        // 8192 is a multiple of 16: no rounding.
        assert_eq!(r.allocated_bytes, r.logical_bytes);
    }

    #[test]
    fn int4_is_exact_in_bits() {
        let mut i = Inputs::seed();
        i.kv_dtype = Dtype::Int4;
        let r = compute(&i).unwrap();
        assert_eq!(r.logical_bytes, 1 << 30);
        assert!(r.formula.contains("× 0.5 ×"));
    }

    #[test]
    fn paged_rounding_and_prefix() {
        let mut i = Inputs::seed();
        i.seqs = vec![Run { value: 100, count: 3 }];
        i.prefix = Some(PrefixSharing { tokens: 40, sequences: 3 });
        let r = compute(&i).unwrap();
        let per_token = 2 * 32 * 8 * 128 * 2u128;
        assert_eq!(r.logical_bytes, per_token * (300 - 2 * 40));
        // Pages: 112 tokens per sequence; 32 prefix tokens (2 whole blocks) shared.
        assert_eq!(r.allocated_bytes, per_token * (3 * 112 - 2 * 32));
    }

    #[test]
    fn tensor_parallel_shards_or_replicates() {
        let mut i = Inputs::seed();
        i.tp = 4;
        let r = compute(&i).unwrap();
        assert_eq!(r.tensor_parallel.per_gpu_logical_bytes, 1 << 30);
        assert_eq!(r.tensor_parallel.placements[0].mode, "sharded");
        i.tp = 16;
        let r = compute(&i).unwrap();
        assert_eq!(r.tensor_parallel.placements[0].mode, "replicated");
        assert_eq!(r.tensor_parallel.per_gpu_logical_bytes, (4u128 << 30) / 8);
        assert_eq!(r.tensor_parallel.replication_bytes, 4u128 << 30);
        i.tp = 3;
        let err = compute(&i).unwrap_err();
        assert!(err.to_string().contains("tp"), "{err}");
    }

    #[test]
    fn budget_inversion() {
        let mut i = Inputs::seed();
        i.budget = Some(GpuBudget {
            gpu_bytes: 80 << 30,
            reserve: Decimal { numerator: 1, scale: 1 },
            params: 8_000_000_000,
            weight_dtype: Dtype::Bf16,
            weight_bytes: None,
        });
        let r = compute(&i).unwrap();
        let b = r.budget.unwrap();
        assert_eq!(b.weight_bytes_total, 16_000_000_000);
        let usable = (80u128 << 30) * 9 / 10;
        assert_eq!(b.kv_budget_bytes_per_gpu, usable - 16_000_000_000);
        assert_eq!(b.max_retained_tokens, b.kv_budget_bytes_per_gpu / 131_072);
        assert_eq!(b.max_sequences, b.kv_budget_bytes_per_gpu / (1 << 30));
        assert!(b.current_mix_fits);
    }

    #[test]
    fn cross_check_is_exact() {
        let mut i = Inputs::seed();
        // 1 GiB of KV memory for 8,000 tokens: 134,217.728 bytes per token
        // against 131,072 computed, +3,145.728 (+2.40 %).
        i.vllm = Some(crate::vllm::parse("Available KV cache memory: 1 GiB\nGPU KV cache size: 8,000 tokens", 16).unwrap());
        let c = compute(&i).unwrap().cross_check.unwrap();
        assert_eq!(c.implied_bytes_per_token, "134,217.73");
        assert_eq!(c.difference_text, "+3,145.73 bytes per token (+2.40 %), engine minus computed");
    }

    fn hybrid(preset: &str, seqs: &str, tp: &str) -> Report {
        let mut form = crate::Form::default();
        form.apply(&crate::presets::find(preset).unwrap().patch());
        form.set("seqs", seqs);
        form.set("tp", tp);
        compute(&form.validate().unwrap()).unwrap()
    }

    /// Qwen3-Next-80B-A3B, four sequences of 8,192 tokens in bf16. A
    /// delta-rule layer's state: 3 × 8,192 × 2 + 32 × 128 × 128 × 2 =
    /// 1,097,728 bytes, 36 layers × 4 sequences; the 12 attention layers
    /// keep 2 × 2 × 256 × 2 = 2,048 bytes a token. vLLM's block: 16 ×
    /// ⌈1,097,728 ÷ 32,768⌉ = 544 tokens (its start-up line for this model),
    /// each state padded to 544 × 2,048 = 1,114,112 bytes.
    #[test]
    fn a_hybrid_model_keeps_a_constant_state_and_vllm_pages_it() {
        let r = hybrid("qwen3-next-80b-a3b", "8192x4", "1");
        let state = 1_097_728u128 * 36 * 4;
        let attention = 2_048u128 * 12 * 8192 * 4;
        assert_eq!(r.logical_bytes, state + attention);
        assert_eq!(r.per_token_bytes, 2_048 * 12, "the state does not grow with tokens");
        let page = r.hybrid_page.as_ref().unwrap();
        assert_eq!((page.block, page.aligned_block, page.requested_block), (544, 544, 16));
        assert_eq!(page.page_bits / 8, 1_114_112);
        assert!(page.explanation().contains("+1.49 %"), "{}", page.explanation());
        // 8,192 tokens round up to 16 blocks of 544.
        assert_eq!(r.allocated_bytes, 1_114_112 * 36 * 4 + 2_048 * 12 * 16 * 544 * 4);
        assert!(!r.formula_is_payload);
        // A longer sequence costs only attention bytes more.
        let longer = hybrid("qwen3-next-80b-a3b", "16384x4", "1");
        assert_eq!(longer.logical_bytes - r.logical_bytes, 2_048 * 12 * 8192 * 4);
        // Without attention layers nothing is padded: a pure recurrent stack.
        let mut form = crate::Form::default();
        form.apply(&crate::presets::find("qwen3-next-80b-a3b").unwrap().patch());
        form.set("layers", "4");
        form.set("layer_types", "linearx4");
        let pure = compute(&form.validate().unwrap()).unwrap();
        assert!(pure.hybrid_page.is_none());
        assert_eq!(pure.allocated_bytes, 4 * 1_097_728 * 4);
    }

    /// The two start-up lines vLLM prints for hybrid models, reproduced from
    /// the shapes alone: Qwen3-Next (above) logs "Setting attention block
    /// size to 544 tokens" and "Padding mamba page size by 1.49%"; Qwen3.5-0.8B
    /// (16 key and 16 value heads of 128, 2 KV heads of 256, its SSM state in
    /// fp32 as its config's `mamba_ssm_dtype` says) logs 544 and 2.64 %. The
    /// second: conv 3 × (2 × 16 × 128 + 16 × 128) × 2 + SSM 16 × 128 × 128 × 4
    /// = 1,085,440 bytes; 16 × ⌈1,085,440 ÷ 32,768⌉ = 544; 544 × 2,048 =
    /// 1,114,112, +2.64 %.
    #[test]
    fn vllm_start_up_lines_for_hybrid_models_are_reproduced() {
        let (form, _) = crate::Form::from_query(
            "layers=4&kv_heads=2&head_dim=256&layer_types=linearx3,full&conv_state=3x6144&ssm_state=16x128x128&ssm_dtype=fp32&seqs=1",
        );
        let page = compute(&form.validate().unwrap()).unwrap().hybrid_page.unwrap();
        assert_eq!(page.state_bits / 8, 1_085_440);
        assert_eq!(page.block, 544);
        assert!(page.explanation().contains("(+2.64 %)"), "{}", page.explanation());
        let qwen3_next = hybrid("qwen3-next-80b-a3b", "1", "1").hybrid_page.unwrap();
        assert_eq!(qwen3_next.block, 544);
        assert!(qwen3_next.explanation().contains("(+1.49 %)"), "{}", qwen3_next.explanation());
    }

    #[test]
    fn tensor_parallel_splits_the_state_or_names_tp() {
        let one = hybrid("jamba-v0.1", "1000", "1");
        let two = hybrid("jamba-v0.1", "1000", "2");
        assert_eq!(two.tensor_parallel.per_gpu_logical_bytes * 2, one.logical_bytes);
        // Jamba: 2 × 8 × 128 × 2 = 4,096 bytes a token and layer, a Mamba-1
        // state of 3 × 8,192 × 2 + 8,192 × 16 × 2 = 311,296 bytes: 16 ×
        // ⌈311,296 ÷ 65,536⌉ = 80 tokens, on one GPU as on two.
        assert_eq!(one.block, 80);
        assert_eq!(two.block, 80);
        let mut form = crate::Form::default();
        form.apply(&crate::presets::find("qwen3-next-80b-a3b").unwrap().patch());
        form.set("tp", "64");
        let err = compute(&form.validate().unwrap()).unwrap_err().to_string();
        assert!(err.contains("tp") && err.contains("32 SSM heads"), "{err}");
    }

    #[test]
    fn overflow_is_an_error() {
        let mut i = Inputs::seed();
        i.model = ModelShape::uniform(u32::MAX, u32::MAX, u32::MAX);
        i.seqs = vec![Run { value: u64::MAX, count: u64::MAX }];
        assert!(matches!(compute(&i), Err(KvError::Overflow { .. })));
    }
}
