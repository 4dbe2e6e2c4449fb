//! The decoder backbone: a forward pass from token ids to the final hidden
//! state (after the output norm), for the llama and qwen3 GGUF layouts.
//!
//! A router needs no LM head, so `output.weight` is never loaded. The two
//! architectures differ in two places only: qwen3 normalises each query and
//! key head (`attn_q_norm`, `attn_k_norm`) and rotates half-split pairs
//! (NeoX RoPE), while llama.cpp stores llama's Q and K permuted so that RoPE
//! rotates interleaved pairs.

use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Module, Tensor};

use crate::attention;
use crate::dequant;
use crate::error::{Result, RouterError};
use crate::gguf::{Architecture, Checkpoint, Hparams};
use crate::kernels::Packed;

/// How weights are computed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// candle's quantized matmul on the stored blocks (activations in f32).
    Quantized,
    /// Weights dequantized to f32 once at load; f32 GEMM.
    DequantizedF32,
}

impl Precision {
    pub fn label(self, weight_type: &str) -> String {
        match self {
            Precision::Quantized => format!("{weight_type} weights, quantized matmul, f32 activations"),
            Precision::DequantizedF32 => {
                format!("{weight_type} weights dequantized to f32 at load, f32 compute{}", crate::kernels::KERNEL_NOTE)
            }
        }
    }
}

/// A projection. In the browser, f32 weights are repacked at load for
/// `kernels`' SIMD128 micro-kernel, which beats candle's generic GEMM there;
/// natively candle's GEMM (AVX2/AVX-512, multi-threaded) is the faster one
/// on the machines measured, so it stays.
enum Linear {
    Candle(QMatMul),
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    Packed(Packed),
}

impl Linear {
    fn load(ck: &Checkpoint, name: &str, rows: usize, cols: usize, precision: Precision) -> Result<Linear> {
        // candle reports GGUF shapes in PyTorch order: [out (rows), in (cols)].
        ck.expect_shape(name, &[rows, cols])?;
        let q = ck.tensor(name)?;
        Ok(match precision {
            Precision::DequantizedF32 if cfg!(target_arch = "wasm32") && dequant::block_bytes(q.dtype()).is_some() => {
                // Decode each row straight into the kernel's panels, on
                // every thread: no intermediate f32 tensor or copies.
                let data = q.data()?;
                let row_bytes = data.len() / rows;
                Linear::Packed(Packed::from_row_fn(rows, cols, |r, out| {
                    dequant::row(q.dtype(), &data[r * row_bytes..(r + 1) * row_bytes], out);
                }))
            }
            Precision::DequantizedF32 => Linear::from_f32(q.dequantize(&Device::Cpu)?)?,
            Precision::Quantized => Linear::Candle(QMatMul::from_qtensor(q)?),
        })
    }

    /// An f32 weight `[out × in]`, in the layout this target computes fastest with.
    fn from_f32(weight: Tensor) -> Result<Linear> {
        #[cfg(target_arch = "wasm32")]
        {
            let (rows, cols) = weight.dims2()?;
            Ok(Linear::Packed(Packed::from_rows(&weight.flatten_all()?.to_vec1::<f32>()?, rows, cols)))
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            Ok(Linear::Candle(QMatMul::Tensor(weight)))
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Linear::Candle(m) => Ok(m.forward(x)?),
            Linear::Packed(p) => {
                let (t, _) = x.dims2()?;
                let y = p.matmul(&x.flatten_all()?.to_vec1::<f32>()?, t);
                Ok(Tensor::from_vec(y, (t, p.n), &Device::Cpu)?)
            }
        }
    }
}

