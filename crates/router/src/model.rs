//! The decoder backbone: one forward pass from token ids to the final
//! hidden states (after the output norm), for every architecture described
//! in [`crate::arch`].
//!
//! A router needs no LM head, so `output.weight` is never loaded. The pass
//! keeps its activations in plain `[tokens × width]` f32 buffers and writes
//! each layer's keys and values straight into a new [`Segment`], in the
//! layout attention reads; a call continues from any [`KvState`] (a cached
//! prefix) without copying what it holds. candle is used where it is the
//! better tool: parsing the GGUF, the quantized embedding rows, dequantizing
//! at load and the quantized matmul; natively the f32 projections call the
//! GEMM candle itself uses (`kernels::gemm_dense`) on these buffers.

use std::sync::Arc;

use web_time::Instant;

use candle_core::quantized::QMatMul;
use candle_core::{Device, Module, Tensor};

use crate::arch::{Activation, Arch, EmbeddingScale, LayerKind, RopeStyle};
use crate::attention;
use crate::dequant;
use crate::elapsed_ms;
use crate::error::{Result, RouterError};
use crate::gguf::{Checkpoint, Hparams};
use crate::integer::{Activations as IntActivations, IntPacked, ValueWidth};
use crate::kernels::Packed;
use crate::lm_head::{HeadArithmetic, LmHead};
use crate::parallel;
use crate::segment::{KvLayout, KvPiece, KvState, PagedKv, Segment, SegmentView};

pub use crate::decision::Precision;

impl Precision {
    /// What computes with the weights, for the precision line of every report:
    /// the format, the activations' type and the kernel this build runs.
    pub fn label(self, weight_type: &str) -> String {
        match self {
            Precision::Quantized => format!("{weight_type} weights, quantized matmul, f32 activations"),
            Precision::DequantizedF32 => {
                format!("{weight_type} weights dequantized to f32 at load, f32 compute{}", crate::kernels::KERNEL_NOTE)
            }
            Precision::IntegerQ8 => format!(
                "{weight_type} weights repacked at load × activations quantized to 8 bits per 32 values, integer dot ({})",
                crate::integer::kernel_name()
            ),
        }
    }
}

/// A projection, with its optional bias. In the browser, f32 weights are
/// repacked at load for `kernels`' SIMD128 micro-kernel, which beats
/// candle's generic GEMM there; natively candle's GEMM (the `gemm` crate,
/// AVX2/AVX-512, multi-threaded) is the faster one on the machines
/// measured, so it runs, called directly on the activation buffers.
struct Linear {
    weight: Weights,
    bias: Option<Vec<f32>>,
}

pub(crate) enum Weights {
    /// candle's quantized matmul on the stored blocks (`Precision::Quantized`).
    Quantized(QMatMul),
    /// f32 `[n × k]`, natively: `kernels::gemm_dense` (candle's own GEMM,
    /// called on our buffers).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    Dense { weight: Vec<f32>, n: usize, k: usize },
    /// f32 repacked for the SIMD128 micro-kernel, in the browser.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    Packed(Packed),
    /// The stored blocks as bytes and scales for the integer kernels.
    Integer(IntPacked),
}

impl Linear {
    fn load(ck: &Checkpoint, name: &str, rows: usize, cols: usize, precision: Precision) -> Result<Linear> {
        Ok(Linear { weight: Weights::load(ck, &format!("{name}.weight"), rows, cols, precision)?, bias: None })
    }

    fn with_bias(mut self, ck: &Checkpoint, name: &str, rows: usize) -> Result<Linear> {
        self.bias = Some(vector(ck, &format!("{name}.bias"), rows)?);
        Ok(self)
    }

    /// `input` is `[t × in]`; writes `[t × out]` into `out`, reusing its
    /// allocation.
    fn forward_into(&self, input: &mut Input<'_>, out: &mut Vec<f32>) -> Result<()> {
        self.weight.forward_into(input, out)?;
        if let Some(bias) = &self.bias {
            out.chunks_exact_mut(bias.len()).for_each(|row| row.iter_mut().zip(bias).for_each(|(y, b)| *y += b));
        }
        Ok(())
    }
}

/// One projection input, `[t × width]` f32 rows, with its 8-bit
/// quantization for the integer weights: made by the first integer
/// projection that reads the input and reused by the others (q, k and v
/// read one input, gate and up another), per weight group size, instead
/// of three and two passes over the same rows. The quantized buffers
/// belong to the caller's [`Scratch`], refilled in place.
struct Input<'a> {
    x: &'a [f32],
    t: usize,
    quantized: &'a mut QuantizedInput,
}

/// Quantized activations for weight groups of 32 and of 16 (Q6_K), and
/// which of them hold the current input.
#[derive(Default)]
struct QuantizedInput {
    by_group: [IntActivations; 2],
    current: [bool; 2],
}

