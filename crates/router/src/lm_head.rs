//! The LM head: final hidden states to logits over the vocabulary, the one
//! product a router never needs and a generator needs every step.
//!
//! Both bundled checkpoints tie it to the token embeddings, stored as Q8_0
//! (SmolLM2: 49,152 × 576; Gemma 3: 262,144 × 640). Dequantized to f32
//! that table would be 113 MB and 671 MB beside weights the browser already
//! holds, so Q8_0 rows are read in place, from the embedding table the
//! backbone keeps anyway: no second copy of it exists.
//!
//! * In f32 mode a row's dot is `Σ_blocks d · Σ q·x` with `x` in f32: the
//!   dequantized weight's product to rounding, which is what llama.cpp
//!   computes on an F32 copy of the file (the greedy fixture's reference).
//! * In int8 mode `x` is quantized per 32 values with f16 scales and the dot
//!   is `Σ_blocks d_w · d_x · Σ q_w·q_x` in integers: llama.cpp's own
//!   `Q8_0 × Q8_0` product on the quantized file.
//!
//! A head in another format (an untied `output.weight`, or a table not in
//! Q8_0) is loaded as a projection like the layers'.

use candle_core::quantized::{GgmlDType, QTensor};

use crate::integer::{Activations, BLOCK};
use crate::parallel;

/// Bytes of one Q8_0 block: an f16 scale and 32 signed bytes.
const Q8_0_BYTES: usize = 34;

/// Where the head's weights are and how they multiply.
pub(crate) enum LmHead {
    /// Q8_0 rows read in place; `None` is the (tied) embedding table.
    Q8Blocks(Option<QTensor>),
    /// Any other format, as the layers' projections load it.
    Projection(crate::model::Weights),
}

/// How a Q8_0 head multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadArithmetic {
    F32,
    Int8,
}

impl LmHead {
    /// Whether `dtype` is read in place.
    pub(crate) fn in_place(dtype: GgmlDType) -> bool {
        dtype == GgmlDType::Q8_0
    }

    /// Logits `[m × vocab]` of `x` (`[m × k]`) against Q8_0 `blocks`
    /// (`vocab` rows of `k / 32` blocks each).
    pub(crate) fn q8_logits(blocks: &[u8], vocab: usize, k: usize, x: &[f32], m: usize, arithmetic: HeadArithmetic) -> Vec<f32> {
        assert!(k.is_multiple_of(BLOCK) && x.len() == m * k && blocks.len() == vocab * k / BLOCK * Q8_0_BYTES);
        let row_bytes = k / BLOCK * Q8_0_BYTES;
        let acts = (arithmetic == HeadArithmetic::Int8).then(|| Activations::quantize(x, m, k, BLOCK));
        // Logits transposed, `[vocab × m]`: a task owns a run of weight rows
        // and reads each once for all `m` activation rows.
        let mut transposed = vec![0f32; vocab * m];
        parallel::for_each_rows_mut(&mut transposed, m, parallel::rows_per_task(vocab).max(256), |first, out| {
            for (i, logits) in out.chunks_exact_mut(m).enumerate() {
                let row = &blocks[(first + i) * row_bytes..][..row_bytes];
                for (r, logit) in logits.iter_mut().enumerate() {
                    *logit = match &acts {
                        None => dot_f32(row, &x[r * k..][..k]),
                        Some(acts) => dot_int8(row, &acts.q[r * k..][..k], acts.scales(r)),
                    };
                }
            }
        });
        let mut logits = vec![0f32; m * vocab];
        for (v, column) in transposed.chunks_exact(m).enumerate() {
            for (r, &value) in column.iter().enumerate() {
                logits[r * vocab + v] = value;
            }
        }
        logits
    }
}

fn scale(block: &[u8]) -> f32 {
    half::f16::from_le_bytes([block[0], block[1]]).to_f32()
}

/// One Q8_0 row against f32 activations.
fn dot_f32(row: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0f32;
    for (block, xs) in row.chunks_exact(Q8_0_BYTES).zip(x.chunks_exact(BLOCK)) {
        let mut lanes = [0f32; 8];
        for (q8, x8) in block[2..].chunks_exact(8).zip(xs.chunks_exact(8)) {
            lanes.iter_mut().zip(q8.iter().zip(x8)).for_each(|(acc, (&q, &x))| *acc += q as i8 as f32 * x);
        }
        sum += scale(block) * lanes.iter().sum::<f32>();
    }
    sum
}

/// One Q8_0 row against activations quantized per 32 values.
fn dot_int8(row: &[u8], q: &[i8], scales: &[f32]) -> f32 {
    let mut sum = 0f32;
    for ((block, qs), &x_scale) in row.chunks_exact(Q8_0_BYTES).zip(q.chunks_exact(BLOCK)).zip(scales) {
        let dot: i32 = block[2..].iter().zip(qs).map(|(&w, &x)| w as i8 as i32 * x as i32).sum();
        sum += scale(block) * x_scale * dot as f32;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both arithmetics against the dequantized table in f64.
    #[test]
    fn q8_logits_match_the_dequantized_product() {
        let (vocab, k, m) = (300, 64, 3);
        let mut blocks = Vec::new();
        for v in 0..vocab * k / BLOCK {
            blocks.extend_from_slice(&half::f16::from_f32(0.01 + (v % 7) as f32 * 0.003).to_le_bytes());
            blocks.extend((0..BLOCK).map(|i| ((v * 31 + i * 17) % 255) as u8));
        }
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 13) % 29) as f32 / 29.0 - 0.5).collect();
        let weight = |v: usize, i: usize| {
            let block = &blocks[(v * k / BLOCK + i / BLOCK) * Q8_0_BYTES..][..Q8_0_BYTES];
            scale(block) as f64 * block[2 + i % BLOCK] as i8 as f64
        };
        for arithmetic in [HeadArithmetic::F32, HeadArithmetic::Int8] {
            let logits = LmHead::q8_logits(&blocks, vocab, k, &x, m, arithmetic);
            for r in 0..m {
                for v in 0..vocab {
                    let want: f64 = (0..k).map(|i| weight(v, i) * x[r * k + i] as f64).sum();
                    // Int8 rounds x to 8 bits: 0.5 / 127 of each block's
                    // largest magnitude per value, summed over 64.
                    let tolerance = if arithmetic == HeadArithmetic::F32 { 1e-4 } else { 0.05 };
                    assert!(
                        (logits[r * vocab + v] as f64 - want).abs() < tolerance,
                        "{arithmetic:?} [{r}, {v}]: {} vs {want}",
                        logits[r * vocab + v]
                    );
                }
            }
        }
    }
}
