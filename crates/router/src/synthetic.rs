//! Small GGUF checkpoints with deterministic random weights, written with
//! candle's GGUF writer: the qwen3 architecture tested without a 0.6B
//! download, every supported quantization type exercised, and malformed
//! files made on purpose.

use std::io::Cursor;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use crate::error::Result;

/// The shape of a synthetic model.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    pub architecture: &'static str,
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    /// Type of the 2-D weights (norms stay F32).
    pub weight_type: GgmlDType,
    pub seed: u64,
}

impl SyntheticSpec {
    /// A two-layer qwen3 with Qwen3's vocabulary (151,936 rows), sized so
    /// every quantization type's block divides every row.
    pub fn qwen3(weight_type: GgmlDType) -> SyntheticSpec {
        SyntheticSpec {
            architecture: "qwen3",
            layers: 2,
            hidden: 256,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            ffn: 512,
            vocab: 151_936,
            weight_type,
            seed: 7,
        }
    }

    /// The same shape as [`SyntheticSpec::qwen3`] for another architecture
    /// in [`crate::arch`]; its optional tensors follow the description.
    pub fn of(architecture: &'static str, weight_type: GgmlDType) -> SyntheticSpec {
        SyntheticSpec { architecture, ..SyntheticSpec::qwen3(weight_type) }
    }
}

/// Uniform values in [-scale, scale) from a fixed seed (splitmix64).
fn random(n: usize, scale: f32, seed: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = *seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Writes the GGUF bytes of a synthetic model.
pub fn write(spec: &SyntheticSpec) -> Result<Vec<u8>> {
    let mut seed = spec.seed;
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let mut add = |name: String, rows: usize, cols: usize, dtype: GgmlDType, scale: f32, seed: &mut u64| -> Result<()> {
        let data = if scale == 0.0 { vec![1.0; rows * cols] } else { random(rows * cols, scale, seed) };
        let shape: Vec<usize> = if rows == 1 { vec![cols] } else { vec![rows, cols] };
        let t = Tensor::from_vec(data, shape, &Device::Cpu)?;
        tensors.push((name, QTensor::quantize(&t, dtype)?));
        Ok(())
    };
    let (h, q, kv) = (spec.hidden, spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim);
    let w = spec.weight_type;
    // An unknown name still writes a file (the bad-input tests need one).
    let arch = crate::arch::find(spec.architecture);
    add("token_embd.weight".into(), spec.vocab, h, w, 0.5, &mut seed)?;
    for i in 0..spec.layers {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        add(n("attn_norm"), 1, h, GgmlDType::F32, 0.0, &mut seed)?;
        add(n("attn_q"), q, h, w, 0.08, &mut seed)?;
        add(n("attn_k"), kv, h, w, 0.08, &mut seed)?;
        add(n("attn_v"), kv, h, w, 0.08, &mut seed)?;
        add(n("attn_output"), h, q, w, 0.08, &mut seed)?;
        // The optional tensors are the ones the architecture's description
        // asks for, so a new description gets its synthetic checkpoint free.
        if arch.is_some_and(|a| a.qkv_bias) {
            // Biases are 1-D F32, random rather than constant.
            add(format!("blk.{i}.attn_q.bias"), 1, q, GgmlDType::F32, 0.1, &mut seed)?;
            add(format!("blk.{i}.attn_k.bias"), 1, kv, GgmlDType::F32, 0.1, &mut seed)?;
            add(format!("blk.{i}.attn_v.bias"), 1, kv, GgmlDType::F32, 0.1, &mut seed)?;
        }
        if arch.is_some_and(|a| a.qk_norm) {
            add(n("attn_q_norm"), 1, spec.head_dim, GgmlDType::F32, 0.0, &mut seed)?;
            add(n("attn_k_norm"), 1, spec.head_dim, GgmlDType::F32, 0.0, &mut seed)?;
        }
        if arch.is_some_and(|a| a.post_norms) {
            add(n("post_attention_norm"), 1, h, GgmlDType::F32, 0.0, &mut seed)?;
            add(n("post_ffw_norm"), 1, h, GgmlDType::F32, 0.0, &mut seed)?;
        }
        add(n("ffn_norm"), 1, h, GgmlDType::F32, 0.0, &mut seed)?;
        add(n("ffn_gate"), spec.ffn, h, w, 0.08, &mut seed)?;
        add(n("ffn_up"), spec.ffn, h, w, 0.08, &mut seed)?;
        add(n("ffn_down"), h, spec.ffn, w, 0.08, &mut seed)?;
    }
    add("output_norm.weight".into(), 1, h, GgmlDType::F32, 0.0, &mut seed)?;

    let a = spec.architecture;
    let meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        ("general.name".into(), Value::String(format!("synthetic-{a}"))),
        (format!("{a}.block_count"), Value::U32(spec.layers as u32)),
        (format!("{a}.embedding_length"), Value::U32(h as u32)),
        (format!("{a}.attention.head_count"), Value::U32(spec.heads as u32)),
        (format!("{a}.attention.head_count_kv"), Value::U32(spec.kv_heads as u32)),
        (format!("{a}.attention.key_length"), Value::U32(spec.head_dim as u32)),
        (format!("{a}.feed_forward_length"), Value::U32(spec.ffn as u32)),
        (format!("{a}.context_length"), Value::U32(4096)),
        (format!("{a}.vocab_size"), Value::U32(spec.vocab as u32)),
        (format!("{a}.rope.freq_base"), Value::F32(1_000_000.0)),
        (format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
    ];
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut out = Cursor::new(Vec::new());
    gguf_file::write(&mut out, &meta_refs, &tensor_refs)?;
    Ok(out.into_inner())
}