impl<'a> Input<'a> {
    /// `x` as the input of the next projections: whatever `quantized` held
    /// belongs to an earlier input.
    fn new(x: &'a [f32], t: usize, quantized: &'a mut QuantizedInput) -> Input<'a> {
        quantized.current = [false; 2];
        Input { x, t, quantized }
    }

    /// The input quantized with sums per `group` values (32 or 16).
    fn quantized(&mut self, group: usize) -> &IntActivations {
        let slot = usize::from(group != crate::integer::BLOCK);
        let (t, x) = (self.t, self.x);
        let QuantizedInput { by_group, current } = &mut *self.quantized;
        if !current[slot] {
            by_group[slot].quantize_into(x, t, x.len() / t.max(1), group);
            current[slot] = true;
        }
        &by_group[slot]
    }
}

impl Weights {
    /// Bytes this weight holds in memory, what a product with it reads
    /// (a decode step's single row reads every one of them).
    pub(crate) fn bytes(&self) -> u64 {
        match self {
            Weights::Quantized(QMatMul::QTensor(q)) => q.storage_size_in_bytes() as u64,
            Weights::Quantized(QMatMul::Tensor(t) | QMatMul::TensorF16(t)) => (t.elem_count() * t.dtype().size_in_bytes()) as u64,
            Weights::Dense { weight, .. } => std::mem::size_of_val(weight.as_slice()) as u64,
            Weights::Packed(p) => p.bytes(),
            Weights::Integer(w) => w.bytes(),
        }
    }

    fn load(ck: &Checkpoint, name: &str, rows: usize, cols: usize, precision: Precision) -> Result<Weights> {
        // candle reports GGUF shapes in PyTorch order: [out (rows), in (cols)].
        ck.expect_shape(name, &[rows, cols])?;
        let q = ck.tensor(name)?;
        let integer_format = dequant::affine_format(q.dtype()).filter(|_| cols.is_multiple_of(crate::integer::BLOCK));
        if let (Precision::IntegerQ8, Some(dequant::AffineFormat { group, bits })) = (precision, integer_format) {
            // The stored blocks regrouped, row by row on every thread; a
            // format `affine_format` does not take falls through to f32.
            let (data, dtype) = (q.data()?, q.dtype());
            let row_bytes = data.len() / rows;
            // 4-bit formats two values a byte: what a decode step reads.
            let width = ValueWidth::for_bits(bits);
            return Ok(Weights::Integer(IntPacked::from_row_fn(rows, cols, group, width, |r, q, scales, mins| {
                dequant::affine_row(dtype, &data[r * row_bytes..(r + 1) * row_bytes], q, scales, mins);
            })));
        }
        Ok(match precision {
            Precision::DequantizedF32 | Precision::IntegerQ8
                if cfg!(target_arch = "wasm32") && dequant::block_shape(q.dtype()).is_some() =>
            {
                // Decode each row straight into the kernel's panels, on
                // every thread: no intermediate f32 tensor or copies.
                let data = q.data()?;
                let row_bytes = data.len() / rows;
                Weights::Packed(Packed::from_row_fn(rows, cols, |r, out| {
                    dequant::row(q.dtype(), &data[r * row_bytes..(r + 1) * row_bytes], out);
                }))
            }
            Precision::DequantizedF32 | Precision::IntegerQ8 => Weights::from_f32(q.dequantize(&Device::Cpu)?)?,
            Precision::Quantized => Weights::Quantized(QMatMul::from_qtensor(q)?),
        })
    }

    /// An f32 weight `[out × in]`, in the layout this target computes fastest with.
    pub(crate) fn from_f32(weight: Tensor) -> Result<Weights> {
        #[cfg(target_arch = "wasm32")]
        {
            let (rows, cols) = weight.dims2()?;
            Ok(Weights::Packed(Packed::from_rows(&weight.flatten_all()?.to_vec1::<f32>()?, rows, cols)))
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let (n, k) = weight.dims2()?;
            Ok(Weights::Dense { weight: weight.flatten_all()?.to_vec1::<f32>()?, n, k })
        }
    }

    /// A product on its own (the probes): the input quantized afresh.
    pub(crate) fn forward(&self, x: &[f32], t: usize) -> Result<Vec<f32>> {
        let (mut quantized, mut out) = (QuantizedInput::default(), Vec::new());
        self.forward_into(&mut Input::new(x, t, &mut quantized), &mut out)?;
        Ok(out)
    }

    fn forward_into(&self, input: &mut Input<'_>, out: &mut Vec<f32>) -> Result<()> {
        let (x, t) = (input.x, input.t);
        match self {
            Weights::Quantized(m) => {
                let input = Tensor::from_slice(x, (t, x.len() / t.max(1)), &Device::Cpu)?;
                *out = m.forward(&input)?.flatten_all()?.to_vec1::<f32>()?;
            }
            #[cfg(not(target_arch = "wasm32"))]
            Weights::Dense { weight, n, k } => crate::kernels::gemm_dense_into(x, t, *k, weight, *n, out),
            #[cfg(target_arch = "wasm32")]
            Weights::Dense { .. } => unreachable!("dense weights are native only"),
            Weights::Packed(p) => p.matmul_strided_into(x, p.k, t, out),
            Weights::Integer(w) => w.matmul_quantized_into(input.quantized(w.group), out),
        }
        Ok(())
    }
}

