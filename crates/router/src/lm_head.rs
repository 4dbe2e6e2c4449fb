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
        let input = match &acts {
            None => HeadInput::F32 { x, k },
            Some(acts) => HeadInput::Int8(acts),
        };
        // Logits transposed, `[vocab × m]`: a task owns a run of weight rows
        // and reads each once for all `m` activation rows, up to
        // `ROWS_A_PASS` of them in one pass over its blocks.
        let mut transposed = vec![0f32; vocab * m];
        parallel::for_each_rows_mut(&mut transposed, m, parallel::rows_per_task(vocab).max(256), |first, out| {
            for (i, logits) in out.chunks_exact_mut(m).enumerate() {
                let row = &blocks[(first + i) * row_bytes..][..row_bytes];
                for (pass, column) in logits.chunks_mut(ROWS_A_PASS).enumerate() {
                    dots(row, &input, pass * ROWS_A_PASS, column);
                }
            }
        });
        if m == 1 {
            // One row's logits are already in order (a decode step of one
            // sequence): no second buffer of the vocabulary's size.
            return transposed;
        }
        // Back to `[m × vocab]`, written row by row: written column by
        // column, each weight row's m values landed in m different pages,
        // and at m = 16 the head took 2.7 times as long as at m = 8.
        let mut logits = vec![0f32; m * vocab];
        for (r, row) in logits.chunks_exact_mut(vocab).enumerate() {
            row.iter_mut().zip(transposed.iter().skip(r).step_by(m)).for_each(|(logit, &value)| *logit = value);
        }
        logits
    }
}

/// Activation rows one pass over a weight row serves. A decode step of B
/// sequences multiplies B rows by the whole table; one row at a time
/// loaded (and, in f32, widened) each weight block B times, so the head
/// cost B times one row's (measured natively, int8: 6.3 ms a row, 39.7 ms
/// for 8). Four rows share each block's load, sign and scale, and their
/// four accumulators are independent chains the CPU overlaps; more would
/// not fit AVX2's 16 registers beside the widened f32 weights.
const ROWS_A_PASS: usize = 4;