/// Times the projection GEMM a dequantized prefill runs, `[m × k]` times a
/// `[n × k]` weight, through the very `Linear` the backbone uses, so the
/// rate is what this build's matmul attains on this device (native or
/// wasm32), not a separate kernel's.
pub fn gemm_probe(m: usize, k: usize, n: usize, repeats: usize) -> Result<crate::GemmProbe> {
    // Varied values, so no kernel meets only zeros or ones.
    let values = |len: usize, salt: usize| (0..len).map(|i| ((i * 7 + salt) % 13) as f32 / 13.0 - 0.5).collect::<Vec<f32>>();
    let x = Tensor::from_vec(values(m * k, 1), (m, k), &Device::Cpu)?;
    let weight = Linear::from_f32(Tensor::from_vec(values(n * k, 5), (n, k), &Device::Cpu)?)?;
    // One untimed call: the first allocates.
    weight.forward(&x)?;
    let mut times = Vec::with_capacity(repeats.max(1));
    for _ in 0..repeats.max(1) {
        let started = web_time::Instant::now();
        let y = weight.forward(&x)?;
        // Make sure the result exists before the clock stops.
        let _ = y.dims();
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    // A clock coarser than the call (some browsers round to 0.1 ms) must not divide by zero.
    let best_ms = times[0].max(1e-3);
    Ok(crate::GemmProbe {
        m,
        k,
        n,
        repeats: times.len(),
        best_ms,
        median_ms: times[times.len() / 2],
        gflops: 2.0 * (m * k * n) as f64 / best_ms / 1e6,
    })
}

fn norm_weight(ck: &Checkpoint, name: &str, size: usize) -> Result<Tensor> {
    ck.expect_shape(name, &[size])?;
    Ok(ck.tensor(name)?.dequantize(&Device::Cpu)?)
}

struct Layer {
    attn_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    ffn_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// Keys and values of the tokens processed so far, per layer, after RoPE:
/// `[1, kv_heads, tokens, head_dim]`. A later prefix-reuse feature can keep
/// one and continue from it.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    pub layers: Vec<(Tensor, Tensor)>,
    pub tokens: usize,
}

/// The loaded backbone.
pub struct Backbone {
    pub hparams: Hparams,
    pub precision: Precision,
    embeddings: candle_core::quantized::QTensor,
    layers: Vec<Layer>,
    output_norm: Tensor,
    cos: Tensor,
    sin: Tensor,
}

impl Backbone {
    /// Loads every tensor the forward pass needs, checking shapes.
    pub fn load(ck: &Checkpoint, precision: Precision) -> Result<Backbone> {
        let h = ck.hparams.clone();
        let q_dim = h.heads * h.head_dim;
        let kv_dim = h.kv_heads * h.head_dim;
        ck.expect_shape("token_embd.weight", &[h.vocab, h.hidden])?;
        let embeddings = ck.tensor("token_embd.weight")?;
        let mut layers = Vec::with_capacity(h.layers);
        for i in 0..h.layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let qk_norms = h.architecture == Architecture::Qwen3;
            layers.push(Layer {
                attn_norm: norm_weight(ck, &n("attn_norm"), h.hidden)?,
                q: Linear::load(ck, &n("attn_q"), q_dim, h.hidden, precision)?,
                k: Linear::load(ck, &n("attn_k"), kv_dim, h.hidden, precision)?,
                v: Linear::load(ck, &n("attn_v"), kv_dim, h.hidden, precision)?,
                o: Linear::load(ck, &n("attn_output"), h.hidden, q_dim, precision)?,
                q_norm: if qk_norms { Some(norm_weight(ck, &n("attn_q_norm"), h.head_dim)?) } else { None },
                k_norm: if qk_norms { Some(norm_weight(ck, &n("attn_k_norm"), h.head_dim)?) } else { None },
                ffn_norm: norm_weight(ck, &n("ffn_norm"), h.hidden)?,
                gate: Linear::load(ck, &n("ffn_gate"), h.ffn, h.hidden, precision)?,
                up: Linear::load(ck, &n("ffn_up"), h.ffn, h.hidden, precision)?,
                down: Linear::load(ck, &n("ffn_down"), h.hidden, h.ffn, precision)?,
            });
        }
        let output_norm = norm_weight(ck, "output_norm.weight", h.hidden)?;
        if !h.head_dim.is_multiple_of(2) {
            return Err(RouterError::Metadata {
                file: ck.file.clone(),
                key: "attention.key_length".into(),
                reason: format!("head dim {} is odd; RoPE needs pairs", h.head_dim),
            });
        }
        let (cos, sin) = rope_tables(&h, h.context_length.clamp(1, 32_768))?;
        Ok(Backbone { hparams: h, precision, embeddings, layers, output_norm, cos, sin })
    }

    /// Runs `ids` after whatever `cache` holds and returns the final hidden
    /// states `[ids.len(), hidden]`, appending the new keys and values.
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let h = &self.hparams;
        let t = ids.len();
        if t == 0 {
            return Err(RouterError::Request("nothing to encode: zero tokens".into()));
        }
        let start = cache.tokens;
        if start + t > self.cos.dim(0)? {
            return Err(RouterError::Request(format!("{} tokens exceed the backbone's RoPE table of {}", start + t, self.cos.dim(0)?)));
        }
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= h.vocab) {
            return Err(RouterError::Request(format!("token id {bad} is outside the vocabulary of {}", h.vocab)));
        }
        let ids_t = Tensor::new(ids, &Device::Cpu)?;
        let mut x = self.embeddings.embedding(&ids_t)?; // [t, hidden]
        let cos = self.cos.narrow(0, start, t)?;
        let sin = self.sin.narrow(0, start, t)?;
        let eps = h.rms_eps as f32;
        let scale = 1.0 / (h.head_dim as f32).sqrt();
        let mut new_cache = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            let residual = x.clone();
            let xs = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps)?;
            let q = layer.q.forward(&xs)?.reshape((1, t, h.heads, h.head_dim))?;
            let k = layer.k.forward(&xs)?.reshape((1, t, h.kv_heads, h.head_dim))?;
            let v = layer.v.forward(&xs)?.reshape((1, t, h.kv_heads, h.head_dim))?;
            let (q, k) = match (&layer.q_norm, &layer.k_norm) {
                (Some(qn), Some(kn)) => {
                    (candle_nn::ops::rms_norm(&q.contiguous()?, qn, eps)?, candle_nn::ops::rms_norm(&k.contiguous()?, kn, eps)?)
                }
                _ => (q, k),
            };
            let q = q.transpose(1, 2)?.contiguous()?; // [1, heads, t, d]
            let k = k.transpose(1, 2)?.contiguous()?;
            let v = v.transpose(1, 2)?.contiguous()?;
            let (q, k) = match h.architecture {
                Architecture::Llama => (candle_nn::rotary_emb::rope_i(&q, &cos, &sin)?, candle_nn::rotary_emb::rope_i(&k, &cos, &sin)?),
                Architecture::Qwen3 => (candle_nn::rotary_emb::rope(&q, &cos, &sin)?, candle_nn::rotary_emb::rope(&k, &cos, &sin)?),
            };
            let (k, v) = match cache.layers.get(i) {
                Some((pk, pv)) => (Tensor::cat(&[pk, &k], 2)?, Tensor::cat(&[pv, &v], 2)?),
                None => (k, v),
            };
            new_cache.push((k.clone(), v.clone()));
            let shape = attention::Shape { heads: h.heads, kv_heads: h.kv_heads, tokens: t, total: start + t, head_dim: h.head_dim, start };
            let y =
                attention::causal(&q.flatten_all()?.to_vec1()?, &k.flatten_all()?.to_vec1()?, &v.flatten_all()?.to_vec1()?, shape, scale);
            let y = Tensor::from_vec(y, (t, h.heads * h.head_dim), &Device::Cpu)?;
            x = (residual + layer.o.forward(&y)?)?;
            let residual = x.clone();
            let xs = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, eps)?;
            let gated = (candle_nn::ops::silu(&layer.gate.forward(&xs)?)? * layer.up.forward(&xs)?)?;
            x = (residual + layer.down.forward(&gated)?)?;
        }
        cache.layers = new_cache;
        cache.tokens += t;
        Ok(candle_nn::ops::rms_norm(&x, &self.output_norm, eps)?)
    }

    /// Mean of the final hidden states over the tokens, L2-normalised: the
    /// vector a router compares. `[hidden]`.
    pub fn embed(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let hidden = self.forward(ids, &mut KvCache::default())?;
        let mean = hidden.mean(0)?;
        let norm = mean.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
        Ok((mean / (norm.max(1e-12) as f64))?.to_vec1::<f32>()?)
    }
}

fn rope_tables(h: &Hparams, positions: usize) -> Result<(Tensor, Tensor)> {
    let half = h.head_dim / 2;
    let inv: Vec<f32> = (0..half).map(|i| 1.0 / h.rope_theta.powf(2.0 * i as f32 / h.head_dim as f32)).collect();
    let inv = Tensor::from_vec(inv, (1, half), &Device::Cpu)?;
    let pos = Tensor::arange(0u32, positions as u32, &Device::Cpu)?.to_dtype(DType::F32)?.reshape((positions, 1))?;
    let freqs = pos.matmul(&inv)?;
    Ok((freqs.cos()?, freqs.sin()?))
}