/// A 1-D tensor (a norm's weight, a bias) as f32 values.
fn vector(ck: &Checkpoint, name: &str, size: usize) -> Result<Vec<f32>> {
    ck.expect_shape(name, &[size])?;
    Ok(ck.tensor(name)?.dequantize(&Device::Cpu)?.to_vec1::<f32>()?)
}

/// One layer's weights. Optional parts are present exactly when the
/// architecture's description asks for them.
struct Layer {
    kind: LayerKind,
    /// Index into `Backbone::rope` of this layer's RoPE base.
    rope: usize,
    attn_norm: Vec<f32>,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    /// Per-head RMSNorm of queries and keys (`qk_norm`).
    qk_norm: Option<(Vec<f32>, Vec<f32>)>,
    /// RMSNorm of the attention and feed-forward outputs (`post_norms`).
    post_norms: Option<(Vec<f32>, Vec<f32>)>,
    ffn_norm: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// cos and sin of every position's angles for one RoPE base,
/// `[positions × head_dim / 2]`.
struct RopeTable {
    base: f32,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    fn new(base: f32, head_dim: usize, positions: usize) -> RopeTable {
        let half = head_dim / 2;
        let inv: Vec<f32> = (0..half).map(|i| 1.0 / base.powf(2.0 * i as f32 / head_dim as f32)).collect();
        let angles = || (0..positions).flat_map(|p| inv.iter().map(move |f| p as f32 * f));
        RopeTable { base, cos: angles().map(f32::cos).collect(), sin: angles().map(f32::sin).collect() }
    }

    /// Rotates every head of `x` (`[t × heads·d]`; row `i` at position `start + i`).
    fn apply(&self, x: &mut [f32], width: usize, head_dim: usize, start: usize, style: RopeStyle) {
        let half = head_dim / 2;
        // Pair j is (j·step, j·step + partner): (2j, 2j + 1) or (j, j + d/2).
        let (step, partner) = match style {
            RopeStyle::Interleaved => (2, 1),
            RopeStyle::HalfSplit => (1, half),
        };
        rows_mut(x, width, |first, run| {
            for (i, row) in run.chunks_exact_mut(width).enumerate() {
                let at = (start + first + i) * half;
                let (cos, sin) = (&self.cos[at..at + half], &self.sin[at..at + half]);
                for head in row.chunks_exact_mut(head_dim) {
                    for j in 0..half {
                        let (a, b) = (j * step, j * step + partner);
                        let (x0, x1) = (head[a], head[b]);
                        head[a] = x0 * cos[j] - x1 * sin[j];
                        head[b] = x0 * sin[j] + x1 * cos[j];
                    }
                }
            }
        });
    }
}

/// `work(first_row, run)` over runs of `width`-wide rows of `out`, on the
/// pool's threads: the row-wise passes between projections (norms, RoPE,
/// activations, residual adds) would otherwise leave every other core idle.
fn rows_mut(out: &mut [f32], width: usize, work: impl Fn(usize, &mut [f32]) + Sync) {
    let rows = out.len() / width.max(1);
    parallel::for_each_rows_mut(out, width, parallel::rows_per_task(rows), work);
}

/// `1 / RMS(row)` with the norm's epsilon. The squares are summed in f64,
/// as ggml sums them, in 8 independent lanes: one running f64 sum is a
/// serial chain of additions the compiler may not reorder, about 4 cycles
/// a value (two norms a layer over every token: some 25 ms of a
/// 1,024-token prefill on 2 threads), while the lanes vectorise.
fn inverse_rms(row: &[f32], eps: f32) -> f32 {
    let mut lanes = [0f64; 8];
    let chunks = row.chunks_exact(8);
    let rest: f64 = chunks.remainder().iter().map(|&v| v as f64 * v as f64).sum();
    for chunk in chunks {
        lanes.iter_mut().zip(chunk).for_each(|(acc, &v)| *acc += v as f64 * v as f64);
    }
    let mean_square = (lanes.iter().sum::<f64>() + rest) / row.len() as f64;
    1.0 / ((mean_square as f32) + eps).sqrt()
}

/// RMSNorm of each `weight.len()`-wide row of `x`, into `out`.
fn rms_norm_into(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let width = weight.len();
    rows_mut(out, width, |first, run| {
        for (i, dst) in run.chunks_exact_mut(width).enumerate() {
            let row = &x[(first + i) * width..][..width];
            let inv = inverse_rms(row, eps);
            dst.iter_mut().zip(row).zip(weight).for_each(|((d, &v), &w)| *d = v * inv * w);
        }
    });
}

/// RMSNorm in place, per `weight.len()`-wide row (or per head).
fn rms_norm(x: &mut [f32], weight: &[f32], eps: f32) {
    let width = weight.len();
    rows_mut(x, width, |_, run| {
        for row in run.chunks_exact_mut(width) {
            let inv = inverse_rms(row, eps);
            row.iter_mut().zip(weight).for_each(|(v, &w)| *v = *v * inv * w);
        }
    });
}

/// `x += y`, row-wise on the pool.
fn add_rows(x: &mut [f32], y: &[f32], width: usize) {
    rows_mut(x, width, |first, run| run.iter_mut().zip(&y[first * width..]).for_each(|(x, y)| *x += y));
}

impl Activation {
    /// `gate ← activation(gate) × up`, element by element. The exponential
    /// is [`attention::exp`], a branch-free polynomial that vectorises,
    /// where libm's `expf` (and `tanhf`) are a call per value: at 1,024
    /// tokens that is 47 million calls a prefill, 2 % of its native
    /// profile. Its arguments here have either sign; it is exact to about
    /// 2 ulp on its clamped range [−87, 88], beyond which the activation
    /// is 0 or the identity (silu) to f32 precision anyway.
    fn gate_into(self, gate: &mut [f32], up: &[f32]) {
        match self {
            Activation::Silu => gate.iter_mut().zip(up).for_each(|(g, &u)| *g = *g / (1.0 + attention::exp(-*g)) * u),
            // 0.5·x·(1 + tanh z) = x / (1 + e^{−2z}): the same value,
            // without the cancellation of 1 + tanh z where tanh z nears −1.
            Activation::GeluTanh => {
                const SQRT_2_OVER_PI: f32 = 0.797_884_6;
                gate.iter_mut().zip(up).for_each(|(g, &u)| {
                    let x = *g;
                    *g = x / (1.0 + attention::exp(-2.0 * SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x))) * u;
                })
            }
        }
    }
}