/// The activation rows the head multiplies: f32 values, or 8-bit values
/// with a scale per block.
enum HeadInput<'a> {
    F32 { x: &'a [f32], k: usize },
    Int8(&'a Activations),
}

/// Row `row`'s dots with activation rows `first..first + out.len()`
/// (at most [`ROWS_A_PASS`]) into `out`, dispatched to the best kernel
/// this CPU has. Every kernel computes each row's dot in the same order as
/// one row alone would, so batching changes the time, not a logit.
fn dots(row: &[u8], input: &HeadInput<'_>, first: usize, out: &mut [f32]) {
    match out.len() {
        1 => out.copy_from_slice(&dots_n::<1>(row, input, first)),
        2 => out.copy_from_slice(&dots_n::<2>(row, input, first)),
        3 => out.copy_from_slice(&dots_n::<3>(row, input, first)),
        4 => out.copy_from_slice(&dots_n::<4>(row, input, first)),
        n => unreachable!("{n} activation rows in one pass; at most {ROWS_A_PASS}"),
    }
}

#[inline]
fn dots_n<const N: usize>(row: &[u8], input: &HeadInput<'_>, first: usize) -> [f32; N] {
    match *input {
        HeadInput::F32 { x, k } => {
            let xs: [&[f32]; N] = std::array::from_fn(|r| &x[(first + r) * k..][..k]);
            #[cfg(target_arch = "x86_64")]
            if x86::available() {
                // SAFETY: AVX2, FMA and F16C were detected at run time; each
                // of `xs` holds 32 values for every 34-byte block of `row`.
                return unsafe { x86::dots_f32(row, xs) };
            }
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            return simd128::dots_f32(row, xs);
            #[allow(unreachable_code)]
            xs.map(|x| portable_dot_f32(row, x))
        }
        HeadInput::Int8(acts) => {
            let qs: [&[i8]; N] = std::array::from_fn(|r| &acts.q[(first + r) * acts.k..][..acts.k]);
            let scales: [&[f32]; N] = std::array::from_fn(|r| acts.scales(first + r));
            #[cfg(target_arch = "x86_64")]
            if x86::available() {
                // SAFETY: as for f32 (and AVX-VNNI just detected); each of
                // `qs` holds 32 values and each of `scales` one scale for
                // every block of `row`.
                return unsafe {
                    if x86::vnni() {
                        x86::dots_int8_vnni(row, qs, scales)
                    } else {
                        x86::dots_int8(row, qs, scales)
                    }
                };
            }
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            return simd128::dots_int8(row, qs, scales);
            #[allow(unreachable_code)]
            std::array::from_fn(|r| portable_dot_int8(row, qs[r], scales[r]))
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Q8_0_BYTES;
    use crate::integer::BLOCK;
    use crate::kernels::avx2::sum;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
    }

    /// A block's f16 scale by F16C's one instruction. `half`'s portable
    /// conversion (a call behind a run-time feature check) was a block's
    /// largest single cost in the dot; the value is the same, exactly.
    #[target_feature(enable = "avx2,f16c")]
    fn scale(block: &[u8]) -> f32 {
        let bits = u16::from_le_bytes([block[0], block[1]]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
    }

    /// Each block's 32 signed bytes widened to f32 eight at a time, once,
    /// and multiplied into each activation row's block accumulator, then
    /// scaled once per row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dots_f32<const N: usize>(row: &[u8], xs: [&[f32]; N]) -> [f32; N] {
        let mut acc = [_mm256_setzero_ps(); N];
        for (b, block) in row.chunks_exact(Q8_0_BYTES).enumerate() {
            let w: [__m256; 4] = std::array::from_fn(|j| {
                // SAFETY: `block` has 34 bytes, so bytes 2 + 8j..10 + 8j are inside it.
                let bytes = unsafe { _mm_loadl_epi64(block.as_ptr().add(2 + 8 * j) as *const __m128i) };
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes))
            });
            let d = _mm256_set1_ps(scale(block));
            for (acc, x) in acc.iter_mut().zip(&xs) {
                let x = &x[b * BLOCK..][..BLOCK];
                let mut inner = _mm256_setzero_ps();
                for (j, &w) in w.iter().enumerate() {
                    // SAFETY: `x` has 32 values, so 8j..8j + 8 are inside it.
                    let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * j)) };
                    inner = _mm256_fmadd_ps(w, xv, inner);
                }
                *acc = _mm256_fmadd_ps(d, inner, *acc);
            }
        }
        acc.map(|a| sum(a))
    }

    /// llama.cpp's `Q8_0 × Q8_0` block dot: |w| as unsigned bytes times
    /// x with w's sign, in pairs to i16 (at most 2 × 128 × 127: no
    /// saturation), then to i32 and f32, scaled by both blocks' scales;
    /// the weight block loaded, its sign taken and its scale converted
    /// once for every activation row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dots_int8<const N: usize>(row: &[u8], qs: [&[i8]; N], scales: [&[f32]; N]) -> [f32; N] {
        // SAFETY: forwarded.
        unsafe { dots_int8_body::<N, false>(row, qs, scales) }
    }

    /// [`dots_int8`] with AVX-VNNI's `vpdpbusd` in place of the
    /// `vpmaddubsw` + `vpmaddwd` pair: the same i32 sums (neither
    /// saturates here), one instruction instead of two.
    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    pub unsafe fn dots_int8_vnni<const N: usize>(row: &[u8], qs: [&[i8]; N], scales: [&[f32]; N]) -> [f32; N] {
        // SAFETY: forwarded.
        unsafe { dots_int8_body::<N, true>(row, qs, scales) }
    }

    pub fn vnni() -> bool {
        is_x86_feature_detected!("avxvnni")
    }

    /// # Safety
    /// AVX2, FMA, F16C (and AVX-VNNI where `VNNI`) are enabled; each of
    /// `qs` holds 32 values and each of `scales` one scale for every
    /// 34-byte block of `row`.
    #[inline(always)]
    unsafe fn dots_int8_body<const N: usize, const VNNI: bool>(row: &[u8], qs: [&[i8]; N], scales: [&[f32]; N]) -> [f32; N] {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); N];
        for (b, block) in row.chunks_exact(Q8_0_BYTES).enumerate() {
            // SAFETY: 32 bytes from offset 2 of a 34-byte block.
            let w = unsafe { _mm256_loadu_si256(block.as_ptr().add(2) as *const __m256i) };
            let magnitudes = _mm256_sign_epi8(w, w);
            let d = scale(block);
            for r in 0..N {
                let q = &qs[r][b * BLOCK..][..BLOCK];
                // SAFETY: `q` is the block's 32 activation values.
                let xv = unsafe { _mm256_loadu_si256(q.as_ptr() as *const __m256i) };
                let signed = _mm256_sign_epi8(xv, w);
                let sums = if VNNI {
                    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), magnitudes, signed)
                } else {
                    _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, signed), ones)
                };
                let dots = _mm256_cvtepi32_ps(sums);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * scales[r][b]), dots, acc[r]);
            }
        }
        acc.map(|a| sum(a))
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

    /// A block's 32 signed bytes as two vectors of sixteen.
    fn weight_bytes(block: &[u8]) -> [v128; 2] {
        std::array::from_fn(|half| {
            let w = &block[2 + 16 * half..18 + 16 * half];
            u8x16(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11], w[12], w[13], w[14], w[15])
        })
    }

    /// Each block's bytes widened to f32 once (eight vectors of four) and
    /// multiplied into each activation row's block accumulator.
    pub fn dots_f32<const N: usize>(row: &[u8], xs: [&[f32]; N]) -> [f32; N] {
        let mut acc = [f32x4_splat(0.0); N];
        for (b, block) in row.chunks_exact(Q8_0_BYTES).enumerate() {
            let bytes = weight_bytes(block);
            // Quarters in the order the single-row kernel summed them.
            let w: [v128; 8] = std::array::from_fn(|i| {
                let words = if i % 4 < 2 { i16x8_extend_low_i8x16(bytes[i / 4]) } else { i16x8_extend_high_i8x16(bytes[i / 4]) };
                f32x4_convert_i32x4(if i % 2 == 0 { i32x4_extend_low_i16x8(words) } else { i32x4_extend_high_i16x8(words) })
            });
            let d = f32x4_splat(scale(block));
            for (acc, x) in acc.iter_mut().zip(&xs) {
                let x = &x[b * BLOCK..][..BLOCK];
                let mut inner = f32x4_splat(0.0);
                for pair in 0..4 {
                    let at = 8 * pair;
                    let xa = f32x4(x[at], x[at + 1], x[at + 2], x[at + 3]);
                    let xb = f32x4(x[at + 4], x[at + 5], x[at + 6], x[at + 7]);
                    inner = f32x4_add(inner, f32x4_add(f32x4_mul(w[2 * pair], xa), f32x4_mul(w[2 * pair + 1], xb)));
                }
                *acc = f32x4_add(*acc, f32x4_mul(d, inner));
            }
        }
        acc.map(sum)
    }

    /// Signed bytes widened to i16 and dotted in pairs to i32 (the
    /// SIMD128 `i32x4.dot_i16x8_s`), scaled by both blocks' scales; the
    /// weight block widened once for every activation row.
    pub fn dots_int8<const N: usize>(row: &[u8], qs: [&[i8]; N], scales: [&[f32]; N]) -> [f32; N] {
        let mut acc = [f32x4_splat(0.0); N];
        for (b, block) in row.chunks_exact(Q8_0_BYTES).enumerate() {
            let bytes = weight_bytes(block);
            let w = [
                i16x8_extend_low_i8x16(bytes[0]),
                i16x8_extend_high_i8x16(bytes[0]),
                i16x8_extend_low_i8x16(bytes[1]),
                i16x8_extend_high_i8x16(bytes[1]),
            ];
            let d = scale(block);
            for r in 0..N {
                let x = &qs[r][b * BLOCK..][..BLOCK];
                let mut dots = i32x4_splat(0);
                for half in 0..2 {
                    let x = &x[16 * half..16 * half + 16];
                    let xv = i8x16(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9], x[10], x[11], x[12], x[13], x[14], x[15]);
                    dots = i32x4_add(dots, i32x4_dot_i16x8(w[2 * half], i16x8_extend_low_i8x16(xv)));
                    dots = i32x4_add(dots, i32x4_dot_i16x8(w[2 * half + 1], i16x8_extend_high_i8x16(xv)));
                }
                acc[r] = f32x4_add(acc[r], f32x4_mul(f32x4_splat(d * scales[r][b]), f32x4_convert_i32x4(dots)));
            }
        }
        acc.map(sum)
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

    /// A batch's logits are each row's own, to the bit: rows share a
    /// weight block's pass (four at a time, then the rest), never an
    /// accumulator.
    #[test]
    fn a_batch_gives_each_row_its_own_logits() {
        let (vocab, k, m) = (70, 96, 7);
        let mut blocks = Vec::new();
        for v in 0..vocab * k / BLOCK {
            blocks.extend_from_slice(&half::f16::from_f32(0.02 - (v % 5) as f32 * 0.004).to_le_bytes());
            blocks.extend((0..BLOCK).map(|i| ((v * 29 + i * 13) % 256) as u8));
        }
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 31) as f32 / 9.0 - 1.5).collect();
        for arithmetic in [HeadArithmetic::F32, HeadArithmetic::Int8] {
            let batch = LmHead::q8_logits(&blocks, vocab, k, &x, m, arithmetic);
            for r in 0..m {
                let alone = LmHead::q8_logits(&blocks, vocab, k, &x[r * k..][..k], 1, arithmetic);
                assert_eq!(&batch[r * vocab..][..vocab], &alone[..], "{arithmetic:?}, row {r}");
            }
        }
    }

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
