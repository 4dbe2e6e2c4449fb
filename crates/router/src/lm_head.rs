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
//!
//! The head is most of a decode step's arithmetic for these small models
//! (SmolLM2: 28 M multiply–adds a row against 35 M in all 30 layers), and
//! the portable dots do not vectorise well: measured natively (int8, two
//! threads), one row took 11.1 ms of a 21.1 ms step and 16 rows 185 ms of
//! 228 ms. So each block's dot has a SIMD form where the target has one:
//! AVX2 (detected at run time) natively, SIMD128 in the browser; the
//! portable dots remain the reference the tests hold them to.

#![allow(unsafe_code)]

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

/// One row's dot, dispatched to the best kernel this CPU has.
#[inline]
fn dot_f32(row: &[u8], x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: AVX2 and FMA were detected at run time; the slices are
        // whole blocks (`row`: 34 bytes a block, `x`: 32 values a block).
        return unsafe { x86::dot_f32(row, x) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::dot_f32(row, x);
    #[allow(unreachable_code)]
    portable_dot_f32(row, x)
}

#[inline]
fn dot_int8(row: &[u8], q: &[i8], scales: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: as in `dot_f32`; `q` holds 32 values and `scales` one
        // scale for each block of `row`.
        return unsafe { x86::dot_int8(row, q, scales) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::dot_int8(row, q, scales);
    #[allow(unreachable_code)]
    portable_dot_int8(row, q, scales)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{scale, Q8_0_BYTES};
    use crate::integer::BLOCK;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }

    /// Eight f32 lanes summed.
    #[target_feature(enable = "avx2,fma")]
    fn sum(v: __m256) -> f32 {
        let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
        _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
    }

    /// Each block's 32 signed bytes widened to f32 eight at a time and
    /// multiplied into the block's accumulator, then scaled once.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_f32(row: &[u8], x: &[f32]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (block, xs) in row.chunks_exact(Q8_0_BYTES).zip(x.chunks_exact(BLOCK)) {
            let mut inner = _mm256_setzero_ps();
            for j in 0..4 {
                // SAFETY: `block` has 34 bytes, so bytes 2 + 8j..10 + 8j are
                // inside it; `xs` has 32 values, so 8j..8j + 8 are.
                let w = unsafe { _mm_loadl_epi64(block.as_ptr().add(2 + 8 * j) as *const __m128i) };
                let w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(w));
                let xv = unsafe { _mm256_loadu_ps(xs.as_ptr().add(8 * j)) };
                inner = _mm256_fmadd_ps(w, xv, inner);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(scale(block)), inner, acc);
        }
        sum(acc)
    }

    /// llama.cpp's `Q8_0 × Q8_0` block dot: |w| as unsigned bytes times
    /// x with w's sign, in pairs to i16 (at most 2 × 128 × 127: no
    /// saturation), then to i32 and f32, scaled by both blocks' scales.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_int8(row: &[u8], q: &[i8], scales: &[f32]) -> f32 {
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        for ((block, qs), &x_scale) in row.chunks_exact(Q8_0_BYTES).zip(q.chunks_exact(BLOCK)).zip(scales) {
            // SAFETY: 32 bytes from offset 2 of a 34-byte block, and the
            // block's 32 activation values.
            let w = unsafe { _mm256_loadu_si256(block.as_ptr().add(2) as *const __m256i) };
            let xv = unsafe { _mm256_loadu_si256(qs.as_ptr() as *const __m256i) };
            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
            let dots = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(scale(block) * x_scale), dots, acc);
        }
        sum(acc)
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    use std::arch::wasm32::*;

    use super::{scale, Q8_0_BYTES};
    use crate::integer::BLOCK;

    fn sum(v: v128) -> f32 {
        f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v) + f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v)
    }

    /// Sixteen signed bytes at a time widened to f32 and multiplied into
    /// the block's accumulator.
    pub fn dot_f32(row: &[u8], x: &[f32]) -> f32 {
        let mut acc = f32x4_splat(0.0);
        for (block, xs) in row.chunks_exact(Q8_0_BYTES).zip(x.chunks_exact(BLOCK)) {
            let mut inner = f32x4_splat(0.0);
            for half in 0..2 {
                let mut bytes = [0u8; 16];
                bytes.copy_from_slice(&block[2 + 16 * half..18 + 16 * half]);
                let w = u8x16(
                    bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10],
                    bytes[11], bytes[12], bytes[13], bytes[14], bytes[15],
                );
                let (low, high) = (i16x8_extend_low_i8x16(w), i16x8_extend_high_i8x16(w));
                for (i, words) in [low, high].into_iter().enumerate() {
                    let (a, b) = (f32x4_convert_i32x4(i32x4_extend_low_i16x8(words)), f32x4_convert_i32x4(i32x4_extend_high_i16x8(words)));
                    let at = 16 * half + 8 * i;
                    let xa = f32x4(xs[at], xs[at + 1], xs[at + 2], xs[at + 3]);
                    let xb = f32x4(xs[at + 4], xs[at + 5], xs[at + 6], xs[at + 7]);
                    inner = f32x4_add(inner, f32x4_add(f32x4_mul(a, xa), f32x4_mul(b, xb)));
                }
            }
            acc = f32x4_add(acc, f32x4_mul(f32x4_splat(scale(block)), inner));
        }
        sum(acc)
    }

    /// Signed bytes widened to i16 and dotted in pairs to i32 (the
    /// SIMD128 `i32x4.dot_i16x8_s`), scaled by both blocks' scales.
    pub fn dot_int8(row: &[u8], q: &[i8], scales: &[f32]) -> f32 {
        let mut acc = f32x4_splat(0.0);
        for ((block, qs), &x_scale) in row.chunks_exact(Q8_0_BYTES).zip(q.chunks_exact(BLOCK)).zip(scales) {
            let mut dots = i32x4_splat(0);
            for half in 0..2 {
                let w = &block[2 + 16 * half..18 + 16 * half];
                let x = &qs[16 * half..16 * half + 16];
                let wv = u8x16(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11], w[12], w[13], w[14], w[15]);
                let xv = i8x16(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9], x[10], x[11], x[12], x[13], x[14], x[15]);
                dots = i32x4_add(dots, i32x4_dot_i16x8(i16x8_extend_low_i8x16(wv), i16x8_extend_low_i8x16(xv)));
                dots = i32x4_add(dots, i32x4_dot_i16x8(i16x8_extend_high_i8x16(wv), i16x8_extend_high_i8x16(xv)));
            }
            acc = f32x4_add(acc, f32x4_mul(f32x4_splat(scale(block) * x_scale), f32x4_convert_i32x4(dots)));
        }
        sum(acc)
    }
}

fn scale(block: &[u8]) -> f32 {
    half::f16::from_le_bytes([block[0], block[1]]).to_f32()
}

/// One Q8_0 row against f32 activations.
fn portable_dot_f32(row: &[u8], x: &[f32]) -> f32 {
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
fn portable_dot_int8(row: &[u8], q: &[i8], scales: &[f32]) -> f32 {
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