/// A prefill's working buffers, kept from layer to layer: the projections'
/// outputs and the quantized inputs are megabytes each at long prompts,
/// and allocated afresh seven times a layer each was mapped, faulted in
/// page by page and unmapped again. Kept here, with the shared
/// quantization, the int8 projections of a 1,024-token prefill went from
/// 0.98–1.00 s to 0.80–0.82 s natively (`bench-decide --precision int8`,
/// two alternated runs of each build).
#[derive(Default)]
struct Scratch {
    quantized: QuantizedInput,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// The attention's and then the feed-forward's output projection.
    out: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
}

/// One sequence's part of a [`Backbone::forward`]: the tokens `ids` it
/// adds after the shared views it reads (`shared`: a cached prefix, read in
/// place) and the tokens already in its own pages (`own`, written to).
pub struct Span<'a> {
    pub shared: &'a KvState,
    pub own: &'a mut PagedKv,
    pub ids: &'a [u32],
}

impl Span<'_> {
    /// The position of the span's first new token.
    pub fn start(&self) -> usize {
        self.shared.tokens() + self.own.len()
    }
}

/// The weights' bytes in memory ([`Backbone::weight_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeightBytes {
    /// The layers' projection weights, as this precision holds them.
    pub projections: u64,
    /// The LM head's table (SmolLM2's and Gemma's: the Q8_0 embeddings).
    pub lm_head: u64,
}

impl WeightBytes {
    pub fn total(&self) -> u64 {
        self.projections + self.lm_head
    }
}

/// What a forward pass returns: the final hidden states (after the output
/// norm) of every row, `[rows × hidden]` in span order, each span's first
/// row, and where the time went.
pub struct Forward {
    pub hidden: Vec<f32>,
    pub offsets: Vec<usize>,
    pub projections_ms: f64,
    pub attention_ms: f64,
}

impl Forward {
    /// Span `span`'s last row: the state the next token is predicted from.
    pub fn last_row(&self, span: usize, tokens: usize, hidden: usize) -> &[f32] {
        &self.hidden[(self.offsets[span] + tokens - 1) * hidden..][..hidden]
    }
}

/// The loaded backbone.
pub struct Backbone {
    pub hparams: Hparams,
    pub precision: Precision,
    embeddings: candle_core::quantized::QTensor,
    layers: Vec<Layer>,
    output_norm: Vec<f32>,
    /// One table per distinct RoPE base among the layers.
    rope: Vec<RopeTable>,
    /// Positions the RoPE tables cover: the longest sequence a state may reach.
    positions: usize,
    /// Hidden states to logits, for generation.
    lm_head: LmHead,
    /// Layers applied at each depth whose hidden states a prefill keeps
    /// beside the final ones ([`feature_taps`]).
    taps: Vec<usize>,
}

/// The intermediate depths a prefill keeps: after a quarter, half and three
/// quarters of the layers (rounded to the nearest). Middle layers often
/// carry more of what a text is about than the last, which is shaped for
/// predicting the next token; a trained head's study chooses among them.
/// Fixed per layer count, so a segment's layout never depends on which
/// head is attached, and a cached prefix serves every head.
pub fn feature_taps(layers: usize) -> Vec<usize> {
    let mut taps: Vec<usize> = (1..4).map(|q| (layers * q + 2) / 4).filter(|&t| t > 0 && t < layers).collect();
    taps.dedup();
    taps
}

impl Backbone {
    /// How many of the layers' projections the integer kernels compute, and
    /// how many there are: under `IntegerQ8`, a format they do not take
    /// (Q8_0) stays f32, and the precision's label says so.
    pub fn integer_projections(&self) -> (usize, usize) {
        let projections = || self.layers.iter().flat_map(|l| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]);
        (projections().filter(|p| matches!(p.weight, Weights::Integer(_))).count(), projections().count())
    }

    /// Loads every tensor the architecture's description asks for, checking shapes.
    pub fn load(ck: &Checkpoint, precision: Precision) -> Result<Backbone> {
        let h = ck.hparams.clone();
        let arch: &Arch = h.architecture;
        let q_dim = h.heads * h.head_dim;
        let kv_dim = h.kv_heads * h.head_dim;
        if !h.head_dim.is_multiple_of(2) {
            return Err(RouterError::Metadata {
                file: ck.file.clone(),
                key: format!("{}.attention.key_length", arch.name),
                reason: format!("head dim {} is odd; RoPE needs pairs", h.head_dim),
            });
        }
        ck.expect_shape("token_embd.weight", &[h.vocab, h.hidden])?;
        let embeddings = ck.tensor("token_embd.weight")?;
        let positions = h.context_length.clamp(1, 32_768);
        let mut rope: Vec<RopeTable> = Vec::new();
        let mut layers = Vec::with_capacity(h.layers);
        for i in 0..h.layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let kind = arch.layer_kind(i, h.rope_theta, h.sliding_window);
            let rope_index = match rope.iter().position(|t| t.base == kind.rope_base) {
                Some(index) => index,
                None => {
                    rope.push(RopeTable::new(kind.rope_base, h.head_dim, positions));
                    rope.len() - 1
                }
            };
            let mut q = Linear::load(ck, &n("attn_q"), q_dim, h.hidden, precision)?;
            let mut k = Linear::load(ck, &n("attn_k"), kv_dim, h.hidden, precision)?;
            let mut v = Linear::load(ck, &n("attn_v"), kv_dim, h.hidden, precision)?;
            if arch.qkv_bias {
                q = q.with_bias(ck, &n("attn_q"), q_dim)?;
                k = k.with_bias(ck, &n("attn_k"), kv_dim)?;
                v = v.with_bias(ck, &n("attn_v"), kv_dim)?;
            }
            let norm = |s: &str, size: usize| vector(ck, &format!("{}.weight", n(s)), size);
            layers.push(Layer {
                kind,
                rope: rope_index,
                attn_norm: norm("attn_norm", h.hidden)?,
                q,
                k,
                v,
                o: Linear::load(ck, &n("attn_output"), h.hidden, q_dim, precision)?,
                qk_norm: if arch.qk_norm { Some((norm("attn_q_norm", h.head_dim)?, norm("attn_k_norm", h.head_dim)?)) } else { None },
                post_norms: if arch.post_norms {
                    Some((norm("post_attention_norm", h.hidden)?, norm("post_ffw_norm", h.hidden)?))
                } else {
                    None
                },
                ffn_norm: norm("ffn_norm", h.hidden)?,
                gate: Linear::load(ck, &n("ffn_gate"), h.ffn, h.hidden, precision)?,
                up: Linear::load(ck, &n("ffn_up"), h.ffn, h.hidden, precision)?,
                down: Linear::load(ck, &n("ffn_down"), h.hidden, h.ffn, precision)?,
            });
        }
        let output_norm = vector(ck, "output_norm.weight", h.hidden)?;
        // An untied head is `output.weight`; a tied one reads the embeddings.
        let tied = !ck.content.tensor_infos.contains_key("output.weight");
        let head_name = if tied { "token_embd.weight" } else { "output.weight" };
        let lm_head = match ck.content.tensor_infos.get(head_name).map(|info| info.ggml_dtype) {
            Some(dtype) if LmHead::in_place(dtype) && h.hidden.is_multiple_of(crate::integer::BLOCK) => {
                LmHead::Q8Blocks(if tied { None } else { Some(ck.tensor(head_name)?) })
            }
            _ => LmHead::Projection(Weights::load(ck, head_name, h.vocab, h.hidden, precision)?),
        };
        let taps = feature_taps(h.layers);
        Ok(Backbone { hparams: h, precision, embeddings, layers, output_norm, rope, positions, lm_head, taps })
    }

    /// The shape of one token's state in a prefill's segment: its K/V, its
    /// final hidden state and the taps' ([`Backbone::kv_layout`]
    /// `.without_taps()` for a generating sequence).
    pub fn kv_layout(&self) -> KvLayout {
        let h = &self.hparams;
        KvLayout { layers: h.layers, kv_heads: h.kv_heads, head_dim: h.head_dim, hidden: h.hidden, taps: self.taps.len() }
    }

    /// The depths a prefill keeps hidden states of besides the final one,
    /// as layers applied (ascending).
    pub fn taps(&self) -> &[usize] {
        &self.taps
    }

    /// The depth index [`crate::segment::Segment::at_depth`] reads for a
    /// feature map's `after_layers` (`None`, the final state, is 0); `None`
    /// when this backbone does not tap that depth.
    pub fn depth_of(&self, after_layers: Option<usize>) -> Option<usize> {
        match after_layers {
            None => Some(0),
            Some(layers) => self.taps.iter().position(|&t| t == layers).map(|k| k + 1),
        }
    }

    /// Prefills `ids` after the tokens `prefix` holds and returns their new
    /// segment: every layer's keys and values, and the final hidden states.
    /// `prefix` is read in place, never copied.
    pub fn prefill(&self, prefix: &KvState, ids: &[u32]) -> Result<Segment> {
        let mut own = PagedKv::single(self.kv_layout(), ids.len());
        let forward = self.forward(&mut [Span { shared: prefix, own: &mut own, ids }])?;
        let mut segment = own.into_segment();
        (segment.projections_ms, segment.attention_ms) = (forward.projections_ms, forward.attention_ms);
        Ok(segment)
    }

    /// One forward pass over several sequences at once, as a serving
    /// engine's iteration runs it: every span's new tokens go through the
    /// projections as rows of one product (a decode step of B sequences is
    /// B rows, a prefill chunk its length), while RoPE, the K/V writes and
    /// attention are per span, over that sequence's own state. Each span's
    /// keys and values are written into its `own` pages (allocated as
    /// needed) and its final hidden states returned, all rows in span
    /// order. A span of one token is a decode step; of many, a prefill or
    /// a prefill chunk; the arithmetic of a row does not depend on which
    /// other rows share its pass.
    pub fn forward(&self, spans: &mut [Span<'_>]) -> Result<Forward> {
        parallel::on_workers(|| self.forward_here(spans))
    }

    /// [`Backbone::forward`] on the calling thread.
    fn forward_here(&self, spans: &mut [Span<'_>]) -> Result<Forward> {
        let h = &self.hparams;
        let arch = h.architecture;
        let rows: usize = spans.iter().map(|s| s.ids.len()).sum();
        for span in spans.iter() {
            let t = span.ids.len();
            if t == 0 {
                return Err(RouterError::Request("nothing to encode: zero tokens".into()));
            }
            let end = span.start() + t;
            if end > self.positions {
                return Err(RouterError::Request(format!("{end} tokens exceed the backbone's RoPE table of {}", self.positions)));
            }
            if let Some(bad) = span.ids.iter().find(|&&id| id as usize >= h.vocab) {
                return Err(RouterError::Request(format!("token id {bad} is outside the vocabulary of {}", h.vocab)));
            }
        }
        if rows == 0 {
            return Err(RouterError::Request("nothing to encode: no sequences".into()));
        }
        let (d, q_dim, kv_dim) = (h.head_dim, h.heads * h.head_dim, h.kv_heads * h.head_dim);
        let eps = h.rms_eps as f32;
        let scale = 1.0 / (d as f32).sqrt();
        let width = self.kv_layout().value_width();
        for span in spans.iter_mut() {
            let end = span.own.len() + span.ids.len();
            span.own.grow_to(end);
        }
        // Each span's first row in the batch.
        let offsets: Vec<usize> = spans.iter().scan(0, |at, s| Some(std::mem::replace(at, *at + s.ids.len()))).collect();

        // The residual stream and one normed copy of it, reused by every layer.
        let ids: Vec<u32> = spans.iter().flat_map(|s| s.ids.iter().copied()).collect();
        let mut x = self.embeddings.embedding(&Tensor::new(ids.as_slice(), &Device::Cpu)?)?.flatten_all()?.to_vec1::<f32>()?;
        if arch.embedding_scale == EmbeddingScale::SqrtHidden {
            let factor = (h.hidden as f32).sqrt();
            x.iter_mut().for_each(|v| *v *= factor);
        }
        let mut normed = vec![0f32; rows * h.hidden];
        let mut attended = vec![0f32; rows * q_dim];
        let Scratch { quantized, q, k, v, out, gate, up } = &mut Scratch::default();
        let (mut projections_ms, mut attention_ms) = (0.0, 0.0);
        for (l, layer) in self.layers.iter().enumerate() {
            rms_norm_into(&x, &layer.attn_norm, eps, &mut normed);
            let started = Instant::now();
            let input = &mut Input::new(&normed, rows, quantized);
            layer.q.forward_into(input, q)?;
            layer.k.forward_into(input, k)?;
            layer.v.forward_into(input, v)?;
            projections_ms += elapsed_ms(started);
            if let Some((q_norm, k_norm)) = &layer.qk_norm {
                rms_norm(q, q_norm, eps);
                rms_norm(k, k_norm, eps);
            }
            let rope = &self.rope[layer.rope];
            for (span, &first) in spans.iter_mut().zip(&offsets) {
                let (t, start, written) = (span.ids.len(), span.start(), span.own.len());
                let span_rows = first..first + t;
                rope.apply(&mut q[span_rows.start * q_dim..span_rows.end * q_dim], q_dim, d, start, arch.rope);
                rope.apply(&mut k[span_rows.start * kv_dim..span_rows.end * kv_dim], kv_dim, d, start, arch.rope);

                // This layer's keys and values, per head, into the span's pages.
                for i in 0..t {
                    let (k_row, v_row) = (&k[(first + i) * kv_dim..][..kv_dim], &v[(first + i) * kv_dim..][..kv_dim]);
                    let (block, row) = span.own.slot(written + i);
                    let block = span.own.block_mut(block);
                    let head_rows = block.tokens();
                    let (keys, values) = block.layer_mut(l);
                    for g in 0..h.kv_heads {
                        keys[(g * head_rows + row) * d..][..d].copy_from_slice(&k_row[g * d..][..d]);
                        values[(g * head_rows + row) * width..][..d].copy_from_slice(&v_row[g * d..][..d]);
                    }
                }
            }
            // Attention, once every span's keys are in place: a span of
            // several tokens (a prefill or its chunk) on its own, the
            // spans of one token (a decode step's sequences) in one batch.
            let started = Instant::now();
            let pieces: Vec<Vec<KvPiece<'_>>> = spans
                .iter()
                .map(|span| {
                    let mut pieces: Vec<_> = span.shared.views().iter().map(|view| view.segment.piece(l, view.rows.clone())).collect();
                    pieces.extend(span.own.pieces(l, span.own.len() + span.ids.len()));
                    pieces
                })
                .collect();
            let mut single = Vec::new();
            for ((span, &first), pieces) in spans.iter().zip(&offsets).zip(&pieces) {
                let (t, start) = (span.ids.len(), span.start());
                let shape =
                    attention::Shape { heads: h.heads, kv_heads: h.kv_heads, tokens: t, head_dim: d, start, window: layer.kind.window };
                if t == 1 {
                    single.push(attention::SingleQuery { q: &q[first * q_dim..][..q_dim], pieces, shape, out_row: first });
                } else {
                    let rows = first * q_dim..(first + t) * q_dim;
                    attention::causal(&q[rows.clone()], pieces, shape, scale, &mut attended[rows]);
                }
            }
            attention::single_queries(&single, scale, &mut attended);
            attention_ms += elapsed_ms(started);

            let started = Instant::now();
            layer.o.forward_into(&mut Input::new(&attended, rows, quantized), out)?;
            projections_ms += elapsed_ms(started);
            if let Some((post_attention, _)) = &layer.post_norms {
                rms_norm(out, post_attention, eps);
            }
            add_rows(&mut x, out, h.hidden);

            rms_norm_into(&x, &layer.ffn_norm, eps, &mut normed);
            let started = Instant::now();
            let input = &mut Input::new(&normed, rows, quantized);
            layer.gate.forward_into(input, gate)?;
            layer.up.forward_into(input, up)?;
            projections_ms += elapsed_ms(started);
            let activation = arch.activation;
            rows_mut(gate, h.ffn, |first, run| activation.gate_into(run, &up[first * h.ffn..]));
            let started = Instant::now();
            layer.down.forward_into(&mut Input::new(gate, rows, quantized), out)?;
            projections_ms += elapsed_ms(started);
            if let Some((_, post_ffw)) = &layer.post_norms {
                rms_norm(out, post_ffw, eps);
            }
            add_rows(&mut x, out, h.hidden);
            if let Some(tap) = self.taps.iter().position(|&t| t == l + 1) {
                // `normed` is free until the next layer's norm: the tap
                // reads the residual stream through the output norm, as
                // the final state is read.
                if spans.iter().any(|s| s.own.layout().taps > tap) {
                    rms_norm_into(&x, &self.output_norm, eps, &mut normed);
                    for (span, &first) in spans.iter_mut().zip(&offsets) {
                        if span.own.layout().taps <= tap {
                            continue;
                        }
                        let written = span.own.len();
                        for i in 0..span.ids.len() {
                            let (block, row) = span.own.slot(written + i);
                            span.own.block_mut(block).tap_mut(tap, row).copy_from_slice(&normed[(first + i) * h.hidden..][..h.hidden]);
                        }
                    }
                }
            }
        }
        rms_norm_into(&x, &self.output_norm, eps, &mut normed);
        for (span, &first) in spans.iter_mut().zip(&offsets) {
            let written = span.own.len();
            for i in 0..span.ids.len() {
                let (block, row) = span.own.slot(written + i);
                span.own.block_mut(block).hidden_mut()[row * h.hidden..][..h.hidden]
                    .copy_from_slice(&normed[(first + i) * h.hidden..][..h.hidden]);
            }
            span.own.advance(span.ids.len());
        }
        Ok(Forward { hidden: normed, offsets, projections_ms, attention_ms })
    }

    /// The longest sequence (held and new tokens) a forward pass takes.
    pub fn max_positions(&self) -> usize {
        self.positions
    }

    /// Per layer, the keys a query may see when the layer has a sliding
    /// window (`None`: every earlier key): what a sequence handed to
    /// another instance must carry of each layer.
    pub fn layer_windows(&self) -> Vec<Option<usize>> {
        self.layers.iter().map(|layer| layer.kind.window).collect()
    }

    /// Logits `[m × vocab]` of final hidden states `hidden` (`[m × width]`),
    /// in this precision's arithmetic (see [`crate::lm_head`]).
    pub fn logits(&self, hidden: &[f32], m: usize) -> Result<Vec<f32>> {
        let (vocab, k) = (self.hparams.vocab, self.hparams.hidden);
        match &self.lm_head {
            LmHead::Q8Blocks(own) => {
                let table = own.as_ref().unwrap_or(&self.embeddings);
                let arithmetic = match self.precision {
                    Precision::DequantizedF32 => HeadArithmetic::F32,
                    Precision::IntegerQ8 | Precision::Quantized => HeadArithmetic::Int8,
                };
                Ok(LmHead::q8_logits(&table.data()?, vocab, k, hidden, m, arithmetic))
            }
            LmHead::Projection(weights) => weights.forward(hidden, m),
        }
    }

    /// The weights one decode step reads from memory, each once whatever
    /// the batch: every projection and the LM head's table. (Each
    /// sequence also reads its keys and values: the kv calculator's
    /// payload at its context.)
    pub fn weight_bytes(&self) -> WeightBytes {
        let linear = |l: &Linear| l.weight.bytes() + l.bias.as_ref().map_or(0, |b| 4 * b.len() as u64);
        let projections =
            self.layers.iter().map(|l| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down].into_iter().map(linear).sum::<u64>()).sum();
        let lm_head = match &self.lm_head {
            LmHead::Q8Blocks(own) => own.as_ref().unwrap_or(&self.embeddings).storage_size_in_bytes() as u64,
            LmHead::Projection(weights) => weights.bytes(),
        };
        WeightBytes { projections, lm_head }
    }

    /// Final hidden states of `ids` from scratch, `[ids.len() × hidden]`.
    pub fn hidden_states(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let segment = self.prefill(&KvState::default(), ids)?;
        Ok(segment.hidden(0..ids.len()).to_vec())
    }

    /// Mean of the final hidden states over the tokens, not normalised (as
    /// the llama.cpp reference fixtures record it).
    pub fn mean_hidden_state(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let hidden = self.hidden_states(ids)?;
        let mut sum = vec![0f64; self.hparams.hidden];
        for row in hidden.chunks_exact(self.hparams.hidden) {
            sum.iter_mut().zip(row).for_each(|(s, &x)| *s += x as f64);
        }
        Ok(sum.iter().map(|s| (s / ids.len() as f64) as f32).collect())
    }

    /// Mean of the final hidden states over the tokens after the first
    /// `skip` (a BOS, whose state is the same for every text), L2-normalised:
    /// the vector a router compares. `[hidden]`.
    pub fn embed(&self, ids: &[u32], skip: usize) -> Result<Vec<f32>> {
        let mut state = KvState::default();
        state.push(SegmentView::whole(Arc::new(self.prefill(&KvState::default(), ids)?)));
        Ok(state.mean_embedding(self.hparams.hidden, skip))
    }
}

#[cfg(test)]
mod tests {
    use super::Activation;

    /// The vectorised activations against their definitions in f64, over
    /// arguments past both ends of the polynomial exponential's clamped
    /// range.
    #[test]
    fn activations_match_their_definitions() {
        let xs: Vec<f32> = (-4000..=4000).map(|i| i as f32 * 0.025).collect();
        let up: Vec<f32> = xs.iter().map(|x| 1.0 + x.abs() * 0.01).collect();
        let silu = |x: f64| x / (1.0 + (-x).exp());
        // 0.5·x·(1 + tanh z), as x / (1 + e^{−2z}): in f64 too, 1 + tanh z
        // cancels to 0 in the negative tail.
        let gelu = |x: f64| x / (1.0 + (-2.0 * (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x * x * x)).exp());
        for (activation, definition) in [(Activation::Silu, &silu as &dyn Fn(f64) -> f64), (Activation::GeluTanh, &gelu)] {
            let mut gate = xs.clone();
            activation.gate_into(&mut gate, &up);
            for ((&x, &u), &ours) in xs.iter().zip(&up).zip(&gate) {
                let want = definition(x as f64) * u as f64;
                // Relative 1e-5: the exponential's argument rounded to f32
                // (6e-8 relative) becomes an error of |argument| × 6e-8 in
                // the result, up to 5e-6 at the clamp's 88, as with libm in
                // f32. Far in the tail, where the value underflows, 1e-30.
                assert!((ours as f64 - want).abs() <= 1e-5 * want.abs() + 1e-30, "{activation:?}({x}): {ours} against {want}");
            }
        }
    }
}
